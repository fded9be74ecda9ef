"""Two ways a StatefulSet pod that shares a tray claim can stay Pending for good, and what undoes
them. Pure: observed children and a clock in, names out; qdd.controller.reconcile writes.

1. kube-scheduler v1.36.3 loops on a shared claim (kubernetes/kubernetes#140263, fixed by #140269
   in v1.37; not in v1.36.3). Two pods of one PodGroup cycle share the tray claim's pending
   allocation; their binding cycles run side by side. The first writes the allocation; the
   scheduler stores its own write in its assume cache, so the informer's copy of the same
   resourceVersion is skipped (pkg/scheduler/util/assumecache, ``add``: only newer versions) and
   the cache's API copy stays the unallocated one. The second pod's PreBind fails ("claim ... got
   allocated elsewhere in the meantime", dynamicresources.go bindClaim) and its Unreserve restores
   that stale copy. From then on each retry sees the claim unallocated, allocates it again, and
   PreBind refuses again, until the claim gets a newer resourceVersion. Seen in CI on the 8×DEP2
   example: prefill-5 Pending for more than 120 s beside prefill-4 on its tray. Undo: any write to
   the claim (an annotation) is a newer version, which the informer hands to the cache.
2. The admission policy ``qdd-tray-claims`` was not active when the StatefulSet controller created
   the pod (the chart installed it a moment before; a MutatingAdmissionPolicy takes effect once the
   API server's informer has it), or it is missing. The pod then keeps the template's claim, group
   0, and no :data:`~qdd.render.trayclaims.TRAY_CLAIM` label: every ordinal asks for tray 0's
   channel and at most a tray's worth of them can ever be placed. Undo: delete the unbound pod; the
   StatefulSet controller creates it again, through the policy.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..render.trayclaims import CLAIM, PODS_PER_TRAY, POD_INDEX, PREFIX, TRAY_CLAIM

RESYNC = "qdd.dev/scheduler-resync"
"""Annotation qdd writes on a tray claim to give kube-scheduler a newer version of it (case 1); its
value is the time of the write, ``%Y-%m-%dT%H:%M:%SZ``."""
ALLOCATED_ELSEWHERE = "got allocated elsewhere in the meantime"
"""kube-scheduler's PreBind error for case 1 (k8s.io/kubernetes v1.36.3
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, bindClaim)."""
RESYNC_EVERY_S = 30.0
"""At most one resync write per claim in this time: one write ends the loop; a second covers a write
the scheduler saw before its own failed bind. Bounded, so a message that lingers costs nothing."""
LOOP_FOR_S = 10.0
"""How long a claim must be seen looping before qdd writes it. Every shared claim's second pod fails
PreBind once as a rule (kubernetes#140053, open) and the scheduler retries it within its back-off
(1 s, doubling): placed by itself in 5–8 s on this machine, 24 of 24 runs; make bench-scale wrote 87
resyncs for 96 claims without this wait."""
POLICY_GRACE_S = 10.0
"""How old an unmutated pod must be before it is deleted: at most one delete per pod in this time,
should the policy be missing altogether (then the Warning event says so)."""


def _time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def _unbound(pod: dict[str, Any]) -> bool:
    return (pod["kind"] == "Pod" and not pod.get("spec", {}).get("nodeName")
            and not pod["metadata"].get("deletionTimestamp"))


def _scheduler_said(pod: dict[str, Any]) -> str:
    c: dict[str, Any] = next((c for c in pod.get("status", {}).get("conditions") or []
                              if c.get("type") == "PodScheduled"), {})
    return str(c.get("message") or "") if c.get("status") == "False" else ""


def looping_claims(observed: list[dict[str, Any]]) -> list[str]:
    """Names of the tray claims (case 1) that are allocated and that an unbound pod labelled with
    them waits for with the scheduler's "allocated elsewhere" message."""
    waiting = {p["metadata"].get("labels", {}).get(TRAY_CLAIM) for p in observed
               if _unbound(p) and ALLOCATED_ELSEWHERE in _scheduler_said(p)} - {None}
    return [c["metadata"]["name"] for c in observed
            if c["kind"] == "ResourceClaim" and c["metadata"]["name"] in waiting
            # unallocated: the scheduler allocates it on the pod's next try by itself
            and (c.get("status") or {}).get("allocation") and not c["metadata"].get("deletionTimestamp")]


def claims_to_resync(observed: list[dict[str, Any]], now: dt.datetime,
                     first_seen: dict[str, dt.datetime] | None = None) -> list[str]:
    """Of :func:`looping_claims`, those seen looping for :data:`LOOP_FOR_S` (``first_seen``: claim →
    when a pass first saw it so, kept by the caller; None: no wait) and not touched by qdd in
    :data:`RESYNC_EVERY_S`. ``now``: timezone-aware UTC."""
    out = []
    for name in looping_claims(observed):
        if first_seen is not None and (now - first_seen.get(name, now)).total_seconds() < LOOP_FOR_S:
            continue  # most often the one failed PreBind of a shared claim, retried and placed by itself
        c = next(o for o in observed if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == name)
        last = _time((c["metadata"].get("annotations") or {}).get(RESYNC))
        if last is None or (now - last).total_seconds() >= RESYNC_EVERY_S:
            out.append(name)
    return out


def expected_claim(pod: dict[str, Any]) -> str | None:
    """The tray claim the policy gives this pod (prefix ``-`` ordinal // pods per tray); None for a
    pod the policy does not match (no tray claim annotations or no pod-index label)."""
    meta = pod["metadata"]
    ann, lab = meta.get("annotations") or {}, meta.get("labels") or {}
    try:
        return f"{ann[PREFIX]}-{int(lab[POD_INDEX]) // int(ann[PODS_PER_TRAY])}"
    except (KeyError, ValueError, ZeroDivisionError):
        return None


def pods_missed_by_policy(observed: list[dict[str, Any]], now: dt.datetime) -> list[str]:
    """Names of the unbound pods (case 2) whose channel claim or :data:`TRAY_CLAIM` label is not
    the one the policy gives their ordinal, created at least :data:`POLICY_GRACE_S` ago."""
    out = []
    for p in observed:
        want = expected_claim(p) if _unbound(p) else None
        if want is None:
            continue
        claim = next((c.get("resourceClaimName") for c in p.get("spec", {}).get("resourceClaims") or []
                      if c.get("name") == CLAIM), None)
        if claim == want and (p["metadata"].get("labels") or {}).get(TRAY_CLAIM) == want:
            continue
        born = _time(p["metadata"].get("creationTimestamp"))
        if born is not None and (now - born).total_seconds() >= POLICY_GRACE_S:
            out.append(p["metadata"]["name"])
    return out
