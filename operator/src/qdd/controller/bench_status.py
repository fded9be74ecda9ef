"""QwenDisaggBenchmark.status from what the benchmark reconcile found. Pure.

Conditions (qdd.api.benchmark): ``Complete`` (every step has its result), ``Failed`` (a Job failed,
a result is unreadable, the spec or the deployment's spec is invalid), ``AccuracyPassed`` (the mean
GSM8K accuracy against ``spec.accuracy.passThreshold``; Unknown until measured or when no accuracy
run is asked). ``phase``: WaitingForDeployment, Running, Complete or Failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api.benchmark import ACCURACY_PASSED, COMPLETE, FAILED
from ..bench.observe import Progress
from .status import _merge_times, drop_none


@dataclass(frozen=True)
class BenchFacts:
    """``waiting``: why the benchmark cannot start or go on (the deployment is missing or not
    Ready), else None; ``invalid``: the benchmark's or the deployment's spec error, else None."""

    generation: int | None
    progress: Progress | None
    waiting: str | None = None
    invalid: str | None = None
    topology: str | None = None
    gpus: int | None = None
    results_config_map: str | None = None
    accuracy_requested: bool = False


def _cond(ctype: str, ok: bool | None, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message[:4096],
            "observedGeneration": generation}


def _complete_failed(f: BenchFacts) -> tuple[dict[str, Any], dict[str, Any], str]:
    g, p = f.generation, f.progress
    if f.invalid:
        return (_cond(COMPLETE, False, "InvalidSpec", f.invalid, g), _cond(FAILED, True, "InvalidSpec", f.invalid, g),
                "Failed")
    if p is not None and p.failed:
        return (_cond(COMPLETE, False, "JobFailed", p.failed, g), _cond(FAILED, True, "JobFailed", p.failed, g),
                "Failed")
    if p is not None and p.complete:
        parts = ([f"{len(p.sweep)} sweep point(s)"] if p.sweep else []) + (
            [f"GSM8K mean {p.accuracy['mean']:.3f}"] if p.accuracy else [])
        done = ", ".join(parts) or "nothing to run"
        return _cond(COMPLETE, True, "Completed", done, g), _cond(FAILED, False, "Completed", done, g), "Complete"
    if f.waiting:
        return (_cond(COMPLETE, False, "WaitingForDeployment", f.waiting, g),
                _cond(FAILED, False, "WaitingForDeployment", f.waiting, g), "WaitingForDeployment")
    step = (p.running or p.start) if p else None
    msg = f"running {step}" if step else "starting"
    return _cond(COMPLETE, False, "Running", msg, g), _cond(FAILED, False, "Running", msg, g), "Running"


def _accuracy_cond(f: BenchFacts) -> dict[str, Any]:
    g, acc = f.generation, f.progress.accuracy if f.progress else None
    if not f.accuracy_requested:
        return _cond(ACCURACY_PASSED, None, "NotRequested", "spec.accuracy is not set", g)
    if acc is None:
        return _cond(ACCURACY_PASSED, None, "NotMeasured", "the GSM8K run has not reported yet", g)
    text = (f"GSM8K mean {acc['mean']:.3f} over {len(acc['repeats'])} repeat(s) of {acc['questions']} questions; "
            f"threshold {acc['passThreshold']:.3f}")
    if acc.get("errors"):
        return _cond(ACCURACY_PASSED, False, "RequestsFailed", f"{text}; {acc['errors']} requests got no answer", g)
    if acc["passed"]:
        return _cond(ACCURACY_PASSED, True, "AboveThreshold", text, g)
    return _cond(ACCURACY_PASSED, False, "BelowThreshold", text, g)


def compute_bench_status(old: dict[str, Any], f: BenchFacts, now: str) -> dict[str, Any]:
    """The whole status (nulls dropped, transition times kept where a condition did not flip)."""
    complete, failed, phase = _complete_failed(f)
    conds = _merge_times([complete, failed, _accuracy_cond(f)], (old or {}).get("conditions") or [], now)
    p = f.progress
    sweep = p.sweep if p else (old or {}).get("sweep") or []
    best = max((s["totalTokensPerSecondPerGpu"] for s in sweep if "totalTokensPerSecondPerGpu" in s), default=None)
    acc = p.accuracy if p else (old or {}).get("accuracy")
    status = {"observedGeneration": f.generation, "conditions": conds, "phase": phase, "topology": f.topology,
              "gpus": f.gpus, "sweep": sweep,
              "accuracy": {k: acc.get(k) for k in ("repeats", "mean", "questions", "invalid", "generation")} if acc else None,
              "resultsConfigMap": f.results_config_map, "bestTotalTokensPerSecondPerGpu": best}
    return drop_none(status)
