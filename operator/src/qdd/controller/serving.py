"""status.serving and the serving conditions of one pass, from the observer's cache
(qdd.controller.observer, judged by qdd.observe); and the events of their transitions.

Kept out of qdd.controller.status (which computes everything else): the serving part is added to
the status that function returns. A spec that does not plan keeps the serving part it had (as
the rest of the status keeps what described the children); spec.observe.enabled false removes it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from ..api import conditions as C
from ..observe.status import serving_status
from ..plan import Plan
from . import metrics
from .observer import Observer


REFRESH_PERIODS = 4
"""status.serving's moving values (rates, percentiles, gauges) are written again at most once per
this many read periods (60 s at the default 15 s) while nothing else about it changes; a change of
source, window, pods or engines read, errors, or a value that appears (a rate once two reads
exist) is written at once, and the serving conditions are judged from every read (a change of
their status or reason is written at once; their messages, which count what the window saw, are
refreshed with the values). Written on every pass, they were a status patch per deployment per pass,
steady state included (make bench-scale: 30 patches in 30 s for 30 idle deployments)."""
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(_FORMAT)


def _shape(serving: dict[str, Any]) -> tuple[Any, ...]:
    """What of status.serving is written at once when it changes (a value that appears or goes included)."""
    return (serving.get("source"), serving.get("windowSeconds"), serving.get("errors"), *(
        ((serving.get(r) or {}).get("pods"), (serving.get(r) or {}).get("engines"), sorted(serving.get(r) or {}))
        for r in ("prefill", "decode")))


def _seconds_between(old: str | None, new: str | None) -> float | None:
    try:
        return (dt.datetime.strptime(str(new), _FORMAT) - dt.datetime.strptime(str(old), _FORMAT)).total_seconds()
    except ValueError:
        return None


def kept_serving(old: dict[str, Any] | None, new: dict[str, Any], period_s: int) -> dict[str, Any]:
    """The status.serving to write: ``old`` (the stored one, so no write) when ``new`` differs from it
    only by its newest read's time, or only by moving values within :data:`REFRESH_PERIODS` periods
    of ``old``'s; else ``new``."""
    if not old or _shape(old) != _shape(new):
        return new
    if {k: v for k, v in old.items() if k != "observedTime"} == {k: v for k, v in new.items() if k != "observedTime"}:
        return old
    age = _seconds_between(old.get("observedTime"), new.get("observedTime"))
    return old if age is not None and 0 <= age < REFRESH_PERIODS * period_s else new


def forget_metrics(namespace: str, name: str) -> None:
    """Remove the deployment's ``qdd_serving_condition`` series (it is gone, or spec.observe.enabled is
    false): a series left behind would say 0 or 1 of a condition no one judges any more."""
    for ctype in C.SERVING_TYPES:
        with contextlib.suppress(KeyError):  # never set for this deployment
            metrics.SERVING_CONDITION.remove(namespace, name, ctype)


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
        forget_metrics(ns, name)
        return status
    pods = [o for o in observed if o.get("kind") == "Pod"]
    observer.track(ns, name, spec, pods, plan.spec.ports.http, meta.get("generation"),
                   plan.spec.kv_transfer.lease_seconds)
    got = observer.judgement(ns, name)
    assert got is not None  # tracked just now
    j, newest = got
    status["serving"] = kept_serving(old.get("serving"), serving_status(
        j, observer.source(ns, name), spec.window_seconds, _time(newest) if newest is not None else None),
        spec.period_seconds)
    unrefreshed = old.get("serving") is not None and status["serving"] is old.get("serving")
    before: dict[str, dict[str, Any]] = {c["type"]: c for c in old.get("conditions") or []}
    for c in j.conditions:
        prev = before.get(c["type"]) or {}
        same = (prev.get("status"), prev.get("reason")) == (c["status"], c["reason"])
        c["lastTransitionTime"] = prev["lastTransitionTime"] if same and prev.get("lastTransitionTime") else now
        if same and unrefreshed and prev.get("message") is not None:
            # The message counts what the window saw ("no failed KV transfer in the last 300 s (812
            # done)"): refreshed with status.serving's values, not on every pass. A change of status
            # or reason is written at once.
            c["message"] = prev["message"]
        metrics.SERVING_CONDITION.labels(ns, name, c["type"]).set(1 if c["status"] == "True" else 0)
    status["conditions"] = list(status["conditions"]) + j.conditions
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
