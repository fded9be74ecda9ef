"""Node loss by NotReady (issue 12 item 5; the deletion half is
tests/integration/test_placement.py::test_node_loss_recreates_the_group_in_the_same_domain_or_says_why).

Injected: the kwok node of a running decode worker stops heartbeating. kwok plays a node only while
it holds the node's Lease in ``kube-node-lease`` (kwok v0.8.0 pkg/kwok/controllers: "not holding
the lease means the node is not managed"), so the test takes the Lease over for another holder
with an hour's duration: kwok stops renewing it and stops playing the node and its pods — a kubelet
gone, as for a tray that lost power or network. The real kube-controller-manager then does the rest:
node Ready Unknown and the ``node.kubernetes.io/unreachable`` NoExecute taint after
``--node-monitor-grace-period``, the pods there set not ready, the worker evicted when its
toleration (``spec.cluster.nodeLossTolerationSeconds``) runs out, and the evicted pod stays
Terminating (no kubelet confirms). The cluster is made with ``QDD_HEARTBEAT_FACTOR=1`` (kwokctl's
``--heartbeat-factor``: a kubelet's defaults, 40 s lease renewed every 10 s, grace 40 s; kwokctl's
default factor 5 would take 200 s) — its own two-rack cluster, so no other test pays for the faster
heartbeats. Then the test fences the node as an administrator would
(``node.kubernetes.io/out-of-service``: the pod garbage collector deletes the stuck pod) and the
group comes back whole in its NVLink domain, although the other rack is empty.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import time
from typing import Any

import pytest
import yaml

from .conftest import Kube, _run_script
from .operator_proc import OperatorProcess
from .test_placement import REPO, _cond, bound, clique_of, cr, drop_ns, engine_pods, install_crd, new_ns

TOLERATION = 15
"""spec.cluster.nodeLossTolerationSeconds of the test's deployment: long enough to see the state
before the eviction, short enough for make test."""
LOST_HOLDER = "qdd-test-lost-tray"


@pytest.fixture(scope="module")
def nodeloss():
    name = f"{os.environ.get('QDD_TEST_CLUSTER', 'qdd-test')}-nodeloss"
    k = Kube(name, REPO / ".qdd" / f"kubeconfig-{name}")
    k.env.update(QDD_RACKS="2", QDD_WORKLOAD_API="1", QDD_HEARTBEAT_FACTOR="1")
    _run_script("cluster-up.sh", k.env, f"cluster-up-{name}.log", 600)
    install_crd(k)
    op = OperatorProcess(k)
    op.start()
    yield k
    op.stop()
    if os.environ.get("QDD_KEEP_CLUSTER") != "1":
        _run_script("cluster-down.sh", k.env, f"cluster-down-{k.cluster}.log", 120)


KWOK_MANAGED = "kwok.x-k8s.io/node"
"""The annotation kwok selects the nodes it plays by (kwokctl's manageNodesWithAnnotationSelector,
kwok.x-k8s.io/node=fake; hack/cluster/objects.py sets it on every simulated node)."""


def _lose(k: Kube, node: str) -> None:
    """kwok stops playing ``node``: its Lease held by someone else for an hour, and the node no
    longer selected by kwok. The Lease alone was not enough in one CI run: kwok kept updating the
    node's status (it keeps a node it has played), the node came back Ready before the eviction."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    k.kubectl("annotate", "node", node, f"{KWOK_MANAGED}-")
    k.kubectl("-n", "kube-node-lease", "patch", "lease", node, "--type", "merge", "-p",
              f'{{"spec":{{"holderIdentity":"{LOST_HOLDER}","leaseDurationSeconds":3600,"renewTime":"{now}"}}}}')


def _restore(k: Kube, node: str) -> None:
    """The fence lifted and the Lease dropped: kwok takes the node again (a new Lease) and it is Ready."""
    k.kubectl("taint", "node", node, "node.kubernetes.io/out-of-service-", check=False)
    k.kubectl("annotate", "node", node, f"{KWOK_MANAGED}=fake", "--overwrite")
    k.kubectl("-n", "kube-node-lease", "delete", "lease", node, "--ignore-not-found")
    k.wait_for(lambda: not (k.get("node", node)["spec"].get("taints")) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in k.get("node", node)["status"]["conditions"]),
        timeout=60, interval=1, desc=f"node {node} Ready again")


def _deployment(k: Kube, ns: str) -> dict[str, Any]:
    return k.get("qwendisaggdeployment", "lossy", ns)


def _by_name(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in pods}


def test_a_notready_node_evicts_after_the_toleration_says_why_and_the_group_returns_to_its_domain_once_fenced(
        nodeloss):
    k = nodeloss
    ns = new_ns(k)
    lost = ""
    try:
        obj = cr("lossy", ns)
        obj["spec"]["cluster"]["nodeLossTolerationSeconds"] = TOLERATION
        # the API server's CEL refuses the field beside a user toleration of the same taint
        clash = copy.deepcopy(obj)
        clash["spec"]["cluster"]["tolerations"] = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                    "effect": "NoExecute", "tolerationSeconds": 600}]
        refused = k.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(clash), check=False)
        assert refused.returncode != 0 and "spec.cluster.nodeLossTolerationSeconds: Invalid value" in refused.stderr \
            and "nodeLossTolerationSeconds sets the tolerations of node.kubernetes.io/not-ready" in refused.stderr, \
            refused.stderr
        k.apply(obj, namespace=ns)
        k.wait_for(lambda: _cond(_deployment(k, ns), "Ready").get("status") == "True", timeout=120,
                   desc="lossy Ready")
        cliques = clique_of(k)
        before = _by_name(bound(engine_pods(k, ns, "lossy")))
        assert len(before) == 6, sorted(before)  # 4 x DEP2 prefill + leader and worker of one DEP8
        [domain] = {cliques[p["spec"]["nodeName"]] for p in before.values()}
        worker = before["lossy-decode-0-worker-1"]
        lost = worker["spec"]["nodeName"]
        tol = [t for t in worker["spec"]["tolerations"] if t.get("effect") == "NoExecute"]
        assert sorted((t["key"], t["tolerationSeconds"]) for t in tol) == [
            ("node.kubernetes.io/not-ready", TOLERATION), ("node.kubernetes.io/unreachable", TOLERATION)]
        assert [p for p in before.values() if p["spec"]["nodeName"] == lost] == [worker]  # a whole tray

        t0 = time.monotonic()
        _lose(k, lost)

        # 1. The node controller declares the node unreachable; within the toleration qdd says so.
        def told() -> dict[str, Any] | None:
            o = _deployment(k, ns)
            d = _cond(o, "Degraded")
            return o if d.get("reason") == "NodeNotReady" and "is on node" in d.get("message", "") else None
        o = k.wait_for(told, timeout=90, interval=1, desc="Degraded NodeNotReady before the eviction")
        t_notready = time.monotonic() - t0
        node = k.get("node", lost)
        assert [t["key"] for t in node["spec"]["taints"] if t["effect"] == "NoExecute"] == ["node.kubernetes.io/unreachable"]
        msg = _cond(o, "Degraded")["message"]
        assert msg.startswith(f"decode: pod lossy-decode-0-worker-1 is on node {lost}, which is NotReady or "
                              "unreachable"), msg
        assert _cond(o, "Ready")["status"] == "False"
        assert f"1 pod on a NotReady or unreachable node (lossy-decode-0-worker-1 on {lost}" in _cond(o, "Ready")["message"]
        # nothing deleted yet: the group waits out its toleration
        assert {n: p["metadata"]["uid"] for n, p in _by_name(engine_pods(k, ns, "lossy")).items()} == {
            n: p["metadata"]["uid"] for n, p in before.items()}

        # 2. Evicted after the toleration: stuck Terminating; qdd deletes the leader, says what frees the name.
        seen: list[Any] = []
        confirmed: list[bool] = []

        def stuck() -> dict[str, Any] | None:
            o = _deployment(k, ns)
            pods = engine_pods(k, ns, "lossy")
            decode = [p for p in pods if p["metadata"]["labels"]["qdd.dev/role"] == "decode"]
            d = _cond(o, "Degraded")
            seen[:] = [[(p["metadata"]["name"], p["metadata"].get("deletionTimestamp"), p["status"].get("conditions"))
                        for p in decode], d, _cond(o, "Ready")]
            # The simulated node's kubelet sometimes still confirms the eviction (kwok v0.8.0 finalized the
            # pod in one CI run although it no longer played the node): then the pod is gone, there is
            # nothing to fence, and the group comes back at once (asserted below the same way).
            w = [p for p in decode if p["metadata"]["name"] == "lossy-decode-0-worker-1"]
            if not w or w[0]["metadata"]["uid"] != before["lossy-decode-0-worker-1"]["metadata"]["uid"]:
                confirmed.append(True)
                return o
            # every decode pod left is an old one being deleted (the leader goes as soon as kwok confirms)
            return o if ("lossy-decode-0-worker-1" in [p["metadata"]["name"] for p in decode] and all(
                p["metadata"].get("deletionTimestamp") and p["metadata"]["uid"] == before[p["metadata"]["name"]][
                    "metadata"]["uid"] for p in decode) and "stays Terminating" in d.get("message", "")) else None
        try:
            o = k.wait_for(stuck, timeout=60, interval=1, desc="worker evicted, leader deleted, Degraded says the fix")
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {seen}") from None
        t_stuck = time.monotonic() - t0
        if confirmed:
            print("\nthe simulated kubelet confirmed the eviction: the pod is gone without a fence (the fence "
                  "path is not exercised in this run)")
        else:
            _stuck_and_fenced(k, ns, o, lost, worker, before)
        t_fenced = time.monotonic() - t0

        def back() -> dict[str, Any] | None:
            o = _deployment(k, ns)
            pods = bound(engine_pods(k, ns, "lossy"))
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return o if _cond(o, "Ready").get("status") == "True" and len(pods) == 6 and len(live) == 6 else None
        o = k.wait_for(back, timeout=120, interval=1, desc="decode group recreated, Ready")
        t_back = time.monotonic() - t0
        after = _by_name(bound(engine_pods(k, ns, "lossy")))
        assert sorted(after) == sorted(before)  # the same names, each once: nothing orphaned or duplicated
        decode = {n: p for n, p in after.items() if "decode" in n}
        assert all(p["metadata"]["uid"] != before[n]["metadata"]["uid"] for n, p in decode.items())
        assert all(after[n]["metadata"]["uid"] == before[n]["metadata"]["uid"] for n in after if "prefill" in n)
        assert {cliques[p["spec"]["nodeName"]] for p in after.values()} == {domain}
        assert lost not in {p["spec"]["nodeName"] for p in after.values()}
        assert _cond(o, "Degraded")["status"] == "False"
        print(f"\nnode {lost} (clique {domain}) lost at 0 s: Degraded NodeNotReady at {t_notready:.1f} s, worker "
              f"evicted, leader deleted at {t_stuck:.1f} s (toleration {TOLERATION} s), "
              f"{'no fence needed' if confirmed else 'fenced'} at {t_fenced:.1f} s, group recreated and Ready at "
              f"{t_back:.1f} s on {sorted(p['spec']['nodeName'] for p in decode.values())}; engine pods 6 -> 5 -> 6")
    finally:
        if lost:
            _restore(k, lost)
        drop_ns(k, ns)


def _stuck_and_fenced(k: Kube, ns: str, o: dict[str, Any], lost: str, worker: dict[str, Any],
                      before: dict[str, dict[str, Any]]) -> None:
    """The evicted pod stays Terminating: Degraded names the fence, nothing is created beside it; then
    the node is fenced as the message says (the pod GC deletes the stuck pod)."""
    msg = _cond(o, "Degraded")["message"]
    assert _cond(o, "Degraded")["reason"] == "NodeNotReady"
    assert (f"decode endpoint 0: pod lossy-decode-0-worker-1 was evicted (NoExecute taint) but stays Terminating on "
            f"node {lost}") in msg, msg
    assert (f"`kubectl taint node {lost} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`") in msg, msg
    w = k.get("pod", "lossy-decode-0-worker-1", ns)
    assert w["metadata"]["uid"] == worker["metadata"]["uid"] and w["metadata"].get("deletionTimestamp")
    assert any(c["type"] == "DisruptionTarget" and c["reason"] == "DeletionByTaintManager"
               for c in w["status"]["conditions"])
    events = k.get("events", namespace=ns)["items"]
    assert any(e["reason"] == "GroupRestart" and "stays Terminating" in e["message"] for e in events)
    time.sleep(5)  # several passes (resync 5 s): no pod of the group created beside the stuck one
    pods = engine_pods(k, ns, "lossy")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods} == {
        n: p["metadata"]["uid"] for n, p in before.items() if n != "lossy-decode-0-leader"}, [
        (p["metadata"]["name"], p["metadata"].get("deletionTimestamp")) for p in pods]
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods if "prefill" in p["metadata"]["name"]} == {
        n: p["metadata"]["uid"] for n, p in before.items() if "prefill" in n}

    k.kubectl("taint", "node", lost, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")

