"""Parsed samples of one pod's metrics → one :class:`EngineRead` per engine core.

Input: ``(sample name, labels, value)`` triples as prometheus-client's parser yields them (the
reader parses the text; the Prometheus source yields the same triples from /api/v1/query). Only
the series of :data:`qdd.observe.metrics.EXPOSED` are read; series of several ``model_name``s or
``finished_reason``s on one engine are summed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from . import metrics as M
from .model import EngineRead, Histogram

Sample = tuple[str, Mapping[str, str], float]

_FIELDS = {M.RUNNING: "running", M.WAITING: "waiting", M.KV_CACHE_USAGE: "kv_cache_usage",
           M.PREEMPTIONS: "preemptions", M.PROMPT_TOKENS: "prompt_tokens", M.GENERATION_TOKENS: "generation_tokens",
           M.REQUEST_SUCCESS: "finished", M.NIXL_FAILED_TRANSFERS: "failed_transfers",
           M.NIXL_FAILED_NOTIFICATIONS: "failed_notifications", M.NIXL_EXPIRED: "expired",
           M.NIXL_AFTER_EXPIRY: "after_expiry"}
_HISTS = {M.TTFT: "ttft", M.ITL: "itl", M.TPOT: "tpot", M.QUEUE_TIME: "queue"}


def _le(labels: Mapping[str, str]) -> float:
    return math.inf if labels.get("le") in ("+Inf", "Inf", "inf") else float(labels.get("le", "nan"))


def engines_of(samples: Iterable[Sample]) -> tuple[EngineRead, ...]:
    """One EngineRead per ``engine`` label value (sorted numerically where they are numbers); a
    series without the label counts as engine ``0`` (a vLLM without DP labels)."""
    scalars: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[tuple[str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str], float] = defaultdict(float)
    for name, labels, value in samples:
        declared = M.EXPOSED.get(name)
        if declared is None or math.isnan(value):
            continue
        engine = labels.get("engine", "0")
        if declared in _FIELDS:
            scalars[engine][_FIELDS[declared]] += value
            continue
        key = (engine, declared)
        scalars[engine]  # an engine with histograms only is still an engine
        if name.endswith("_bucket"):
            buckets[key][_le(labels)] += value
        elif name.endswith("_sum"):
            sums[key] += value
        else:
            counts[key] += value
    out = []
    for engine in sorted(scalars, key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e)):
        values: dict[str, Any] = dict(scalars[engine])
        for declared, attr in _HISTS.items():
            k = (engine, declared)
            values[attr] = Histogram(tuple(sorted(buckets[k].items())), sums[k], counts[k])
        values["transfers"] = counts[(engine, M.NIXL_XFER_TIME)]
        out.append(EngineRead(engine, **values))
    return tuple(out)
