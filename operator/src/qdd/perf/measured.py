"""Benchmark results as calibration points: a finished QwenDisaggBenchmark's ``results.json``
(its ``<benchmark>-results`` ConfigMap, or the file ``qdd bench report`` reads) → one
:class:`~qdd.perf.profile.MeasuredPoint` per sweep concurrency.

Read from each ``sweep[]`` entry: ``concurrency``, ``completed`` and ``durationSeconds`` (request
rate = completed / duration), ``ttftMs.p50``, ``tpotMs.p50``, ``totalTokensPerSecondPerGpu``; and
from the document, ``topology`` (``4xDEP2-1xDEP8``: the endpoints of each role, as
``qdd.bench.observe.topology`` writes it). Errors name the document and the key.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .profile import MeasuredPoint

_TOPOLOGY = re.compile(r"^(\d+)x[A-Z0-9]+-(\d+)x[A-Z0-9]+$")


class MeasuredError(ValueError):
    """A results document that cannot calibrate a profile."""


def endpoints(topology: str, source: str) -> tuple[int, int]:
    """(prefill, decode) endpoints from ``4xDEP2-1xDEP8``."""
    m = _TOPOLOGY.match(topology or "")
    if not m:
        raise MeasuredError(f"{source}: topology: {topology!r} is not of the form 4xDEP2-1xDEP8")
    return int(m.group(1)), int(m.group(2))


def measured_points(text: str, source: str) -> tuple[str, list[MeasuredPoint]]:
    """The deployment's name and the measured points of one ``results.json``."""
    try:
        doc: dict[str, Any] = json.loads(text)
    except ValueError as e:
        raise MeasuredError(f"{source}: not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MeasuredError(f"{source}: not a results document (a JSON object)")
    pre, dec = endpoints(str(doc.get("topology") or ""), source)
    out = []
    for i, p in enumerate(doc.get("sweep") or []):
        where = f"{source}: sweep[{i}]"
        try:
            rate = float(p["completed"]) / float(p["durationSeconds"])
            out.append(MeasuredPoint(benchmark=str(doc.get("benchmark") or source), concurrency=int(p["concurrency"]),
                                     request_rate=rate, ttft_ms=float(p["ttftMs"]["p50"]),
                                     tpot_ms=float(p["tpotMs"]["p50"]),
                                     total_tokens_per_second_per_gpu=float(p.get("totalTokensPerSecondPerGpu") or 0.0),
                                     prefill_endpoints=pre, decode_endpoints=dec))
        except (KeyError, TypeError, ZeroDivisionError) as e:
            raise MeasuredError(f"{where}: {e} is missing or not a number (completed, durationSeconds, ttftMs.p50, "
                                "tpotMs.p50 are needed)") from None
        except ValueError as e:
            raise MeasuredError(f"{where}: {e}") from None
    if not out:
        raise MeasuredError(f"{source}: no sweep points (an accuracy-only benchmark calibrates nothing)")
    return str(doc.get("deployment") or ""), out


def calibrated_configmap(cm: dict[str, Any], results_text: str, source: str) -> dict[str, Any] | None:
    """The profile ConfigMap ``cm`` (``<deployment>-perf-profile``) with a finished benchmark's
    ``results.json`` taken in, as the object to apply (name, namespace, labels, annotations,
    ``data``), or None when it changes nothing. The operator calls this when a benchmark of the
    deployment completes, so a running deployment's profile takes its measurements without
    aiconfigurator. Raises MeasuredError (or pydantic's ValidationError for a bad profile)."""
    from .profile import CONFIGMAP_KEY, calibrate, load_profile

    text = (cm.get("data") or {}).get(CONFIGMAP_KEY)
    if text is None:
        raise MeasuredError(f"{source}: ConfigMap {cm.get('metadata', {}).get('name')}: no {CONFIGMAP_KEY} key")
    prof = load_profile(text)
    deployment, points = measured_points(results_text, source)
    if deployment and deployment != prof.deployment:
        raise MeasuredError(f"{source}: measured on {deployment}, the profile is {prof.deployment}'s")
    new = calibrate(prof, points)
    if new == prof:
        return None
    meta = cm.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)},
            "data": {**(cm.get("data") or {}), CONFIGMAP_KEY: new.to_json()}}
