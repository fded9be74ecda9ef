"""The autoscaling decision: observations, profile, counts, budget → per-role targets and actions.

One pure function, :func:`decide`, called every ``period_s`` by the controller (and by the offline
closed loop in bench/autoscale.py). Per role:

1. Demand at the forecast load (:mod:`.forecast`: the trend ``startup_s + period_s`` ahead, so an
   engine started now is Ready for the load it was started for), or in the busiest period of the
   last ``peak_window_s`` if that was more. Prefill: input tokens per second
   over one endpoint's token rate at the TTFT target. Decode: concurrent requests by Little's law
   (rate × OSL × TPOT target) over one endpoint's concurrency at the TPOT target.
2. Hysteresis: scale up when demand exceeds ``utilization_up`` of the active endpoints (ready +
   pending: a Pending endpoint is supply already bought); scale down only to a count at which
   demand stays under ``utilization_down``, and only after that has held ``scale_down_cooldown_s``.
   A constant load sits inside the band and never moves a count. A scale-up whose endpoint is not
   serving yet is cancelled as soon as the forecast demand is under ``utilization_down`` of the
   count without it (and the latency stayed low since the order): no hold, no drain — it serves
   nothing (dynamo#14251's Planner kept such a pod until it was Ready).
3. Reactive correction (the profile corrected by what the engines report): an observed latency over
   its target lowers the role's capacity correction by the miss (at most halving it per period, never
   below a quarter), a latency under half the target raises it back 2 % per period; and when the
   target is missed, the role has nothing Pending and its last scale-up is older than
   ``scale_up_cooldown_s``, at least one more endpoint.
4. Bounds, then the budget (:mod:`.budget`).
5. Actions that keep the budget in every intermediate state: removals first (a Pending endpoint is
   cancelled, it serves nothing; a Ready one is drained: out of routing, deleted by the controller
   once idle — its GPUs stay counted until then), additions only into GPUs free now. A rebalance at
   full budget thus drains first and adds on a later decision, never overshoots and never waits on
   itself. Scale-down of one role is never held back by a Pending scale-up of either role.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .budget import fit_budget
from .forecast import trend_forecast, window_means
from .types import (ROLES, CapacityProfile, Counts, Decision, Observation, PolicyConfig, PolicyState, Role,
                    RoleDecision, Sample)

CORRECTION_FLOOR, CORRECTION_RECOVERY = 0.25, 1.02
"""The capacity correction never goes below a quarter of the profile, and recovers 2 % per period
while the observed latency is under half its target at load."""
RECOVERY_LOAD = 0.5
"""Share of the busiest recent period's load a period must carry for its latency to count as
evidence that the capacity is higher than the correction says."""
ISL_WINDOW_S = 60.0
"""Seconds over which the mean ISL/OSL are taken (request-weighted): one period is noisy."""


def _demand(role: Role, rate: float, isl: float, osl: float, profile: CapacityProfile, cfg: PolicyConfig) -> float:
    """Endpoints' worth of work at full capacity (a fraction; 1.0 = one endpoint exactly at its target)."""
    if rate <= 0:
        return 0.0
    if role == "prefill":
        return rate * max(isl, 1.0) / profile.prefill_tokens_per_s(max(isl, 1.0), cfg.ttft_ms)
    in_flight = rate * max(osl, 1.0) * cfg.tpot_ms / 1000.0
    return in_flight / profile.decode_concurrency(max(isl, 1.0), max(osl, 1.0), cfg.tpot_ms)


def _observed(role: Role, obs: Observation, cfg: PolicyConfig) -> tuple[float | None, float]:
    return (obs.ttft_ms, cfg.ttft_ms) if role == "prefill" else (obs.tpot_ms, cfg.tpot_ms)


def _missed(role: Role, obs: Observation, cfg: PolicyConfig) -> bool:
    seen, target = _observed(role, obs, cfg)
    return seen is not None and seen > target


def _corrected(role: Role, obs: Observation, cfg: PolicyConfig, state: PolicyState, load_now: float,
               load_peak: float) -> float:
    """The role's capacity correction after this observation: a miss by a factor f scales the
    capacity by 1/f (at most halving it per period); a latency under half the target recovers it,
    but only from a period whose load (``load_now``, profiled endpoints) was at least
    ``RECOVERY_LOAD`` of the busiest recent period's (``load_peak``). A quiet period between
    bursts meets any target and says nothing about the capacity at the load the role is sized
    for: recovering from it would undo what the last burst taught, and the next burst would miss."""
    c = state.correction.get(role, 1.0)
    seen, target = _observed(role, obs, cfg)
    if seen is None:
        return c
    if seen > target:
        return max(CORRECTION_FLOOR, c * max(0.5, target / seen))
    if seen < target / 2 and load_now > 0 and load_now >= RECOVERY_LOAD * load_peak:
        return min(1.0, c * CORRECTION_RECOVERY)
    return c


def _wanted(role: Role, demand: float, hold_demand: float | None, may_cancel: bool, obs: Observation,
            counts: Counts, cfg: PolicyConfig, state: PolicyState) -> tuple[int, int, dict[str, float], str]:
    """(wanted count within bounds, SLO need before bounds, updated lower_since, reason).
    ``demand``: endpoints' worth at the forecast / recent peak (scale-up); ``hold_demand``: the
    most demand of any period in the hold window (scale-down), None while a scale-down is not
    allowed: the history is shorter than the window, the role scaled up within it, or its
    latency came near its target within it. ``may_cancel``: the latency evidence for cancelling
    a starting endpoint is there (:func:`_may_cancel`)."""
    lim, c = cfg.limits(role), counts.of(role)
    lower_since = dict(state.lower_since_s)
    if lim.external:
        lower_since.pop(role, None)
        return c.active, c.active, lower_since, "owned by another writer (scale subresource)"
    u_up, u_down = cfg.band(role)
    up = math.ceil(demand / u_up - 1e-9)
    need, reason = max(up, 1), f"demand {demand:.2f} endpoints"
    if _missed(role, obs, cfg) and c.pending == 0 and \
            obs.now_s - state.last_scale_up_s.get(role, -math.inf) >= cfg.scale_up_cooldown_s and need <= c.active:
        need, reason = c.active + 1, f"observed {'TTFT' if role == 'prefill' else 'TPOT'} over target"
    down = max(math.ceil(max(hold_demand or 0.0, demand) / u_down - 1e-9), need, 1)
    # Cancelling a scale-up that is not serving yet. A starting endpoint holds GPUs and serves
    # nothing: deleting it cuts no request and owes no KV transfer, so neither the hold window nor
    # a drain applies to it (they protect requests in flight and the start-up time it takes a
    # drained endpoint to come back; a starting one has not paid its start-up yet, and the demand
    # below is already the forecast a start-up time ahead, so the load it would serve is looked at).
    # The rule: the newest starting endpoints go, down to the count at which the demand (forecast,
    # and the busiest period of the peak window: the current load) stays under the scale-DOWN share
    # of that count, as a serving endpoint's scale-down asks of every period of its hold window.
    # Not the scale-up share: with one threshold for both, a demand wavering around it would order
    # and cancel in turn, and a starting endpoint cancelled and ordered again starts over. Between
    # the two shares (prefill 85 % / 65 %, decode 95 % / 75 %) an order stands: the demand must
    # fall by about a quarter (decode a fifth) below the level that ordered it. And only while the
    # role's latency stayed at or under ``latency_down`` of its target from its last scale-up on
    # (``may_cancel``): an endpoint ordered because the engines missed their target is not taken
    # back on the profile's word alone.
    keep = max(math.ceil(demand / u_down - 1e-9), need, 1, c.active - c.cancellable_pending)
    if need > c.active:
        lower_since.pop(role, None)
        want = need
    elif hold_demand is not None and down < c.active:
        lower_since.setdefault(role, obs.now_s)
        want, reason = down, reason + f", under {u_down:.0%} of {down} for the last {hold_window_s(cfg):.0f} s"
    elif may_cancel and keep < c.active:
        lower_since.pop(role, None)
        want = keep
        reason += f", under {u_down:.0%} of {keep}: {c.active - keep} starting endpoint(s) not needed"
    else:
        lower_since.pop(role, None)
        want = c.active
    return min(max(want, lim.min_endpoints), lim.max_endpoints), need, lower_since, reason


def _may_scale_down(role: Role, in_hold: list[Sample], covered: bool, cfg: PolicyConfig, state: PolicyState,
                    now_s: float) -> bool:
    """A role may shrink once the policy has seen a whole hold window (``covered``) in which it
    did not scale up and its observed latency stayed at or under ``latency_down`` of its target."""
    if not covered or now_s - state.last_scale_up_s.get(role, -math.inf) < hold_window_s(cfg):
        return False
    target = cfg.ttft_ms if role == "prefill" else cfg.tpot_ms
    seen = [x.ttft_ms if role == "prefill" else x.tpot_ms for x in in_hold]
    return all(v is None or v <= cfg.latency_down * target for v in seen)


def _may_cancel(role: Role, history: tuple[Sample, ...], cfg: PolicyConfig, state: PolicyState) -> bool:
    """The latency evidence for cancelling a starting endpoint of ``role``: its observed latency
    was at or under ``latency_down`` of its target in every period from its last scale-up on, the
    period that ordered it included (the evidence a serving endpoint's scale-down asks of its hold
    window, over the time since the order). So an endpoint the reactive step ordered on a missed
    target is never cancelled: one good period after a miss is a burst's gap, not evidence, and
    taking it back would let bursts order and cancel in turn while nothing ever starts."""
    since = state.last_scale_up_s.get(role, -math.inf)
    target = cfg.ttft_ms if role == "prefill" else cfg.tpot_ms
    seen = [x.ttft_ms if role == "prefill" else x.tpot_ms for x in history if x.t_s >= since]
    return all(v is None or v <= cfg.latency_down * target for v in seen)


def hold_window_s(cfg: PolicyConfig) -> float:
    """Seconds a lower demand must have lasted before a scale-down: the scale-down cooldown, and at
    least one start-up time plus a period. An endpoint drained now takes ``startup_s`` to come back,
    so a trough shorter than that saves nothing and costs the next peak's latency; the demand of
    the last start-up time is also the best guess of the next one's peak (bursts recur)."""
    return max(cfg.scale_down_cooldown_s, cfg.startup_s + cfg.period_s)


def _remove(role: Role, target: int, counts: Counts) -> tuple[int, int]:
    """(pending to cancel, ready to drain) to bring the active count down to ``target``: the
    starting endpoints a lower count removes first (:attr:`RoleCounts.cancellable`), then drains."""
    c = counts.of(role)
    excess = max(c.active - target, 0)
    cancel = min(excess, c.cancellable_pending)
    return cancel, excess - cancel


def decide(obs: Observation, profile: CapacityProfile, counts: Counts, cfg: PolicyConfig,
           state: PolicyState | None = None) -> Decision:
    """One decision. Pure: the same inputs give the same Decision (state included).

    ``counts``: endpoints per role by state now. ``state``: the previous Decision's ``state``
    (None at the first call). Raises nothing for valid inputs; a profile returning a capacity
    ≤ 0 raises ZeroDivisionError (the profile adapter must refuse such a profile)."""
    state = state or PolicyState()
    isl_now, osl_now = obs.mean_isl, obs.mean_osl
    hold_s = hold_window_s(cfg)
    keep_s = max(cfg.trend_window_s, cfg.peak_window_s, hold_s)
    history = tuple(s for s in state.history if s.t_s >= obs.now_s - keep_s)
    history += (Sample(obs.now_s, max(obs.request_rate_rps, 0.0), isl_now, osl_now, obs.ttft_ms, obs.tpot_ms),)
    horizon = cfg.startup_s + cfg.period_s
    trend = tuple(s for s in history if s.t_s >= obs.now_s - cfg.trend_window_s)
    rate = trend_forecast(trend, obs.now_s, horizon, min_span_s=cfg.trend_window_s / 2)
    # Size for the busiest recent period too, each with its own lengths: requests arrive in bursts
    # shorter than the trend window, and a queue built in one burst costs TTFT long after it.
    recent = [x for x in history if x.t_s >= obs.now_s - cfg.peak_window_s]
    in_hold = [x for x in history if x.t_s >= obs.now_s - hold_s]
    # Each sample stands for the period that ends at it; half a period of slack for timer jitter.
    seen_whole_window = obs.now_s - history[0].t_s + cfg.period_s >= hold_s - cfg.period_s / 2
    isl, osl = window_means(history, obs.now_s - ISL_WINDOW_S)
    state = replace(state, history=history)
    wants: dict[str, tuple[int, int, str]] = {}
    for role in ROLES:
        loads = [_demand(role, x.rate_rps, x.isl, x.osl, profile, cfg) for x in recent]
        corr = _corrected(role, obs, cfg, state, loads[-1], max(loads))
        state = replace(state, correction={**state.correction, role: corr})
        demand = max([_demand(role, rate, isl, osl, profile, cfg)] + loads)
        hold = max(_demand(role, x.rate_rps, x.isl, x.osl, profile, cfg) for x in in_hold) / corr \
            if _may_scale_down(role, in_hold, seen_whole_window, cfg, state, obs.now_s) else None
        w, need, lower_since, reason = _wanted(role, demand / corr, hold, _may_cancel(role, history, cfg, state), obs,
                                               counts, cfg, state)
        state = replace(state, lower_since_s=lower_since)
        wants[role] = (w, need, reason)
    (wp, np_, _), (wd, nd, _) = wants["prefill"], wants["decode"]
    tp, td = fit_budget(wp, wd, np_, nd, counts, cfg)
    targets = {"prefill": tp, "decode": td}
    attainable = tp >= np_ and td >= nd
    held = sum(counts.of(r).held * cfg.limits(r).gpus_per_endpoint for r in ROLES)
    out: dict[str, RoleDecision] = {}
    last_up, last_change = dict(state.last_scale_up_s), dict(state.last_change_s)
    for role in ROLES:  # removals first: a cancelled Pending endpoint frees its GPUs now
        cancel, drain = _remove(role, targets[role], counts)
        held -= cancel * cfg.limits(role).gpus_per_endpoint
        out[role] = RoleDecision(target=targets[role], cancel_pending=cancel, drain=drain, needed=wants[role][1],
                                 reason=wants[role][2])
        if cancel or drain:
            last_change[role] = obs.now_s
            state = replace(state, lower_since_s={k: v for k, v in state.lower_since_s.items() if k != role})
    # Additions into what is free now, the role further from its need first.
    order = sorted(ROLES, key=lambda r: counts.of(r).active / max(wants[r][1], 1))
    for role in order:
        g, c = cfg.limits(role).gpus_per_endpoint, counts.of(role)
        add = min(max(targets[role] - c.active, 0), max(cfg.gpu_budget - held, 0) // g)
        held += add * g
        if add:
            last_up[role] = last_change[role] = obs.now_s
        out[role] = replace(out[role], add=add)
    state = replace(state, last_scale_up_s=last_up, last_change_s=last_change)
    return Decision(prefill=out["prefill"], decode=out["decode"], slo_attainable=attainable, gpus_held_after=held,
                    forecast_rate_rps=rate, state=state)
