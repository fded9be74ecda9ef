"""The operator's engine-metrics reader and judgement on REAL vLLM engines (the CPU pair of
tests/realengine, one pair at a time): the reader (qdd.controller.engine_metrics.read_pod, the
Observer) parses the engines' real /metrics; a KV lease shorter than decode's read delay raises
KVLeaseExpiring and a KV-cache dtype mismatch between the roles raises KVTransferFailing — each
with its Warning event — and both clear, with a Normal event, once the pair runs as qdd renders it.

The pods are the two engine processes (named as the operator names a deployment's pods); the
Observer reads them through the real reader, with the engine's port in place of the pod's IP.
Two pairs with one guardrail bypassed each raise the two conditions; the package's shared pair (as
qdd renders it, tests/realengine/conftest.py) clears both — one pair at a time.
With QDD_UPDATE_FIXTURES=1 the healthy pair's /metrics bodies are written to
tests/unit/data/vllm-engine-metrics-{prefill,decode}.txt (the engine test double's source,
hack/fake_engine_metrics.py); without it, the live bodies must have the committed families.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qdd.api.observe import ObserveSpec
from qdd.controller.engine_metrics import read_pod
from qdd.controller.observer import Observer
from qdd.controller.serving import serving_events

from ..conftest import ROOT
from .engines import post_json
from .guardrails import PROMPTS, _body, _direct, kv_cache_fp8_on_decode, lease_2s
from .pair import Pair, nixl_stats, start_pair, start_router

SPEC = ObserveSpec.model_validate({"periodSeconds": 5, "windowSeconds": 60})
"""A 60 s window: the read before and the read after the requests (two late ones take 16 s) fall in
it, with room for a machine that others load."""
NS, NAME = "llm", "tiny"
PODS = {"prefill": f"{NAME}-prefill-0", "decode": f"{NAME}-decode-0"}
FIXTURE = ROOT / "tests" / "unit" / "data"


def _pods() -> list[dict[str, Any]]:
    return [{"metadata": {"name": pod, "labels": {"qdd.dev/role": role, "qdd.dev/endpoint": "0"}},
             "status": {"phase": "Running", "podIP": "127.0.0.1"}} for role, pod in PODS.items()]


class Deployment:
    """One tracked deployment whose two pods are whatever pair runs now; ``status`` is what a pass
    would write of the serving conditions, ``events`` what it would post."""

    def __init__(self) -> None:
        self.pair: Pair | None = None
        self.observer = Observer(read=self._read, workers=0)
        self.observer.track(NS, NAME, SPEC, _pods(), 8000, generation=1, lease_seconds=2)
        self.status: dict[str, Any] = {}
        self.events: list[tuple[str, str, str]] = []

    def _read(self, url: str, pod: str, role: str, endpoint: int, bounds: Any) -> Any:
        assert self.pair is not None
        return read_pod((self.pair.prefill if role == "prefill" else self.pair.decode).base + "/metrics", pod, role,
                        endpoint, bounds)

    def read(self) -> dict[str, dict[str, Any]]:
        """Wait for the next period, read both pods, judge; the conditions by type."""
        time.sleep(SPEC.period_seconds + 0.1)
        self.observer.read_due()
        got = self.observer.judgement(NS, NAME)
        assert got is not None
        new = {"conditions": got[0].conditions}
        self.events += serving_events(self.status, new)
        self.status = new
        return {c["type"]: c for c in got[0].conditions}

    def settle(self) -> dict[str, dict[str, Any]]:
        """Reads until a whole window has passed since the last change on the engines."""
        out = self.read()
        for _ in range(SPEC.window_seconds // SPEC.period_seconds + 1):
            out = self.read()
        return out


START_TIMEOUT_S = 900.0
"""Longer than the harness's 300 s: pairs start one after another on a machine others load."""


def _start(venv: Path, model: Path, logs: Path, edit: Any = None) -> Pair:
    pair = start_pair(venv, model, logs, edit=edit, wait=False)
    try:
        for e in (pair.prefill, pair.decode):
            e.wait_ready(START_TIMEOUT_S)
    except BaseException:
        pair.stop()
        raise
    return pair


def _logs(logs: Path, name: str) -> Path:
    (logs / name).mkdir(parents=True, exist_ok=True)
    return logs / name


def _late(pair: Pair, n: int = 2) -> list[int]:
    """Prefill answered, decode asked 8 s later (the guardrail run's drive)."""
    return [_direct(pair, p, lambda kv: None, 8.0)[0] for p in PROMPTS[:n]]


@pytest.fixture(scope="module")
def dep() -> Deployment:
    return Deployment()


def test_a_kv_lease_shorter_than_decodes_read_delay_raises_the_lease_condition(cpu_venv, checkpoint, logs: Path,
                                                                              dep: Deployment):
    # A KV lease of 2 s (what spec.kvTransfer.leaseSeconds' CEL rule refuses) and decode reading 8 s late.
    dep.pair = _start(cpu_venv, checkpoint, _logs(logs, "lease"), edit=lease_2s)
    try:
        before = dep.read()
        assert before["KVLeaseExpiring"]["status"] == "False", before
        assert _late(dep.pair) == [200, 200]  # HTTP 200: nothing a client sees
        raised = dep.read()["KVLeaseExpiring"]
        assert (raised["status"], raised["reason"]) == ("True", "KVLeaseExpired"), raised
        n = re.match(r"(\d+) requests' KV leases expired before decode read them", raised["message"])
        assert n and int(n.group(1)) >= 2, raised["message"]
        assert f"{PODS['prefill']} engine 0: " in raised["message"]
        assert dep.events[-1][:2] == ("Warning", "KVLeaseExpired")
    finally:
        dep.pair.stop()


def test_a_kv_dtype_mismatch_between_the_roles_raises_transfer_failing(cpu_venv, checkpoint, logs: Path,
                                                                       dep: Deployment):
    dep.pair = _start(cpu_venv, checkpoint, _logs(logs, "dtype"), edit=kv_cache_fp8_on_decode)
    try:
        router, _ = start_router(dep.pair, _logs(logs, "dtype"))
        with router:
            dep.read()  # after the router's start (slow on a loaded machine): the read before the requests
            statuses = [post_json(router.base + "/v1/completions", _body(p), timeout=60)[0] for p in PROMPTS]
        assert statuses == [500] * 4
        raised = dep.read()["KVTransferFailing"]
        assert (raised["status"], raised["reason"]) == ("True", "KVTransfersFailing"), raised
        assert f"{PODS['decode']} engine 0" in raised["message"]
        assert ("Warning", "KVTransfersFailing") in [e[:2] for e in dep.events]
    finally:
        dep.pair.stop()


def test_both_clear_on_the_pair_as_qdd_renders_it_and_the_reader_parses_its_metrics(pair: Pair, router, logs: Path,
                                                                                   dep: Deployment):
    """The fix of both: the package's pair, exactly as rendered (lease 120 s, one KV dtype). The same
    late reads are in time and the same requests through the router transfer; after a window both
    conditions are False, each with its Normal event after its Warning."""
    dep.pair = pair
    before = nixl_stats(pair.decode.metrics())
    assert _late(pair) == [200, 200]
    r, _ = router
    assert [post_json(r.base + "/v1/completions", _body(p), timeout=60)[0] for p in PROMPTS] == [200] * 4
    after = nixl_stats(pair.decode.metrics())
    assert after["expired"] == before["expired"] and after["failed_transfers"] == before["failed_transfers"]
    conds = dep.settle()
    assert (conds["KVLeaseExpiring"]["status"], conds["KVLeaseExpiring"]["reason"]) == ("False", "LeasesHeld")
    assert (conds["KVTransferFailing"]["status"], conds["KVTransferFailing"]["reason"]) == ("False",
                                                                                        "NoFailedTransfers")
    kinds = [e[:2] for e in dep.events]
    for warning, normal in ((("Warning", "KVLeaseExpired"), ("Normal", "LeasesHeld")),
                            (("Warning", "KVTransfersFailing"), ("Normal", "NoFailedTransfers"))):
        assert warning in kinds and normal in kinds[kinds.index(warning):], dep.events
    assert any(e[1] == "LeasesHeld" and "KVLeaseExpiring cleared" in e[2] for e in dep.events), dep.events
    # The reader on real output: both roles' engines, tokens, the decode's transfers.
    m = read_pod(pair.decode.base + "/metrics", PODS["decode"], "decode", 0)
    assert m.error is None and [e.engine for e in m.engines] == ["0"] and m.series > 100 and m.bytes > 10_000
    assert m.engines[0].transfers == after["transfers"] and after["transfers"] - before["transfers"] == 2 + len(PROMPTS)
    assert m.engines[0].generation_tokens >= 2 * 16
    j = dep.observer.judgement(NS, NAME)[0]
    assert j.roles["decode"].engines == 1 and j.roles["prefill"].engines == 1
    assert [c["status"] for c in j.conditions] == ["False"] * 5, j.conditions
    _capture(pair, logs)


def _families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    return {f.name: (f.type, frozenset(k for s in f.samples for k in s.labels)) for f in
            text_string_to_metric_families(text)}


def _capture(pair: Pair, logs: Path) -> None:
    """Write the fixture (QDD_UPDATE_FIXTURES=1) or check the live bodies have its families."""
    for role, engine in (("prefill", pair.prefill), ("decode", pair.decode)):
        text = engine.metrics()
        path = FIXTURE / f"vllm-engine-metrics-{role}.txt"
        if os.environ.get("QDD_UPDATE_FIXTURES") == "1":
            path.write_text(text)
            continue
        want = {k: v for k, v in _families(path.read_text()).items() if k.startswith("vllm:")}
        got = {k: v for k, v in _families(text).items() if k.startswith("vllm:")}
        assert got == want, f"{role}: the engine's /metrics families differ from {path.name}: refresh it"
