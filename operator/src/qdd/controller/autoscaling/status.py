"""``status.autoscaling``, the ``SLOAttainable`` condition and the events of their transitions, from
the autoscaler's last decision. Pure.

The decision (qdd.autoscale.decide) is made once per ``spec.autoscaling.periodSeconds``; every pass
in between writes the same status from the :class:`Snapshot` the operator keeps, so a status write
happens when something changed, not on every pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...api import conditions as C
from ...api.autoscaling import AutoscalingSpec
from ...api.conditions import Reason as R
from ...autoscale import Decision, Observation
from ...autoscale.types import ROLES, Role


@dataclass(frozen=True)
class RoleView:
    """One role at the decision: counts laid out (qdd.controller.autoscaling.actuate) and latencies."""

    effective: int = 0
    ready: int = 0
    pending: int = 0
    draining: int = 0
    observed_ms: float | None = None
    predicted_ms: float | None = None
    cancellable: int | None = None
    """Of the ``pending``, those a lower count drops at once (qdd.controller.autoscaling.actuate.starting_on_top)."""


@dataclass(frozen=True)
class Snapshot:
    mode: str
    time: str | None = None
    """RFC 3339 time of the decision (None: none made yet)."""
    decision: Decision | None = None
    observation: Observation | None = None
    roles: dict[str, RoleView] = field(default_factory=dict)
    profile: str = ""
    startup_seconds: float | None = None
    startup_source: str = ""
    gpus_held: int | None = None
    message: str = ""
    """Why no decision was made (no profile, no metrics yet)."""
    no_profile: bool = False
    policy_state: str | None = None


def _round(v: float | None, n: int = 3) -> float | None:
    return None if v is None else round(v, n)


def _role(a: AutoscalingSpec, s: Snapshot, role: Role) -> dict[str, Any]:
    v = s.roles.get(role, RoleView())
    d = s.decision.of(role) if s.decision is not None else None
    bounds = a.prefill if role == "prefill" else a.decode
    out: dict[str, Any] = {
        "driver": bounds.driver, "target": d.target if d else v.effective, "effective": v.effective, "ready": v.ready,
        "pending": v.pending, "draining": v.draining, "needed": d.needed if d else 0,
        "targetLatencyMs": float(a.targets.ttft_ms if role == "prefill" else a.targets.tpot_ms),
        "observedLatencyMs": _round(v.observed_ms, 1), "predictedLatencyMs": _round(v.predicted_ms, 1),
        "reason": d.reason if d else s.message,
    }
    return {k: x for k, x in out.items() if x is not None}


def autoscaling_status(a: AutoscalingSpec, s: Snapshot) -> dict[str, Any]:
    """status.autoscaling (camelCase, as qdd.api.autoscaling_status declares it)."""
    o = s.observation
    inputs = {"requestRate": _round(o.request_rate_rps) if o else None,
              "forecastRate": _round(s.decision.forecast_rate_rps) if s.decision else None,
              "meanIsl": _round(o.mean_isl, 1) if o else None, "meanOsl": _round(o.mean_osl, 1) if o else None,
              "profile": s.profile, "startupSeconds": _round(s.startup_seconds, 1), "startupSource": s.startup_source}
    out = {"mode": s.mode, "lastDecisionTime": s.time, "ttftMs": a.targets.ttft_ms, "tpotMs": a.targets.tpot_ms,
           "percentile": a.targets.percentile, "gpuBudget": a.gpu_budget, "gpusHeld": s.gpus_held,
           "sloAttainable": s.decision.slo_attainable if s.decision else None,
           "prefill": _role(a, s, "prefill"), "decode": _role(a, s, "decode"),
           "inputs": {k: v for k, v in inputs.items() if v is not None}, "message": s.message,
           "policyState": s.policy_state}
    return {k: v for k, v in out.items() if v is not None}


def _cond(ctype: str, ok: bool | None, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """As qdd.controller.status_conditions' builders: ``ok`` is the condition's status."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def slo_condition(a: AutoscalingSpec, s: Snapshot, generation: int | None) -> dict[str, Any]:
    """SLOAttainable from the last decision (Unknown without one)."""
    d = s.decision
    if d is None:
        if s.no_profile:
            return _cond(C.SLO_ATTAINABLE, None, R.NO_PERFORMANCE_PROFILE, s.message, generation)
        return _cond(C.SLO_ATTAINABLE, None, R.NO_DECISION_YET, s.message or "no decision yet", generation)
    needs = ", ".join(f"{r} {d.of(r).needed} (max {(a.prefill if r == 'prefill' else a.decode).max_endpoints}, "
                      f"target {d.of(r).target})" for r in ROLES)
    if d.slo_attainable:
        return _cond(C.SLO_ATTAINABLE, True, R.SLO_WITHIN_BUDGET,
                     f"endpoints needed at {d.forecast_rate_rps:.2f} req/s fit: {needs}; GPU budget {a.gpu_budget}",
                     generation)
    def cap(r: str) -> int:
        return (a.prefill if r == "prefill" else a.decode).max_endpoints

    over_max = [r for r in ROLES if d.of(r).needed > cap(r)]
    # The limit named is the one that binds: a role held below both its need and its maxEndpoints is
    # held by the budget (raising maxEndpoints would change nothing), whatever the need beyond the max.
    budget_binds = any(d.of(r).target < min(d.of(r).needed, cap(r)) for r in ROLES)
    if over_max and not budget_binds:
        return _cond(C.SLO_ATTAINABLE, False, R.MAX_ENDPOINTS_REACHED,
                     f"{' and '.join(over_max)} need(s) more endpoints than maxEndpoints at {d.forecast_rate_rps:.2f} "
                     f"req/s: {needs}; raise spec.autoscaling.<role>.maxEndpoints", generation)
    return _cond(C.SLO_ATTAINABLE, False, R.GPU_BUDGET_REACHED,
                 f"the endpoints needed at {d.forecast_rate_rps:.2f} req/s ({needs}) need more than gpuBudget "
                 f"{a.gpu_budget} GPUs; atBudget {a.at_budget}: "
                 + ("GPUs go to the role that misses by more" if a.at_budget == "Rebalance" else "counts held")
                 + "; raise spec.autoscaling.gpuBudget", generation)


def autoscaling_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of each transition between the stored status ``old`` and ``new``:
    SLOAttainable turning False (Warning) or True again (Normal), and each role's target changing
    (Normal ScalingUp/ScalingDown in mode On, ScalingAdvised in Advise). Never one per pass."""
    out: list[tuple[str, str, str]] = []
    was: dict[str, Any] = next((c for c in old.get("conditions") or [] if c.get("type") == C.SLO_ATTAINABLE), {})
    now: dict[str, Any] = next((c for c in new.get("conditions") or [] if c.get("type") == C.SLO_ATTAINABLE), {})
    if now.get("status") == "False" and (was.get("status") != "False" or was.get("reason") != now.get("reason")):
        out.append(("Warning", "SLONotAttainable", now.get("message", "")))
    elif now.get("status") == "True" and was.get("status") == "False":
        out.append(("Normal", "SLOAttainable", now.get("message", "")))
    a_old, a_new = old.get("autoscaling") or {}, new.get("autoscaling") or {}
    if a_new.get("lastDecisionTime") and a_new.get("lastDecisionTime") != a_old.get("lastDecisionTime"):
        for role in ROLES:
            before, after = (a_old.get(role) or {}).get("target"), (a_new.get(role) or {}).get("target")
            if before is None or after is None or before == after:
                continue
            reason = "ScalingAdvised" if a_new.get("mode") == "Advise" else ("ScalingUp" if after > before else "ScalingDown")
            out.append(("Normal", reason, f"{role} {before} → {after} endpoints: {(a_new.get(role) or {}).get('reason', '')}"))
    return out
