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


def _group_key(obj: dict[str, Any]) -> tuple[str, int] | None:
    lab = obj["metadata"].get("labels") or {}
    if obj["kind"] != "Pod" or labels.ENDPOINT not in lab or lab.get(labels.ROLE) not in ("prefill", "decode"):
        return None
    return lab[labels.ROLE], int(lab[labels.ENDPOINT])


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
        present, terminating, broken, outdated, restarting, all_ready = [], [], None, False, False, True
        by_rev: dict[str, list[str]] = defaultdict(list)
        size: dict[str, int] = {rev: len(pods)}
        for p in sorted(have[(role, ep)], key=lambda o: o["metadata"]["name"]):
            name = p["metadata"]["name"]
            lab = p["metadata"].get("labels") or {}
            prev = lab.get(labels.REVISION, "")
            current = prev == rev and name in pods
            if p["metadata"].get("deletionTimestamp"):
                terminating.append(name)
                restarting = restarting or current
                continue
            present.append(name)
            by_rev[prev].append(name)
            if not current:
                outdated = True
                size.setdefault(prev, int(lab.get(labels.GROUP_SIZE) or len(pods)))
            phase = (p.get("status") or {}).get("phase")
            if phase in ("Failed", "Succeeded"):
                broken = broken or f"pod {name} is {phase}"
            elif _restarts(p) > 0:
                broken = broken or f"pod {name} restarted"
            all_ready = all_ready and pod_ready(p)
        # Pods of two revisions (never created so by qdd): replaced as an outdated group, one at a
        # time; while all are up and Ready it is taken for serving, so that it is not rolled first.
        mixed = len(by_rev) > 1
        if not broken and by_rev and not mixed:
            (r, names), = by_rev.items()
            missing = sorted(set(pods) - set(names) - set(terminating)) if r == rev else []
            if missing:
                broken = f"pod {missing[0]} is gone"
            elif r != rev and len(names) + len(terminating) < size.get(r, len(pods)):
                broken = f"the group of the previous revision lost a pod (has {', '.join(names)})"
        if terminating and present and not broken:
            broken = f"pod {terminating[0]} is terminating"
        serving = bool(present) and not terminating and all_ready and not broken
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
