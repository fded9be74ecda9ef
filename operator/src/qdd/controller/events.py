"""The events a status change posts: one per transition, never one per pass. Pure."""

from __future__ import annotations

from typing import Any

from ..api.conditions import Reason
from ..canary import canary_events
from ..canary.accuracy import accuracy_events
from .placement import INSUFFICIENT

Event = tuple[str, str, str]  # (type, reason, message)


def _cond(status: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def transition_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """The events of going from status ``old`` to ``new``: an invalid spec (again when its message
    changes), Ready, a capacity shortage the scheduler stated and its end, a stall
    (spec.rollout.progressDeadlineSeconds: once per stall), the canary's, the accuracy gate's, the
    ComputeDomain Ready."""
    out: list[Event] = []
    was, now = _cond(old, "PlanValid"), _cond(new, "PlanValid")
    if now.get("status") == "False" and (was.get("status") != "False" or was.get("message") != now.get("message")):
        out.append(("Warning", "InvalidSpec", now["message"]))
    r_was, r_now = _cond(old, "Ready"), _cond(new, "Ready")
    if r_now.get("status") == "True" and r_was.get("status") != "True":
        out.append(("Normal", "Ready", r_now.get("message", "")))
    p_was, p_now = _cond(old, "Placed"), _cond(new, "Placed")
    if p_now.get("reason") == INSUFFICIENT and p_was.get("reason") != INSUFFICIENT:
        out.append(("Warning", INSUFFICIENT, p_now.get("message", "")))
    elif p_was.get("reason") == INSUFFICIENT and p_now.get("status") == "True":
        out.append(("Normal", "Placed", p_now.get("message", "")))
    s_was, s_now = _cond(old, "Stalled"), _cond(new, "Stalled")
    if s_now.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED and s_was.get("status") != "True":
        out.append(("Warning", Reason.PROGRESS_DEADLINE_EXCEEDED, s_now.get("message", "")))
    out += canary_events(old, new)
    out += accuracy_events(old, new)
    cd_was, cd_now = _cond(old, "ComputeDomainReady"), _cond(new, "ComputeDomainReady")
    if cd_now.get("status") == "True" and cd_was.get("status") == "False":
        out.append(("Normal", "ComputeDomainReady", cd_now.get("message", "")))
    return out
