"""Contract of the engine TEST DOUBLE's load mode (hack/fake_engine_load.py, used by
hack/fake_engine_metrics.py): it sends requests where vllm-router's discovery would — the pods that
match the router Deployment's rendered selectors, Running, Ready and not being deleted (the rule read
in vllm-router's discovery and checked against the real router in tests/contract/test_router.py) —,
a pod the router leaves finishes what it holds, and a client sees a failure exactly when a pod is
deleted holding requests or a role has no pod. Read through the operator's own parser and judge."""

from __future__ import annotations

import copy
import sys

from qdd.api.observe import ObserveThresholds
from qdd.controller.engine_metrics import parse_text
from qdd.observe import PodRead, engines_of, judge
from qdd.plan.router import router_args

from ..conftest import ROOT

sys.path.insert(0, str(ROOT / "hack"))
import fake_engine_load as fel  # noqa: E402
import fake_engine_metrics as fem  # noqa: E402

GEN = "abc123"
CFG = {"load-rps": "4", "isl": "1000", "osl": "100", "prefill-ttft-ms": "200", "itl-ms": "20",
       "prefill-capacity-rps": "2", "decode-capacity": "64"}


def router() -> dict:
    from qdd.api import parse_resource
    import yaml
    cr = yaml.safe_load((ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml").read_text())
    cr["metadata"] = {"name": "x", "namespace": "llm"}
    args = list(router_args("x", "llm", parse_resource(cr).spec, GEN))
    return {"metadata": {"name": "x-router"}, "spec": {"template": {"spec": {"containers": [{"args": args}]}}}}


def pod(name: str, role: str, group_role: str = "leader", ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": name, "labels": {"qdd.dev/deployment": "x", "qdd.dev/role": role,
                                     "qdd.dev/group-role": group_role, "qdd.dev/generation": GEN}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def fleet(pods: list[dict], t: float = 0.0, cfg: dict | None = None) -> fel.Fleet:
    f = fel.Fleet(cfg=dict(cfg or CFG))
    f.update(t, pods, [router()])
    return f


PODS = [pod("x-prefill-0", "prefill"), pod("x-prefill-1", "prefill"), pod("x-decode-0-leader", "decode"),
        pod("x-decode-0-worker-1", "decode", "worker")]


def test_requests_go_where_the_rendered_selectors_send_them():
    f = fleet(PODS + [pod("x-prefill-2", "prefill", ready=False)])
    assert {n for n, p in f.pods.items() if p.routable} == {"x-prefill-0", "x-prefill-1", "x-decode-0-leader"}
    assert f.of("x-prefill-0", 0.0)["rate"] == 2.0 and f.of("x-decode-0-leader", 0.0)["rate"] == 4.0
    assert f.of("x-prefill-0", 0.0)["running"] == 1.0  # 2 req/s × 0.2 s TTFT, as whole requests
    other = copy.deepcopy(PODS[0])
    other["metadata"]["labels"]["qdd.dev/generation"] = "old"
    assert not fleet([other, *PODS[2:]]).pods["x-prefill-0"].routable


def test_a_drained_pod_finishes_what_it_holds_and_its_deletion_fails_nothing():
    f = fleet(PODS)
    drained = copy.deepcopy(PODS)
    drained[1]["metadata"]["labels"]["qdd.dev/group-role"] = "draining"
    f.update(1.0, drained, [router()])
    assert f.of("x-prefill-1", 1.0)["running"] == 1.0 and f.of("x-prefill-1", 1.0)["rate"] == 0.0
    assert f.of("x-prefill-0", 1.0)["rate"] == 4.0
    f.update(1.5, drained, [router()])
    assert f.of("x-prefill-1", 1.5) | {"ttft": 0, "itl": 0} == {"rate": 0.0, "running": 0.0, "kv": 0.0, "ttft": 0,
                                                                  "itl": 0}
    f.update(2.0, [p for p in drained if p["metadata"]["name"] != "x-prefill-1"], [router()])
    assert f.failed == 0 and f.sent == 8.0


def test_a_pod_deleted_while_it_holds_requests_fails_them_and_no_pod_fails_arrivals():
    f = fleet(PODS)
    f.update(1.0, [PODS[0], *PODS[2:]], [router()])  # prefill-1 gone while serving: its request fails
    assert f.failed == 1.0
    f.update(2.0, PODS[2:], [router()])  # no prefill at all: 4 requests arrive in that second and fail
    assert f.failed == 1.0 + 1.0 + 4.0


def test_the_load_mode_reads_as_its_share_through_the_operators_reader():
    f = fleet(PODS)
    double = fem.Double(lambda ns: CFG, clock=lambda: 0.0)
    p = fem.Pod("prefill", 2, double.captures["prefill"], 0.0)
    reads = []
    for t in (0.0, 10.0):
        p.advance(t, "healthy", f.of("x-prefill-0", t), 1000.0, 100.0)
        samples, _ = parse_text(p.text().decode())
        reads.append(PodRead("x-prefill-0", "prefill", 0, t, engines_of(samples)))
    j = judge({"x-prefill-0": reads}, ObserveThresholds(), 30, 10.0)
    r = j.roles["prefill"]
    assert (r.requests_per_second, r.prompt_tokens_per_second, r.running) == (2.0, 2000.0, 1.0)
    assert r.ttft.p50 is not None and 0.1 < r.ttft.p50 <= 0.25
