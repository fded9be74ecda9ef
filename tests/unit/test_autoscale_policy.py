"""The autoscaling decision (qdd.autoscale.decide): table tests, Dynamo's own scenario, and one
regression per failure seen in the field's autoscalers (issue 27)."""

from __future__ import annotations

import pytest

from qdd.autoscale import Counts, Observation, PolicyState, RoleCounts, RoleLimits, decide
from qdd.autoscale.profile import TableProfile

from .autoscale_helpers import PROFILE, apply, config, counts, gpus, run, settle


@pytest.mark.parametrize(("rate", "isl", "osl", "want"), [
    # (req/s, ISL, OSL) → settled (prefill, decode); PROFILE: 40K tok/s per prefill endpoint at
    # ISL 3000, 200 requests per decode endpoint at 50 ms; scale-up at 85 % of capacity.
    (1.0, 3000, 150, (1, 1)),
    (10.0, 3000, 150, (1, 1)),      # 30K tok/s = 0.75 endpoint; 75 in flight = 0.38
    (20.0, 3000, 150, (2, 1)),      # Dynamo's scenario: 60K tok/s = 1.5 → 2; 150 in flight = 0.75 → 1
    (40.0, 3000, 150, (4, 2)),      # 120K tok/s = 3 → ceil(3/0.85) = 4; 300 in flight = 1.5 → 2
    (10.0, 8000, 150, (4, 1)),      # long inputs: 80K tok/s over 30K each = 2.7 → ceil(2.7/0.85) = 4
    (10.0, 500, 1500, (1, 4)),      # long outputs: 750 in flight over 240 each = 3.1 → 4
])
def test_settled_counts_for_a_load(rate, isl, osl, want):
    cfg = config()
    steps = run([rate] * 3, cfg, counts(), isl=isl, osl=osl)
    assert (steps[-1][1].prefill.target, steps[-1][1].decode.target) == want


def test_dynamo_scenario_10_to_20_rps_at_3000_150_goes_1p1d_to_2p1d():
    """Dynamo's Planner docs: load 10 → 20 req/s at ISL/OSL 3000/150 moves 1P1D to 2P1D."""
    cfg = config()
    steps = run([10.0] * 4 + [20.0] * 4, cfg, counts())
    assert [(d.prefill.target, d.decode.target) for _, d in steps[:4]] == [(1, 1)] * 4
    assert (steps[4][1].prefill.target, steps[4][1].prefill.add, steps[4][1].decode.target) == (2, 1, 1)
    assert settle(steps[-1][0]) == counts(2, 1)


def test_scales_up_a_start_up_time_early():
    """Flat, then a ramp of +1 req/s per minute: with a 300 s start-up the endpoint is asked for
    while the current rate still fits one endpoint, about a start-up time before the rate needs it.
    The ramp is followed once it shows in both halves of the 300 s trend window (a step shows in
    one only: qdd/autoscale/forecast.py), 3 periods after a line through the whole window would
    have: 270 s ahead instead of 315 s."""
    cfg = config(startup_s=300.0)
    rates = [5.0] * 20 + [5.0 + 0.25 * i for i in range(60)]
    steps = run(rates, cfg, counts())
    first_add = next(i for i, (_, d) in enumerate(steps) if d.prefill.add)
    # One endpoint holds 0.85 × 40K / 3000 = 11.3 req/s at 85 %; 13.3 req/s at 100 %.
    needed_at = next(i for i, r in enumerate(rates) if r * 3000 / 40000 > 1.0)
    assert (first_add, rates[first_add]) == (36, 9.0)
    assert (needed_at - first_add) * cfg.period_s == 270.0 >= cfg.startup_s - 2 * cfg.period_s
    cold = run(rates, config(startup_s=0.0), counts())
    assert next(i for i, (_, d) in enumerate(cold) if d.prefill.add) == 45  # at 11.25 req/s: 135 s later


def test_pending_endpoints_count_as_supply():
    """A Pending endpoint is capacity already bought: no second add for the same demand."""
    d = decide(Observation(0.0, 20.0, 3000, 150), PROFILE, counts(1, 1, pp=1), config())
    assert (d.prefill.target, d.prefill.add) == (2, 0)


def test_dynamo_13559_4917_scale_down_drains_instead_of_killing_in_flight_requests():
    """dynamo#13559, #4917: scale-down deleted engines with requests in flight. Here a Ready
    endpoint is only ever drained (the controller deletes it when idle), its GPUs stay counted
    until it is gone, and decode groups go whole (counts are whole endpoints)."""
    cfg = config(scale_down_cooldown_s=60.0)
    steps = run([40.0] * 3 + [5.0] * 10, cfg, counts(4, 2))
    downs = [d for _, d in steps if d.prefill.drain or d.decode.drain]
    assert downs and all(d.prefill.cancel_pending == 0 and d.decode.cancel_pending == 0 for d in downs)
    first = downs[0]
    seen = next(c for c, d in steps if d is first)
    assert first.gpus_held_after == gpus(seen, cfg)  # draining endpoints still hold their GPUs
    assert settle(steps[-1][0]) == counts(1, 1)


def test_dynamo_12428_rebalance_at_full_budget_never_overshoots_nor_deadlocks():
    """dynamo#12428: a rebalance at full budget added first, overshot the budget and deadlocked.
    Here the role giving GPUs drains first; the other role is added once the GPUs are free."""
    cfg = config(gpu_budget=24, prefill=RoleLimits(1, 16, 2), decode=RoleLimits(1, 8, 8))
    # Start decode-heavy at full budget (4P2D = 24 GPUs), then the shape turns prefill-heavy.
    steps = run([(10.0, 500, 1500)] * 2 + [(30.0, 8000, 50)] * 12, cfg, counts(4, 2))
    for c, d in steps:
        assert gpus(c, cfg) <= cfg.gpu_budget and d.gpus_held_after <= cfg.gpu_budget
    final = settle(steps[-1][0])
    assert (final.prefill.ready, final.decode.ready) == (8, 1)  # 8 × 2 + 1 × 8 = 24
    assert not steps[-1][1].slo_attainable  # 30 req/s × 8000 needs more prefill than the budget holds


def test_dynamo_14251_scale_down_while_a_scale_up_is_pending():
    """dynamo#14251: no scale-down while a new pod sat Pending. Decode drains although prefill
    has an endpoint Pending; a Pending endpoint of the shrinking role is cancelled first."""
    cfg = config(scale_down_cooldown_s=0.0)
    d = decide(Observation(0.0, 12.0, 3000, 150), PROFILE, counts(1, 4, pp=1), cfg)
    assert (d.prefill.add, d.prefill.cancel_pending, d.decode.drain, d.decode.target) == (0, 0, 3, 1)
    d = decide(Observation(0.0, 2.0, 3000, 150), PROFILE, counts(1, 1, pp=2), cfg)
    assert (d.prefill.cancel_pending, d.prefill.drain, d.prefill.target) == (2, 0, 1)


def test_dynamo_4420_a_role_owned_by_another_writer_is_never_written():
    """dynamo#4420: two writers of replicas fought. A role driven by an HPA/KEDA through its scale
    subresource is left to it; its GPUs still count against the budget."""
    cfg = config(prefill=RoleLimits(1, 16, 2, external=True), gpu_budget=26)
    d = decide(Observation(0.0, 60.0, 3000, 1500), PROFILE, counts(5, 1), cfg)
    assert (d.prefill.target, d.prefill.add, d.prefill.drain) == (5, 0, 0)
    assert d.decode.target == 2  # budget 26 − 10 prefill GPUs = 16: two decode endpoints
    assert d.gpus_held_after == 26


def test_llm_d_autoscaling_1213_prefill_is_scaled_when_inputs_grow():
    """llm-d-autoscaling#1213: the autoscaler never scaled prefill. Constant rate, inputs grow
    1000 → 8000 tokens: prefill grows, decode does not."""
    cfg = config()
    steps = run([(10.0, 1000, 150)] * 3 + [(10.0, 8000, 150)] * 8, cfg, counts())
    assert settle(steps[2][0]) == counts(1, 1)
    assert settle(steps[-1][0]) == counts(4, 1)


def test_kthena_1589_no_ratio_clamp_and_scale_down_drains():
    """kthena#1589: each role scaled on its own metric, then a fixed P:D ratio was clamped on top,
    and endpoints were removed without draining. Here the ratio follows the load's shape (4:1
    prefill-heavy, then 1:4 decode-heavy) and the shrinking role drains."""
    cfg = config(scale_down_cooldown_s=30.0)
    steps = run([(40.0, 3000, 50)] * 3 + [(5.0, 500, 3000)] * 12, cfg, counts())
    assert settle(steps[2][0]) == counts(4, 1)
    end = settle(steps[-1][0])
    assert (end.prefill.ready, end.decode.ready) == (1, 4)
    assert any(d.prefill.drain for _, d in steps) and not any(d.prefill.cancel_pending for _, d in steps)


def test_hold_at_budget_keeps_counts_and_reports_the_slo_unattainable():
    cfg = config(gpu_budget=12, at_budget="Hold")
    d = decide(Observation(0.0, 40.0, 3000, 150), PROFILE, counts(2, 1), cfg)
    assert (d.prefill.target, d.decode.target, d.prefill.drain, d.decode.drain) == (2, 1, 0, 0)
    assert d.slo_attainable is False and d.prefill.needed == 4


def test_reactive_step_when_the_profile_is_optimistic():
    """Observed TTFT over target with capacity to spare on paper: one more prefill endpoint, and
    not again within the scale-up cooldown."""
    cfg = config(scale_up_cooldown_s=60.0)
    d = decide(Observation(0.0, 5.0, 3000, 150, ttft_ms=3500.0), PROFILE, counts(1, 1), cfg)
    assert (d.prefill.add, d.decode.add) == (1, 0)
    d2 = decide(Observation(15.0, 5.0, 3000, 150, ttft_ms=3500.0), PROFILE, counts(2, 1), cfg, d.state)
    assert d2.prefill.add == 0


def test_bounds_apply():
    cfg = config(prefill=RoleLimits(2, 3, 2), decode=RoleLimits(1, 1, 8))
    d = decide(Observation(0.0, 80.0, 3000, 1000), PROFILE, counts(2, 1), cfg)
    assert (d.prefill.target, d.decode.target, d.slo_attainable) == (3, 1, False)
    d = decide(Observation(0.0, 0.0, 3000, 150), PROFILE, counts(2, 1), config(prefill=RoleLimits(2, 3, 2)))
    assert d.prefill.target == 2


def test_first_call_without_state_and_state_round_trip():
    d = decide(Observation(0.0, 10.0, 3000, 150), PROFILE, counts(), config())
    assert isinstance(d.state, PolicyState) and len(d.state.history) == 1


def test_table_profile_refuses_bad_tables_and_other_targets():
    with pytest.raises(ValueError, match="strictly increasing"):
        TableProfile(1, 1, (2.0, 1.0), (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="> 0"):
        TableProfile(1, 1, (1.0,), (0.0,), (1.0,))
    with pytest.raises(ValueError, match="tabulated for ttft"):
        PROFILE.prefill_tokens_per_s(3000, 1000.0)


def test_profile_corrected_by_observed_latency_and_recovers():
    """The engines report TTFT at twice the target: the prefill capacity is halved (the profile
    was optimistic), so a demand of 1.5 profiled endpoints asks for 4; once TTFT sits under half
    the target the correction recovers 2 % per period and the count comes back down."""
    cfg = config(scale_down_cooldown_s=60.0)
    c, state = counts(2, 1), None
    d = decide(Observation(0.0, 20.0, 3000, 150, ttft_ms=4000.0), PROFILE, c, cfg, state)
    assert d.state.correction["prefill"] == 0.5 and d.state.correction["decode"] == 1.0
    assert d.prefill.target == 4  # 1.5 / 0.5 = 3 endpoints' worth at 85 %
    c, state = counts(4, 1), d.state
    for i in range(1, 80):
        d = decide(Observation(15.0 * i, 20.0, 3000, 150, ttft_ms=300.0), PROFILE, c, cfg, state)
        state, c = d.state, counts(d.prefill.target, 1)
    assert state.correction["prefill"] == 1.0 and c.prefill.ready == 3  # 1.5 under 65 % → 3


def test_scale_down_waits_a_start_up_time_of_low_demand():
    """An endpoint drained now takes startup_s to come back: a trough shorter than the start-up
    time (plus a period) drains nothing; a longer one does, once the whole window was low."""
    cfg = config(startup_s=300.0, scale_down_cooldown_s=60.0)
    busy, trough = [(40.0, 3000, 150)] * 4, [(5.0, 3000, 150)]
    short = run(busy + trough * 16 + busy, cfg, counts(4, 2))  # 240 s of trough
    assert not any(d.prefill.drain or d.decode.drain for _, d in short)
    long = run(busy + trough * 30, cfg, counts(4, 2))  # 450 s of trough
    first = next(i for i, (_, d) in enumerate(long) if d.prefill.drain)
    assert (first - 4 + 1) * cfg.period_s >= cfg.startup_s + cfg.period_s  # the whole window was low
    assert settle(long[-1][0]) == counts(1, 1)


def test_correction_is_not_undone_by_quiet_periods():
    """A burst over the TTFT target lowers the prefill capacity correction; quiet periods between
    bursts (TTFT far under target at a tenth of the load) leave it, busy ones that meet the target
    with room recover it."""
    cfg = config()
    d = decide(Observation(0.0, 40.0, 3000, 150, ttft_ms=4000.0), PROFILE, counts(4, 1), cfg)
    low = d.state.correction["prefill"]
    assert low == 0.5
    state = d.state
    for i in range(1, 4):
        state = decide(Observation(15.0 * i, 4.0, 3000, 150, ttft_ms=200.0), PROFILE, counts(6, 1), cfg, state).state
    assert state.correction["prefill"] == low
    state = decide(Observation(60.0, 30.0, 3000, 150, ttft_ms=200.0), PROFILE, counts(6, 1), cfg, state).state
    assert state.correction["prefill"] == pytest.approx(low * 1.02)


def test_no_trend_from_a_short_history():
    """Three periods of a rising rate right after start, with a 300 s start-up: a line through 30 s
    of samples is not carried five minutes ahead (it asked for 3× the load in the offline loop);
    the forecast is the current rate until the history spans half the trend window."""
    cfg = config(startup_s=300.0)
    steps = run([10.0, 20.0, 30.0], cfg, counts(3, 1))
    assert steps[-1][1].forecast_rate_rps == 30.0
    longer = run([10.0 + i for i in range(12)], cfg, counts(3, 1))  # 165 s of a +1 req/s per period ramp
    assert longer[-1][1].forecast_rate_rps > 21.0


def test_decode_runs_closer_to_its_profiled_concurrency_than_prefill():
    """TPOT is one batch step that grows smoothly with the batch (the profile's concurrency is where
    its 95th percentile meets the target); TTFT is a queue that climbs steeply near capacity. At 90 %
    of one endpoint's capacity in both roles, prefill asks for a second endpoint, decode does not."""
    cfg = config()
    # prefill: 12 req/s × 3000 = 36K tok/s over 40K = 0.9; decode: 12 × 300 × 0.05 = 180 over 200 = 0.9.
    d = decide(Observation(0.0, 12.0, 3000, 300), PROFILE, counts(1, 1), cfg)
    assert (d.prefill.target, d.decode.target) == (2, 1)
    d = decide(Observation(0.0, 13.0, 3000, 300), PROFILE, counts(1, 1), cfg)  # decode 195 / 200 = 0.975
    assert d.decode.target == 2


def test_no_scale_down_within_a_hold_window_of_a_scale_up():
    """The reactive step adds an endpoint on an observed miss the demand does not explain; the
    next period's demand alone would take it away again (seen in the offline loop: 4P → 5P → 3P
    in two periods). A role that scaled up keeps its count for a hold window."""
    cfg = config(scale_down_cooldown_s=60.0)
    quiet = [Observation(15.0 * i, 5.0, 3000, 150, ttft_ms=100.0) for i in range(8)]
    state, c = None, counts(2, 1)
    for o in quiet:
        d = decide(o, PROFILE, c, cfg, state)
        state, c = d.state, settle(apply(c, d))
    assert c == counts(1, 1)
    d = decide(Observation(120.0, 5.0, 3000, 150, ttft_ms=3000.0), PROFILE, c, cfg, state)
    assert d.prefill.add == 1
    state, c = d.state, settle(apply(c, d))
    held = []
    for i in range(9, 16):
        d = decide(Observation(15.0 * i, 5.0, 3000, 150, ttft_ms=100.0), PROFILE, c, cfg, state)
        held.append(d.prefill.target)
        state, c = d.state, settle(apply(c, d))
    assert held[:4] == [2, 2, 2, 2] and held[-1] == 1  # 60 s window + a period, then it goes


def test_no_scale_down_while_latency_used_more_than_half_its_target():
    """Bursts shorter than a period: the mean rate says one endpoint would do, the TTFT percentile
    at 1.2 s of a 2 s target says the endpoints are busier than that. No drain until every period
    of the hold window kept the percentile under half the target."""
    cfg = config(scale_down_cooldown_s=60.0)
    steps, state, c = [], None, counts(3, 1)
    for i, ttft in enumerate([1200.0] * 6 + [400.0] * 6):
        d = decide(Observation(15.0 * i, 5.0, 3000, 150, ttft_ms=ttft), PROFILE, c, cfg, state)
        steps.append(d.prefill.drain)
        state, c = d.state, settle(apply(c, d))
    assert steps[:10] == [0] * 10 and sum(steps) == 2  # the 400 ms periods cover 75 s at i = 10


def _while_starting(rates, c, cfg, ttft_ms: float | None = 400.0):
    """Decisions every period while whatever was added stays Pending (a start-up longer than the
    run): each decision's cancellations and drains apply, its additions join the Pending ones."""
    state, out = None, []
    for i, rate in enumerate(rates):
        d = decide(Observation(15.0 * i, rate, 3000, 150, ttft_ms=ttft_ms), PROFILE, c, cfg, state)
        out.append(d)
        state = d.state
        p = c.prefill
        c = counts(p.ready - d.prefill.drain, c.decode.ready, pp=p.pending - d.prefill.cancel_pending + d.prefill.add,
                   pd=p.draining + d.prefill.drain)
    return out, c


def test_a_starting_endpoint_is_cancelled_once_the_load_it_was_ordered_for_is_gone():
    """dynamo#14251 (its Planner kept a new pod while it sat Pending). 24 req/s at ISL 3000 is 72K
    tok/s, 1.8 endpoints' worth over 2 × 85 %: a third endpoint is ordered (300 s start-up). The load
    falls to 15 req/s (1.125 endpoints' worth, under 2 × 65 % = 1.3) a minute later; once the peak
    window (60 s) holds no busy period the starting endpoint is cancelled — no hold, no drain, its
    GPUs free at once — 75 s after the drop, where a serving one waits out a start-up time."""
    cfg = config(startup_s=300.0)
    decisions, end = _while_starting([24.0] * 4 + [15.0] * 8, counts(2, 1), cfg)
    assert (decisions[0].prefill.add, decisions[0].prefill.target) == (1, 3)
    assert [d.prefill.target for d in decisions] == [3] * 8 + [2] * 4
    cancel = decisions[8]  # t = 120 s: the last 24 req/s period (t = 45 s) left the peak window
    assert (cancel.prefill.cancel_pending, cancel.prefill.drain, cancel.gpus_held_after) == (1, 0, 2 * 2 + 8)
    assert "1 starting endpoint(s) not needed" in cancel.prefill.reason
    assert end == counts(2, 1)


def test_a_serving_endpoint_ordered_for_the_same_load_waits_out_the_hold():
    """The same load, but the third endpoint is Ready (serving): it is drained, not dropped, and
    only once the hold window (start-up + a period, 315 s) holds no busy period: at t = 375 s."""
    cfg = config(startup_s=300.0)
    state, c, drains = None, counts(2, 1), []
    for i, rate in enumerate([24.0] * 4 + [15.0] * 26):
        d = decide(Observation(15.0 * i, rate, 3000, 150, ttft_ms=400.0), PROFILE, c, cfg, state)
        state = d.state
        drains.append((d.prefill.drain, d.prefill.cancel_pending))
        c = settle(apply(c, d))  # what was added is Ready at the next decision
    assert drains[:25] == [(0, 0)] * 25 and drains[25] == (1, 0)  # t = 375 s = 45 s + 315 s + one period
    assert c == counts(2, 1)


def test_a_starting_endpoint_still_needed_is_kept():
    """At 24 req/s the third endpoint stays ordered; at 19 req/s (1.425 endpoints' worth) two
    would do by the scale-up share (1.425 < 2 × 85 %), but the load is not under the scale-down
    share of two (1.3): the order stands (a load between the two shares never flips an order)."""
    cfg = config(startup_s=300.0)
    for later in (24.0, 19.0):
        decisions, end = _while_starting([24.0] * 4 + [later] * 16, counts(2, 1), cfg)
        assert all(d.prefill.target == 3 and not d.prefill.cancel_pending for d in decisions), later
        assert end == counts(2, 1, pp=1)


def test_a_starting_endpoint_ordered_on_a_missed_target_or_below_a_serving_one_is_not_cancelled():
    """An endpoint the reactive step ordered because TTFT missed its target (the profile said one
    would do) is kept although the next periods are quiet: one good period is no evidence. And a
    not-Ready endpoint below a Ready one (restarting) is not cancellable: a lower count would drain
    the Ready one above it instead, so the hold applies."""
    cfg = config(startup_s=300.0)
    d = decide(Observation(0.0, 5.0, 3000, 150, ttft_ms=3500.0), PROFILE, counts(1, 1), cfg)
    assert d.prefill.add == 1
    state = d.state
    for i in range(1, 12):
        d = decide(Observation(15.0 * i, 5.0, 3000, 150, ttft_ms=300.0), PROFILE, counts(1, 1, pp=1), cfg, state)
        state = d.state
        assert (d.prefill.target, d.prefill.cancel_pending) == (2, 0)
    restarting = Counts(RoleCounts(2, 1, cancellable=0), RoleCounts(1))
    decisions = [decide(Observation(15.0 * i, 5.0, 3000, 150, ttft_ms=300.0), PROFILE, restarting, cfg)
                 for i in range(2)]
    assert all((x.prefill.target, x.prefill.cancel_pending, x.prefill.drain) == (3, 0, 0) for x in decisions)
