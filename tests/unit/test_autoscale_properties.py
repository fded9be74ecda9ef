"""Properties of the autoscaling decision over generated inputs (hypothesis): never over budget,
monotone in load, no oscillation under constant load, scale-down while a scale-up is Pending."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from qdd.autoscale import Counts, Observation, RoleCounts, RoleLimits, decide

from .autoscale_helpers import PROFILE, config, gpus, run, settle

GP, GD = 2, 8


@st.composite
def setups(draw):
    """(config, counts) with counts inside the budget (what the policy keeps), any mix of states."""
    budget = draw(st.integers(GP + GD, 120))
    at_budget = draw(st.sampled_from(["Rebalance", "Hold"]))
    p_min, d_min = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    if p_min * GP + d_min * GD > budget:
        p_min, d_min = 1, 1
    cfg = config(gpu_budget=budget, at_budget=at_budget, prefill=RoleLimits(p_min, draw(st.integers(p_min, 24)), GP),
                 decode=RoleLimits(d_min, draw(st.integers(d_min, 10)), GD),
                 scale_down_cooldown_s=draw(st.sampled_from([0.0, 60.0, 300.0])),
                 startup_s=draw(st.sampled_from([0.0, 120.0, 300.0])))
    cancellable = st.one_of(st.none(), st.integers(0, 3))  # None: every Pending one (the replay's)
    while True:
        c = Counts(RoleCounts(draw(st.integers(p_min, 12)), draw(st.integers(0, 3)), draw(st.integers(0, 2)),
                              draw(cancellable)),
                   RoleCounts(draw(st.integers(d_min, 6)), draw(st.integers(0, 2)), draw(st.integers(0, 1)),
                              draw(cancellable)))
        if gpus(c, cfg) <= budget:
            return cfg, c
        budget_fit = Counts(RoleCounts(p_min), RoleCounts(d_min))
        if draw(st.booleans()):
            return cfg, budget_fit


loads = st.tuples(st.floats(0.0, 200.0), st.floats(50.0, 8000.0), st.floats(1.0, 3000.0))


@settings(max_examples=150, deadline=None)
@given(setups(), st.lists(loads, min_size=1, max_size=6))
def test_never_over_budget_in_any_intermediate_state(setup, seq):
    cfg, c = setup
    state = None
    for i, (rate, isl, osl) in enumerate(seq):
        d = decide(Observation(i * cfg.period_s, rate, isl, osl), PROFILE, c, cfg, state)
        assert d.gpus_held_after <= cfg.gpu_budget
        # Mid-way states: after the cancellations alone, and with this decision's additions
        # Pending while the drains still hold their GPUs.
        assert gpus(c, cfg) - sum(d.of(r).cancel_pending * cfg.limits(r).gpus_per_endpoint for r in ("prefill", "decode")) \
            + sum(d.of(r).add * cfg.limits(r).gpus_per_endpoint for r in ("prefill", "decode")) == d.gpus_held_after
        for role in ("prefill", "decode"):
            lim = cfg.limits(role)
            assert lim.min_endpoints <= d.of(role).target <= lim.max_endpoints
            assert d.of(role).cancel_pending <= c.of(role).cancellable_pending  # never one a lower count would not drop
            assert d.of(role).add == 0 or (d.of(role).drain == 0 and d.of(role).cancel_pending == 0)
        state = d.state
        c = Counts(*(RoleCounts(c.of(r).ready + c.of(r).pending - d.of(r).cancel_pending - d.of(r).drain,
                                d.of(r).add, d.of(r).drain) for r in ("prefill", "decode")))


@settings(max_examples=300, deadline=None)
@given(st.floats(0.0, 150.0), st.floats(0.0, 150.0), st.floats(100.0, 8000.0), st.floats(1.0, 2000.0),
       st.integers(1, 6), st.integers(1, 3), st.sampled_from([40, 80, 100_000]))
def test_monotone_in_load(r1, r2, isl, osl, p, d, budget):
    """More load never needs fewer endpoints of a role, and never makes an unattainable SLO
    attainable. With a budget that does not bind, it never asks for fewer endpoints of a role;
    with one that binds a role may give GPUs it holds above its need to the other (Rebalance)."""
    lo, hi = sorted((r1, r2))
    cfg = config(gpu_budget=budget, prefill=RoleLimits(1, 64, GP), decode=RoleLimits(1, 16, GD))
    c = Counts(RoleCounts(p), RoleCounts(d))
    if gpus(c, cfg) > budget:
        return
    a = decide(Observation(0.0, lo, isl, osl), PROFILE, c, cfg)
    b = decide(Observation(0.0, hi, isl, osl), PROFILE, c, cfg)
    assert b.prefill.needed >= a.prefill.needed and b.decode.needed >= a.decode.needed
    assert a.slo_attainable or not b.slo_attainable
    if budget == 100_000 and b.prefill.needed <= 64 and b.decode.needed <= 16:
        assert b.prefill.target >= a.prefill.target and b.decode.target >= a.decode.target
    for role in ("prefill", "decode"):  # a role short of its need is never shrunk to help the other
        x, y = a.of(role), b.of(role)
        assert y.target >= min(x.target, y.needed) or not b.slo_attainable


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 60.0), st.floats(200.0, 8000.0), st.floats(10.0, 2000.0), st.integers(1, 8), st.integers(1, 4),
       st.sampled_from([0.0, 60.0, 300.0]))
def test_no_oscillation_under_constant_load(rate, isl, osl, p, d, cooldown):
    """A constant load moves each role's count in one direction at most, and then not again."""
    cfg = config(gpu_budget=1000, prefill=RoleLimits(1, 32, GP), decode=RoleLimits(1, 16, GD), scale_down_cooldown_s=cooldown)
    steps = run([(rate, isl, osl)] * 45, cfg, Counts(RoleCounts(p), RoleCounts(d)))
    for role in ("prefill", "decode"):
        seq = [settle(c).of(role).ready for c, _ in steps]
        moves = [b - a for a, b in zip(seq, seq[1:], strict=False) if b != a]
        assert all(m > 0 for m in moves) or all(m < 0 for m in moves), (role, seq)
        assert seq[-15:] == [seq[-1]] * 15


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(2, 6), st.booleans())
def test_scale_down_allowed_while_a_scale_up_is_pending(pending, extra_decode, p_ready, pending_in_decode):
    """Whichever role has a Pending scale-up, an over-provisioned role still shrinks (dynamo#14251)."""
    cfg = config(gpu_budget=1000, scale_down_cooldown_s=0.0, prefill=RoleLimits(1, 32, GP), decode=RoleLimits(1, 16, GD))
    # Prefill busy enough for p_ready + pending endpoints; decode nearly idle with extra endpoints.
    rate = (p_ready + pending) * 0.8 * 40000.0 / 3000.0
    pend = (0, pending) if pending_in_decode else (pending, 0)
    c = Counts(RoleCounts(p_ready, pend[0]), RoleCounts(1 + extra_decode, pend[1]))
    d = decide(Observation(0.0, rate, 3000.0, 1.0), PROFILE, c, cfg)
    assert d.decode.target < c.decode.active
    assert d.decode.cancel_pending + d.decode.drain == c.decode.active - d.decode.target


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 60.0), st.floats(200.0, 8000.0), st.floats(10.0, 2000.0), st.integers(1, 8), st.integers(1, 4),
       st.sampled_from([60.0, 300.0]))
def test_no_order_and_cancel_in_turn_under_constant_load_while_endpoints_start(rate, isl, osl, p, d, startup):
    """What a constant load orders stays ordered while it starts (here it never becomes Ready): no
    cancellation, no second order. Cancelling asks for the demand under the scale-down share of
    the count without the starting endpoint; the order was made above its scale-up share."""
    cfg = config(gpu_budget=1000, prefill=RoleLimits(1, 32, GP), decode=RoleLimits(1, 16, GD), startup_s=startup)
    c, state = Counts(RoleCounts(p), RoleCounts(d)), None
    for i in range(30):
        dec = decide(Observation(i * cfg.period_s, rate, isl, osl), PROFILE, c, cfg, state)
        state = dec.state
        for role in ("prefill", "decode"):
            assert dec.of(role).cancel_pending == 0
            assert dec.of(role).add == 0 or (i == 0 and c.of(role).pending == 0)
        c = Counts(*(RoleCounts(c.of(r).ready - dec.of(r).drain, c.of(r).pending + dec.of(r).add,
                                c.of(r).draining + dec.of(r).drain) for r in ("prefill", "decode")))
