"""Multi-pod endpoints (a leader and headless workers holding one DP/EP group) live and die
together: a group with a missing, failed, restarted, terminating or out-of-date pod is deleted
whole and created again. Pure."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .. import labels


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


def pod_ready(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def group_states(desired: list[dict[str, Any]], observed: list[dict[str, Any]]) -> list[GroupState]:
    """Compare the desired bare Pods of every multi-pod endpoint with the observed ones."""
    want: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for d in desired:
        if d["kind"] == "Pod":
            lab = d["metadata"]["labels"]
            want[(lab[labels.ROLE], int(lab[labels.ENDPOINT]))][d["metadata"]["name"]] = lab[labels.REVISION]
    have: dict[str, dict[str, Any]] = {o["metadata"]["name"]: o for o in observed if o["kind"] == "Pod"}
    out = []
    for (role, ep), pods in sorted(want.items()):
        present, terminating, broken, outdated, ready, restarting = [], [], None, False, True, False
        for name, rev in sorted(pods.items()):
            p = have.get(name)
            if p is None:
                ready = False
                continue
            if p["metadata"].get("deletionTimestamp"):
                terminating.append(name)
                restarting = restarting or p["metadata"].get("labels", {}).get(labels.REVISION) == rev
                ready = False
                continue
            present.append(name)
            phase = (p.get("status") or {}).get("phase")
            if phase in ("Failed", "Succeeded"):
                broken = broken or f"pod {name} is {phase}"
            elif _restarts(p) > 0:
                broken = broken or f"pod {name} restarted"
            if p["metadata"].get("labels", {}).get(labels.REVISION) != rev:
                outdated = True
            ready = ready and pod_ready(p)
        if present and len(present) + len(terminating) < len(pods) and not broken:
            missing = sorted(set(pods) - set(present) - set(terminating))
            broken = f"pod {missing[0]} is gone"
        if terminating and present and not broken:
            broken = f"pod {terminating[0]} is terminating"
        serving = ready and len(present) == len(pods) and not broken
        out.append(GroupState(role, ep, tuple(sorted(pods)), tuple(present), tuple(terminating),
                              serving and not outdated, broken, outdated, serving, restarting))
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
