"""Trays coming back (qdd.controller.tray_watch): a Node's transition queues the passes of the
deployments waiting on it or on room in its NVLink domain, and nothing else does. Nodes shaped as the
kubelet, the node lifecycle controller and GPU Feature Discovery write them; after a tray reboot the
node, its clique label, its compute-domain daemon and the domain come back one at a time
(NVIDIA/ai-cloud-validation#625)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import kopf

from qdd import labels
from qdd.api.conditions import Reason
from qdd.controller import handlers, tray_watch
from qdd.controller.kube import Kube
from qdd.controller.reconcile import Reconciler
from qdd.controller.status_inputs import home_clique, status_inputs
from qdd.controller.tray_watch import NodeState, TrayWatch, Waiting, came_back, node_state, to_queue, waiting_of

from .controller_world import plan_of, world
from .test_controller_status import NAME, SEED, FakeKube, router_canary

RACK0 = "4a7c2b1e-0b1d-4d3e-9f00-000000000001.32766"
RACK1 = "4a7c2b1e-0b1d-4d3e-9f00-000000000002.32766"
T = "2026-12-02T12:00:00Z"


def _node(name: str, clique: str | None = RACK0, ready: str = "True", cordoned: bool = False,
          taints: tuple[tuple[str, str], ...] = (), heartbeat: str = T) -> dict[str, Any]:
    lab = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200"}
    if clique is not None:
        lab["nvidia.com/gpu.clique"] = clique
    spec: dict[str, Any] = {"taints": [{"key": k, "effect": e} for k, e in taints]}
    if cordoned:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab}, "spec": spec,
            "status": {"allocatable": {"nvidia.com/gpu": "4"}, "images": [{"names": ["vllm"], "sizeBytes": 1}],
                       "conditions": [{"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
                                      {"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
                                       "lastTransitionTime": T}]}}


def _pod(name: str, role: str, node: str | None, *, marked: bool = False, deleting: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "False" if marked else "True"},
                  {"type": "ContainersReady", "status": "True"}]
    meta: dict[str, Any] = {"name": name, "labels": {labels.DEPLOYMENT: NAME, labels.ROLE: role}}
    if deleting:
        meta["deletionTimestamp"] = T
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Running" if node else "Pending", "conditions": conditions if node else []}}


def test_node_state_reads_ready_schedulable_and_the_clique():
    assert node_state(_node("gb200-r0-t3")) == NodeState(True, True, RACK0)
    assert node_state(_node("gb200-r0-t3")).usable
    assert node_state(_node("gb200-r0-t3", ready="Unknown")) == NodeState(False, True, RACK0)
    assert node_state(_node("gb200-r0-t3", cordoned=True)).schedulable is False
    fenced = _node("gb200-r0-t3", taints=[("node.kubernetes.io/out-of-service", "NoExecute")])
    assert not node_state(fenced).usable
    # the cluster's own taints (GPU nodes tainted for GPU pods, tolerated by them) are not Kubernetes' keep-out
    assert node_state(_node("gb200-r0-t3", taints=[("nvidia.com/gpu", "NoSchedule")])).usable
    assert not node_state(_node("gb200-r0-t3", clique=None)).usable  # engine pods require the label


def test_came_back_is_a_turn_to_usable_or_a_new_clique():
    up, down = NodeState(True, True, RACK0), NodeState(False, True, RACK0)
    assert came_back(down, up) and came_back(None, up)
    assert came_back(NodeState(True, True, None), up)  # its clique label is back
    assert came_back(NodeState(True, False, RACK0), up)  # uncordoned, or the fence taint removed
    assert came_back(NodeState(True, True, RACK1), up)
    assert not came_back(up, up) and not came_back(up, down) and not came_back(up, None)


def test_what_a_deployment_waits_for():
    nodes = {"gb200-r0-t0": NodeState(True, True, RACK0), "gb200-r0-t1": NodeState(True, True, RACK0),
             "gb200-r0-t2": NodeState(False, True, RACK0), "gb200-r0-t5": NodeState(True, True, None)}
    converged = [_pod(f"{NAME}-prefill-0", "prefill", "gb200-r0-t0"), _pod(f"{NAME}-decode-0-leader", "decode",
                                                                            "gb200-r0-t1")]
    assert not waiting_of(converged, nodes)
    # a decode group recreated after its node was lost: its pods wait for room where the rest is bound
    regrouped = [*converged[:1], _pod(f"{NAME}-decode-0-leader", "decode", None),
                 _pod(f"{NAME}-decode-0-worker-1", "decode", None)]
    assert waiting_of(regrouped, nodes) == Waiting(cliques=frozenset({RACK0}))
    # nothing bound yet (a whole gang waits): any domain's room may do; so with one gang per group
    assert waiting_of(regrouped[1:], nodes) == Waiting(anywhere=True)
    assert waiting_of(regrouped, nodes, one_domain=False) == Waiting(anywhere=True)
    # pods on a lost node (the node controller's mark, or the node seen NotReady) and on a tray back
    # without its clique label wait on those nodes; the router's and a deleted pod's wait are not the engines'
    lost = [_pod(f"{NAME}-decode-0-worker-1", "decode", "gb200-r0-t7", marked=True, deleting=True),
            _pod(f"{NAME}-prefill-1", "prefill", "gb200-r0-t2"), _pod(f"{NAME}-prefill-2", "prefill", "gb200-r0-t5"),
            _pod(f"{NAME}-router-5d8f7-x0", "router", None), _pod(f"{NAME}-prefill-3", "prefill", None, deleting=True)]
    assert waiting_of(lost, nodes) == Waiting(nodes=frozenset({"gb200-r0-t7", "gb200-r0-t2", "gb200-r0-t5"}))


def test_only_a_transition_queues_and_only_the_deployments_it_can_help():
    waiting = {("llm", "a"): Waiting(cliques=frozenset({RACK0})), ("llm", "b"): Waiting(cliques=frozenset({RACK1})),
               ("llm", "c"): Waiting(anywhere=True), ("llm", "d"): Waiting(nodes=frozenset({"gb200-r0-t2"}))}
    down, up = node_state(_node("gb200-r0-t4", ready="Unknown")), node_state(_node("gb200-r0-t4"))
    assert to_queue("gb200-r0-t4", down, up, waiting) == [("llm", "a"), ("llm", "c")]
    assert to_queue("gb200-r0-t4", up, up, waiting) == []  # a heartbeat
    assert to_queue("gb200-r0-t4", up, down, waiting) == []  # a node lost is the pods' events' business
    # the node waited on: any change of it, its deletion included
    t2 = node_state(_node("gb200-r0-t2", clique=None))
    assert to_queue("gb200-r0-t2", t2, node_state(_node("gb200-r0-t2")), waiting) == [("llm", "a"), ("llm", "c"),
                                                                                     ("llm", "d")]
    assert to_queue("gb200-r0-t2", t2, None, waiting) == [("llm", "d")]


def test_the_watch_fills_its_cache_from_the_listing_and_queues_on_a_tray_back():
    """ai-cloud-validation#625, step by step: the tray's node turns Ready without its clique label,
    then gets the label: the second step is the one that gives room in the rack."""
    trays = TrayWatch()
    for i in range(4):
        assert trays.on_event(None, _node(f"gb200-r0-t{i}")) == []  # kopf's first listing
    assert trays.on_event(None, _node("gb200-r0-t4", ready="Unknown")) == []
    pods = [_pod(f"{NAME}-prefill-{i}", "prefill", f"gb200-r0-t{i}") for i in range(4)] + [
        _pod(f"{NAME}-decode-0-leader", "decode", None), _pod(f"{NAME}-decode-0-worker-1", "decode", None)]
    assert trays.observe(("llm", NAME), pods) == Waiting(cliques=frozenset({RACK0}))
    assert trays.on_event("MODIFIED", _node("gb200-r0-t1", heartbeat="2026-12-02T12:05:00Z")) == []
    assert trays.on_event("MODIFIED", _node("gb200-r0-t4", clique=None)) == []  # Ready, no label yet: no room
    assert trays.on_event("MODIFIED", _node("gb200-r0-t4")) == [("llm", NAME)]  # the label is back
    assert trays.on_event("MODIFIED", _node("gb200-r0-t4")) == []
    assert trays.on_event("ADDED", _node("gb200-r1-t0", clique=RACK1)) == []  # another rack: not its domain
    assert trays.nodes(["gb200-r0-t4", "gb200-r9-t9"]) == {"gb200-r0-t4": {
        "metadata": {"name": "gb200-r0-t4", "labels": {"nvidia.com/gpu.clique": RACK0}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": T, "lastTransitionTime": T}]}}}
    trays.forget(("llm", NAME))
    assert trays.on_event("MODIFIED", _node("gb200-r0-t3", ready="False")) == []
    assert trays.on_event("MODIFIED", _node("gb200-r0-t3")) == []  # forgotten: nothing waits
    assert trays.on_event("DELETED", _node("gb200-r0-t3")) == [] and trays.nodes(["gb200-r0-t3"]) == {}


class _Queue:
    def __init__(self) -> None:
        self.added: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str]) -> None:
        self.added.append(key)


class _R:
    def __init__(self) -> None:
        self.trays = TrayWatch()


def test_kopf_watches_every_node_and_its_handler_only_queues():
    registry, old = kopf.OperatorRegistry(), kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        state: dict[str, Any] = {}
        tray_watch.register(state)
    finally:
        kopf.set_default_registry(old)
    [handler] = registry._watching.get_all_handlers()
    assert (handler.selector.group, handler.selector.plural or handler.selector.any_name) == ("", "nodes")
    asyncio.run(handler.fn(event={"type": "MODIFIED", "object": _node("gb200-r0-t0")}))  # before start-up: nothing
    state.update(r=_R(), queue=_Queue())
    state["r"].trays.observe(("llm", NAME), [_pod(f"{NAME}-prefill-0", "prefill", None)])
    asyncio.run(handler.fn(event={"type": None, "object": _node("gb200-r0-t0", ready="False")}))
    asyncio.run(handler.fn(event={"type": "MODIFIED", "object": _node("gb200-r0-t0")}))
    assert state["queue"].added == [("llm", NAME)]


def test_a_pass_records_the_wait_and_a_node_of_its_rack_coming_back_queues_it():
    """In the reconcile: the seed's decode pods are bound (on gb200-NN, the FakeKube's nodes), its
    prefill pods not yet: a tray of the same rack coming back queues it, one of another rack does not."""
    kube = FakeKube(SEED)
    r = Reconciler(kube, gang=True, canary=router_canary())  # type: ignore[arg-type]
    r.once("default", NAME)
    kube.settle()
    bound = sorted({o["spec"]["nodeName"] for o in kube.objs.values() if o["kind"] == "Pod" and o["spec"].get("nodeName")})
    assert bound
    for n in bound:
        r.trays.on_event(None, _node(n))
    r.trays.on_event(None, _node("gb200-r0-t17", ready="False"))
    r.trays.on_event(None, _node("gb200-r1-t17", clique=RACK1, ready="False"))
    for o in kube.objs.values():  # the StatefulSet's pods are not bound yet
        if o["kind"] == "Pod" and o["metadata"]["labels"].get(labels.ROLE) == "prefill":
            o["spec"].pop("nodeName", None)
    r.once("default", NAME)
    assert r.trays.on_event("MODIFIED", _node("gb200-r1-t17", clique=RACK1)) == []
    assert r.trays.on_event("MODIFIED", _node("gb200-r0-t17")) == [("default", NAME)]
    r.forget("default", NAME)
    assert r.trays.on_event("MODIFIED", _node("gb200-r0-t17", cordoned=True)) == []


def test_a_tray_back_without_its_clique_label_is_tray_rejoining():
    """The ComputeDomain's judgement gets the nodes the watch saw: an engine pod's tray that is back
    (Ready) without the clique label is TrayRejoining (qdd.controller.platform); not watched, not judged."""
    plan = plan_of(SEED)
    assert plan.compute_domain  # GB200
    observed = world(SEED)
    nodes = sorted({o["spec"]["nodeName"] for o in observed if o["kind"] == "Pod" and o["spec"].get("nodeName")
                    and o["metadata"]["labels"].get(labels.ROLE) in ("prefill", "decode")})
    assert len(nodes) >= 2
    trays = TrayWatch()
    for n in nodes:
        trays.on_event(None, _node(n))
    kube = FakeKube(SEED)
    *_, verdict = status_inputs(kube, True, plan, [], observed, trays)  # type: ignore[arg-type]
    assert verdict is not None and verdict.ready
    trays.on_event("MODIFIED", _node(nodes[1], clique=None))
    *_, verdict = status_inputs(kube, True, plan, [], observed, trays)  # type: ignore[arg-type]
    assert verdict is not None and (verdict.ready, verdict.reason, verdict.nodes) == (False, Reason.TRAY_REJOINING,
                                                                                      (nodes[1],))
    assert f"tray {nodes[1]} is back but has no nvidia.com/gpu.clique label (the deployment's NVLink domain is " \
           f"{RACK0})" in verdict.message
    *_, unwatched = status_inputs(kube, True, plan, [], observed, None)  # type: ignore[arg-type]
    assert unwatched is not None and unwatched.ready


def test_home_clique_is_a_strict_majority():
    def n(c: str | None) -> dict[str, Any]:
        return {"metadata": {"labels": {"nvidia.com/gpu.clique": c} if c else {}}}
    assert home_clique({"a": n(RACK0), "b": n(RACK0), "c": n(RACK1)}) == RACK0
    assert home_clique({"a": n(RACK0), "b": n(RACK1)}) is None
    assert home_clique({"a": n(None)}) is None and home_clique({}) is None


class _Reviews:
    """The API server's SelfSubjectAccessReview: ``allowed`` per verb, or ``fail`` (an exception)."""

    def __init__(self, allowed: dict[str, bool], fail: Exception | None = None) -> None:
        self.allowed, self.fail, self.asked = allowed, fail, []

    def create(self, body: dict[str, Any], serialize: bool, _request_timeout: Any) -> Any:
        if self.fail is not None:
            raise self.fail
        attrs = body["spec"]["resourceAttributes"]
        self.asked.append((attrs["verb"], attrs["resource"]))
        return type("Resp", (), {"data": json.dumps({"status": {"allowed": self.allowed[attrs["verb"]]}}).encode()})()


def _kube(reviews: _Reviews) -> Kube:
    k = Kube.__new__(Kube)  # no cluster: only what may_watch_nodes reads
    k._discovery, k._res = threading.Lock(), {("authorization.k8s.io/v1", "SelfSubjectAccessReview"): reviews}
    return k


def test_the_node_watch_is_registered_only_where_nodes_may_be_listed_and_watched(caplog):
    """A namespace-scoped install without rbac.discovery may not read Nodes: the operator starts
    without the watch (kopf would retry a forbidden watch and log errors), and says so."""
    cluster = _Reviews({"list": True, "watch": True})
    assert _kube(cluster).may_watch_nodes() and cluster.asked == [("list", "nodes"), ("watch", "nodes")]
    assert not _kube(_Reviews({"list": True, "watch": False})).may_watch_nodes()
    assert "no node watch" in caplog.text
    assert not _kube(_Reviews({}, fail=OSError("connection refused"))).may_watch_nodes()
    assert "not answered: OSError: connection refused" in caplog.text
    registry, old = kopf.OperatorRegistry(), kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        handlers.register(lambda: None, 30, nodes=False)
    finally:
        kopf.set_default_registry(old)
    assert all((h.selector.plural or h.selector.any_name) != "nodes" for h in registry._watching.get_all_handlers())
