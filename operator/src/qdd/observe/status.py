"""A :class:`~qdd.observe.judge.Judgement` → ``status.serving`` (camelCase, as the CRD declares it:
qdd.api.status.ServingStatus). Pure."""

from __future__ import annotations

import math
from typing import Any

from .judge import Judgement
from .model import Percentiles, RoleServing

MAX_ERRORS = 8
MAX_COUNT = 2**53
"""The largest count written: an exact integer in every JSON reader (a status integer beyond int64
is refused by the API server, and the whole status patch with it)."""


def _count(x: float) -> int:
    return int(min(max(x, 0.0), MAX_COUNT)) if math.isfinite(x) else 0


def _pct(p: Percentiles) -> dict[str, float] | None:
    out = {k: v for k, v in (("p50", p.p50), ("p90", p.p90), ("p99", p.p99)) if v is not None}
    return out or None


def role_status(r: RoleServing) -> dict[str, Any]:
    out: dict[str, Any] = {
        "engines": r.engines, "pods": r.pods, "running": _count(r.running), "waiting": _count(r.waiting),
        "kvCacheUsage": r.kv_cache_usage, "kvCacheUsageMean": r.kv_cache_usage_mean,
        "promptTokensPerSecond": r.prompt_tokens_per_second,
        "generationTokensPerSecond": r.generation_tokens_per_second,
        "requestsPerSecond": r.requests_per_second,
        "ttftSeconds": _pct(r.ttft), "itlSeconds": _pct(r.itl), "tpotSeconds": _pct(r.tpot),
        "preemptions": _count(r.preemptions), "failedTransfers": _count(r.failed_transfers),
        "expiredLeases": _count(r.expired_leases),
    }
    return {k: v for k, v in out.items() if v is not None}


def serving_status(j: Judgement, source: str, window_seconds: int, observed_time: str | None) -> dict[str, Any]:
    """status.serving; ``observed_time``: RFC 3339 time of the newest read (None: none yet)."""
    out: dict[str, Any] = {"source": source, "windowSeconds": window_seconds,
                           "prefill": role_status(j.roles["prefill"]), "decode": role_status(j.roles["decode"]),
                           "waiting": _count(j.roles["prefill"].waiting + j.roles["decode"].waiting)}
    if observed_time is not None:
        out["observedTime"] = observed_time
    if j.errors:
        out["errors"] = [e[:300] for e in j.errors[:MAX_ERRORS]]
    return out
