"""Results of ``vllm bench serve`` (``--save-result``; the format of vllm/benchmarks/serve.py,
``benchmark()``, checked in vLLM 0.32.0 and 0.33.0): parse, compact, and turn into a sweep point of
QwenDisaggBenchmark.status. qdd's one parser of that file: the operator, the benchmark Jobs, the
contract tests and the real-engine tests all read it here.

Standard library only: the benchmark Job runs this file with the engine image's python
(``python3 results.py compact RESULT.json`` writes the compact form to stdout, which the Job
copies to its termination message, at most 4,096 bytes); the operator parses that message with
:func:`parse_compact`.

API (for anyone else parsing ``vllm bench serve`` output):

- :func:`parse_serve_result` ``(dict | JSON text, require) -> ServeResult``: the saved result
  (keys: ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``, ``duration`` in
  s, ``total_token_throughput``, ``output_throughput`` in tok/s, ``request_throughput`` in req/s,
  ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el}_ms`` in ms for the ``--percentile-metrics`` and
  ``--metric-percentiles`` of the run (``p99``, ``p99.9``), ``max_concurrency``, ``num_prompts``,
  per-request ``errors``, empty on success). ``require``: the metrics whose median must be there
  (default ttft, tpot, itl: what the sweep Job asks for). Raises :class:`ResultError` naming the
  missing or bad key.
- :func:`compact` ``(dict) -> str``: the keys above but the per-request errors, as one JSON line
  (< 1 KiB); parsed back it gives the same ServeResult but ``errors`` (``failed`` counts them).
- :func:`parse_compact` ``(str) -> ServeResult``: the termination message back.
- :func:`sweep_point` ``(ServeResult, gpus) -> dict``: a ``status.sweep[]`` entry (camelCase),
  with tok/s/GPU = total tok/s / ``gpus`` and tok/s/user = 1000 / median TPOT (ms).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

METRICS = ("ttft", "tpot", "itl", "e2el")
"""Time to first token, time per output token (after the first), inter-token latency, end-to-end latency."""
REQUIRED_METRICS = ("ttft", "tpot", "itl")
"""What the sweep Job's ``--percentile-metrics`` asks for (qdd.render.benchmark)."""
_LATENCY_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
COUNTS = ("completed", "failed", "total_input_tokens", "total_output_tokens")
RATES = ("duration", "total_token_throughput", "output_throughput", "request_throughput")
SETTINGS = ("max_concurrency", "num_prompts")
MAX_MESSAGE = 4096
"""Kubernetes' limit on a container's termination message, bytes."""
MAX_VALUE = 1e15
"""The largest count, time (ms, s) or rate a result may hold: 31 years in ms, 10^15 tokens. The
message is written by the benchmark image (the author's): a larger number is not a measurement,
and a status patch must carry every figure derived from it."""


class ResultError(ValueError):
    """A result that cannot be read; the message names the key."""


@dataclass(frozen=True)
class ServeResult:
    """One ``vllm bench serve`` run. Times in ms (``latency_ms[metric][stat]``, stat ``mean``,
    ``median``, ``std`` or ``p<P>`` as vLLM names it: ``p50``, ``p99.9``; only the metrics the run
    reported), durations in s, throughputs per second; ``errors`` the non-empty per-request errors."""

    completed: int
    failed: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    total_tokens_per_second: float
    output_tokens_per_second: float
    latency_ms: dict[str, dict[str, float]]
    max_concurrency: int | None = None
    num_prompts: int | None = None
    request_throughput: float | None = None
    errors: tuple[str, ...] = ()

    @property
    def requests(self) -> int:
        return self.completed + self.failed


def _number(raw: dict[str, Any], key: str, kind: type, required: bool = True) -> Any:
    value = raw.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ResultError(f"{key}: {'missing' if value is None else f'not a number: {value!r:.40}'}")
    if not 0 <= value <= MAX_VALUE or 0 < value < sys.float_info.min:
        # A denormal latency would make 1000 / TPOT infinite; a negative one means nothing.
        raise ResultError(f"{key}: {value!r} is not a measurement (0 or a normal number up to {MAX_VALUE:g})")
    if kind is int and value != int(value):
        raise ResultError(f"{key}: not an integer: {value!r}")
    return kind(value)


def _latency(raw: dict[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key in sorted(raw):
        m = _LATENCY_KEY.match(key)
        if m:
            out.setdefault(m.group(2), {})[m.group(1)] = _number(raw, key, float)
    return out


def parse_serve_result(raw: Any, require: tuple[str, ...] = REQUIRED_METRICS) -> ServeResult:
    """A ServeResult from ``vllm bench serve``'s saved JSON, as text or decoded (or the compact form)."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise ResultError(f"(result): not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ResultError(f"(result): not a JSON object but {type(raw).__name__}")
    latency = _latency(raw)
    missing = [f"median_{m}_ms" for m in require if "median" not in latency.get(m, {})]
    if missing:
        raise ResultError(f"{', '.join(missing)}: missing (run with --percentile-metrics {','.join(require)})")
    errors = raw.get("errors") or []
    return ServeResult(
        completed=_number(raw, "completed", int), failed=_number(raw, "failed", int, required=False) or 0,
        input_tokens=_number(raw, "total_input_tokens", int), output_tokens=_number(raw, "total_output_tokens", int),
        duration_s=_number(raw, "duration", float), total_tokens_per_second=_number(raw, "total_token_throughput", float),
        output_tokens_per_second=_number(raw, "output_throughput", float), latency_ms=latency,
        max_concurrency=_number(raw, "max_concurrency", int, required=False),
        num_prompts=_number(raw, "num_prompts", int, required=False),
        request_throughput=_number(raw, "request_throughput", float, required=False),
        errors=tuple(str(e) for e in errors if e) if isinstance(errors, list) else (str(errors),))


def compact(raw: dict[str, Any]) -> str:
    """The keys :func:`parse_serve_result` reads, as one JSON line; checked by parsing it."""
    keys = [*COUNTS, *RATES, *SETTINGS, *(k for k in raw if _LATENCY_KEY.match(k))]
    out = json.dumps({k: raw[k] for k in keys if raw.get(k) is not None}, separators=(",", ":"), sort_keys=True)
    parse_serve_result(json.loads(out))
    if len(out.encode()) > MAX_MESSAGE:
        raise ResultError(f"(result): {len(out)} bytes is over the termination message's {MAX_MESSAGE}")
    return out


def parse_compact(text: str | None) -> ServeResult:
    """The ServeResult a sweep Job wrote to its termination message."""
    if not text:
        raise ResultError("(termination message): empty: the Job wrote no result")
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ResultError(f"(termination message): not JSON: {e}") from None
    return parse_serve_result(raw)


def _pcts(r: ServeResult, metric: str) -> dict[str, float]:
    stats = r.latency_ms[metric]
    out = {"mean": stats.get("mean"), "p50": stats.get("p50", stats.get("median")), "p90": stats.get("p90"),
           "p99": stats.get("p99")}
    return {k: round(v, 3) for k, v in out.items() if v is not None}


def sweep_point(r: ServeResult, concurrency: int, gpus: int | None) -> dict[str, Any]:
    """A ``status.sweep[]`` entry. ``gpus``: the deployment's GPUs (None: no per-GPU figure)."""
    tpot = r.latency_ms["tpot"]["median"]
    point = {"concurrency": concurrency, "completed": r.completed, "failed": r.failed,
             "inputTokens": r.input_tokens, "outputTokens": r.output_tokens, "durationSeconds": round(r.duration_s, 3),
             "totalTokensPerSecond": round(r.total_tokens_per_second, 3),
             "outputTokensPerSecond": round(r.output_tokens_per_second, 3),
             "ttftMs": _pcts(r, "ttft"), "tpotMs": _pcts(r, "tpot"), "itlMs": _pcts(r, "itl")}
    if gpus:
        point["totalTokensPerSecondPerGpu"] = round(r.total_tokens_per_second / gpus, 3)
    if tpot > 0 and math.isfinite(1000.0 / tpot):
        point["outputTokensPerSecondPerUser"] = round(1000.0 / tpot, 3)
    return point


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "compact":
        print("usage: results.py compact RESULT.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as fh:
            print(compact(json.load(fh)))
    except (OSError, ValueError) as e:
        print(f"error: {argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
