"""From the endpoint counts wanted per role to the counts laid out, within the GPU budget, with
scale-down by draining. Pure.

The count wanted is the role's QwenDisaggRoleScale ``spec.replicas`` (whoever wrote it: qdd's planner
or an HPA/KEDA). Endpoints are numbered from 0 and removed from the top (a StatefulSet removes its
highest ordinals; decode groups are laid out the same way), so per role:

- an endpoint above the wanted count that is not Ready (starting, Pending) is dropped at once: it
  serves nothing;
- a Ready one is drained first: its serving pod is relabelled out of the router
  (qdd.labels.DRAINING) and it stays laid out until :mod:`.drain` says its requests and KV leases
  are done; then it is dropped (a decode group whole: all its pods go with the count);
- a draining endpoint that is wanted again (the count went back up) is put back into the router.

Additions come last, only into GPUs free now: the GPUs held are those of every engine pod that
exists (starting, draining and terminating ones included, of every generation) plus the endpoints
laid out whose pods are not created yet. The cap is the smaller of spec.autoscaling.gpuBudget and
the NVLink domain (a deployment that stays in one domain must fit it). So the budget holds in every
intermediate state, whichever writer asked for what.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .endpoints import ENGINE_ROLES, Endpoint


@dataclass(frozen=True)
class RoleInput:
    wanted: int
    """Endpoints wanted (already within the role's bounds)."""
    previous: int
    """Endpoints laid out before this pass."""
    gpus_per_endpoint: int
    endpoints: dict[int, Endpoint] = field(default_factory=dict)
    drained: frozenset[int] = frozenset()
    """Draining endpoints whose drain is done (:func:`qdd.controller.autoscaling.drain.drain_progress`)."""
    minimum: int = 0
    """The role's minEndpoints: GPUs for it are reserved before another role grows past its own."""


@dataclass(frozen=True)
class RoleActuation:
    effective: int
    """Endpoints to lay out now."""
    start_drain: tuple[str, ...] = ()
    """Serving pods to take out of the router now."""
    cancel_drain: tuple[str, ...] = ()
    """Serving pods to put back into the router (their endpoint is wanted again)."""
    dropped: tuple[int, ...] = ()
    """Endpoint indices no longer laid out from this pass on (drained, or not Ready)."""
    ready: int = 0
    pending: int = 0
    draining: int = 0
    note: str = ""
    """Why ``effective`` is not the count wanted, when it is not."""
    cancellable: int = 0
    """Of the ``pending``, those a lower count drops at once (:func:`starting_on_top`)."""


def starting_on_top(eps: dict[int, Endpoint], laid_out: int, draining: set[int] | frozenset[int]) -> int:
    """Endpoints laid out (indices below ``laid_out``) that are not Ready, counted from the top down
    to the first Ready or draining one: those a lower count removes at once (:func:`_shrink` drops a
    not-Ready endpoint above the count, and only while nothing it must keep lies above it). A
    not-Ready endpoint below a Ready one (one restarting) is not among them: a lower count drains
    the Ready one above it instead. An endpoint laid out whose pods do not exist yet is one of them.
    The policy cancels only these without a hold (qdd.autoscale.RoleCounts.cancellable), so that
    what it decides is what the count it writes does."""
    n = 0
    for i in range(laid_out - 1, -1, -1):
        e = eps.get(i)
        if e is not None and (e.ready or e.draining or i in draining):
            break
        n += 1
    return n


def committed_gpus(held_now: int, roles: dict[str, RoleInput], laid_out: dict[str, int]) -> int:
    """GPUs held now plus those of endpoints laid out (``laid_out`` per role) whose pods do not exist yet."""
    missing = sum(r.gpus_per_endpoint * sum(1 for i in range(laid_out[role]) if not r.endpoints.get(i)
                                             or not r.endpoints[i].pods)
                  for role, r in roles.items())
    return held_now + missing


def _shrink(r: RoleInput, may_drain: bool) -> tuple[int, list[str], list[str], list[int]]:
    """(count after removals, pods to drain, pods to put back, indices dropped)."""
    start, cancel, dropped, keep = [], [], [], 0
    for i, e in sorted(r.endpoints.items()):
        if i < r.wanted:
            if e.draining and e.leader:
                cancel.append(e.leader)
            continue
        if i >= r.previous:
            continue
        if e.draining and i not in r.drained:
            keep = i + 1
        elif e.ready and not e.draining:
            if may_drain and e.leader:
                start.append(e.leader)
            keep = i + 1
        else:
            dropped.append(i)
    if r.wanted >= r.previous:
        return r.previous, start, cancel, []
    count = max(r.wanted, keep)
    return count, start, cancel, [i for i in dropped if i >= count]


def actuate(roles: dict[str, RoleInput], held_now: int, cap: int, may_drain: bool) -> dict[str, RoleActuation]:
    """Per role, the counts to lay out and the drains to start or cancel. ``held_now``: GPUs of every
    engine pod that exists; ``cap``: the most GPUs (min of gpuBudget and the NVLink domain);
    ``may_drain``: False while a rollout moves generations (no endpoint is taken out of the router
    then: the Ready ones above the count wait)."""
    shrunk = {role: _shrink(r, may_drain) for role, r in roles.items()}
    counts = {role: s[0] for role, s in shrunk.items()}
    used = committed_gpus(held_now, roles, counts)
    notes: dict[str, str] = {}

    def unmet(role: str) -> int:
        r = roles[role]
        return max(min(r.minimum, r.wanted) - counts[role], 0) * r.gpus_per_endpoint

    # Each role up to its minimum first, then the role furthest from what it wants; a role never
    # takes the GPUs another still needs for its minimum (a deployment without decode serves nothing).
    order = sorted(roles, key=lambda x: counts[x] / max(roles[x].wanted, 1))
    for role, upto in [(x, "minimum") for x in order] + [(x, "wanted") for x in order]:
        r = roles[role]
        goal = min(r.minimum, r.wanted) if upto == "minimum" else r.wanted
        if goal <= counts[role]:
            continue
        reserved = sum(unmet(x) for x in roles if x != role)
        add = min(goal - counts[role], max(cap - used - reserved, 0) // r.gpus_per_endpoint)
        if upto == "wanted" and add < goal - counts[role]:
            notes[role] = (f"{goal - counts[role] - add} endpoint(s) wait for GPUs: {used + add * r.gpus_per_endpoint} "
                           f"of {cap} held (budget or NVLink domain), draining and terminating pods included")
        counts[role] += add
        used += add * r.gpus_per_endpoint
    out = {}
    for role in ENGINE_ROLES:
        if role not in roles:
            continue
        r, (_, start, cancel, dropped) = roles[role], shrunk[role]
        n = counts[role]
        draining = {i for i, e in r.endpoints.items() if i < n and (e.draining and e.leader not in cancel
                                                                     or e.leader in start)}
        ready = sum(1 for i, e in r.endpoints.items() if i < n and e.ready and i not in draining)
        note = notes.get(role, "")
        if not note and n > r.wanted:
            note = f"{n - r.wanted} endpoint(s) above the count wanted are draining"
        pending = max(n - ready - len(draining), 0)
        out[role] = RoleActuation(n, tuple(start), tuple(cancel), tuple(dropped), ready, pending, len(draining), note,
                                  min(starting_on_top(r.endpoints, n, draining), pending))
    return out
