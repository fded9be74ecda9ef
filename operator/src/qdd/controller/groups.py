"""Multi-pod endpoints (a leader and headless workers holding one DP/EP group) live and die
together: a group with a missing, failed, restarted, terminating or out-of-date pod is deleted
whole and created again. Pure.

A pod on a NotReady or unreachable node (qdd.controller.nodeloss) makes its group not ready, not
broken: the group is recreated once Kubernetes evicts the pod, when its toleration of the node's
NoExecute taint runs out (spec.cluster.nodeLossTolerationSeconds). Deleting the group earlier would
not bring it back sooner — the evicted pod keeps its name until the node is fenced or gone — and
would restart a group whose node returns within the toleration with its engines still running."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .. import labels
from .nodeloss import LostPod, lost_pod


@dataclass(frozen=True)
class GroupState:
    role: str
    endpoint: int
    desired: tuple[str, ...]
    """Pod names the group must have."""
    present: tuple[str, ...]
    """Pods that exist and are not terminating."""
    terminating: tuple[str, ...]
    ready: bool
    """Every pod is there and Ready on the current revision, and the group is not broken."""
    broken: str | None
    """Why the group must be recreated now (a pod missing, failed or restarted), else None."""
    outdated: bool
    """Pods run an older revision (spec change): recreate when the rollout allows."""
    serving: bool = False
    """Every pod is there and Ready, whatever its revision (``ready`` also wants the current one)."""
    restarting: bool = False
    """Pods of the current revision are terminating: a failure-driven restart, not a planned roll
    (a roll deletes pods of an older revision)."""
    lost: tuple[LostPod, ...] = ()
    """Pods of the group on a NotReady or unreachable node (qdd.controller.nodeloss), present or
    terminating."""


def pod_ready(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def _group_key(obj: dict[str, Any]) -> tuple[str, int] | None:
    lab = obj["metadata"].get("labels") or {}
    endpoint = labels.index(lab.get(labels.ENDPOINT))  # None: not a number qdd wrote
    if obj["kind"] != "Pod" or endpoint is None or lab.get(labels.ROLE) not in ("prefill", "decode"):
        return None
    return lab[labels.ROLE], endpoint


@dataclass
class _Scan:
    """What the observed pods of one group show, pod by pod."""

    present: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)
    by_rev: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    size: dict[str, int] = field(default_factory=dict)
    broken: str | None = None
    outdated: bool = False
    restarting: bool = False
    all_ready: bool = True
    lost: list[LostPod] = field(default_factory=list)


def _scan(want: dict[str, str], rev: str, observed: list[dict[str, Any]]) -> _Scan:
    """Sort the observed pods of a group (``want``: desired name → revision ``rev``) into present,
    terminating and per-revision, and note the first failure or restart."""
    s = _Scan(size={rev: len(want)})
    for p in sorted(observed, key=lambda o: o["metadata"]["name"]):
        name = p["metadata"]["name"]
        lab = p["metadata"].get("labels") or {}
        prev = lab.get(labels.REVISION, "")
        current = prev == rev and name in want
        lost = lost_pod(p)
        if lost is not None:
            s.lost.append(lost)
        if p["metadata"].get("deletionTimestamp"):
            s.terminating.append(name)
            s.restarting = s.restarting or current
            continue
        s.present.append(name)
        s.by_rev[prev].append(name)
        if not current:
            s.outdated = True
            s.size.setdefault(prev, labels.index(lab.get(labels.GROUP_SIZE)) or len(want))
        phase = (p.get("status") or {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            s.broken = s.broken or f"pod {name} is {phase}"
        elif _restarts(p) > 0:
            s.broken = s.broken or f"pod {name} restarted"
        s.all_ready = s.all_ready and pod_ready(p)
    return s


def _why_broken(s: _Scan, want: dict[str, str], rev: str) -> str | None:
    """A pod failed or restarted; a pod of the group is gone or going while others run."""
    broken = s.broken
    # Pods of two revisions (never created so by qdd): replaced as an outdated group, one at a
    # time; while all are up and Ready it is taken for serving, so that it is not rolled first.
    if not broken and len(s.by_rev) == 1:
        (r, names), = s.by_rev.items()
        missing = sorted(set(want) - set(names) - set(s.terminating)) if r == rev else []
        if missing:
            broken = f"pod {missing[0]} is gone"
        elif r != rev and len(names) + len(s.terminating) < s.size.get(r, len(want)):
            broken = f"the group of the previous revision lost a pod (has {', '.join(names)})"
    if s.terminating and s.present and not broken:
        stuck = next((p for p in s.lost if p.terminating), None)
        broken = stuck.text if stuck is not None else f"pod {s.terminating[0]} is terminating"
    return broken


def group_states(desired: list[dict[str, Any]], observed: list[dict[str, Any]]) -> list[GroupState]:
    """Compare the desired bare Pods of every multi-pod endpoint with the observed ones.

    Observed pods belong to a group by their role and endpoint labels, not by name: when the
    group's shape changes (DEP8 → DEP16 adds workers, DEP16 → DEP8 drops some), the pods of the
    old shape are the old revision of the same group and are rolled with it, never half-pruned
    or counted as a broken new group."""
    want: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for d in desired:
        k = _group_key(d)
        if k is not None:
            want[k][d["metadata"]["name"]] = d["metadata"]["labels"][labels.REVISION]
    have: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in observed:
        k = _group_key(o)
        if k is not None and k in want:
            have[k].append(o)
    out = []
    for (role, ep), pods in sorted(want.items()):
        rev = next(iter(pods.values()))
        s = _scan(pods, rev, have[(role, ep)])
        broken = _why_broken(s, pods, rev)
        serving = bool(s.present) and not s.terminating and s.all_ready and not broken
        out.append(GroupState(role, ep, tuple(sorted(pods)), tuple(s.present), tuple(s.terminating),
                              serving and not s.outdated, broken, s.outdated, serving, s.restarting,
                              tuple(s.lost)))
    return out


def groups_to_delete(states: list[GroupState]) -> list[GroupState]:
    """Broken groups go at once. Outdated groups roll one at a time per role, and only while every
    other group of that role is Ready (at most one endpoint of a role down for a spec change): an
    outdated group that is not serving anyway goes first, so that a serving one is taken down only
    while all the others serve."""
    out = [s for s in states if s.broken and s.present]
    for role in sorted({s.role for s in states}):
        mine = [s for s in states if s.role == role]
        if any(not s.ready and not s.outdated for s in mine) or any(s in out for s in mine):
            continue
        rolling = sorted((s for s in mine if s.outdated and s.present), key=lambda s: s.serving)
        if rolling:
            out.append(rolling[0])
    return out


def pods_to_create(states: list[GroupState]) -> set[str]:
    """Pods that may be created now: every pod of a group that has no pod left (a group is
    never topped up around a survivor: its DP ranks would not meet)."""
    return {name for s in states if not s.present and not s.terminating for name in s.desired}
