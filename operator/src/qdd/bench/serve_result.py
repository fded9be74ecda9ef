"""The result file of ``vllm bench serve --save-result`` (JSON), parsed into typed numbers.

Source of the format: vLLM's ``vllm/benchmarks/serve.py`` (``benchmark()`` builds the dict that
``--save-result`` writes; checked in vLLM 0.32.0 and 0.33.0): counts ``completed``/``failed``,
``duration`` (s), ``total_input_tokens``/``total_output_tokens``, ``request_throughput``
(req/s), ``output_throughput`` and ``total_token_throughput`` (tok/s), per-request ``errors``
(empty string on success), and per latency metric (``ttft``, ``tpot``, ``itl``, ``e2el``; those
``--percentile-metrics`` selects) ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and
``p<P>_<m>_ms`` for each ``--metric-percentiles`` P (``p99``, ``p99.9``). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

METRICS = ("ttft", "tpot", "itl", "e2el")
"""Time to first token, time per output token (after the first), inter-token latency, end-to-end latency."""
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
REQUIRED = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput")


class BenchResultError(ValueError):
    """The text is not a `vllm bench serve` result: the message names the key and the fix."""


@dataclass(frozen=True)
class LatencyStats:
    """One latency metric, milliseconds. ``percentiles``: {percentile (e.g. 99.0): ms}."""

    mean_ms: float
    median_ms: float
    std_ms: float
    percentiles: dict[float, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServeResult:
    """One run of ``vllm bench serve``. ``duration_s`` seconds; throughputs per second;
    ``latency`` {metric: stats} for the metrics the run reported; ``errors`` the non-empty
    per-request error strings."""

    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    latency: dict[str, LatencyStats]
    errors: tuple[str, ...]

    @property
    def requests(self) -> int:
        return self.completed + self.failed


def _number(d: dict[str, Any], key: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BenchResultError(f"`vllm bench serve` result: {key!r} must be a number, got {v!r} "
                               "(was the file written by --save-result?)")
    return float(v)


def _latency(d: dict[str, Any]) -> dict[str, LatencyStats]:
    pct: dict[str, dict[float, float]] = {}
    for key in d:
        m = _PCT.match(key)
        if m:
            pct.setdefault(m.group(2), {})[float(m.group(1))] = _number(d, key)
    out = {}
    for metric in METRICS:
        if f"mean_{metric}_ms" in d:
            out[metric] = LatencyStats(_number(d, f"mean_{metric}_ms"), _number(d, f"median_{metric}_ms"),
                                       _number(d, f"std_{metric}_ms"), pct.get(metric, {}))
    return out


def parse_serve_result(data: str | bytes | dict[str, Any]) -> ServeResult:
    """Parse a result (the JSON text, or the already decoded dict). Raises :class:`BenchResultError`
    naming the missing or malformed key."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise BenchResultError(f"`vllm bench serve` result is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise BenchResultError("`vllm bench serve` result must be a JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise BenchResultError(f"`vllm bench serve` result lacks {', '.join(missing)} (was it written by --save-result "
                               "of a generation benchmark?)")
    counts = {k: _number(data, k) for k in ("completed", "failed", "total_input_tokens", "total_output_tokens")}
    errors = data.get("errors") or []
    return ServeResult(
        completed=int(counts["completed"]), failed=int(counts["failed"]), duration_s=_number(data, "duration"),
        total_input_tokens=int(counts["total_input_tokens"]), total_output_tokens=int(counts["total_output_tokens"]),
        request_throughput=_number(data, "request_throughput"), output_throughput=_number(data, "output_throughput"),
        latency=_latency(data), errors=tuple(str(e) for e in errors if e),
    )
