"""The autoscaling policy's inputs from what qdd already reads: the engines' metrics as qdd.observe
judges them, the performance profile of qdd.perf, the start-up model of qdd.catalog. Pure.

No new types: :class:`qdd.observe.RoleServing` (one role over spec.observe.windowSeconds) becomes
the policy's :class:`qdd.autoscale.Observation`; :class:`qdd.perf.profile.PerfProfile` already
answers the policy's :class:`qdd.autoscale.CapacityProfile` protocol and is only checked here.
"""

from __future__ import annotations

import math
import statistics

from ...autoscale import Observation
from ...observe import RoleServing
from ...observe.model import Percentiles
from ...perf.profile import PerfProfile, latency_at


def percentile_of(p: Percentiles, percentile: int) -> float | None:
    """Seconds at the SLO's percentile from the quantiles status.serving keeps (p50, p90, p99): the
    first kept one at or above it (a p95 target reads p99: never more optimistic than asked)."""
    for q, v in ((50, p.p50), (90, p.p90), (99, p.p99)):
        if percentile <= q:
            return v
    return p.p99


def observation(now_s: float, prefill: RoleServing, decode: RoleServing, percentile: int, window_s: float,
                isl_default: float, osl_default: float) -> Observation | None:
    """The policy's :class:`Observation` from both roles' engines over the window; None before a
    rate could be measured (fewer than two reads).

    - request rate: prefill's finished requests per second (every P/D request ends on prefill with
      ``max_tokens`` 1; vllm:request_success) plus its waiting queue spread over the window (requests
      that arrived and are not finished yet: at saturation the finished rate alone is the capacity,
      not the load);
    - mean ISL: prefill's prompt tokens per finished request; mean OSL: decode's generated tokens per
      finished request (``isl_default``/``osl_default``, spec.workload, when no request finished);
    - TTFT at the percentile: prefill's TTFT plus decode's (its first token after the KV transfer),
      an upper bound of the client's; TPOT: decode's inter-token latency at the percentile. Seconds
      from vLLM's histograms, turned into ms."""
    rps = prefill.requests_per_second
    if rps is None:
        return None
    rate = rps + prefill.waiting / max(window_s, 1.0)
    isl = prefill.prompt_tokens_per_second / rps if rps > 0 and prefill.prompt_tokens_per_second else isl_default
    dps = decode.requests_per_second
    osl = decode.generation_tokens_per_second / dps if dps and decode.generation_tokens_per_second else osl_default
    p_ttft, d_ttft = percentile_of(prefill.ttft, percentile), percentile_of(decode.ttft, percentile)
    ttft = None if p_ttft is None else (p_ttft + (d_ttft or 0.0)) * 1000.0
    itl = percentile_of(decode.itl, percentile)
    return Observation(now_s=now_s, request_rate_rps=rate, mean_isl=isl, mean_osl=osl, ttft_ms=ttft,
                       tpot_ms=None if itl is None else itl * 1000.0)


def profile_problem(profile: PerfProfile, ttft_ms: float, tpot_ms: float, isl: float, osl: float) -> str | None:
    """Why the policy cannot size with this profile at these targets (a capacity of 0: even one
    request per endpoint misses the target), else None. The policy divides by both capacities."""
    if profile.prefill_tokens_per_s(max(isl, 1.0), ttft_ms) <= 0:
        return (f"the profile's prefill endpoint misses TTFT {ttft_ms:.0f} ms even at its lightest load "
                f"({profile.prefill.points[0].latency_ms:.0f} ms): the target cannot be met by adding endpoints")
    if profile.decode_concurrency(max(isl, 1.0), max(osl, 1.0), tpot_ms) <= 0:
        return (f"the profile's decode endpoint misses TPOT {tpot_ms:.0f} ms even at its lightest load "
                f"({profile.decode.points[0].latency_ms:.0f} ms): the target cannot be met by adding endpoints")
    return None


def predicted_ms(profile: PerfProfile, role: str, load_per_endpoint: float) -> float | None:
    """The profile's latency at ``load_per_endpoint`` (prefill: requests/s, decode: concurrent
    requests, per Ready endpoint); None beyond what the profile predicts."""
    if load_per_endpoint <= 0:
        load_per_endpoint = 1e-9
    v = latency_at(profile.prefill if role == "prefill" else profile.decode, load_per_endpoint)
    return None if math.isinf(v) else round(v, 1)


def startup_seconds(spec_seconds: int | None, measured: list[float], model_seconds: float) -> tuple[float, str]:
    """(seconds, source): spec.autoscaling.startupSeconds, else the median of this deployment's
    measured engine starts, else the start-up model's (qdd.catalog.startup via qdd.plan.startup)."""
    if spec_seconds is not None:
        return float(spec_seconds), "spec"
    if measured:
        return float(statistics.median(measured)), "measured"
    return float(model_seconds), "model"
