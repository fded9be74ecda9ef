"""The Placed condition and the free-GPU count per NVLink domain (qdd.controller.placement)."""

from __future__ import annotations

from qdd import names
from qdd.controller.placement import (INSUFFICIENT, NO_GANG, UNSCHEDULABLE, Domain, Stuck, free_by_domain, placed,
                                      stuck_pods)
from qdd.controller.schedfacts import GPU_CAPACITY, causes_of

from .controller_world import cr_of, plan_of

R1, R2 = "aaaa.32766", "bbbb.32766"


def _node(name: str, clique: str | None, gpus: int = 4, ready: bool = True) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": clique} if clique else {}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _pod(node: str, gpus: int, phase: str = "Running") -> dict:
    return {"spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def _pg(name: str, status: str, reason: str, message: str = "") -> dict:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "PodGroupScheduled", "status": status, "reason": reason, "message": message}]}}


def test_free_gpus_per_domain_count_bound_unfinished_pods_only():
    nodes = [_node("r1-a", R1), _node("r1-b", R1), _node("r2-a", R2), _node("r2-b", R2),
             _node("r2-down", R2, ready=False), _node("cpu", None, gpus=0)]
    pods = [_pod("r1-a", 4), _pod("r1-b", 2), _pod("r2-a", 2), _pod("r2-a", 2, phase="Succeeded")]
    assert free_by_domain(nodes, pods) == [Domain(R2, 6, 4, 2), Domain(R1, 2, 2, 2)]


GPU_SHORT = "0/36 nodes are available: 18 Insufficient nvidia.com/gpu, 18 node(s) didn't match pod affinity rules."
GPU_ONLY = "0/18 nodes are available: 18 Insufficient nvidia.com/gpu. preemption: not eligible"
SELECTOR = ("0/36 nodes are available: 36 node(s) didn't match Pod's node affinity/selector. preemption: 0/36 nodes "
            "are available: 36 Preemption is not helpful for scheduling.")
FOLLOWER = "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled"


def _waiting(plan, group: str, why: str, n: int = 6) -> list[dict]:
    """The gang's pods, none bound: the first marked with ``why``, the others followers of the group."""
    return [_gpod(f"p{i}", None, 4 if i < 2 else 2, why if i == 0 else FOLLOWER, group) for i in range(n)]


def test_no_domain_fits_names_the_gpus_asked_and_the_free_gpus_per_domain():
    plan = plan_of(cr_of())  # seed: 4 x DEP2 prefill + 1 x DEP8 decode = 16 GPUs in 6 pods
    g = f"{plan.name}-engines"
    pg = _pg(g, "False", "Unschedulable", "0/2 placements are available, first placement status: pod group is "
             "unschedulable")
    stuck = stuck_pods(_waiting(plan, g, GPU_ONLY), {}, [pg])
    assert stuck[g].pods == 6 and stuck[g].said is not None and stuck[g].said.causes == (GPU_CAPACITY,)
    status, reason, msg = placed(plan, True, [g], [pg], stuck, [Domain(R2, 12, 4, 18), Domain(R1, 8, 2, 18)])
    assert (status, reason) == (False, INSUFFICIENT)
    assert "the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode): 16 GPUs in 6 pods asked in one NVLink domain" \
        in msg
    assert f"{R2}: 12 GPUs free on 18 nodes (at most 4 on one node), {R1}: 8 GPUs free on 18 nodes (at most 2 on one node)" in msg


def test_a_podgroup_marked_unschedulable_with_no_cause_stated_is_not_a_capacity_shortage():
    """The scheduler's verdict on a gang before any pod says why (or the gang still forming): no guess."""
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines"
    pg = _pg(g, "False", "Unschedulable", "pod group is unschedulable")
    assert placed(plan, True, [g], [pg], stuck_pods(_waiting(plan, g, FOLLOWER), {}, [pg]), None)[:2] == \
        (None, "Scheduling")
    assert placed(plan, True, [g], [pg], {}, None)[:2] == (None, "Scheduling")  # no pod marked at all


def test_a_selector_nothing_matches_is_named_in_the_schedulers_words_and_not_blamed_on_capacity():
    """Issue 23: new pods with a nodeSelector no node has; 72 GPUs free. Slot b's PodGroup is named."""
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines-b"
    stuck = stuck_pods(_waiting(plan, g, SELECTOR), {}, [])
    status, reason, msg = placed(plan, True, [g], [], stuck, None)
    assert (status, reason) == (False, UNSCHEDULABLE)
    assert msg.startswith("the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode): 6 pods the scheduler cannot "
                          "place: node selector or affinity (the scheduler: \"0/36 nodes are available: 36 node(s) "
                          "didn't match Pod's node affinity/selector.")
    assert "GPUs" not in msg and "no domain can hold it" not in msg


def test_gpus_named_beside_a_cause_checked_after_them_are_not_called_a_shortage():
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines"
    stuck = stuck_pods(_waiting(plan, g, GPU_SHORT), {}, [])
    assert stuck[g].said is not None and stuck[g].said.causes == ("pod affinity", GPU_CAPACITY)
    assert placed(plan, True, [g], [], stuck, None)[1] == UNSCHEDULABLE


def test_gpus_short_on_the_nodes_that_match_are_a_shortage_whatever_the_other_nodes_say():
    """CPU nodes fail the selector before the GPU check: they were never candidates."""
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines"
    why = ("0/21 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 18 Insufficient "
           "nvidia.com/gpu. preemption: 0/21 nodes are available: 21 Preemption is not helpful for scheduling.")
    stuck = stuck_pods(_waiting(plan, g, why), {}, [])
    assert placed(plan, True, [g], [], stuck, [])[1] == INSUFFICIENT


def test_scheduler_messages_sorted_into_causes():
    assert causes_of("0/4 nodes are available: 4 node(s) had untolerated taint(s).") == ("taint",)
    assert causes_of("0/4 nodes are available: 4 cannot allocate all claims.") == ("DRA claim",)
    assert causes_of("0/4 nodes are available: 4 node(s) were unschedulable.") == ("cordoned nodes",)
    assert causes_of("0/4 nodes are available: 4 Insufficient memory.") == ("CPU or memory",)
    assert causes_of(FOLLOWER) == ()


def test_an_endpoint_podgroup_of_slot_b_is_named_like_slot_a():
    plan = plan_of(cr_of())
    for slot in ("a", "b"):
        g = names.endpoint_pod_group(plan.name, "decode", 0, slot)
        stuck = stuck_pods(_waiting(plan, g, GPU_ONLY, 2), {}, [])
        msg = placed(plan, True, [g], [], stuck, [])[2]
        assert msg.startswith("decode endpoint 0 (DEP8): 8 GPUs in 2 pods asked in one NVLink domain"), msg


def test_placed_true_only_when_every_desired_gang_is_scheduled():
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines"
    assert placed(plan, True, [g], [], {}, None)[:2] == (None, "Scheduling")
    assert placed(plan, True, [g], [_pg(g, "True", "Scheduled")], {}, None)[:2] == (True, "GangScheduled")


def test_without_the_workload_api_the_condition_says_partial_placement_is_possible():
    plan = plan_of(cr_of())
    status, reason, msg = placed(plan, False, [], [], {"": Stuck(2, 8)}, None)
    assert (status, reason) == (False, NO_GANG)
    assert msg.startswith("no gang scheduling: partial placement possible")
    assert placed(plan, False, [], [], {}, None)[0] is True


def _gpod(name: str, node: str | None, gpus: int, why: str | None = None, group: str = "seed-engines") -> dict:
    p = {"metadata": {"name": name}, "spec": {"schedulingGroup": {"podGroupName": group},
                                              "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
         "status": {}}
    if node:
        p["spec"]["nodeName"] = node
    if why:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": why}]
    return p


def test_a_gang_already_placed_whose_recreated_pods_cannot_come_back_says_so():
    """The scheduler never sets a placed PodGroup back to False: the stuck pods tell."""
    plan = plan_of(cr_of())
    g = f"{plan.name}-engines"
    pods = [_gpod("p0", "r1-a", 2), _gpod("p1", "r1-a", 2),
            _gpod("d0", None, 4, "0/18 nodes are available: 18 Insufficient nvidia.com/gpu."),
            _gpod("d1", None, 4, "pod group is unschedulable, waiting for minCount pods"),
            _gpod("x", None, 4, "resourceclaimtemplate seed-imex-channel not found", "other")]  # another gang
    stuck = stuck_pods(pods, {"r1-a": R1})
    assert (stuck["seed-engines"].pods, stuck["seed-engines"].gpus, stuck["seed-engines"].bound_in) == (2, 8, R1)
    assert stuck["other"].said is not None and stuck["other"].said.causes == ("DRA claim",)
    status, reason, msg = placed(plan, True, [g], [_pg(g, "True", "Scheduled")], {g: stuck["seed-engines"]},
                                 [Domain(R1, 4, 4, 16)])
    assert (status, reason) == (False, INSUFFICIENT)
    assert f"2 pods (8 GPUs) of the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode) cannot be placed in " \
           f"NVLink domain {R1}, where the rest of the gang is bound" in msg
    assert f"{R1}: 4 GPUs free on 16 nodes (at most 4 on one node)" in msg
