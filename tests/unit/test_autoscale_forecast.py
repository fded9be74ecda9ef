"""The load forecast (qdd.autoscale.forecast): a step in the load is not extrapolated, a sustained
ramp is followed (issue 27; the offline loop read single jumps as slopes and scaled up for load
that never came)."""

from __future__ import annotations

import pytest

from qdd.autoscale.forecast import confirmed_slope, trend_forecast
from qdd.autoscale.types import Sample

PERIOD_S = 15.0
WINDOW = 21
"""Samples of a 300 s trend window at a 15 s period (both ends included), as the policy keeps."""


def history(rates: list[float]) -> tuple[Sample, ...]:
    return tuple(Sample(i * PERIOD_S, r, 2000.0, 200.0) for i, r in enumerate(rates))


def plain_slope(h: tuple[Sample, ...]) -> float:
    """The whole window's least-squares slope, as the forecast used it before."""
    n = len(h)
    mt, mr = sum(s.t_s for s in h) / n, sum(s.rate_rps for s in h) / n
    return sum((s.t_s - mt) * (s.rate_rps - mr) for s in h) / sum((s.t_s - mt) ** 2 for s in h)


@pytest.mark.parametrize("at", [1, 5, 10, 15, 20])
def test_a_step_is_not_extrapolated_wherever_it_lies_in_the_window(at):
    """10 → 20 req/s at sample ``at`` (older half, the middle, recent half, the last period), a
    300 s start-up ahead: the forecast is the 20 req/s seen now. The whole window's line alone
    would have carried up to 1.5 steps more (35 req/s for a step in the middle)."""
    h = history([10.0] * at + [20.0] * (WINDOW - at))
    assert confirmed_slope(h) == 0.0
    assert trend_forecast(h, h[-1].t_s, 315.0, min_span_s=150.0) == 20.0
    if at == 10:
        assert 20.0 + plain_slope(h) * 300.0 == pytest.approx(35.0, abs=0.8)


def test_a_sustained_ramp_is_followed_a_start_up_time_ahead():
    """+0.02 req/s per second for the whole window (10 → 16 req/s over 300 s): the slope is the
    ramp's, and the forecast 300 s ahead is where the ramp will be (22 req/s); a longer horizon is
    carried no further than the 300 s the slope was seen over."""
    h = history([10.0 + 0.02 * PERIOD_S * i for i in range(WINDOW)])
    assert confirmed_slope(h) == pytest.approx(0.02)
    assert trend_forecast(h, h[-1].t_s, 300.0) == pytest.approx(22.0)
    assert trend_forecast(h, h[-1].t_s, 900.0) == pytest.approx(22.0)
    assert trend_forecast(h, h[-1].t_s, 60.0) == pytest.approx(17.2)


def test_a_noisy_ramp_is_followed_and_a_burst_in_the_last_period_is_not_the_level():
    """The same ramp with ±1 req/s of alternating noise is followed to within the noise; a burst
    of +6 req/s in the last period raises the forecast by less than the burst (the level is the
    recent half's line; the burst itself is sized for by the policy's peak window)."""
    ramp = [10.0 + 0.3 * i + (1.0 if i % 2 else -1.0) for i in range(WINDOW)]
    h = history(ramp)
    assert trend_forecast(h, h[-1].t_s, 300.0) == pytest.approx(22.0, abs=1.0)
    burst = history(ramp[:-1] + [ramp[-1] + 6.0])
    assert trend_forecast(burst, burst[-1].t_s, 300.0) == pytest.approx(22.45, abs=0.01)  # +0.55: 6 / 11 samples
    # Before, the burst was both the level and a tilt of the line: 21 + (0.02 + its tilt) × 300.
    assert burst[-1].rate_rps + plain_slope(burst) * 300.0 == pytest.approx(28.56, abs=0.01)


def test_a_ramp_that_shows_in_one_half_only_waits_for_the_other():
    """Flat for 200 s, then a ramp for the last 100 s: the older half is flat, so no slope yet
    (the price of not extrapolating steps: a ramp is followed once it shows in both halves)."""
    h = history([10.0] * 14 + [10.0 + 0.5 * i for i in range(1, 8)])
    assert confirmed_slope(h) == 0.0
    assert trend_forecast(h, h[-1].t_s, 300.0) == 13.5


def test_falling_and_disagreeing_slopes_never_raise_the_forecast():
    """A falling ramp: the current rate (the scale-down hysteresis handles falling load). Two rising
    halves with a drop between them (a sawtooth) tilt the whole window down: no trend."""
    fall = history([30.0 - 0.5 * i for i in range(WINDOW)])
    assert confirmed_slope(fall) == pytest.approx(-0.5 / PERIOD_S)
    assert trend_forecast(fall, fall[-1].t_s, 300.0) == 20.0
    saw = history([20.0 + i for i in range(11)] + [10.0 + i for i in range(1, 11)])
    assert confirmed_slope(saw) == 0.0
    assert trend_forecast(saw, saw[-1].t_s, 300.0) == 20.0


def test_short_or_empty_history():
    assert trend_forecast((), 0.0, 300.0) == 0.0
    assert trend_forecast(history([5.0, 9.0]), 15.0, 300.0) == 9.0  # fewer than MIN_SAMPLES
    ramp = history([1.0 + 0.2 * i for i in range(WINDOW)])
    assert trend_forecast(ramp, ramp[-1].t_s, 300.0, min_span_s=301.0) == 5.0  # spans less than asked
    assert trend_forecast(ramp, ramp[-1].t_s, 300.0) == pytest.approx(9.0)
