"""Placement on the real scheduler (issue 12): gang + topology-aware scheduling through the
Workload API against today's pod-affinity path, on simulated GB200 NVL72 racks.

Clusters (the smallest that prove each point): the session's one-rack cluster (``kube``, Workload
API on) for the no-domain-fits case with the operator; a two-rack cluster ``<session>-racks`` for
fragmentation and packing (objects rendered by ``qdd render`` and applied with kubectl: what the
operator applies, tests/integration/test_render_equals_applied.py); a one-rack cluster
``<session>-noapi`` without the Workload API for the fallback. Occupied GPUs are filler pods bound
to named trays (``spec.nodeName``, no scheduler), labelled ``qdd.dev/test-filler``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import uuid
from typing import Any

import pytest
import yaml

from qdd.render.trayclaims import bind_domain

from .conftest import REPO, VENV_BIN, Kube, _run_script, keep_logs

_spec = importlib.util.spec_from_file_location("qdd_sim_objects", REPO / "hack/cluster/objects.py")
objects = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(objects)

SEED = REPO / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"
R1, R2 = objects.clique(1), objects.clique(2)


def _cluster(suffix: str, racks: int, workload_api: bool):
    base = os.environ.get("QDD_TEST_CLUSTER", "qdd-test")
    name = f"{base}-{suffix}"
    k = Kube(name, REPO / ".qdd" / f"kubeconfig-{name}")
    k.env.update(QDD_RACKS=str(racks), QDD_WORKLOAD_API="1" if workload_api else "0")
    _run_script("cluster-up.sh", k.env, f"cluster-up-{name}.log", 600)
    return k


@pytest.fixture(scope="module")
def racks2():
    k = _cluster("racks", 2, True)
    # The rendered tray claims' pods name their claim only through the qdd-tray-claims policy: without it
    # no prefill pod of the applied render is ever bound.
    install_crd(k)
    yield k
    if os.environ.get("QDD_KEEP_CLUSTER") != "1":
        keep_logs(k.cluster)
        _run_script("cluster-down.sh", k.env, f"cluster-down-{k.cluster}.log", 120)


def cr(name: str, ns: str, prefill: int = 4, decode_dp: int = 8, same_domain: bool = True) -> dict[str, Any]:
    """The seed with ``prefill`` x DEP2 and one DEP``decode_dp`` decode; no preflight (its pods
    need GPUs beyond the engines', which a rack filled exactly has not)."""
    obj = yaml.safe_load(SEED.read_text())
    obj["metadata"].update(name=name, namespace=ns)
    obj["spec"]["prefill"]["endpoints"] = prefill
    obj["spec"]["decode"]["topology"]["dataParallel"] = decode_dp
    obj["spec"]["kvTransfer"]["preflight"] = {"enabled": False}
    obj["spec"]["cluster"]["sameNVLinkDomain"] = same_domain
    return obj


def qdd_render(obj: dict[str, Any], placement: str) -> str:
    p = subprocess.run([str(VENV_BIN / "qdd"), "render", "-f", "-", "--placement", placement],
                       input=yaml.safe_dump(obj), capture_output=True, text=True, check=True)
    return p.stdout


def apply_rendered(k: Kube, ns: str, text: str) -> None:
    """Apply `qdd render` output as the operator does: ComputeDomains first, then the tray
    ResourceClaims bound to their domain's uid (qdd.render.trayclaims.bind_domain; the operator
    creates them on the pass that sees the domain) with the Workloads, then the rest."""
    objs = [o for o in yaml.safe_load_all(text) if o]
    cds = [o for o in objs if o["kind"] == "ComputeDomain"]
    if cds:
        k.apply(cds, namespace=ns)
    observed = [k.get("computedomain", o["metadata"]["name"], ns) for o in cds]
    rest = [b for o in objs if o["kind"] != "ComputeDomain"
            and (b := bind_domain(o, observed) if o["kind"] == "ResourceClaim" else o) is not None]
    first = [o for o in rest if o["kind"] in ("ResourceClaim", "Workload")]
    if first:
        k.apply(first, namespace=ns)
    k.apply([o for o in rest if o not in first], namespace=ns)


def fillers(k: Kube, ns: str, trays: dict[str, tuple[int, str]]) -> None:
    """A pod bound to each tray holding ``(gpus, cpu)`` of it."""
    items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"fill-{node}", "namespace": ns, "labels": {"qdd.dev/test-filler": "true"}},
        "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": [{
            "name": "c", "image": "filler", "resources": {
                "requests": {"nvidia.com/gpu": str(g), "cpu": c}, "limits": {"nvidia.com/gpu": str(g)}}}]}}
        for node, (g, c) in trays.items()]
    k.apply(items)


def install_crd(k: Kube) -> None:
    k.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds" / "qdd.dev_qwendisaggdeployments.yaml"),
              "-f", str(REPO / "crds" / "qdd-tray-claims-policy.yaml"))
    # `kubectl wait` errs when the status has no conditions yet (a CRD applied a moment ago)
    k.wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in (
        k.get("crd", "qwendisaggdeployments.qdd.dev").get("status") or {}).get("conditions") or []),
        timeout=60, desc="CRD Established")


def new_ns(k: Kube) -> str:
    ns = f"p-{uuid.uuid4().hex[:8]}"
    k.kubectl("create", "namespace", ns)
    k.wait_for(lambda: k.exists("serviceaccount", "default", ns), timeout=60, desc=f"sa default in {ns}")
    return ns


def drop_ns(k: Kube, ns: str) -> None:
    k.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    k.wait_for(lambda: not k.kubectl("get", "pods", "-n", ns, "-o", "name", check=False).stdout.strip(),
               timeout=120, desc=f"pods of {ns} gone")


def engine_pods(k: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return k.get("pods", namespace=ns, selector=f"qdd.dev/deployment={name},qdd.dev/role in (prefill,decode)")["items"]


def clique_of(k: Kube) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.clique", "")
            for n in k.get("nodes")["items"]}


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def all_bound(k: Kube, ns: str, name: str, want: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The ``want`` engine pods of ``name``, once every one is bound to a node."""
    def done():
        pods = engine_pods(k, ns, name)
        return pods if len(pods) == want and len(bound(pods)) == want else None
    return k.wait_for(done, timeout=timeout, interval=0.5, desc=f"{want} engine pods of {ns}/{name} bound")


def settle(k: Kube, ns: str, name: str, want: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The engine pods once ``want`` exist and the scheduler has had its say on each (bound, or
    PodScheduled False)."""
    def done():
        pods = engine_pods(k, ns, name)
        decided = [p for p in pods if p["spec"].get("nodeName") or any(
            c["type"] == "PodScheduled" and c["status"] == "False" for c in p["status"].get("conditions", []))]
        return pods if len(pods) == want and len(decided) == want else None
    return k.wait_for(done, timeout=timeout, interval=0.5, desc=f"{want} engine pods of {name} scheduled or refused")


# Rack 1 fragmented: 14 trays full, 2 with 2 GPUs taken, 2 free but with most of their CPUs taken
# (so every tray of rack 1 that has room scores above rack 2's empty trays under MostAllocated,
# the first pod of the affinity path goes there). Free in rack 1: 2 + 2 + 4 + 4 = 12 GPUs < 16.
FRAGMENTED = {**{objects.node_name(1, i): (4, "1") for i in range(1, 15)},
              objects.node_name(1, 15): (2, "1"), objects.node_name(1, 16): (2, "1"),
              objects.node_name(1, 17): (0, "100"), objects.node_name(1, 18): (0, "100")}


def test_fragmented_racks_affinity_path_strands_pods_gang_path_places_all_in_the_rack_that_fits(racks2):
    """Seed (4 x DEP2 + 1 x DEP8 = 16 GPUs, 6 pods). Rack 1 holds 12 free GPUs, rack 2 all 72.
    Today's path (pod affinity on the clique): the first pod picks rack 1 and the rest cannot
    follow. The gang path: the whole deployment in rack 2, 10 times out of 10."""
    k = racks2
    fill = new_ns(k)
    try:
        fillers(k, fill, FRAGMENTED)
        cliques = clique_of(k)
        ns = new_ns(k)
        try:
            apply_rendered(k, ns, qdd_render(cr("old", ns), "affinity"))
            pods = settle(k, ns, "old", 6)
            placed = bound(pods)
            assert 0 < len(placed) < 6, [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods]
            assert {cliques[p["spec"]["nodeName"]] for p in placed} == {R1}
        finally:
            drop_ns(k, ns)
        for rep in range(10):
            ns = new_ns(k)
            try:
                apply_rendered(k, ns, qdd_render(cr("seed", ns), "gang"))
                pods = all_bound(k, ns, "seed", 6)
                assert {cliques[p["spec"]["nodeName"]] for p in pods} == {R2}, f"repetition {rep}"
                assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "seed-engines"} for p in pods)
                claims = {c["metadata"]["name"]: c for c in k.get("resourceclaims", namespace=ns)["items"]}
                for p in pods:  # the IMEX channel of every pod: its tray's claim or its own, allocated
                    held = [c.get("resourceClaimName") for c in p["spec"].get("resourceClaims") or []] + [
                        c.get("resourceClaimName") for c in p["status"].get("resourceClaimStatuses") or []]
                    held = [n for n in held if n]
                    assert held and all(claims[n]["status"].get("allocation") for n in held), p["metadata"]["name"]
            finally:
                drop_ns(k, ns)
    finally:
        drop_ns(k, fill)


def test_two_deployments_fill_one_rack_exactly_a_third_with_dep16_goes_to_the_next(racks2):
    """Rack 2 has 32 free GPUs (10 trays filled), rack 1 all 72. Two deployments of 36 GPUs
    (10 x DEP2 + 1 x DEP16 = 14 pods on 9 trays) fit only rack 1, together exactly; the third
    (4 x DEP2 + 1 x DEP16 = 24 GPUs) has only rack 2 left, its DEP16 decode (4 trays) and
    prefill together there. No tray holds more than 4 GPUs."""
    k = racks2
    fill = new_ns(k)
    try:
        fillers(k, fill, {objects.node_name(2, i): (4, "1") for i in range(1, 11)})
        cliques = clique_of(k)
        spaces = []
        try:
            for name, prefill, want_rack, pods in (("a", 10, R1, 14), ("b", 10, R1, 14), ("c", 4, R2, 8)):
                ns = new_ns(k)
                spaces.append(ns)
                apply_rendered(k, ns, qdd_render(cr(name, ns, prefill=prefill, decode_dp=16), "gang"))
                got = all_bound(k, ns, name, pods, timeout=90)
                assert {cliques[p["spec"]["nodeName"]] for p in got} == {want_rack}, name
            per_node: dict[str, int] = {}
            for p in json.loads(k.kubectl("get", "pods", "-A", "-l", "qdd.dev/role in (prefill,decode)", "-o",
                                          "json").stdout)["items"]:
                if p["metadata"]["namespace"] in spaces and p["spec"].get("nodeName"):
                    gpus = int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
                    per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + gpus
            assert max(per_node.values()) == 4
            assert sum(g for n, g in per_node.items() if cliques[n] == R1) == 72  # rack 1 exactly full
        finally:
            for ns in spaces:
                drop_ns(k, ns)
    finally:
        drop_ns(k, fill)


def test_same_nvlink_domain_false_keeps_each_dep_group_whole_in_its_own_domain(racks2):
    """sameNVLinkDomain false: a gang per decode group (minCount 4 for DEP16), none for the
    single-pod prefill endpoints; each group lands in one clique."""
    k = racks2
    ns = new_ns(k)
    try:
        text = qdd_render(cr("split", ns, prefill=2, decode_dp=16, same_domain=False), "gang")
        groups = [o for o in yaml.safe_load_all(text) if o and o["kind"] == "PodGroup"]
        assert [(g["metadata"]["name"], g["spec"]["schedulingPolicy"]) for g in groups] == [
            ("split-decode-0", {"gang": {"minCount": 4}})]
        k.apply(text, namespace=ns)
        pods = all_bound(k, ns, "split", 6)
        cliques = clique_of(k)
        decode = [p for p in pods if p["metadata"]["labels"]["qdd.dev/role"] == "decode"]
        assert len({cliques[p["spec"]["nodeName"]] for p in decode}) == 1
        assert all("schedulingGroup" not in p["spec"] for p in pods if p not in decode)
    finally:
        drop_ns(k, ns)


def _cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_no_domain_fits_binds_nothing_says_why_with_numbers_then_recovers(kube, operator, namespace):
    """One rack with 8 free GPUs (16 of 18 trays filled): the seed asks for 16. Zero pods bound,
    Ready False with reason InsufficientNVLinkDomainCapacity and the numbers, a Warning event;
    the fillers go → Ready by itself."""
    fill = new_ns(kube)
    try:
        fillers(kube, fill, {**{objects.node_name(1, i): (4, "1") for i in range(1, 16)},
                             objects.node_name(1, 16): (4, "1")})  # 2 free trays: 8 GPUs
        kube.apply(cr("tight", namespace), namespace=namespace)
        got = kube.wait_for(lambda: (lambda o: o if _cond(o, "Placed").get("reason") ==
                                     "InsufficientNVLinkDomainCapacity" else None)(
            kube.get("qwendisaggdeployment", "tight", namespace)), timeout=90, desc="Placed=False with numbers")
        placed, ready = _cond(got, "Placed"), _cond(got, "Ready")
        assert placed["status"] == "False"
        assert "16 GPUs in 6 pods asked in one NVLink domain" in placed["message"]
        assert f"{R1}: 8 GPUs free on 18 nodes (at most 4 on one node)" in placed["message"]
        assert ready["status"] == "False" and ready["reason"] == "InsufficientNVLinkDomainCapacity"
        time.sleep(3)  # the scheduler has tried: still not one pod bound
        pods = engine_pods(kube, namespace, "tight")
        assert len(pods) == 6 and bound(pods) == []
        events = kube.get("events", namespace=namespace)["items"]
        assert any(e["reason"] == "InsufficientNVLinkDomainCapacity" and e["type"] == "Warning" for e in events)
    finally:
        drop_ns(kube, fill)
    done = kube.wait_for(lambda: (lambda o: o if _cond(o, "Ready").get("status") == "True" else None)(
        kube.get("qwendisaggdeployment", "tight", namespace)), timeout=120, desc="Ready after capacity freed")
    assert _cond(done, "Placed")["reason"] == "GangScheduled"
    assert len(bound(engine_pods(kube, namespace, "tight"))) == 6


@pytest.fixture(scope="module")
def noapi():
    k = _cluster("noapi", 1, False)
    yield k
    if os.environ.get("QDD_KEEP_CLUSTER") != "1":
        keep_logs(k.cluster)
        _run_script("cluster-down.sh", k.env, f"cluster-down-{k.cluster}.log", 120)


def test_without_the_workload_api_the_operator_falls_back_to_affinity_and_says_so(noapi):
    from .operator_proc import OperatorProcess

    k = noapi
    assert "scheduling.k8s.io/v1alpha2" not in k.kubectl("api-versions").stdout.split()
    install_crd(k)
    op = OperatorProcess(k)
    op.start()
    ns = new_ns(k)
    try:
        k.apply(cr("plain", ns), namespace=ns)
        got = k.wait_for(lambda: (lambda o: o if _cond(o, "Ready").get("status") == "True" else None)(
            k.get("qwendisaggdeployment", "plain", ns)), timeout=120, desc="Ready without gang scheduling")
        placed = _cond(got, "Placed")
        assert placed["reason"] == "NoGangScheduling" and placed["status"] == "True"
        assert placed["message"].startswith("no gang scheduling: partial placement possible")
        pods = engine_pods(k, ns, "plain")
        assert all("schedulingGroup" not in p["spec"] for p in pods)
        assert all(p["spec"]["affinity"]["podAffinity"] for p in pods)
        router = k.get("pods", namespace=ns, selector="qdd.dev/role=router")["items"]
        assert router and all(p["spec"]["nodeName"].startswith("cpu-") for p in router)
    finally:
        drop_ns(k, ns)
        op.stop()



@pytest.fixture(scope="module")
def racks2_operator(racks2):
    from .operator_proc import OperatorProcess

    k = racks2
    install_crd(k)
    op = OperatorProcess(k)
    op.start()
    yield op
    op.stop()


def _ready(k: Kube, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:
    return k.wait_for(lambda: (lambda o: o if _cond(o, "Ready").get("status") == "True" else None)(
        k.get("qwendisaggdeployment", name, ns)), timeout=timeout, desc=f"{ns}/{name} Ready")


def test_node_loss_recreates_the_group_in_the_same_domain_or_says_why(racks2, racks2_operator):
    """Injected: the kwok node of the decode worker is deleted (a tray lost). The pod goes with
    it (the pod garbage collector), the operator recreates the whole decode group, and the gang
    (the deployment's PodGroup, whose other pods are still bound) puts it back in the same clique.
    Then the rest of that clique is filled and the new worker's node deleted too: the group cannot
    come back in its domain; nothing of it binds elsewhere, and Placed says why with numbers.
    Restores the nodes after (hack/cluster-up.sh is idempotent)."""
    k = racks2
    ns = new_ns(k)
    fill = new_ns(k)
    try:
        k.apply(cr("lossy", ns), namespace=ns)
        _ready(k, ns, "lossy")
        cliques = clique_of(k)
        pods = bound(engine_pods(k, ns, "lossy"))
        [domain] = {cliques[p["spec"]["nodeName"]] for p in pods}
        worker = next(p for p in pods if p["metadata"]["name"] == "lossy-decode-0-worker-1")
        k.kubectl("delete", "node", worker["spec"]["nodeName"], "--wait=false")

        def back():
            ps = [p for p in bound(engine_pods(k, ns, "lossy")) if not p["metadata"].get("deletionTimestamp")]
            w = [p for p in ps if p["metadata"]["name"] == "lossy-decode-0-worker-1"]
            return w[0] if len(ps) == 6 and w and w[0]["metadata"]["uid"] != worker["metadata"]["uid"] else None
        new_worker = k.wait_for(back, timeout=180, interval=1, desc="decode group recreated")
        assert cliques[new_worker["spec"]["nodeName"]] == domain
        assert {cliques[p["spec"]["nodeName"]] for p in bound(engine_pods(k, ns, "lossy"))} == {domain}
        _ready(k, ns, "lossy")
        events = k.get("events", namespace=ns)["items"]
        assert any(e["reason"] == "GroupRestart" and "decode endpoint 0" in e["message"] for e in events)

        # Fill every free tray of the domain, then lose the new worker's tray as well.
        used = {p["spec"]["nodeName"] for p in bound(engine_pods(k, ns, "lossy"))}
        rack = 1 if domain == R1 else 2
        free = [objects.node_name(rack, i) for i in range(1, 19)
                if objects.node_name(rack, i) not in used and objects.node_name(rack, i) in cliques]
        fillers(k, fill, {n: (4, "1") for n in free})
        k.kubectl("delete", "node", new_worker["spec"]["nodeName"], "--wait=false")
        got = k.wait_for(lambda: (lambda o: o if _cond(o, "Placed").get("reason") ==
                                  "InsufficientNVLinkDomainCapacity" else None)(
            k.get("qwendisaggdeployment", "lossy", ns)), timeout=180, interval=1, desc="Placed says why")
        msg = _cond(got, "Placed")["message"]
        # the recreated group's old leader left one tray free: 4 GPUs, one whole tray, too few for DEP8
        assert f"2 pods (8 GPUs) of the whole deployment (4 x DEP2 prefill + 1 x DEP8 decode) cannot be placed in " \
               f"NVLink domain {domain}, where the rest of the gang is bound" in msg, msg
        assert f"{domain}: 4 GPUs free on 16 nodes (at most 4 on one node)" in msg, msg
        decode = [p for p in engine_pods(k, ns, "lossy") if p["metadata"]["labels"]["qdd.dev/role"] == "decode"
                  and not p["metadata"].get("deletionTimestamp")]
        assert decode and bound(decode) == []  # never half a group, never in the other rack
    finally:
        drop_ns(k, ns)
        drop_ns(k, fill)
        _run_script("cluster-up.sh", k.env, f"cluster-up-{k.cluster}.log", 600)  # the lost nodes come back


def test_prefill_scale_up_lands_in_the_domain_or_waits_there_while_the_others_serve(racks2, racks2_operator):
    """Injected: a Ready seed deployment (one clique) scaled 4 -> 6 prefill endpoints; then every
    free tray of its clique taken by other pods and the deployment scaled 6 -> 8. Checked: the two
    new endpoints of the first scale bind in the deployment's clique; those of the second bind
    nowhere (not in the other rack, which has room), the 6 bound endpoints stay Ready and serving
    (prefillReady 6/8) and the status says why; freeing the trays lets them bind in the clique."""
    k = racks2
    ns = new_ns(k)
    fill = new_ns(k)
    try:
        k.apply(cr("grow", ns), namespace=ns)
        _ready(k, ns, "grow")
        cliques = clique_of(k)
        [domain] = {cliques[p["spec"]["nodeName"]] for p in bound(engine_pods(k, ns, "grow"))}
        k.kubectl("scale", "qdd", "grow", "-n", ns, "--replicas=6")

        def ready_with(want: str, timeout: float = 120) -> dict[str, Any]:
            def done():
                o = k.get("qwendisaggdeployment", "grow", ns)
                st = o.get("status") or {}
                return o if (st.get("observedGeneration") == o["metadata"]["generation"] and
                             st.get("prefillReady") == want and _cond(o, "Ready").get("status") == "True") else None
            return k.wait_for(done, timeout=timeout, interval=0.5, desc=f"prefill {want} and Ready")
        ready_with("6/6")
        assert {cliques[p["spec"]["nodeName"]] for p in bound(engine_pods(k, ns, "grow"))} == {domain}
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in bound(engine_pods(k, ns, "grow"))}

        rack = 1 if domain == R1 else 2
        used: dict[str, int] = {}
        for p in bound(engine_pods(k, ns, "grow")):
            gpus = sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
                       for c in p["spec"]["containers"])
            used[p["spec"]["nodeName"]] = used.get(p["spec"]["nodeName"], 0) + gpus
        trays = [objects.node_name(rack, i) for i in range(1, 19) if objects.node_name(rack, i) in cliques]
        fillers(k, fill, {n: (4 - used.get(n, 0), "1") for n in trays if used.get(n, 0) < 4})
        k.kubectl("scale", "qdd", "grow", "-n", ns, "--replicas=8")

        def waiting():
            o = k.get("qwendisaggdeployment", "grow", ns)
            st = o.get("status") or {}
            if st.get("observedGeneration") != o["metadata"]["generation"] or st.get("prefillReady") != "6/8":
                return None
            ps = [p for p in engine_pods(k, ns, "grow") if p["metadata"]["labels"]["qdd.dev/role"] == "prefill"]
            # The scheduler's verdict on the two new pods, not only their lack of a node: the
            # operator's message can say "unschedulable" only after the scheduler has.
            refused = [p for p in ps if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                                            for c in (p.get("status") or {}).get("conditions") or [])]
            return o if len(ps) == 8 and len(bound(ps)) == 6 and len(refused) == 2 else None
        k.wait_for(waiting, timeout=120, interval=1, desc="two new prefill endpoints Unschedulable, six serving")

        def said() -> dict[str, Any] | None:  # the status of a pass that saw the scheduler's verdict
            o = k.get("qwendisaggdeployment", "grow", ns)
            return o if "2 pods unschedulable" in _cond(o, "Ready").get("message", "") else None
        o = k.wait_for(said, timeout=60, interval=0.5, desc="Ready's message names the 2 unschedulable pods")
        assert _cond(o, "Ready")["status"] == "False" and o["status"]["prefillReady"] == "6/8", o["status"]
        # nothing bound outside the clique, nothing of the serving endpoints replaced
        assert {cliques[p["spec"]["nodeName"]] for p in bound(engine_pods(k, ns, "grow"))} == {domain}
        assert {n: u for n, u in ((p["metadata"]["name"], p["metadata"]["uid"]) for p in bound(
            engine_pods(k, ns, "grow"))) if n in before} == before
        drop_ns(k, fill)
        ready_with("8/8", timeout=180)
        assert {cliques[p["spec"]["nodeName"]] for p in bound(engine_pods(k, ns, "grow"))} == {domain}
    finally:
        drop_ns(k, ns)
        drop_ns(k, fill)
