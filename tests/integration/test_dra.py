"""IMEX channels on the real scheduler with the faithful DRA double (hack/cluster/objects.py,
hack/fake_compute_domain_driver.py; docs/facts/dra-driver.md): what NVIDIA's driver refuses is
refused here, and qdd's rendering places the seed and every example shape in one rack.

Session cluster (``kube``, one rack, Workload API on). Objects are rendered by ``qdd render`` and
applied with kubectl, the ComputeDomain first so that the tray claims get its UID as the operator
gives it (qdd.render.trayclaims.bind_domain); render and apply agree
(tests/integration/test_render_equals_applied.py). The rack is filled with filler pods (bound by
``spec.nodeName``, no claim) until exactly the trays ``qdd plan`` asks are free.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd.api import parse_resource
from qdd.plan import build_plan
from qdd.plan.trays import trays
from qdd.controller.tray_repair import ALLOCATED_ELSEWHERE, RESYNC, claims_to_resync
from qdd.render.trayclaims import CLAIM, POD_INDEX, PODS_PER_TRAY, PREFIX, TRAY_CLAIM, bind_domain

from .conftest import REPO, VENV_BIN, Kube
from .test_placement import fillers, objects

DRIVER = "compute-domain.nvidia.com"
CD_LABEL = "resource.nvidia.com/computeDomain"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
TRAYS = [objects.node_name(1, i) for i in range(1, 19)]


def _cr(path: Path, ns: str) -> dict[str, Any]:
    obj = yaml.safe_load(path.read_text())
    obj["metadata"]["namespace"] = ns
    return obj


def _render(cr: dict[str, Any]) -> list[dict[str, Any]]:
    p = subprocess.run([str(VENV_BIN / "qdd"), "render", "-f", "-"], input=yaml.safe_dump(cr),
                       capture_output=True, text=True, check=True)
    return [o for o in yaml.safe_load_all(p.stdout) if o]


def _old_rendering(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What qdd rendered before tray claims: every GPU pod its own claim from the template."""
    out = []
    for o in copy.deepcopy(objs):
        if o["kind"] == "ResourceClaim":
            continue
        if o["kind"] == "StatefulSet":
            t = o["spec"]["template"]
            t["metadata"].pop("annotations", None)
            t["spec"]["affinity"].pop("podAffinity", None)  # the tray claim's pin came with the claims
            template = next(x["spec"]["channel"]["resourceClaimTemplate"]["name"] for x in objs
                            if x["kind"] == "ComputeDomain")
            t["spec"]["resourceClaims"] = [{"name": "imex-channel", "resourceClaimTemplateName": template}]
        out.append(o)
    return out


def _apply(kube: Kube, ns: str, objs: list[dict[str, Any]]) -> None:
    # The qdd-tray-claims admission policy (cluster-scoped, installed with the chart).
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds" / "qdd-tray-claims-policy.yaml"))
    policy_active(kube, ns)
    cds = [o for o in objs if o["kind"] == "ComputeDomain"]
    kube.apply(cds)
    observed = [kube.get("computedomain", o["metadata"]["name"], ns) for o in cds]
    rest = [b for o in objs if o["kind"] != "ComputeDomain"
            and (b := bind_domain(o, observed) if o["kind"] == "ResourceClaim" else o) is not None]
    first = [o for o in rest if o["kind"] in ("ResourceClaim", "Workload")]
    kube.apply(first)
    kube.apply([o for o in rest if o not in first])


def policy_active(kube: Kube, ns: str) -> None:
    """Wait until the API server applies the tray-claim policy: a server-side dry run of a pod it
    matches comes back mutated. A MutatingAdmissionPolicy takes effect once the API server's
    informer has it and its binding; pods created before that keep the template's claim (the first
    test of a fresh cluster did: every prefill pod named tray 0)."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "policy-probe", "namespace": ns, "labels": {POD_INDEX: "3"},
        "annotations": {PREFIX: "probe-tray", PODS_PER_TRAY: "2"}},
        "spec": {"containers": [{"name": "c", "image": "probe"}],
                 "resourceClaims": [{"name": CLAIM, "resourceClaimName": "probe-tray-0"}]}}

    def mutated() -> bool:
        out = kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe)).stdout
        return json.loads(out)["metadata"].get("labels", {}).get(TRAY_CLAIM) == "probe-tray-1"
    kube.wait_for(mutated, timeout=60, interval=0.5, desc="the qdd-tray-claims policy to mutate a pod")


def _resync_looping_claims(kube: Kube, ns: str, pods: list[dict[str, Any]]) -> None:
    """What the operator does for a claim kube-scheduler v1.36.3 loops on (kubernetes#140263,
    qdd.controller.tray_repair), done here since these tests apply the rendering without it."""
    waiting = {(p["metadata"].get("labels") or {}).get(TRAY_CLAIM) for p in pods
               if ALLOCATED_ELSEWHERE in (_unschedulable(p) or "")} - {None}
    claims = [kube.get("resourceclaim", c, ns) for c in waiting if kube.exists("resourceclaim", c, ns)]
    for name in claims_to_resync([*pods, *claims], dt.datetime.now(dt.timezone.utc)):
        print(f"resync of {name}: kube-scheduler looped on it")
        kube.kubectl("annotate", "--overwrite", "-n", ns, "resourceclaim", name,
                     f"{RESYNC}={dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}")


def _gpu_pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [p for p in kube.get("pods", namespace=ns, selector="qdd.dev/role in (prefill,decode,preflight)")["items"]]


def _unschedulable(p: dict[str, Any]) -> str | None:
    c = next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
    return c["message"] if c and c["status"] == "False" else None


def _pods_when(kube: Kube, ns: str, engine_pods: int, preflight_pods: int, done, what: str, timeout: float = 120):
    """The engine and preflight pods once all exist and ``done(pods)`` holds."""
    def check():
        pods = _gpu_pods(kube, ns)
        _resync_looping_claims(kube, ns, pods)
        roles = [p["metadata"]["labels"]["qdd.dev/role"] for p in pods]
        if sum(r != "preflight" for r in roles) < engine_pods or roles.count("preflight") < preflight_pods:
            return None
        return pods if done(pods) else None
    try:
        return kube.wait_for(check, timeout=timeout, interval=1, desc=f"{engine_pods}+{preflight_pods} GPU pods {what}")
    except AssertionError:
        for p in _gpu_pods(kube, ns):  # what the scheduler said, for the failure's reader
            print(p["metadata"]["name"], p["spec"].get("nodeName"), p["spec"].get("resourceClaims"), _unschedulable(p))
        raise


def _all_bound(pods: list[dict[str, Any]]) -> bool:
    return all(p["spec"].get("nodeName") for p in pods)


def _fill_all_but(kube: Kube, ns: str, free: int) -> list[str]:
    """Fill the rack's last 18 - ``free`` trays fully; the first ``free`` stay free."""
    full = TRAYS[free:]
    if full:
        fillers(kube, ns, {n: (4, "1") for n in full})
    return TRAYS[:free]


def _claims_of(kube: Kube, ns: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    names += [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims") or [] if c.get("resourceClaimName")]
    return [kube.get("resourceclaim", n, ns) for n in dict.fromkeys(names)]


def _shape(path: Path) -> tuple:
    """What placement depends on: per role endpoints, pods per endpoint, GPUs per pod; preflight."""
    plan = build_plan(parse_resource(yaml.safe_load(path.read_text())))
    return (tuple((r.endpoints, r.pods_per_endpoint, r.gpus_per_pod) for r in (plan.prefill, plan.decode)),
            plan.spec.kv_transfer.preflight.enabled, plan.compute_domain)


SHAPES: dict[tuple, list[Path]] = {}
for _p in EXAMPLES:
    SHAPES.setdefault(_shape(_p), []).append(_p)
ONE_PER_SHAPE = [paths[0] for paths in SHAPES.values()]
SHAPE_PARAMS = [pytest.param(p, id=p.stem) for p in ONE_PER_SHAPE]


def _place(kube: Kube, ns: str, path: Path, old: bool = False) -> tuple[list[dict[str, Any]], Any, int]:
    """Fill the rack but the trays ``qdd plan`` counts, apply the rendering (``old``: the one of
    before), wait: every pod bound (the new rendering) or the engines bound and the preflight
    refused (the old one). Returns the pods, the plan and the engine pod count."""
    cr = _cr(path, ns)
    plan = build_plan(parse_resource(cr))
    free = _fill_all_but(kube, ns, trays(plan))
    objs = _render(cr)
    _apply(kube, ns, _old_rendering(objs) if old else objs)
    engines = sum(r.endpoints * r.pods_per_endpoint for r in (plan.prefill, plan.decode))
    if old:
        pods = _pods_when(kube, ns, engines, 2 * plan.decode.endpoints, lambda ps: all(
            p["spec"].get("nodeName") if p["metadata"]["labels"]["qdd.dev/role"] != "preflight" else _unschedulable(p)
            for p in ps), "engines bound, preflight refused")
    else:
        pods = _pods_when(kube, ns, engines, 2 * plan.decode.endpoints, _all_bound, "bound")
    assert set(free) >= {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    return pods, plan, engines


def test_every_example_shape_is_tested():
    assert sorted(p for paths in SHAPES.values() for p in paths) == EXAMPLES
    assert len(ONE_PER_SHAPE) < len(EXAMPLES)  # the cc/mtp variants share their base's shape


@pytest.mark.parametrize("path", SHAPE_PARAMS)
def test_example_places_in_one_rack_on_the_trays_qdd_plan_counts_each_gpu_pod_with_its_channel(kube, namespace, path):
    pods, plan, _ = _place(kube, namespace, path)
    by_claim: dict[str, set[str]] = {}
    for p in pods:
        preflight = p["metadata"]["labels"]["qdd.dev/role"] == "preflight"
        if preflight and (p["status"].get("phase") == "Succeeded" or not all(
                kube.exists("resourceclaim", c["resourceClaimName"], namespace)
                for c in p["status"].get("resourceClaimStatuses") or [])):
            # a finished preflight pod: its claim went with it (it was bound, so it had one)
            assert p["status"].get("resourceClaimStatuses"), p["metadata"]["name"]
            continue
        claims = _claims_of(kube, namespace, p)
        assert len(claims) == 1, f"{p['metadata']['name']}: {len(claims)} channel claims"
        res = claims[0]["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"], r["device"]) for r in res] == [(DRIVER, p["spec"]["nodeName"], "channel-0")]
        by_claim.setdefault(claims[0]["metadata"]["name"], set()).add(p["spec"]["nodeName"])
    assert all(len(nodes) == 1 for nodes in by_claim.values())
    engine_nodes = {p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"]["qdd.dev/role"] != "preflight"}
    assert len(engine_nodes) == trays(plan, peak=False)
    # StatefulSet pods of one tray share its claim: pod i holds <cr>-prefill-tray-<i // k>.
    name = plan.name
    for p in pods:
        if p["metadata"]["labels"]["qdd.dev/role"] == "prefill" and plan.prefill.uses_statefulset:
            i = int(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"])
            k = plan.gpus_per_node // plan.prefill.gpus_per_pod
            if k > 1:
                assert p["spec"]["resourceClaims"][0]["resourceClaimName"] == f"{name}-prefill-tray-{i // k}"
            else:  # a pod that fills its tray keeps a claim of its own from the domain's template
                assert "resourceClaimTemplateName" in p["spec"]["resourceClaims"][0], p["spec"]["resourceClaims"]


def test_seed_old_rendering_leaves_pods_pending_on_the_same_rack(kube, namespace):
    """The same test with what qdd rendered before (a claim per pod): on the 6 trays the seed
    needs, the gang takes 6 trays for the 6 engine pods and the preflight pods find none."""
    pods, _, _ = _place(kube, namespace, REPO / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml", old=True)
    time.sleep(10)  # and they stay so
    pods = _gpu_pods(kube, namespace)
    pending = {p["metadata"]["name"]: _unschedulable(p) for p in pods if not p["spec"].get("nodeName")}
    assert len(pending) == 2, "the old rendering placed everything: the faithful double would not tell them apart"
    assert all("cannot allocate all claims" in m or "Insufficient nvidia.com/gpu" in m for m in pending.values()), pending
    bound = {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    assert len(bound) == 6  # one tray per engine pod, 8 GPUs stranded


# --- the driver's refusals, pod by pod ------------------------------------------------------------

def _cd(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    kube.apply({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": name},
                "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"},
                                                    "allocationMode": "Single"}}}, namespace=ns)
    kube.wait_for(lambda: kube.exists("resourceclaimtemplate", f"{name}-channel", ns), timeout=30,
                  desc=f"template {name}-channel")
    return kube.get("computedomain", name, ns)


def _pod(name: str, node: str, claim: dict[str, str], gpus: int = 2, bind: bool = False) -> dict[str, Any]:
    where = {"nodeName": node} if bind else {"nodeSelector": {"kubernetes.io/hostname": node}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        **where, "tolerations": [{"operator": "Exists"}], "resourceClaims": [{"name": "imex", **claim}],
        "containers": [{"name": "c", "image": "engine", "resources": {
            "requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)},
            "claims": [{"name": "imex"}]}}]}}


def _refused(kube: Kube, ns: str, pod: str) -> str:
    return kube.wait_for(lambda: _unschedulable(kube.get("pod", pod, ns)), timeout=30, desc=f"{pod} unschedulable")


def _running_on(kube: Kube, ns: str, pod: str) -> str:
    return kube.wait_for(lambda: (p := kube.get("pod", pod, ns))["status"].get("phase") == "Running"
                         and p["spec"]["nodeName"], timeout=30, desc=f"{pod} running")


def test_two_pods_of_one_domain_with_their_own_claims_on_one_tray_the_second_is_unschedulable(kube, namespace):
    ns, tray = namespace, TRAYS[0]
    cd = _cd(kube, ns, "cd-a")
    kube.apply(_pod("first", tray, {"resourceClaimTemplateName": "cd-a-channel"}), namespace=ns)
    assert _running_on(kube, ns, "first") == tray
    kube.apply(_pod("second", tray, {"resourceClaimTemplateName": "cd-a-channel"}), namespace=ns)
    assert "cannot allocate all claims" in _refused(kube, ns, "second")  # 2 GPUs are free there, no channel
    # The driver's kubelet plugin labelled the tray and its daemon joined the domain.
    assert kube.wait_for(lambda: kube.get("node", tray)["metadata"]["labels"].get(CD_LABEL), timeout=15,
                         desc="node label") == cd["metadata"]["uid"]
    status = kube.wait_for(lambda: (s := kube.get("computedomain", "cd-a", ns).get("status") or {}).get("nodes") and s,
                           timeout=15, desc="status.nodes")
    assert [(n["name"], n["status"]) for n in status["nodes"]] == [(tray, "Ready")] and status["status"] == "Ready"


def test_two_pods_sharing_one_claim_share_the_tray(kube, namespace):
    ns, tray = namespace, TRAYS[1]
    cd = _cd(kube, ns, "cd-s")
    rct = kube.get("resourceclaimtemplate", "cd-s-channel", ns)
    kube.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "tray"},
                "spec": rct["spec"]["spec"]}, namespace=ns)
    for name in ("one", "two"):
        kube.apply(_pod(name, tray, {"resourceClaimName": "tray"}), namespace=ns)
    assert {_running_on(kube, ns, n) for n in ("one", "two")} == {tray}
    claim = kube.get("resourceclaim", "tray", ns)
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["one", "two"]
    assert claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == cd["metadata"]["uid"]


def test_two_compute_domains_on_one_tray_the_scheduler_and_the_kubelet_plugin_refuse_the_second(kube, namespace):
    ns, tray = namespace, TRAYS[2]
    cd1 = _cd(kube, ns, "cd-1")
    cd2 = _cd(kube, ns, "cd-2")
    kube.apply(_pod("of-1", tray, {"resourceClaimTemplateName": "cd-1-channel"}), namespace=ns)
    assert _running_on(kube, ns, "of-1") == tray
    # The kubelet plugin's Prepare for of-1 is what holds the tray's channel for cd-1: wait until it
    # has run (it labels the tray), else the forced pod below may be prepared first.
    kube.wait_for(lambda: kube.get("node", tray)["metadata"]["labels"].get(CD_LABEL) == cd1["metadata"]["uid"],
                  timeout=30, desc="cd-1's Prepare on the tray")
    kube.apply(_pod("of-2", tray, {"resourceClaimTemplateName": "cd-2-channel"}), namespace=ns)
    assert "cannot allocate all claims" in _refused(kube, ns, "of-2")
    # Past the scheduler (a claim allocated by hand, the pod bound by hand): the kubelet plugin's
    # Prepare refuses it, as device_state.go does: the tray's channel is the first domain's.
    rct = kube.get("resourceclaimtemplate", "cd-2-channel", ns)
    kube.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "forced"},
                "spec": rct["spec"]["spec"]}, namespace=ns)
    kube.apply(_pod("forced", tray, {"resourceClaimName": "forced"}, gpus=1, bind=True), namespace=ns)
    pod = kube.get("pod", "forced", ns)
    status = {"status": {"allocation": {"devices": {"results": [{"request": "channel", "driver": DRIVER, "pool": tray,
                                                                 "device": "channel-0"}]},
                                        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                            {"key": "metadata.name", "operator": "In", "values": [tray]}]}]}},
                         "reservedFor": [{"resource": "pods", "name": "forced", "uid": pod["metadata"]["uid"]}]}}
    kube.kubectl("patch", "resourceclaim", "forced", "-n", ns, "--subresource=status", "--type=merge",
                 "-p", yaml.safe_dump(status))

    def refusal():
        return [e["message"] for e in kube.get("events", namespace=ns)["items"]
                if e["reason"] == "FailedPrepareDynamicResources" and e["involvedObject"]["name"] == "forced"]
    msgs = kube.wait_for(refusal, timeout=20, desc="FailedPrepareDynamicResources on pod forced")
    assert "requested device channel-0 is already allocated to different claim" in msgs[0]
    assert kube.get("node", tray)["metadata"]["labels"][CD_LABEL] != cd2["metadata"]["uid"]


# --- the scheduler with claims shared inside one gang ----------------------------------------------

def _claim(kube: Kube, ns: str, template: str, name: str) -> None:
    rct = kube.get("resourceclaimtemplate", template, ns)
    kube.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": rct["spec"]["spec"]}, namespace=ns)


def test_v1_36_3_places_pods_of_one_gang_sharing_an_unallocated_claim_on_different_trays(kube, namespace):
    """Why qdd pins the pods of a tray claim together (docs/placement.md, "The gang and shared
    claims"), reduced to two plain pods: one PodGroup (minCount 2), one claim not yet allocated,
    each pod held by its nodeSelector to a tray of its own. A correct scheduler refuses the gang
    (the claim's one channel is on one tray). kube-scheduler v1.36.3 assumes both, the second
    reusing the first's pending allocation without its node (kubernetes/kubernetes#140087), and
    sends both to PreBind, where exactly one writes the allocation and the other fails ("got
    allocated elsewhere in the meantime", #140053) and is retried. When the pod away from the
    allocation wins the write, it is bound on a tray whose channel its claim does not hold; else
    the other one was sent to PreBind on its own tray. Either shows the bug; when neither happens,
    the scheduler holds such pods to the allocation's tray (#140089) and
    qdd.render.trayclaims.pod_affinity can go. Without a PodGroup the same pair is refused pod by
    pod at Filter, as it should be."""
    ns, one, two, three, four = namespace, *TRAYS[3:7]
    _cd(kube, ns, "cd-g")
    for c in ("shared", "solo"):
        _claim(kube, ns, "cd-g-channel", c)
    kube.apply({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "pair"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}, namespace=ns)
    gang = [_pod(n, tray, {"resourceClaimName": "shared"}) for n, tray in (("ga", one), ("gb", two))]
    for p in gang:
        p["spec"]["schedulingGroup"] = {"podGroupName": "pair"}
    kube.apply(gang + [_pod(n, tray, {"resourceClaimName": "solo"}) for n, tray in (("sa", three), ("sb", four))],
               namespace=ns)

    def prebind_failures(name: str) -> list[str]:
        return [e["message"] for e in kube.get("events", namespace=ns)["items"]
                if e["involvedObject"]["name"] == name and e["reason"] == "FailedScheduling"
                and "got allocated elsewhere in the meantime" in e["message"]]

    def gang_outcome():
        pods = {n: kube.get("pod", n, ns) for n in ("ga", "gb")}
        bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
        alloc = (kube.get("resourceclaim", "shared", ns).get("status") or {}).get("allocation")
        if not bound or not alloc:
            return None
        pool = alloc["devices"]["results"][0]["pool"]
        if any(node != pool for node in bound.values()):
            return "a pod bound on a tray whose channel its claim does not hold", bound, pool
        if any(prebind_failures(n) for n in pods if n not in bound):
            return "the other pod sent to PreBind on its own tray", bound, pool
        return None
    what, bound, pool = kube.wait_for(gang_outcome, timeout=30, desc="the gang placed by v1.36.3")
    print(what, bound, pool)
    assert pool in (one, two)

    def solo_pair():
        pods = [kube.get("pod", n, ns) for n in ("sa", "sb")]
        placed = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [_unschedulable(p) or "" for p in pods if not p["spec"].get("nodeName")]
        return len(placed) == 1 and "resourceclaim not available on the node" in waiting[0] and placed
    placed = kube.wait_for(solo_pair, timeout=30, desc="sa or sb bound, the other refused for the claim's tray")
    pools = [r["pool"] for r in kube.get("resourceclaim", "solo", ns)["status"]["allocation"]["devices"]["results"]]
    assert pools == [placed[0]["spec"]["nodeName"]]
