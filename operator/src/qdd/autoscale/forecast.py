"""Load forecast: where the request rate will be once an endpoint started now is Ready.

A line through the recent per-period rates, carried ``horizon_s`` ahead (at most the span it was
fitted on): an engine that takes minutes to start must be started for the load of minutes from
now. Two guards keep it from reading noise as a trend:

- **Only a confirmed slope.** The slope used is the least-squares slope of the whole window, of its
  older half and of its recent half, whichever is smallest in magnitude, and 0 unless all three
  have the same sign. A sustained ramp has the same slope in all three and is followed. A step in
  the load (a single jump, flat on either side) lies in at most one half, so the other half is flat
  and nothing is extrapolated. Without this guard a step tilts the whole window's line by up to
  1.5 × step / window, which carried a start-up time ahead booked up to 1.5 steps of load that
  never came (docs/autoscaling.md, the offline loop's conversation trace). Two rising halves with
  a drop between them (a sawtooth) tilt the whole window down: no trend either. The price: a ramp
  that began less than half a window ago is followed only once it shows in the older half too.
- **The line's level, not the last period's.** The line goes through the recent half's mean rate
  at its mean time, with the confirmed slope: one period's rate is noisy (a burst), and taken as
  the level a burst would also be carried ahead by the slope. Bursts are sized for elsewhere
  (the policy's peak window), from each period's own demand.

The forecast never goes below the rate seen now (a falling trend is left to the scale-down
hysteresis, which needs the lower load to persist) and never above ``MAX_GROWTH`` times it (a short
burst must not make a trend that books the whole budget). Rates in requests per second, times in
seconds (the samples' ``t_s``).
"""

from __future__ import annotations

from .types import Sample

MAX_GROWTH = 3.0
"""Cap of forecast / current rate."""
MIN_SAMPLES = 3
"""Fewer samples than this: no trend, the forecast is the current rate (each half needs two)."""


def _slope(samples: list[Sample] | tuple[Sample, ...]) -> float:
    """Least-squares slope of rate over time, requests per second per second; 0 for fewer than
    two samples or no spread in time."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(s.t_s for s in samples) / n
    mr = sum(s.rate_rps for s in samples) / n
    var = sum((s.t_s - mt) ** 2 for s in samples)
    if var <= 0:
        return 0.0
    return sum((s.t_s - mt) * (s.rate_rps - mr) for s in samples) / var


def confirmed_slope(history: tuple[Sample, ...]) -> float:
    """The slope of ``history`` (requests per second per second) that its whole span, its older
    half and its recent half all show: the one of the three slopes smallest in magnitude, 0 when
    their signs differ (or one is 0). The halves split at the middle time, sharing a sample there."""
    if len(history) < 2:
        return 0.0
    mid = (history[0].t_s + history[-1].t_s) / 2
    slopes = (_slope(history), _slope([s for s in history if s.t_s <= mid]),
              _slope([s for s in history if s.t_s >= mid]))
    if all(x > 0 for x in slopes):
        return min(slopes)
    if all(x < 0 for x in slopes):
        return max(slopes)
    return 0.0


def trend_forecast(history: tuple[Sample, ...], now_s: float, horizon_s: float, min_span_s: float = 0.0) -> float:
    """Requests per second expected at ``now_s + horizon_s`` from ``history`` (oldest first; the
    last sample is the current period). 0 for an empty history. No trend (the current rate) until
    the history spans ``min_span_s``, or when no slope is confirmed (:func:`confirmed_slope`); the
    line is never carried further ahead than the span it was fitted on (a slope seen over one
    minute says nothing about five minutes from now)."""
    if not history:
        return 0.0
    current = history[-1].rate_rps
    span = history[-1].t_s - history[0].t_s
    if len(history) < MIN_SAMPLES or horizon_s <= 0 or span < min_span_s:
        return current
    slope = confirmed_slope(history)
    if slope == 0:
        return current
    # Through the recent half's centroid rather than the last sample: a burst in the last period
    # is not the level (the recent half is the least lagged estimate of it that averages periods).
    recent = [s for s in history if s.t_s >= (history[0].t_s + history[-1].t_s) / 2]
    mt = sum(s.t_s for s in recent) / len(recent)
    level = sum(s.rate_rps for s in recent) / len(recent) + slope * (history[-1].t_s - mt)
    ahead = level + slope * min(horizon_s, span)
    return min(max(ahead, current), current * MAX_GROWTH if current > 0 else ahead)


def window_means(history: tuple[Sample, ...], since_s: float) -> tuple[float, float]:
    """Request-weighted mean (isl, osl) of the samples at or after ``since_s``; the last sample's
    when none carried requests. (0, 0) for an empty history."""
    recent = [s for s in history if s.t_s >= since_s] or list(history[-1:])
    weight = sum(s.rate_rps for s in recent)
    if weight <= 0:
        return (recent[-1].isl, recent[-1].osl) if recent else (0.0, 0.0)
    return (sum(s.isl * s.rate_rps for s in recent) / weight, sum(s.osl * s.rate_rps for s in recent) / weight)
