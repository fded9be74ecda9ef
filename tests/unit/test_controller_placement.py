"""The Placed condition and the free-GPU count per NVLink domain (qdd.controller.placement)."""

from __future__ import annotations

from qdd.controller.placement import INSUFFICIENT, NO_GANG, Domain, Stuck, free_by_domain, placed, stuck_pods

from .controller_world import cr_of, plan_of

R1, R2 = "aaaa.32766", "bbbb.32766"


def _node(name: str, clique: str | None, gpus: int = 4, ready: bool = True) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": clique} if clique else {}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _pod(node: str, gpus: int, phase: str = "Running") -> dict:
    return {"spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def _pg(name: str, status: str, reason: str) -> dict:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "PodGroupScheduled", "status": status, "reason": reason}]}}


def test_free_gpus_per_domain_count_bound_unfinished_pods_only():
    nodes = [_node("r1-a", R1), _node("r1-b", R1), _node("r2-a", R2), _node("r2-b", R2),
             _node("r2-down", R2, ready=False), _node("cpu", None, gpus=0)]
    pods = [_pod("r1-a", 4), _pod("r1-b", 2), _pod("r2-a", 2), _pod("r2-a", 2, phase="Succeeded")]
    assert free_by_domain(nodes, pods) == [Domain(R2, 6, 4, 2), Domain(R1, 2, 2, 2)]


def test_no_domain_fits_names_the_gpus_asked_and_the_free_gpus_per_domain():
    plan = plan_of(cr_of())  # seed: 4 x DEP2 prefill + 1 x DEP8 decode = 16 GPUs in 6 pods
    name = plan.name
    status, reason, msg = placed(plan, True, [f"{name}-engines"], [_pg(f"{name}-engines", "False", "Unschedulable")],
                                 {}, [Domain(R2, 12, 4, 18), Domain(R1, 8, 2, 18)])
    assert (status, reason) == (False, INSUFFICIENT)
    assert "the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode): 16 GPUs in 6 pods asked in one NVLink domain" \
        in msg
    assert f"{R2}: 12 of 18 nodes (largest on one node 4), {R1}: 8 of 18 nodes (largest on one node 2)" in msg


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


def _gpod(name: str, node: str | None, gpus: int, why: str | None = None) -> dict:
    p = {"metadata": {"name": name}, "spec": {"schedulingGroup": {"podGroupName": "seed-engines"},
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
            _gpod("x", None, 4, "resourceclaimtemplate seed-imex-channel not found")]  # not a capacity problem
    stuck = stuck_pods(pods, {"r1-a": R1})
    assert stuck == {g.replace(plan.name, "seed"): Stuck(2, 8, R1)}
    status, reason, msg = placed(plan, True, [g], [_pg(g, "True", "Scheduled")], {g: stuck["seed-engines"]},
                                 [Domain(R1, 4, 4, 16)])
    assert (status, reason) == (False, INSUFFICIENT)
    assert f"2 pods (8 GPUs) of the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode) cannot be placed in " \
           f"NVLink domain {R1}, where the rest of the gang is bound" in msg
    assert f"{R1}: 4 of 16 nodes (largest on one node 4)" in msg
