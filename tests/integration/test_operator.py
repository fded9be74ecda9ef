"""The operator on the real control plane with a simulated GB200 NVL72 rack (issue: operator).

Each test applies CRs with kubectl into a fresh namespace and asserts on what the API server,
the scheduler and the garbage collector did.
"""

from __future__ import annotations


import json
import re
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, Kube

EXAMPLES = REPO / "examples"
BASE = sorted(EXAMPLES.glob("qwen35-397b-*xdep2-1xdep8.yaml"))
SEED = EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
READY_TIMEOUT = 120




def cr_of(path: Path, namespace: str, **changes) -> dict:
    cr = yaml.safe_load(path.read_text())
    cr["metadata"]["namespace"] = namespace
    for dotted, value in changes.items():
        node = cr
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cr


def condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def wait_ready(kube: Kube, name: str, ns: str, timeout: float = READY_TIMEOUT) -> dict:
    kube.kubectl("wait", "--for=condition=Ready", f"qdd/{name}", "-n", ns, f"--timeout={int(timeout)}s",
                 timeout=timeout + 10)
    obj = kube.get("qdd", name, ns)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    return obj


def pods(kube: Kube, name: str, ns: str, role: str | None = None) -> list[dict]:
    sel = f"qdd.dev/deployment={name}" + (f",qdd.dev/role={role}" if role else "")
    return kube.get("pods", namespace=ns, selector=sel)["items"]


def uids(items: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}


@pytest.mark.parametrize("path", BASE, ids=lambda p: p.stem)
def test_base_example_goes_ready_in_one_clique(kube, operator, namespace, path):
    cr = cr_of(path, namespace)
    name = cr["metadata"]["name"]
    n = cr["spec"]["prefill"]["endpoints"]
    kube.apply(cr)
    obj = wait_ready(kube, name, namespace)
    assert condition(obj, "Ready")["reason"] == "AllEndpointsReady"
    assert obj["status"]["prefillReady"] == f"{n}/{n}" and obj["status"]["decodeReady"] == "1/1"
    assert obj["status"]["gpus"] == 2 * n + 8

    nodes = {x["metadata"]["name"]: x["metadata"]["labels"] for x in kube.get("nodes")["items"]}
    engine = [p for p in pods(kube, name, namespace) if p["metadata"]["labels"]["qdd.dev/role"] in ("prefill", "decode")]
    assert len(engine) == n + 2
    assert all(p["status"]["phase"] == "Running" for p in engine)
    assert {nodes[p["spec"]["nodeName"]]["kubernetes.io/arch"] for p in engine} == {"arm64"}
    assert len({nodes[p["spec"]["nodeName"]]["nvidia.com/gpu.clique"] for p in engine}) == 1
    gpus = sum(int(c["resources"]["requests"]["nvidia.com/gpu"]) for p in engine for c in p["spec"]["containers"])
    assert gpus == 2 * n + 8
    decode = {p["metadata"]["labels"]["qdd.dev/group-role"]: p for p in pods(kube, name, namespace, "decode")}
    assert set(decode) == {"leader", "worker"}
    assert decode["leader"]["spec"]["nodeName"] != decode["worker"]["spec"]["nodeName"]

    # The IMEX channel claims (one per tray: docs/placement.md#imex-channels-one-claim-per-tray):
    # one per pair of DEP2 prefill pods, one per decode pod (and per preflight pod), allocated and
    # reserved by the real scheduler, each on the tray of the pods that hold it.
    claims = [c for c in kube.get("resourceclaims", namespace=namespace)["items"] if "preflight" not in c["metadata"]["name"]]
    assert len(claims) == -(-n // 2) + 2
    for c in claims:
        alloc = c["status"]["allocation"]["devices"]["results"]
        assert alloc and alloc[0]["driver"] == "compute-domain.nvidia.com" and alloc[0]["device"] == "channel-0"
        holders = {p["spec"]["nodeName"] for p in engine if p["metadata"]["uid"] in {r["uid"] for r in c["status"]["reservedFor"]}}
        assert holders == {alloc[0]["pool"]}
    cd = kube.get("computedomains", f"{name}-compute-domain", namespace)
    assert cd["status"]["status"] == "Ready"

    table = kube.kubectl("get", "qdd", name, "-n", namespace).stdout
    header = table.splitlines()[0].split()
    assert header == ["NAME", "PREFILL", "DECODE", "GPUS", "CONCURRENCY", "READY", "REASON", "AGE"]
    assert table.splitlines()[1].split()[1:7] == [f"{n}/{n}", "1/1", str(2 * n + 8), "3072", "True", "AllEndpointsReady"]

    kube.kubectl("delete", "qdd", name, "-n", namespace, "--wait=true", "--timeout=60s")
    kube.wait_for(lambda: not pods(kube, name, namespace), timeout=60, desc="pods garbage-collected")


def test_invalid_tensor_parallel_refused_at_apply(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    cr["spec"]["prefill"]["topology"]["tensorParallel"] = 2
    p = kube.kubectl("apply", "-f", "-", input=json.dumps(cr), check=False)
    assert p.returncode != 0
    assert "spec.decode.topology.tensorParallel" in p.stderr
    assert "must be equal" in p.stderr
    assert not kube.exists("qdd", cr["metadata"]["name"], namespace)


def test_scale_prefill_keeps_decode_pods(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    decode_before = uids(pods(kube, name, namespace, "decode"))
    sts_template = kube.get("statefulset", f"{name}-prefill", namespace)["spec"]["template"]
    kube.kubectl("scale", f"qdd/{name}", "-n", namespace, "--replicas=6")
    kube.wait_for(lambda: kube.get("qdd", name, namespace)["status"].get("prefillReady") == "6/6",
                  timeout=READY_TIMEOUT, desc="6/6 prefill endpoints")
    obj = wait_ready(kube, name, namespace)
    assert obj["spec"]["prefill"]["endpoints"] == 6 and obj["status"]["replicas"] == 6
    assert len(pods(kube, name, namespace, "prefill")) == 6
    assert uids(pods(kube, name, namespace, "decode")) == decode_before
    assert kube.get("statefulset", f"{name}-prefill", namespace)["spec"]["template"] == sts_template
    scale = json.loads(kube.kubectl("get", "--raw",
                                    f"/apis/qdd.dev/v1alpha1/namespaces/{namespace}/qwendisaggdeployments/{name}/scale").stdout)
    assert scale["spec"]["replicas"] == 6 and scale["status"]["selector"] == f"qdd.dev/deployment={name},qdd.dev/role=prefill"


def _capture(pod: dict) -> str:
    args = pod["spec"]["containers"][0]["args"]
    return args[args.index("--max-cudagraph-capture-size") + 1]


def test_concurrency_change_rolls_decode(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    before = uids(pods(kube, name, namespace, "decode"))
    prefill_before = uids(pods(kube, name, namespace, "prefill"))
    assert {_capture(p) for p in pods(kube, name, namespace, "decode")} == {"640"}
    kube.kubectl("patch", "qdd", name, "-n", namespace, "--type=merge", "-p",
                 json.dumps({"spec": {"workload": {"concurrency": 5120}}}))

    def rolled():
        ps = pods(kube, name, namespace, "decode")
        return len(ps) == 2 and {_capture(p) for p in ps} == {"768"} and not set(uids(ps).values()) & set(before.values())
    kube.wait_for(rolled, timeout=READY_TIMEOUT, desc="decode group recreated with capture size 768")
    obj = wait_ready(kube, name, namespace)
    assert obj["status"]["plan"]["decodeMaxCudagraphCaptureSize"] == 768
    assert uids(pods(kube, name, namespace, "prefill")) == prefill_before


@pytest.mark.parametrize("member", ["worker-1", "leader"])
def test_deleting_one_decode_pod_recreates_the_group(kube, operator, namespace, member):
    """Injected: one pod of the DEP8 group deleted — a headless worker, or the leader (whose
    workers would otherwise wait for it forever, vllm#32136). Checked: both pods recreated with
    new UIDs, a GroupRestart event, Ready again."""
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    before = uids(pods(kube, name, namespace, "decode"))
    restarts_before = operator.counter("qdd_group_restarts_total", role="decode", cause="broken")
    kube.kubectl("delete", "pod", f"{name}-decode-0-{member}", "-n", namespace, "--wait=false")

    seen_degraded = []

    def recreated():
        obj = kube.get("qdd", name, namespace)
        if condition(obj, "Degraded").get("status") == "True":
            seen_degraded.append(condition(obj, "Degraded")["message"])
        ps = pods(kube, name, namespace, "decode")
        live = [p for p in ps if not p["metadata"].get("deletionTimestamp")]
        return len(live) == 2 and not set(uids(live).values()) & set(before.values())
    kube.wait_for(recreated, timeout=READY_TIMEOUT, interval=0.1, desc="both decode pods with new UIDs")
    wait_ready(kube, name, namespace)
    assert operator.counter("qdd_group_restarts_total", role="decode", cause="broken") >= restarts_before + 1
    events = kube.get("events", namespace=namespace)["items"]
    assert any(e["reason"] == "GroupRestart" and "decode endpoint 0" in e["message"] for e in events)
    if seen_degraded:  # the window can be shorter than one poll; the event above is the durable record
        assert "recreating the whole group" in seen_degraded[0]


def test_operator_killed_mid_reconcile_leaves_no_duplicates(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    operator.kill()  # right after apply: the first reconcile is in flight or not yet started
    operator.start()
    wait_ready(kube, name, namespace)
    operator.kill()
    operator.start()
    operator.wait_idle(3)
    wait_ready(kube, name, namespace)
    all_pods = pods(kube, name, namespace)
    names = [p["metadata"]["name"] for p in all_pods]
    assert len(names) == len(set(names)) == 4 + 2 + 1 + 2  # prefill, decode, router, preflight serve/fetch
    for kind in ("statefulsets", "services", "deployments", "computedomains", "roles", "rolebindings", "serviceaccounts"):
        items = kube.get(kind, namespace=namespace, selector=f"qdd.dev/deployment={name}")["items"]
        assert items, kind
        for it in items:
            refs = it["metadata"].get("ownerReferences") or []
            assert [r["name"] for r in refs if r.get("controller")] == [name], (kind, it["metadata"]["name"])
    obj = kube.get("qdd", name, namespace)
    assert not obj["metadata"].get("finalizers")
    for item in kube.get("all", namespace=namespace)["items"]:
        anns = item["metadata"].get("annotations") or {}
        assert not any(k.startswith("kopf.zalando.org") for k in anns), item["metadata"]["name"]


def test_delete_cr_removes_every_child(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    kube.kubectl("delete", "qdd", name, "-n", namespace, "--timeout=30s")
    sel = f"qdd.dev/deployment={name}"

    def gone():
        kinds = "pods,services,statefulsets,deployments,serviceaccounts,roles,rolebindings,computedomains,resourceclaimtemplates"
        return not kube.get(kinds, namespace=namespace, selector=sel)["items"]
    kube.wait_for(gone, timeout=60, desc="garbage collector removed every child")
    assert not kube.exists("qdd", name, namespace)


def test_capacity_impossible_cr_reports_numbers(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    cr["spec"]["workload"]["concurrency"] = 20000
    kube.apply(cr)

    def invalid():
        obj = kube.get("qdd", name, namespace)
        return condition(obj, "Ready").get("reason") == "InvalidSpec" and obj
    obj = kube.wait_for(invalid, timeout=60, desc="Ready=False InvalidSpec")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    assert "spec.workload.concurrency" in ready["message"]
    m = re.search(r"20000 concurrent requests exceed the predicted decode capacity of (\d+) .* "
                  r"it needs (\d+) decode endpoints \((\d+) decode GPUs\)", ready["message"])
    assert m, ready["message"]
    capacity, endpoints, gpus = map(int, m.groups())
    assert 3000 < capacity < 6000 and endpoints == -(-20000 // capacity) and gpus == 8 * endpoints
    assert condition(obj, "PlanValid")["status"] == "False" and condition(obj, "Stalled")["status"] == "True"
    assert not pods(kube, name, namespace), "nothing may be applied for an invalid spec"
    events = kube.get("events", namespace=namespace)["items"]
    assert any(e["type"] == "Warning" and e["reason"] == "InvalidSpec" for e in events)



def test_a_burst_of_prefill_replacements_recycles_decode_once_and_is_never_ready_between(kube, operator, namespace):
    """Injected: two prefill pods replaced one after the other, as a drain of their tray does (the
    second evicted once the first's replacement is Ready, under the PodDisruptionBudget). vLLM 0.33's
    decode keeps the old engines' NIXL agents (vllm#49238, #58063), so qdd recreates the decode group:
    once for the burst (issue 23: it was once per replaced pod, Ready between), when every prefill pod
    is back and none was replaced for the window; Ready=False (PeerRestartPending) from the first
    replacement until decode is back; prefill untouched otherwise; nothing orphaned or duplicated."""
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    obj = wait_ready(kube, name, namespace)
    assert len(obj["status"]["prefillPods"]) == 4  # the record replacements are told apart by
    decode_before = uids(pods(kube, name, namespace, "decode"))
    prefill_before = uids(pods(kube, name, namespace, "prefill"))
    victims = [f"{name}-prefill-1", f"{name}-prefill-2"]
    restarts_before = operator.counter("qdd_group_restarts_total", role="decode", cause="peer-restarted")
    seen: list[tuple[str, str]] = []  # (Ready status, reason) after the first replacement

    def ready_now() -> None:
        c = _ready_cond(kube.get("qwendisaggdeployment", name, namespace))
        seen.append((c.get("status", ""), c.get("reason", "")))

    def replaced_and_ready(victim: str) -> bool:
        ready_now()
        p = next((p for p in pods(kube, name, namespace, "prefill") if p["metadata"]["name"] == victim), None)
        return p is not None and p["metadata"]["uid"] != prefill_before[victim] and any(
            c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])

    kube.kubectl("delete", "pod", victims[0], "-n", namespace, "--wait=false")
    kube.wait_for(lambda: replaced_and_ready(victims[0]), timeout=READY_TIMEOUT, interval=0.2,
                  desc="the first prefill replacement Ready")
    kube.kubectl("delete", "pod", victims[1], "-n", namespace, "--wait=false")

    def recycled() -> bool:
        ready_now()
        live = [p for p in pods(kube, name, namespace, "decode") if not p["metadata"].get("deletionTimestamp")]
        return len(live) == 2 and not set(uids(live).values()) & set(decode_before.values())
    kube.wait_for(recycled, timeout=READY_TIMEOUT, interval=0.2, desc="decode group recreated with new UIDs")
    assert ("False", "PeerRestartPending") in seen, seen
    # Never Ready inside the burst once the operator has seen it (the reads before its first pass after
    # the deletion still show the Ready it had: no controller can close that window).
    assert ("True", "AllEndpointsReady") not in seen[seen.index(("False", "PeerRestartPending")):], seen
    obj = wait_ready(kube, name, namespace)
    assert operator.counter("qdd_group_restarts_total", role="decode", cause="peer-restarted") == restarts_before + 1
    events = kube.get("events", namespace=namespace)["items"]
    [ev] = [e for e in events if e["reason"] == "PeerRestarted"]
    assert all(v in ev["message"] for v in victims) and "decode endpoint 0" in ev["message"] and ev["type"] == "Warning"
    after = uids(pods(kube, name, namespace, "prefill"))
    assert after.keys() == prefill_before.keys() and all(after[v] != prefill_before[v] for v in victims)
    assert {k: v for k, v in after.items() if k not in victims} == \
        {k: v for k, v in prefill_before.items() if k not in victims}
    assert obj["status"]["prefillPods"] == after and "peerRestart" not in obj["status"]
    assert "peerRestartPending" not in obj["status"]
    assert len(pods(kube, name, namespace, "decode")) == 2


def _ready_cond(obj: dict) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def _node_of(kube: Kube, ns: str, pod: str) -> str:
    return kube.get("pod", pod, ns)["spec"]["nodeName"]


@pytest.mark.parametrize("role", ["decode", "prefill"])
def test_drain_of_a_node_moves_its_endpoints_within_the_clique(kube, operator, namespace, role):
    """Injected: `kubectl drain` of the node of a decode worker, or of a prefill pod (evictions
    honour the prefill PodDisruptionBudget: one endpoint at a time). Checked: every pod of the
    deployment ends Running on another node of the same NVLink clique, Ready again; lost: nothing
    (4 prefill pods, one decode group of 2)."""
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    victim = f"{name}-decode-0-worker-1" if role == "decode" else f"{name}-prefill-0"
    node = _node_of(kube, namespace, victim)
    clique = kube.get("node", node)["metadata"]["labels"]["nvidia.com/gpu.clique"]
    try:
        kube.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s", timeout=170)

        def moved():
            ps = [p for p in pods(kube, name, namespace) if p["metadata"]["labels"].get("qdd.dev/role") in (
                "prefill", "decode") and not p["metadata"].get("deletionTimestamp")]
            return (len(ps) == 6 and all(p["spec"].get("nodeName") not in (None, node) for p in ps)
                    and all(p.get("status", {}).get("phase") == "Running" for p in ps) and ps)
        live = kube.wait_for(moved, timeout=READY_TIMEOUT, interval=0.5, desc=f"every pod off the drained {role} node")
        wait_ready(kube, name, namespace)
        for p in live:
            labels_ = kube.get("node", p["spec"]["nodeName"])["metadata"]["labels"]
            assert labels_["nvidia.com/gpu.clique"] == clique, p["metadata"]["name"]
        assert len(pods(kube, name, namespace, "prefill")) == 4 and len(pods(kube, name, namespace, "decode")) == 2
    finally:
        kube.kubectl("uncordon", node, check=False)
