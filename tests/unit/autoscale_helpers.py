"""Shared inputs of the autoscaling policy tests: a tabulated profile, a config builder and a tiny
closed loop in which actions take effect at once (Pending → Ready on the next decision, a drained
endpoint gone on the next decision) or after a given number of decisions."""

from __future__ import annotations

from dataclasses import replace

from qdd.autoscale import Counts, Decision, Observation, PolicyConfig, PolicyState, RoleCounts, RoleLimits, decide
from qdd.autoscale.profile import TableProfile

PROFILE = TableProfile(
    ttft_ms=2000.0, tpot_ms=50.0,
    isl_points=(500.0, 1000.0, 3000.0, 8000.0),
    # An illustrative DEP2 prefill endpoint: ~40K input tokens/s at ISL 3000 under a 2 s TTFT,
    # less at long inputs (attention grows with the square of the length).
    prefill_tokens_per_s_at=(46000.0, 45000.0, 40000.0, 30000.0),
    # An illustrative DEP8 decode endpoint: 200 requests at 50 ms TPOT, fewer at long contexts.
    decode_concurrency_at=(240.0, 220.0, 200.0, 150.0),
)
"""Numbers of the shape of AIConfigurator's GB200 estimates for Qwen3.5-397B (docs/autoscaling.md
shows the real ones the offline loop uses); the policy tests need only their shape."""


def config(**kw) -> PolicyConfig:
    base = dict(ttft_ms=2000.0, tpot_ms=50.0, prefill=RoleLimits(1, 16, 2), decode=RoleLimits(1, 8, 8),
                gpu_budget=64, startup_s=0.0, period_s=15.0, scale_up_cooldown_s=30.0, scale_down_cooldown_s=120.0)
    base.update(kw)
    return PolicyConfig(**base)  # type: ignore[arg-type]


def counts(p: int = 1, d: int = 1, pp: int = 0, dp: int = 0, pd: int = 0, dd: int = 0) -> Counts:
    """Ready prefill/decode, Pending (pp, dp), draining (pd, dd)."""
    return Counts(RoleCounts(p, pp, pd), RoleCounts(d, dp, dd))


def gpus(c: Counts, cfg: PolicyConfig) -> int:
    return c.prefill.held * cfg.prefill.gpus_per_endpoint + c.decode.held * cfg.decode.gpus_per_endpoint


def apply(c: Counts, d: Decision) -> Counts:
    """What the controller does with a decision, one step later: Pending became Ready, drained
    endpoints are gone, this decision's actions take effect (cancel at once, drains start, adds Pending)."""
    def role(rc: RoleCounts, rd) -> RoleCounts:
        ready = rc.ready + rc.pending - rd.cancel_pending
        return RoleCounts(ready=ready - rd.drain, pending=rd.add, draining=rd.drain)
    return Counts(role(c.prefill, d.prefill), role(c.decode, d.decode))


def run(rates, cfg: PolicyConfig, start: Counts, isl: float = 3000.0, osl: float = 150.0,
        state: PolicyState | None = None) -> list[tuple[Counts, Decision]]:
    """Decisions every period for the given rates; returns (counts seen, decision) per step."""
    out, c = [], start
    for i, r in enumerate(rates):
        rate, i_isl, i_osl = (r if isinstance(r, tuple) else (r, isl, osl))
        dec = decide(Observation(i * cfg.period_s, rate, i_isl, i_osl), PROFILE, c, cfg, state)
        out.append((c, dec))
        state, c = dec.state, apply(c, dec)
    return out


def settle(c: Counts) -> Counts:
    """Counts once everything Pending is Ready and everything draining is gone."""
    return Counts(RoleCounts(c.prefill.active), RoleCounts(c.decode.active))


__all__ = ["PROFILE", "apply", "config", "counts", "gpus", "replace", "run", "settle"]
