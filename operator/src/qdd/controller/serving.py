"""status.serving and the serving conditions of one pass, from the observer's cache
(qdd.controller.observer, judged by qdd.observe); and the events of their transitions.

Kept out of qdd.controller.status (which computes everything else): the serving part is added to
the status that function returns. A spec that does not plan keeps the serving part it had (as
the rest of the status keeps what described the children); spec.observe.enabled false removes it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..api import conditions as C
from ..observe.status import serving_status
from ..plan import Plan
from . import metrics
from .observer import Observer


def _time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_serving(status: dict[str, Any], cr: dict[str, Any], plan: Plan | None, observed: list[dict[str, Any]],
                observer: Observer, now: str) -> dict[str, Any]:
    """``status`` (as qdd.controller.status.compute_status made it) with status.serving and the
    serving conditions; changed in place and returned."""
    old = cr.get("status") or {}
    meta = cr["metadata"]
    ns, name = meta.get("namespace") or "default", meta["name"]
    if plan is None:
        kept = [c for c in old.get("conditions") or [] if c.get("type") in C.SERVING_TYPES]
        status["conditions"] = list(status["conditions"]) + kept
        if old.get("serving") is not None:
            status["serving"] = old["serving"]
        return status
    spec = plan.spec.observe
    if not spec.enabled:
        observer.forget(ns, name)
        return status
    pods = [o for o in observed if o.get("kind") == "Pod"]
    observer.track(ns, name, spec, pods, plan.spec.ports.http, meta.get("generation"),
                   plan.spec.kv_transfer.lease_seconds)
    got = observer.judgement(ns, name)
    assert got is not None  # tracked just now
    j, newest = got
    before = {c["type"]: c for c in old.get("conditions") or []}
    for c in j.conditions:
        prev = before.get(c["type"])
        c["lastTransitionTime"] = prev["lastTransitionTime"] if prev and prev.get("status") == c["status"] and \
            prev.get("lastTransitionTime") else now
        metrics.SERVING_CONDITION.labels(ns, name, c["type"]).set(1 if c["status"] == "True" else 0)
    status["conditions"] = list(status["conditions"]) + j.conditions
    status["serving"] = serving_status(j, observer.source(ns, name), spec.window_seconds,
                                       _time(newest) if newest is not None else None)
    return status


def serving_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of each serving condition that was raised (Warning, its reason) or
    cleared (Normal, its healthy reason) between the stored status ``old`` and ``new``: events on
    transitions only, never on a condition that stays as it was."""
    was = {c.get("type"): c for c in old.get("conditions") or []}
    out = []
    refused = False
    for c in new.get("conditions") or []:
        if c.get("type") not in C.SERVING_TYPES:
            continue
        if c.get("reason") == C.Reason.PROMETHEUS_NOT_ALLOWED:
            # One event for the five conditions that say it, when it starts (or its message changes).
            prev = was.get(c["type"]) or {}
            if not refused and (prev.get("reason") != c["reason"] or prev.get("message") != c["message"]):
                out.append(("Warning", c["reason"], c["message"]))
            refused = True
            continue
        before = (was.get(c["type"]) or {}).get("status")
        if c["status"] == "True" and before != "True":
            out.append(("Warning", c["reason"], c["message"]))
        elif c["status"] == "False" and before == "True":
            out.append(("Normal", c["reason"], f"{c['type']} cleared: {c['message']}"))
    return out
