"""When a deployment that does not serve its current generation has stopped progressing. Pure.

Progress is a change of :func:`progress_key`: the generation and its rollout phase, the endpoints
Ready per role, the preflight's verdict, the ComputeDomain and the router. ``status.progress``
keeps the key and the time it last changed. The deployment is *stalled* once it has not served its
current generation and the key has not changed for ``spec.rollout.progressDeadlineSeconds``, and
one of these facts names why (the first found):

* the scheduler marked pods of it Unschedulable and said why (qdd.controller.schedfacts: node
  selector or affinity, pod affinity, taint, DRA claim, GPUs, ...);
* a container waits in a back-off the kubelet reported (``state.waiting.reason`` CrashLoopBackOff,
  ImagePullBackOff, ErrImagePull, CreateContainerConfigError, InvalidImageName);
* the KV-transfer preflight failed.

Without such a fact, pods may be loading a model: not stalled before ``spec.cluster.
startupTimeoutSeconds`` (the startup probe's budget) has passed too. Issue 23 saw a rollout whose
new pods no node could hold read the same for days, with no Stalled, no age and no event.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .schedfacts import said

BACK_OFF = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "InvalidImageName")
"""Container waiting reasons that do not clear by waiting (kubelet, k8s.io/kubernetes pkg/kubelet)."""


def _parse(t: str) -> dt.datetime:
    return dt.datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)


def age_text(seconds: float) -> str:
    """``1h2m3s``, ``4m5s``, ``6s``."""
    s = int(seconds)
    h, m, s = s // 3600, s % 3600 // 60, s % 60
    return (f"{h}h{m}m{s}s" if h else f"{m}m{s}s" if m else f"{s}s")


def progress_key(generation: str, phase: str, ready: tuple[int, int], kv: str, cd_ok: bool, router_ok: bool) -> str:
    """What counts as progress, as one string: the generation and its rollout phase, ready endpoints per
    role, the preflight's status, ComputeDomain and router readiness. Pods being bound are left out on
    purpose: each binding would be one more status write, and a stall is declared only with a fact
    (below), so a pod that bound late is no false alarm."""
    return f"{generation}/{phase} ready {ready[0]},{ready[1]} kv {kv} cd {int(cd_ok)} router {int(router_ok)}"


def progress(record: dict[str, Any] | None, key: str, now: str) -> dict[str, str]:
    """The new ``status.progress``: ``since`` moves to ``now`` only when the key changed (so a
    converged deployment's status is not written again)."""
    if not record or record.get("key") != key or not record.get("since"):
        return {"key": key, "since": now}
    return {"key": key, "since": str(record["since"])}


def back_off(pods: list[dict[str, Any]]) -> str | None:
    """``pod/container: Reason (message)`` of the first container waiting in a back-off."""
    for p in pods:
        st = p.get("status") or {}
        for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            w = (cs.get("state") or {}).get("waiting") or {}
            if w.get("reason") in BACK_OFF:
                msg = " ".join(str(w.get("message") or "").split())[:200]
                return f"{p['metadata']['name']}/{cs.get('name')}: {w['reason']}" + (f" ({msg})" if msg else "")
    return None


@dataclass(frozen=True)
class Stall:
    """A stalled deployment: no progress for ``age_s`` seconds, and why."""

    age_s: float
    cause: str


def stalled(record: dict[str, str], now: str, deadline_s: int, startup_s: int, pods: list[dict[str, Any]],
            kv_failed: str | None) -> Stall | None:
    """The stall, or None. ``record``: :func:`progress`'s (for a deployment that does not serve its
    current generation); ``pods``: its current generation's pods; ``kv_failed``: the preflight's
    message when its verdict is a failure."""
    age = (_parse(now) - _parse(record["since"])).total_seconds()
    if age < deadline_s:
        return None
    told = said(pods)
    if told is not None:
        return Stall(age, f"{len(told.pods)} pod{'s' if len(told.pods) > 1 else ''} the scheduler cannot place: "
                     f"{told.text}")
    waiting = back_off(pods)
    if waiting is not None:
        return Stall(age, f"a container cannot start: {waiting}")
    if kv_failed is not None:
        return Stall(age, f"the KV-transfer preflight failed: {kv_failed}")
    if age >= startup_s:
        return Stall(age, f"engine pods not Ready for longer than spec.cluster.startupTimeoutSeconds ({startup_s} s) "
                     "and no cause reported by the scheduler or the kubelet")
    return None


def seconds_to_check(record: dict[str, str], now: str, deadline_s: int, startup_s: int) -> float:
    """When a pass should look again for a stall that the watches may not announce (no event comes
    when nothing changes): at the deadline, then at the startup budget, then every minute."""
    age = (_parse(now) - _parse(record["since"])).total_seconds()
    for bound in (deadline_s, startup_s):
        if age < bound:
            return bound - age + 1
    return 60.0
