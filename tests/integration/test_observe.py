"""Serving conditions on the real control plane: the operator reads engine metrics from the engine
TEST DOUBLE hack/fake_engine_metrics.py (kwok runs no engine; the double serves the /metrics text
captured from real vLLM engines, values moving; QDD_ENGINE_METRICS_URL_OVERRIDE points the
operator's reader at it). A healthy deployment raises nothing over a soak (QDD_OBSERVE_SOAK_SECONDS,
default 30; `make soak-observe` runs 600 and writes bench/results/observe-soak.json); then each of
the five conditions is raised on the pod the double makes misbehave — each with its Warning event —
and all clear, each with its Normal event, once the pods are healthy again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import LOGS, REPO, VENV_BIN, Kube
from .operator_proc import OperatorProcess
from .test_operator import SEED, condition, cr_of, wait_ready

SERVING = ("KVTransferFailing", "KVLeaseExpiring", "KVCacheSaturated", "RequestsQueueing", "EngineStalled")
OBSERVE = {"periodSeconds": 5, "windowSeconds": 20, "thresholds": {"stallSeconds": 30}}
CONFIGMAP = "qdd-simulated-engine-metrics"
SOAK_S = float(os.environ.get("QDD_OBSERVE_SOAK_SECONDS", "30"))
RESULT = os.environ.get("QDD_OBSERVE_SOAK_RESULT")


@pytest.fixture(scope="module")
def double(kube: Kube):
    LOGS.mkdir(parents=True, exist_ok=True)
    url_file = LOGS / f"fake-engine-metrics-{kube.cluster}.url"
    url_file.unlink(missing_ok=True)
    log = open(LOGS / f"fake-engine-metrics-{kube.cluster}.log", "a")  # noqa: SIM115 — until the double ends
    proc = subprocess.Popen([str(VENV_BIN / "python"), "-u", str(REPO / "hack" / "fake_engine_metrics.py"),
                             "--kubeconfig", str(kube.kubeconfig), "--url-file", str(url_file)],
                            stdout=log, stderr=subprocess.STDOUT, env=kube.env)
    kube.wait_for(url_file.exists, timeout=30, interval=0.2, desc="the engine metrics double's URL")
    yield url_file.read_text()
    proc.terminate()
    proc.wait(10)
    log.close()


@pytest.fixture(scope="module")
def observed_operator(kube: Kube, double: str, operator: OperatorProcess):
    """The module's operator, restarted with its reader pointed at the double."""
    operator.stop()
    op = OperatorProcess(kube, env={"QDD_ENGINE_METRICS_URL_OVERRIDE": double}, log_name="-observe")
    op.start()
    yield op
    op.stop()
    operator.start()


def _scenarios(kube: Kube, ns: str, **per_pod: str) -> None:
    kube.kubectl("delete", "configmap", CONFIGMAP, "-n", ns, "--ignore-not-found")
    if per_pod:
        kube.kubectl("create", "configmap", CONFIGMAP, "-n", ns,
                     *[f"--from-literal=pod.{p}={s}" for p, s in per_pod.items()])


def _events(kube: Kube, ns: str, name: str) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in kube.get("events", namespace=ns)["items"]
            if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "QwenDisaggDeployment"]


def _serving(obj: dict) -> dict[str, tuple[str, str]]:
    return {t: (condition(obj, t).get("status"), condition(obj, t).get("reason")) for t in SERVING}


def test_healthy_soak_then_each_condition_raised_and_cleared_with_events(kube: Kube, observed_operator, namespace):
    cr = cr_of(SEED, namespace)
    cr["spec"]["observe"] = OBSERVE
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    obj = kube.wait_for(lambda: (o := kube.get("qdd", name, namespace)) and all(
        s == "False" for s, _ in _serving(o).values()) and o["status"].get("serving", {}).get("decode", {}).get(
        "engines") == 8 and "generationTokensPerSecond" in o["status"]["serving"]["decode"] and o,
        timeout=60, interval=1, desc="serving conditions read over two periods (all False)")
    serving = obj["status"]["serving"]
    assert (serving["source"], serving["prefill"]["engines"], serving["prefill"]["pods"]) == ("pods", 8, 4)
    assert serving["decode"]["pods"] == 1 and serving["decode"]["running"] == 64
    assert serving["decode"]["generationTokensPerSecond"] > 0 and serving["decode"]["itlSeconds"]["p50"] > 0

    # The soak: healthy engines, nothing may be raised; sampled every period.
    samples, raised, start = 0, [], time.monotonic()
    writes0 = observed_operator.counter("qdd_api_writes_total")
    status0 = observed_operator.counter("qdd_api_writes_total", verb="patch-status")
    while time.monotonic() - start < SOAK_S:
        o = kube.get("qdd", name, namespace)
        raised += [(t, s) for t, s in _serving(o).items() if s[0] != "False"]
        samples += 1
        time.sleep(OBSERVE["periodSeconds"])
    raised_reasons = {"KVTransfersFailing", "KVLeaseExpired", "KVCacheFull", "Preempting", "QueueBeyondBound",
                      "EngineNotProgressing"}
    warnings = [e for e in _events(kube, namespace, name) if e[0] == "Warning" and e[1] in raised_reasons]
    if RESULT:
        Path(RESULT).write_text(json.dumps({
            "seconds": round(time.monotonic() - start), "samples": samples, "conditions_not_false": len(raised),
            "warning_events": len(warnings), "observe": OBSERVE,
            "operator_reads": {r: observed_operator.counter("qdd_engine_metrics_reads_total", result=r)
                               for r in ("ok", "error", "limit")},
            "api_writes": observed_operator.counter("qdd_api_writes_total"),
            "api_writes_during_soak": observed_operator.counter("qdd_api_writes_total") - writes0,
            "status_patches_during_soak": observed_operator.counter("qdd_api_writes_total", verb="patch-status") - status0,
            "python": sys.version.split()[0]}, indent=2) + "\n")
    assert raised == [] and warnings == []

    # Each condition on the pod the double makes misbehave.
    pre = [f"{name}-prefill-{i}" for i in range(4)]
    _scenarios(kube, namespace, **{pre[0]: "lease-expiring", pre[1]: "queueing", pre[2]: "rank-stalled",
                                   pre[3]: "kv-cache-full", f"{name}-decode-0-leader": "kv-transfer-failing"})
    want = {"KVTransferFailing": ("True", "KVTransfersFailing"), "KVLeaseExpiring": ("True", "KVLeaseExpired"),
            "KVCacheSaturated": ("True", "KVCacheFull"), "RequestsQueueing": ("True", "QueueBeyondBound"),
            "EngineStalled": ("True", "EngineNotProgressing")}
    obj = kube.wait_for(lambda: (o := kube.get("qdd", name, namespace)) and _serving(o) == want and o,
                        timeout=90, interval=1, desc="all five serving conditions True")
    assert pre[2] in condition(obj, "EngineStalled")["message"] and "engine 1" in condition(obj, "EngineStalled")["message"]
    assert f"{name}-decode-0-leader engine " in condition(obj, "KVTransferFailing")["message"]
    assert condition(obj, "Ready")["status"] == "True"  # serving conditions do not hold Ready back
    events = _events(kube, namespace, name)
    assert {r for t, r in events if t == "Warning"} >= {r for _, r in want.values()}

    _scenarios(kube, namespace)
    healthy = {"KVTransferFailing": ("False", "NoFailedTransfers"), "KVLeaseExpiring": ("False", "LeasesHeld"),
               "KVCacheSaturated": ("False", "KVCacheAvailable"), "RequestsQueueing": ("False", "QueueWithinBound"),
               "EngineStalled": ("False", "AllEnginesProgressing")}
    kube.wait_for(lambda: _serving(kube.get("qdd", name, namespace)) == healthy, timeout=90, interval=1,
                  desc="all five serving conditions cleared")
    normal = {r for t, r in _events(kube, namespace, name) if t == "Normal"}
    assert {r for _, r in healthy.values()} <= normal
    # Events on transitions only: one Warning per condition raised, however many passes saw it True.
    counts = {r: sum(1 for t, rr in _events(kube, namespace, name) if t == "Warning" and rr == r)
              for _, r in want.values()}
    assert all(n == 1 for n in counts.values()), counts
