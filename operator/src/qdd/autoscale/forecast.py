"""Load forecast: where the request rate will be once an endpoint started now is Ready.

The current rate plus the slope of a least-squares line through the recent per-period rates times
``horizon_s`` (at most the span of the fit): an engine that takes minutes to start must be started
for the load of minutes from now. The forecast never
goes below the rate seen now (a falling trend is left to the scale-down hysteresis, which needs the
lower load to persist) and never above ``MAX_GROWTH`` times it (a short burst must not make a trend
that books the whole budget).
"""

from __future__ import annotations

from .types import Sample

MAX_GROWTH = 3.0
"""Cap of forecast / current rate."""
MIN_SAMPLES = 3
"""Fewer samples than this: no trend, the forecast is the current rate."""


def trend_forecast(history: tuple[Sample, ...], now_s: float, horizon_s: float, min_span_s: float = 0.0) -> float:
    """Requests per second expected at ``now_s + horizon_s`` from ``history`` (oldest first; the
    last sample is the current period). 0 for an empty history. No trend (the current rate) until
    the history spans ``min_span_s``; the line is never carried further ahead than the span it was
    fitted on (a slope seen over one minute says nothing about five minutes from now)."""
    if not history:
        return 0.0
    current = history[-1].rate_rps
    span = history[-1].t_s - history[0].t_s
    if len(history) < MIN_SAMPLES or horizon_s <= 0 or span < min_span_s:
        return current
    n = len(history)
    mt = sum(s.t_s for s in history) / n
    mr = sum(s.rate_rps for s in history) / n
    var = sum((s.t_s - mt) ** 2 for s in history)
    if var <= 0:
        return current
    slope = sum((s.t_s - mt) * (s.rate_rps - mr) for s in history) / var
    # The current rate carried along the window's slope: a step in the load tilts the line by
    # about 1.5 × step / window, so a short horizon adds little to a step.
    ahead = current + slope * min(horizon_s, span)
    return min(max(ahead, current), current * MAX_GROWTH if current > 0 else ahead)


def window_means(history: tuple[Sample, ...], since_s: float) -> tuple[float, float]:
    """Request-weighted mean (isl, osl) of the samples at or after ``since_s``; the last sample's
    when none carried requests. (0, 0) for an empty history."""
    recent = [s for s in history if s.t_s >= since_s] or list(history[-1:])
    weight = sum(s.rate_rps for s in recent)
    if weight <= 0:
        return (recent[-1].isl, recent[-1].osl) if recent else (0.0, 0.0)
    return (sum(s.isl * s.rate_rps for s in recent) / weight, sum(s.osl * s.rate_rps for s in recent) / weight)
