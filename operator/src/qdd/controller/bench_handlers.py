"""kopf registrations of QwenDisaggBenchmark: every trigger calls the same level-triggered
:meth:`qdd.controller.benchmark.BenchmarkReconciler.reconcile`.

Triggers: any event of a benchmark; its Jobs and pods (label ``qdd.dev/benchmark``); and a resync
thread (every ``resync_seconds``, the operator's resync period) over every benchmark: it notices a
deployment that became Ready. No handler on QwenDisaggDeployments: with one (an on.event that
reconciled the namespace's benchmarks), the deployment of tests/integration/test_operator.py's
prefill drain test was not Ready again within 120 s, and without it it is, in 28 s; the cause was
not analysed. No finalizer (event handlers only): deleting a benchmark never waits for qdd.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from .. import labels
from ..api.benchmark import PLURAL
from ..render.benchmark import BENCHMARK
from .benchmark import BenchmarkReconciler

BENCH = (labels.GROUP, labels.VERSION, PLURAL)
log = logging.getLogger("qdd.benchmark")


def _safe(r: BenchmarkReconciler, namespace: str | None, name: str | None) -> None:
    if not (namespace and name):
        return
    try:
        r.reconcile(namespace, name)
    except Exception:  # one benchmark must not stop the others; the resync retries
        log.exception("reconcile of benchmark %s/%s failed", namespace, name)


def _resync(r: BenchmarkReconciler, stop: threading.Event, seconds: float, leader: Callable[[], bool] | None) -> None:
    while not stop.wait(seconds):
        if leader is not None and not leader():
            continue  # a standby replica: kopf pauses its handlers, and this thread must not act either
        try:
            keys = r.list_benchmarks()
        except Exception as e:  # the CRD may not be installed; try again next period
            log.warning("resync: cannot list QwenDisaggBenchmarks: %s", e)
            continue
        for namespace, name in keys:
            _safe(r, namespace, name)


def register_benchmarks(factory: Any, resync_seconds: float, leader: Callable[[], bool] | None = None) -> None:
    """Register the handlers; ``factory()`` builds the reconciler at operator startup. ``leader``:
    with peering, whether this replica is the one that acts (as for qdd.controller.handlers.register)."""
    state: dict[str, Any] = {}
    stop = threading.Event()

    @kopf.on.startup()
    def start_benchmarks(**_: Any) -> None:
        state["r"] = factory()
        threading.Thread(target=_resync, args=(state["r"], stop, resync_seconds, leader), name="qdd-bench-resync",
                         daemon=True).start()

    @kopf.on.cleanup()
    def stop_benchmarks(**_: Any) -> None:
        stop.set()

    @kopf.on.event(*BENCH)
    def on_benchmark(namespace: str | None, name: str | None, **_: Any) -> None:
        _safe(state["r"], namespace, name)

    @kopf.on.event("batch", "v1", "jobs", labels={BENCHMARK: kopf.PRESENT})
    @kopf.on.event("", "v1", "pods", labels={BENCHMARK: kopf.PRESENT})
    def on_bench_child(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:  # noqa: A002
        _safe(state["r"], namespace, labels.get(BENCHMARK))
