"""Observed benchmark Jobs and pods → results and what to do next. Pure: dicts in, Progress out.

Steps run one at a time in order (``sweep-0`` … then ``accuracy``, see
:func:`qdd.render.benchmark.step_names`). Per step, the controller passes the live Job of the
current manifest (or None) and the pods of that Job; this module reads each finished Job's pod
termination message (:func:`qdd.yamlinput.load_json`, then :func:`qdd.bench.results.parse_serve_result`,
:func:`qdd.bench.gsm8k.parse_accuracy`)
and says which step to start next, or why the benchmark failed.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from .. import labels
from ..yamlinput import load_json
from .gsm8k import parse_accuracy
from .results import ResultError, parse_serve_result, sweep_point

MESSAGE_BYTES = 16384
"""The longest termination message read: the kubelet keeps 4,096 bytes; more is not a kubelet's."""
MESSAGE_DEPTH = 8
"""A result is a flat JSON object of numbers (the accuracy's ``repeats`` a list in it): 2 deep."""
NO_RESULT_GRACE_S = 120.0
"""How long a succeeded Job may go without a termination message before the benchmark fails: the
kubelet writes it when the container ends, so a real Job has it at once; the simulated cluster's
test double writes it a moment later."""


@dataclass
class Progress:
    """``sweep``: status.sweep entries so far; ``accuracy``: status.accuracy (or None);
    ``running``: the step whose Job runs; ``start``: the step to create now; ``failed``: why the
    benchmark failed (step and reason); ``complete``: every step has its result."""

    sweep: list[dict[str, Any]] = field(default_factory=list)
    accuracy: dict[str, Any] | None = None
    running: str | None = None
    start: str | None = None
    failed: str | None = None
    complete: bool = False


def _finished(job: dict[str, Any]) -> str | None:
    """``Complete``, ``Failed`` or None (running)."""
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    if st.get("failed"):
        return "Failed"
    return "Complete" if st.get("succeeded") else None


def _message(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == "bench":
                msg = ((cs.get("state") or {}).get("terminated") or {}).get("message")
                if msg:
                    return str(msg)
    return None


def _age_s(job: dict[str, Any], now: dt.datetime) -> float:
    st = job.get("status") or {}
    stamp = st.get("completionTime") or next(
        (c.get("lastTransitionTime") for c in st.get("conditions") or [] if c.get("type") in ("Complete", "Failed")),
        None)
    if not stamp:
        return 0.0
    t = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return (now - t).total_seconds()


def _accuracy(raw: Any, threshold: float) -> dict[str, Any]:
    o = parse_accuracy(raw if isinstance(raw, dict) else json.dumps(raw))
    return {"repeats": o.repeats, "mean": round(o.mean, 6), "questions": o.questions, "invalid": o.invalid,
            "errors": o.errors, "passThreshold": threshold, "passed": o.errors == 0 and o.mean >= threshold}


def progress(steps: list[str], concurrencies: list[int], threshold: float | None,
             jobs: dict[str, tuple[dict[str, Any] | None, list[dict[str, Any]]]], gpus: int | None,
             now: dt.datetime) -> Progress:
    """``jobs``: step → (its Job of the current manifest or None, that Job's pods)."""
    out = Progress()
    for step in steps:
        job, pods = jobs.get(step, (None, []))
        if job is None:
            out.start = step
            return out
        state = _finished(job)
        if state is None:
            out.running = step
            return out
        text = _message(pods)
        name = job["metadata"]["name"]
        if text is None:
            if state == "Complete" and _age_s(job, now) < NO_RESULT_GRACE_S:
                out.running = step
                return out
            out.failed = f"Job {name} {'failed' if state == 'Failed' else 'succeeded'} without a result " \
                         "(its pod's termination message is empty: see the pod's log)"
            return out
        try:
            # The pod's image is the benchmark author's: its message is read with qdd's bounded JSON
            # reader (size, depth, finite numbers) before any field of it.
            raw = load_json(text, max_bytes=MESSAGE_BYTES, max_depth=MESSAGE_DEPTH)
            if step == "accuracy":
                out.accuracy = _accuracy(raw, threshold if threshold is not None else 1.0)
                measured = (job["metadata"].get("labels") or {}).get(labels.GENERATION)
                if measured:  # an accuracy gate's run: the deployment generation it measured
                    out.accuracy["generation"] = str(measured)
            else:
                out.sweep.append(sweep_point(parse_serve_result(raw), concurrencies[int(step.split("-")[1])], gpus))
        except (ResultError, ValueError) as e:
            out.failed = f"Job {name}: its result cannot be read: {e}"
            return out
        if state == "Failed":
            errors = (out.accuracy or {}).get("errors")
            out.failed = f"Job {name} failed" + (f": {errors} GSM8K requests got no answer" if errors else "")
            return out
    out.complete = True
    return out


def topology(prefill_endpoints: int, prefill_dp: int, decode_endpoints: int, decode_dp: int, tp: int,
             ep: bool) -> str:
    """The seed's name for a shape: ``4xDEP2-1xDEP8`` (expert parallel, TP 1), else ``4xDP2TP2-…``."""
    def one(n: int, dp: int) -> str:
        return f"{n}xDEP{dp}" if ep and tp == 1 else f"{n}xDP{dp}TP{tp}"
    return f"{one(prefill_endpoints, prefill_dp)}-{one(decode_endpoints, decode_dp)}"
