"""Node loss by NotReady: the engine pods' tolerations (spec.cluster.nodeLossTolerationSeconds,
qdd.render.tolerations), a pod on a lost node read from the pod alone (qdd.controller.nodeloss),
what the group logic does with it (qdd.controller.groups) and what the status says
(qdd.controller.status). The pod statuses are the ones a real kube-controller-manager v1.36.3 left
on a kwok pod whose node stopped heartbeating (tests/integration/test_node_loss.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qdd.api import parse_resource
from qdd.controller.groups import group_states, groups_to_delete, pods_to_create
from qdd.controller.nodeloss import LostPod, lost_pod, lost_pods
from qdd.errors import SpecError

from .controller_world import T0, cr_of, desired_of, find, gone, replace, terminating, with_spec, world
from .test_controller_status import cond, conds, status_of

NAME = "qwen35-397b-4xdep2-1xdep8-cc4096"
LEADER, WORKER, PREFILL = f"{NAME}-decode-0-leader", f"{NAME}-decode-0-worker-1", f"{NAME}-prefill-2"
MARKED = "2030-01-01T00:02:00Z"
"""When the node controller set the pods of the lost node not ready."""
SEED = cr_of(mutate=lambda c: c["spec"]["cluster"].update(nodeLossTolerationSeconds=30))


def kwok_ready() -> dict[str, Any]:
    """A pod kwok plays Running and Ready (its pod-ready stage: four conditions, containers ready)."""
    return {"phase": "Running", "conditions": [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": T0}
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": T0}}}]}


def marked_not_ready(o: dict[str, Any]) -> None:
    """What MarkPodsNotReady does to a pod of a NotReady/unreachable node: Ready flipped, nothing else."""
    st = kwok_ready()
    for c in st["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", lastTransitionTime=MARKED)
    o["status"] = st


def evicted(o: dict[str, Any]) -> None:
    """The taint eviction controller's work once the toleration ran out: DisruptionTarget, then delete."""
    marked_not_ready(o)
    o["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                                      "message": "Taint manager: deleting due to NoExecute taint",
                                      "lastTransitionTime": "2030-01-01T00:02:30Z"})
    terminating(o)


def kubelet_not_ready(o: dict[str, Any]) -> None:
    """A live kubelet's not-ready pod (a failing readiness probe): ContainersReady goes False with Ready."""
    st = kwok_ready()
    for c in st["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c.update(status="False", reason="ContainersNotReady", message="containers with unready status: [vllm]")
    o["status"] = st


def steady() -> list[dict[str, Any]]:
    obs = world(SEED)
    for name in (LEADER, WORKER):
        obs = replace(obs, "Pod", name, lambda o: o.update(status=kwok_ready()))
    return obs


def _pod(obs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return find(obs, "Pod", name)


# --- the tolerations ---------------------------------------------------------------------------------

def test_the_field_renders_both_node_loss_tolerations_on_every_engine_pod_after_the_users():
    cr = cr_of(mutate=lambda c: c["spec"]["cluster"].update(
        nodeLossTolerationSeconds=30, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "llm",
                                                    "effect": "NoSchedule"}]))
    desired = desired_of(cr)
    sts = next(o for o in desired if o["kind"] == "StatefulSet")
    engine = [o["spec"] for o in desired if o["kind"] == "Pod"] + [sts["spec"]["template"]["spec"]]
    assert len(engine) == 3  # the decode leader and worker (bare pods), the prefill template
    for spec in engine:
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 30}]
    # the preflight Jobs and the router keep theirs: the field is about engines
    for o in desired:
        if o["kind"] in ("Job", "Deployment"):
            assert all(t.get("effect") != "NoExecute" for t in o["spec"]["template"]["spec"].get("tolerations", []))


def test_unset_renders_no_node_loss_toleration_so_an_upgrade_changes_no_pod_spec():
    for o in desired_of(cr_of()):
        spec = o["spec"]["template"]["spec"] if o["kind"] == "StatefulSet" else o["spec"] if o["kind"] == "Pod" else None
        if spec is not None:
            assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_changed_toleration_is_a_new_revision_of_the_decode_group():
    rev = {o["metadata"]["name"]: o["metadata"]["labels"]["qdd.dev/revision"]
           for o in desired_of(SEED) if o["kind"] == "Pod"}
    rev60 = {o["metadata"]["name"]: o["metadata"]["labels"]["qdd.dev/revision"] for o in desired_of(
        with_spec(SEED, lambda s: s["cluster"].update(nodeLossTolerationSeconds=60))) if o["kind"] == "Pod"}
    assert rev.keys() == rev60.keys() == {LEADER, WORKER} and all(rev[n] != rev60[n] for n in rev)


@pytest.mark.parametrize("key", ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"])
def test_the_field_beside_a_user_toleration_of_the_same_key_is_refused(key):
    cr = cr_of(mutate=lambda c: c["spec"]["cluster"].update(
        nodeLossTolerationSeconds=30, tolerations=[{"key": key, "operator": "Exists", "effect": "NoExecute",
                                                    "tolerationSeconds": 600}]))
    with pytest.raises(SpecError) as e:
        parse_resource(cr)
    assert "nodeLossTolerationSeconds sets the tolerations of node.kubernetes.io/not-ready and unreachable" in str(e.value)


def test_a_user_toleration_of_every_taint_stays_beside_the_field():
    cr = cr_of(mutate=lambda c: c["spec"]["cluster"].update(nodeLossTolerationSeconds=30,
                                                             tolerations=[{"operator": "Exists"}]))
    leader = find(desired_of(cr), "Pod", LEADER)
    # the taint eviction controller takes the shortest tolerationSeconds of the matching ones: 30
    assert [t.get("tolerationSeconds") for t in leader["spec"]["tolerations"]] == [None, None, 30, 30]


@pytest.mark.parametrize(("value", "ok"), [(0, True), (86400, True), (-1, False), (86401, False)])
def test_bounds(value, ok):
    cr = cr_of(mutate=lambda c: c["spec"]["cluster"].update(nodeLossTolerationSeconds=value))
    if ok:
        assert parse_resource(cr).spec.cluster.node_loss_toleration_seconds == value
    else:
        with pytest.raises(SpecError):
            parse_resource(cr)


# --- reading a pod ------------------------------------------------------------------------------------

def test_the_node_controllers_mark_is_a_lost_pod_a_kubelets_not_ready_is_not():
    obs = steady()
    assert lost_pods([_pod(obs, n) for n in (LEADER, WORKER)]) == []
    assert lost_pod(_pod(replace(obs, "Pod", WORKER, kubelet_not_ready), WORKER)) is None
    got = lost_pod(_pod(replace(obs, "Pod", WORKER, marked_not_ready), WORKER))
    assert got == LostPod(WORKER, _pod(obs, WORKER)["spec"]["nodeName"], MARKED, terminating=False, evicted=False)
    got = lost_pod(_pod(replace(obs, "Pod", WORKER, evicted), WORKER))
    assert got is not None and (got.terminating, got.evicted) == (True, True)
    # a pod that was never bound is not on a lost node, whatever its conditions say
    unbound = copy.deepcopy(_pod(replace(obs, "Pod", WORKER, marked_not_ready), WORKER))
    unbound["spec"].pop("nodeName")
    assert lost_pod(unbound) is None


def test_the_messages_name_the_pod_the_node_the_time_and_the_fix():
    node = "gb200-r1-n04"
    assert LostPod("w", node, MARKED, False, False).text == (
        f"pod w is on node {node}, which is NotReady or unreachable (pod set not ready by the node controller at "
        f"{MARKED}): Kubernetes evicts it when its toleration of the node's NoExecute taint runs out "
        "(spec.cluster.nodeLossTolerationSeconds), and its endpoint is recreated")
    assert LostPod("w", node, MARKED, True, True).text == (
        f"pod w was evicted (NoExecute taint) but stays Terminating on node {node}, which is NotReady or unreachable "
        f"since {MARKED}: no kubelet confirms the deletion, and its endpoint is recreated (same pod names) only once it "
        f"is gone. If the node is down, fence it: `kubectl taint node {node} "
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (non-graceful node shutdown: the pod garbage "
        "collector then deletes it) or `kubectl delete node` it")
    assert LostPod("w", node, MARKED, True, False).text.startswith(f"pod w was deleted but stays Terminating on node {node}")


# --- the group ---------------------------------------------------------------------------------------

def _decide(obs: list[dict[str, Any]]):
    states = group_states(desired_of(SEED), obs)
    return states[0], [(g.role, g.endpoint) for g in groups_to_delete(states)], pods_to_create(states)


def test_within_the_toleration_the_group_is_not_ready_but_kept():
    s, delete, create = _decide(replace(steady(), "Pod", WORKER, marked_not_ready))
    assert (s.ready, s.serving, s.broken, s.present) == (False, False, None, (LEADER, WORKER))
    assert [p.name for p in s.lost] == [WORKER]
    assert delete == [] and create == set()


def test_evicted_the_group_is_deleted_with_the_reason_and_not_created_while_the_pod_stays():
    obs = replace(steady(), "Pod", WORKER, evicted)
    s, delete, create = _decide(obs)
    assert s.broken is not None and s.broken.startswith(f"pod {WORKER} was evicted (NoExecute taint) but stays Terminating")
    assert delete == [("decode", 0)] and create == set()
    # qdd deleted the leader (a live node: gone at once); the worker is all that is left
    s, delete, create = _decide(replace(obs, "Pod", LEADER, gone))
    assert (s.present, s.terminating, s.broken, s.restarting) == ((), (WORKER,), None, True)
    assert delete == [] and create == set()
    # fenced: the pod garbage collector deleted it; the whole group is created again
    s, delete, create = _decide(replace(replace(obs, "Pod", LEADER, gone), "Pod", WORKER, gone))
    assert create == {LEADER, WORKER}


# --- the status ----------------------------------------------------------------------------------------

def test_status_through_a_lost_node():
    node = _pod(steady(), WORKER)["spec"]["nodeName"]
    within = replace(steady(), "Pod", WORKER, marked_not_ready)
    st = status_of(SEED, within)
    assert conds(st)["Degraded"] == ("True", "NodeNotReady")
    assert cond(st, "Degraded")["message"] == f"decode: {LostPod(WORKER, node, MARKED, False, False).text}"
    assert conds(st)["Ready"] == ("False", "EndpointsNotReady")
    assert cond(st, "Ready")["message"].endswith(
        f"; 1 pod on a NotReady or unreachable node ({WORKER} on {node}: see Degraded)")
    assert st["decodeReady"] == "0/1"

    stuck = LostPod(WORKER, node, MARKED, True, True).text
    with_leader = replace(steady(), "Pod", WORKER, evicted)
    st = status_of(SEED, with_leader)
    assert conds(st)["Degraded"] == ("True", "NodeNotReady")
    assert cond(st, "Degraded")["message"] == f"decode endpoint 0: {stuck}; recreating the whole group"
    st = status_of(SEED, replace(with_leader, "Pod", LEADER, gone))
    assert cond(st, "Degraded")["message"] == f"decode endpoint 0: {stuck}"
    assert (st["decodeReady"], st["decode"]["pods"]) == ("0/1", 0)


def test_a_prefill_pod_of_the_statefulset_on_a_lost_node_is_said_too():
    node = "gb200-r1-n07"

    def on_lost_node(o: dict[str, Any]) -> None:
        o["spec"]["nodeName"] = node
        marked_not_ready(o)
    obs = replace(steady(), "Pod", PREFILL, on_lost_node)
    st = status_of(SEED, obs)
    assert conds(st)["Degraded"] == ("True", "NodeNotReady")
    assert cond(st, "Degraded")["message"] == f"prefill: {LostPod(PREFILL, node, MARKED, False, False).text}"
    assert st["prefillReady"] == "3/4"
