"""The accuracy gate (spec.validation.accuracy): whether the current generation has a GSM8K result at
or above minScore. Pure: the deployment's gate, its generation, the gate's QwenDisaggBenchmark as
read (a dict, or None when it does not exist) and the last ``status.accuracy`` in; the state the
conditions are computed from out.

Why: an engine build can serve a checkpoint wrongly with HTTP 200 everywhere (the production NVFP4
Qwen3.5 checkpoint scored ~0.35 on GSM8K instead of ~0.9, vllm#36094), which neither the probes nor
a one-prompt canary see. The result is bound to the generation it measured (the benchmark's
accuracy Job carries ``qdd.dev/generation`` and its status.accuracy.generation says it,
qdd.bench.observe): a score of the previous generation never lets a new one become Ready, and a
generation that passed keeps its result in ``status.accuracy`` even if the benchmark is deleted.

The benchmark runs when the router already serves the generation (Ready False, AccuracyPending:
qdd.controller.benchmark.serves_for_gate): the gate cannot hold the Surge switch, which the
benchmark needs to measure anything (docs/benchmark.md#accuracy-gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import benchmark as B
from ..api import conditions as C
from ..api.conditions import Reason
from ..api.validation import AccuracyGateSpec


@dataclass(frozen=True)
class AccuracyState:
    """What the AccuracyGatePassed, Degraded and Ready conditions read. ``passed`` None: not known yet;
    ``record``: the ``status.accuracy`` to write (None: none yet)."""

    passed: bool | None
    reason: str
    message: str
    record: dict[str, Any] | None = None


def _cond(bench: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (bench.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def _judged(record: dict[str, Any]) -> AccuracyState:
    gen, score, need, bench = record["generation"], record["score"], record["minScore"], record["benchmark"]
    if record["passed"]:
        return AccuracyState(True, Reason.ACCURACY_ABOVE_THRESHOLD,
                             f"GSM8K {score:.3f} >= minScore {need:.3f} on generation {gen} (QwenDisaggBenchmark {bench})",
                             record)
    return AccuracyState(False, Reason.ACCURACY_BELOW_THRESHOLD,
                         f"GSM8K {score:.3f} < minScore {need:.3f} on generation {gen} (QwenDisaggBenchmark {bench}): "
                         "this engine build or checkpoint answers wrongly with HTTP 200; roll back the spec change, or "
                         "check the checkpoint and the engine version's known fixes (docs/facts/engine-fixes.md)", record)


def accuracy_state(gate: AccuracyGateSpec, deployment: str, generation: str, bench: dict[str, Any] | None,
                   record: dict[str, Any] | None, serving: bool, now: str) -> AccuracyState:
    """The gate's state for ``generation``. ``bench``: the QwenDisaggBenchmark named by the gate as read;
    ``record``: the stored status.accuracy; ``serving``: everything else is ready (the benchmark can
    run); ``now``: RFC 3339 time, kept as measuredTime when a result is first seen."""
    name = gate.benchmark_name
    kept = record if record is not None and record.get("generation") else None
    if kept is not None and kept["generation"] == generation and kept.get("benchmark") == name \
            and kept.get("minScore") == gate.min_score:
        return _judged(kept)  # this generation was judged: its result stands, whatever the benchmark does next
    if bench is None:
        return AccuracyState(False, Reason.ACCURACY_BENCHMARK_INVALID,
                             f"QwenDisaggBenchmark {name} (spec.validation.accuracy.benchmarkName) does not exist: "
                             f"create it with spec.deploymentName {deployment} and spec.accuracy", kept)
    spec = bench.get("spec") or {}
    if spec.get("deploymentName") != deployment or not spec.get("accuracy"):
        return AccuracyState(False, Reason.ACCURACY_BENCHMARK_INVALID,
                             f"QwenDisaggBenchmark {name} must have spec.deploymentName {deployment} (it has "
                             f"{spec.get('deploymentName')!r}) and spec.accuracy (it has {'one' if spec.get('accuracy') else 'none'})",
                             kept)
    acc = (bench.get("status") or {}).get("accuracy") or {}
    if acc.get("generation") == generation and isinstance(acc.get("mean"), (int, float)):
        failed = _cond(bench, B.ACCURACY_PASSED).get("reason") == "RequestsFailed"
        if failed:
            return AccuracyState(False, Reason.ACCURACY_RUN_FAILED,
                                 f"QwenDisaggBenchmark {name} measured generation {generation} but some GSM8K requests "
                                 f"got no answer: {_cond(bench, B.ACCURACY_PASSED).get('message', '')}", kept)
        new = {"generation": generation, "benchmark": name, "score": float(acc["mean"]), "minScore": gate.min_score,
               "passed": float(acc["mean"]) >= gate.min_score, "questions": acc.get("questions"), "measuredTime": now}
        return _judged(new)
    failed_cond = _cond(bench, B.FAILED)
    if failed_cond.get("status") == "True" and serving:
        return AccuracyState(False, Reason.ACCURACY_RUN_FAILED,
                             f"QwenDisaggBenchmark {name} failed before measuring generation {generation}: "
                             f"{failed_cond.get('message', '')}", kept)
    where = (f"QwenDisaggBenchmark {name}: {(bench.get('status') or {}).get('phase') or 'not started'}"
             if serving else "it runs once the router serves it, every endpoint is registered and the canary passed")
    return AccuracyState(None, Reason.ACCURACY_PENDING,
                         f"waiting for a GSM8K result of generation {generation} (minScore {gate.min_score:.3f}); {where}",
                         kept)


def accuracy_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events a status change posts: a Normal or Warning event when
    AccuracyGatePassed turns True or False (or fails differently), never one per pass."""
    def cond(st: dict[str, Any]) -> dict[str, Any]:
        return next((c for c in st.get("conditions") or [] if c.get("type") == C.ACCURACY_GATE_PASSED), {})
    was, now = cond(old), cond(new)
    if now.get("status") in ("True", "False") and (was.get("status") != now["status"]
                                                   or was.get("reason") != now.get("reason")):
        return [("Normal" if now["status"] == "True" else "Warning", now["reason"], now.get("message", ""))]
    return []
