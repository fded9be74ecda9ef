"""Parsed samples of one pod's metrics → one :class:`EngineRead` per engine core.

Input: ``(sample name, labels, value)`` triples as prometheus-client's parser yields them (the
reader parses the text; the Prometheus source yields the same triples from /api/v1/query). Only
the series of :data:`qdd.observe.metrics.EXPOSED` are read; series of several ``model_name``s or
``finished_reason``s on one engine are summed.

The engine's image is the resource author's, so its /metrics is hostile input (docs/security.md):
a value no vLLM series takes (NaN, ±Inf, negative, above :data:`MAX_VALUE`) is left out as if
absent, and a body with more engines than :data:`MAX_ENGINES`, an ``engine`` label longer than
:data:`MAX_ENGINE_LABEL` or a histogram of more than :data:`MAX_BUCKETS` buckets is refused whole
(:class:`OverLimit`): every read is kept for the window and judged in every pass, so what one read
may hold bounds the memory and CPU of all of them.
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

MAX_VALUE = 1e15
"""The largest value kept: 10^15 tokens is 30 years at a million tokens/s. Above it (or negative,
NaN, infinite) no vLLM series is; the sums and rates of such values overflowed into ``inf``, whose
``int()`` raised in every pass and froze the status (docs/security.md, round 4)."""
MAX_ENGINES = 72
"""``engine`` label values of one pod: a decode group's leader reports every DP rank of its group,
and spec.*.topology.dataParallel is at most 72."""
MAX_ENGINE_LABEL = 16
"""Characters of an ``engine`` label: vLLM writes the engine core's index (``str(int)``); the label
is named in condition messages and events."""
MAX_BUCKETS = 64
"""Buckets of one histogram of one engine: vLLM 0.33's have at most 23
(tests/unit/data/vllm-engine-metrics-decode.txt)."""


class OverLimit(ValueError):
    """A read beyond one of its bounds (bytes, series, engines, buckets): refused whole, never half-read."""


def _le(labels: Mapping[str, str]) -> float | None:
    """A bucket's upper bound; None when it is not a number (the sample is left out)."""
    raw = labels.get("le", "nan")
    if raw in ("+Inf", "Inf", "inf"):
        return math.inf
    try:
        le = float(raw)
    except ValueError:
        return None
    return None if math.isnan(le) else le


def _engine_order(e: str) -> tuple[bool, int, str]:
    digits = e.isascii() and e.isdigit()
    return (not digits, int(e) if digits else 0, e)


def _new_engine(engine: str, known: int) -> None:
    """OverLimit when one more engine, or this label, is beyond the bounds."""
    if len(engine) > MAX_ENGINE_LABEL:
        raise OverLimit(f"an engine label of {len(engine)} characters (at most {MAX_ENGINE_LABEL})")
    if known >= MAX_ENGINES:
        raise OverLimit(f"more than {MAX_ENGINES} engines")


def _add_bucket(b: dict[float, float], labels: Mapping[str, str], value: float, where: str) -> None:
    le = _le(labels)
    if le is None:
        return
    if le not in b and len(b) >= MAX_BUCKETS:
        raise OverLimit(f"more than {MAX_BUCKETS} buckets in {where}")
    b[le] += value


def engines_of(samples: Iterable[Sample]) -> tuple[EngineRead, ...]:
    """One EngineRead per ``engine`` label value (sorted numerically where they are numbers); a
    series without the label counts as engine ``0`` (a vLLM without DP labels). Raises
    :class:`OverLimit` beyond the bounds of the module docstring."""
    scalars: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[tuple[str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str], float] = defaultdict(float)
    for name, labels, value in samples:
        declared = M.EXPOSED.get(name)
        if declared is None or not 0 <= value <= MAX_VALUE:  # also NaN
            continue
        engine = labels.get("engine", "0")
        if engine not in scalars:
            _new_engine(engine, len(scalars))
        if declared in _FIELDS:
            scalars[engine][_FIELDS[declared]] += value
            continue
        key = (engine, declared)
        scalars[engine]  # an engine with histograms only is still an engine
        if name.endswith("_bucket"):
            _add_bucket(buckets[key], labels, value, f"{declared} of engine {engine}")
        elif name.endswith("_sum"):
            sums[key] += value
        else:
            counts[key] += value
    out = []
    for engine in sorted(scalars, key=_engine_order):
        values: dict[str, Any] = dict(scalars[engine])
        for declared, attr in _HISTS.items():
            k = (engine, declared)
            values[attr] = Histogram(tuple(sorted(buckets[k].items())), sums[k], counts[k])
        values["transfers"] = counts[(engine, M.NIXL_XFER_TIME)]
        out.append(EngineRead(engine, **values))
    return tuple(out)
