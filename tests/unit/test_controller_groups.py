"""controller/groups.py: multi-pod endpoints (a DEP8 decode leader + headless worker) live and die
together. Broken groups are deleted whole and created again only once empty; a spec change rolls
the groups of a role one at a time, and only while the role's other groups serve."""

from __future__ import annotations

import copy
import itertools

import pytest

from qdd import labels
from qdd.controller.children import diff
from qdd.controller.groups import GroupState, group_states, groups_to_delete, pods_to_create

from .controller_world import (
    UID, cr_of, desired_of, find, gone, live, replace, running, terminating, with_spec, world)

NAME = "qwen35-397b-4xdep2-1xdep8-cc4096"
TWO = cr_of(mutate=lambda c: c["spec"]["decode"].update(endpoints=2))
"""4 × DEP2 prefill (a StatefulSet) + 2 × DEP8 decode (two groups of two bare pods)."""
NEW = with_spec(TWO, lambda s: s["engine"].update(image="qdd/vllm:0.33.0-cu13-arm64-rebuilt"))
"""The same with a new revision of every decode group."""


def leader(ep: int) -> str:
    return f"{NAME}-decode-{ep}-leader"


def worker(ep: int) -> str:
    return f"{NAME}-decode-{ep}-worker-1"


def group(ep: int) -> set[str]:
    return {leader(ep), worker(ep)}


def decide(cr: dict, obs: list[dict]) -> tuple[list[GroupState], list[tuple[str, int]], set[str]]:
    states = group_states(desired_of(cr), obs)
    return states, [(g.role, g.endpoint) for g in groups_to_delete(states)], pods_to_create(states)


def state(states: list[GroupState], ep: int, role: str = "decode") -> GroupState:
    return next(s for s in states if s.role == role and s.endpoint == ep)


# pod conditions, as functions changing an observed pod in place (False: the pod is gone)
def _status(st: dict):
    return lambda o: o.update(status=st)


def _old_revision(o: dict) -> None:
    o["metadata"]["labels"][labels.REVISION] = "0ld0ld0ld0"


FAULTS = {
    "missing": (gone, "pod {pod} is gone"),
    "Failed": (_status({**running(ready=False), "phase": "Failed"}), "pod {pod} is Failed"),
    "Succeeded": (_status({**running(ready=False), "phase": "Succeeded"}), "pod {pod} is Succeeded"),
    "restarted, Ready again": (_status(running(ready=True, restarts=1)), "pod {pod} restarted"),
    "restarted, not Ready": (_status(running(ready=False, restarts=3)), "pod {pod} restarted"),
    "terminating": (terminating, "pod {pod} is terminating"),
}
NOT_READY = {
    "Pending": _status({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}),
    "Running, not Ready": _status(running(ready=False)),
    "Unknown (node lost)": _status({**running(ready=False), "phase": "Unknown"}),
    "no status yet": lambda o: o.pop("status"),
}


# --- first reconcile and steady state ----------------------------------------------------------------

def test_first_reconcile_creates_every_group_whole():
    states, delete, create = decide(TWO, [])
    assert [(s.role, s.endpoint) for s in states] == [("decode", 0), ("decode", 1)]
    for s in states:
        assert s.present == s.terminating == () and not s.ready and s.broken is None and not s.outdated
        assert set(s.desired) == group(s.endpoint)
    assert delete == [] and create == group(0) | group(1)


def test_pods_of_other_controllers_are_not_group_members():
    """StatefulSet prefill pods, router pods and preflight Job pods carry our labels but belong to
    their own controllers: they form no group and do not make a group 'present'."""
    obs = [o for o in world(TWO) if not o["metadata"]["name"].startswith(f"{NAME}-decode-")]
    states, delete, create = decide(TWO, obs)
    assert [(s.role, s.endpoint, s.present) for s in states] == [("decode", 0, ()), ("decode", 1, ())]
    assert delete == [] and create == group(0) | group(1)


def test_steady_state_does_nothing():
    states, delete, create = decide(TWO, world(TWO))
    assert all(s.ready and s.broken is None and not s.outdated for s in states)
    assert all(set(s.present) == group(s.endpoint) for s in states)
    assert delete == [] and create == set()


def test_multi_pod_prefill_endpoints_are_groups_too():
    cr = cr_of(mutate=lambda c: c["spec"]["prefill"].update(
        endpoints=1, topology={"dataParallel": 8, "tensorParallel": 1, "expertParallel": True}))
    states, delete, create = decide(cr, [])
    assert [(s.role, s.endpoint) for s in states] == [("decode", 0), ("prefill", 0)]
    assert create == {leader(0), worker(0), f"{NAME}-prefill-0-leader", f"{NAME}-prefill-0-worker-1"}
    assert decide(cr, world(cr))[1:] == ([], set())


# --- one pod of a group in trouble -------------------------------------------------------------------

@pytest.mark.parametrize("which", ["leader", "worker"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_group_with_a_broken_pod_is_deleted_whole_and_never_topped_up(fault, which):
    change, why = FAULTS[fault]
    pod, survivor = (leader(0), worker(0)) if which == "leader" else (worker(0), leader(0))
    obs = replace(world(TWO), "Pod", pod, change)
    states, delete, create = decide(TWO, obs)
    s = state(states, 0)
    assert s.broken == why.format(pod=pod)
    assert not s.ready, "a group about to be deleted is not a ready endpoint"
    assert delete == [("decode", 0)]
    deleted = set(groups_to_delete(states)[0].present)
    assert survivor in deleted and (deleted == group(0) if fault not in ("missing", "terminating") else
                                    deleted == {survivor})
    assert create == set(), "a missing pod is never created next to a survivor"
    assert state(states, 1).ready and state(states, 1).broken is None  # the other endpoint is untouched


@pytest.mark.parametrize("which", ["leader", "worker"])
@pytest.mark.parametrize("cond", list(NOT_READY))
def test_a_pod_that_is_not_ready_yet_is_waited_for(cond, which):
    pod = leader(0) if which == "leader" else worker(0)
    states, delete, create = decide(TWO, replace(world(TWO), "Pod", pod, NOT_READY[cond]))
    s = state(states, 0)
    assert s.broken is None and not s.ready and not s.outdated
    assert delete == [] and create == set()


def test_a_group_is_created_again_only_once_no_pod_of_it_is_left():
    obs = world(TWO)
    # deleted whole: both terminating → nothing to delete, nothing to create
    obs = replace(replace(obs, "Pod", leader(0), terminating), "Pod", worker(0), terminating)
    states, delete, create = decide(TWO, obs)
    assert state(states, 0).broken is None and state(states, 0).terminating == tuple(sorted(group(0)))
    assert delete == [] and create == set()
    # one gone, the other still terminating → still wait
    obs = replace(obs, "Pod", worker(0), gone)
    assert decide(TWO, obs)[1:] == ([], set())
    # none left → the whole group at once
    obs = replace(obs, "Pod", leader(0), gone)
    assert decide(TWO, obs)[1:] == ([], group(0))


def test_both_pods_failed_are_both_deleted():
    fail = _status({**running(ready=False), "phase": "Failed"})
    obs = replace(replace(world(TWO), "Pod", leader(0), fail), "Pod", worker(0), fail)
    states, delete, create = decide(TWO, obs)
    assert delete == [("decode", 0)] and set(groups_to_delete(states)[0].present) == group(0)


# --- rolling a new revision --------------------------------------------------------------------------

def _created(cr: dict, names: set[str], status: dict) -> list[dict]:
    out = []
    for o in desired_of(cr):
        if o["kind"] == "Pod" and o["metadata"]["name"] in names:
            o = live(o)
            o["status"] = copy.deepcopy(status)
            out.append(o)
    return out


def _set(obs: list[dict], names: set[str], fn) -> list[dict]:
    for n in names:
        obs = replace(obs, "Pod", n, fn)
    return obs


def test_two_decode_endpoints_roll_one_at_a_time_and_only_while_the_other_is_ready():
    obs = world(TWO)
    states, delete, create = decide(NEW, obs)
    assert all(s.outdated and not s.ready and s.broken is None for s in states)
    # 1. both on the old revision and serving: roll endpoint 0 only
    assert (delete, create) == ([("decode", 0)], set())
    obs = _set(obs, group(0), terminating)
    # 2. endpoint 0 terminating: endpoint 1 stays
    assert decide(NEW, obs)[1:] == ([], set())
    obs = _set(obs, group(0), gone)
    # 3. endpoint 0 gone: created again on the new revision (and endpoint 1 still stays)
    assert decide(NEW, obs)[1:] == ([], group(0))
    obs += _created(NEW, group(0), {"phase": "Pending"})
    # 4. endpoint 0 starting: endpoint 1 must keep serving
    for st in ({"phase": "Pending"}, running(ready=False)):
        obs = _set(obs, group(0), _status(st))
        states, delete, create = decide(NEW, obs)
        assert (delete, create) == ([], set())
        assert not state(states, 0).outdated and not state(states, 0).ready
    # 5. endpoint 0 Ready on the new revision: now endpoint 1
    obs = _set(obs, group(0), _status(running()))
    states, delete, create = decide(NEW, obs)
    assert state(states, 0).ready and (delete, create) == ([("decode", 1)], set())
    obs = _set(obs, group(1), gone)
    assert decide(NEW, obs)[1:] == ([], group(1))
    obs += _created(NEW, group(1), running())
    states, delete, create = decide(NEW, obs)
    assert all(s.ready and not s.outdated for s in states) and (delete, create) == ([], set())


def test_a_rollout_takes_the_endpoint_that_is_not_serving_first():
    """Regression: endpoint 1 (old revision) still loading, endpoint 0 (old revision) serving. The
    rollout must not take endpoint 0 down while endpoint 1 is not Ready (no decode endpoint would
    serve); endpoint 1 serves nothing, so it goes first."""
    obs = _set(world(TWO), group(1), _status(running(ready=False)))
    states, delete, create = decide(NEW, obs)
    assert delete == [("decode", 1)] and create == set()


def test_a_rollout_of_groups_that_never_started_is_not_stuck():
    """Both groups on the old revision Pending (e.g. unschedulable, which the new spec fixes): one is
    rolled at a time, without waiting for a readiness they would never reach."""
    obs = _set(world(TWO), group(0) | group(1), _status({"phase": "Pending"}))
    assert decide(NEW, obs)[1:] == ([("decode", 0)], set())


def test_a_broken_group_goes_at_once_and_holds_the_rollout():
    fail = _status({**running(ready=False), "phase": "Failed"})
    obs = replace(world(TWO), "Pod", worker(1), fail)
    assert decide(NEW, obs)[1:] == ([("decode", 1)], set())  # broken, not endpoint 0's roll
    obs = _set(world(TWO), {worker(0)}, gone)
    assert decide(NEW, obs)[1:] == ([("decode", 0)], set())  # outdated and broken: deleted at once


def test_roles_roll_independently():
    cr = cr_of(mutate=lambda c: c["spec"]["prefill"].update(
        endpoints=1, topology={"dataParallel": 8, "tensorParallel": 1, "expertParallel": True}))
    new = with_spec(cr, lambda s: s["engine"].update(image="qdd/vllm:other"))
    assert decide(new, world(cr))[1] == [("decode", 0), ("prefill", 0)]


# --- every combination of pod conditions: the invariants hold -----------------------------------------

POD_STATES = {
    "ok": None,
    "missing": gone,
    "Failed": FAULTS["Failed"][0],
    "restarted": FAULTS["restarted, Ready again"][0],
    "terminating": terminating,
    "Pending": NOT_READY["Pending"],
    "not Ready": NOT_READY["Running, not Ready"],
    "old, Ready": _old_revision,
    "old, not Ready": lambda o: (_old_revision(o), o.update(status=running(ready=False))),
}


def _pod_variants() -> dict[tuple[str, str], dict | None]:
    base = {o["metadata"]["name"]: o for o in world(NEW) if o["kind"] == "Pod"}
    out = {}
    for name in sorted(group(0) | group(1)):
        for st, fn in POD_STATES.items():
            o = copy.deepcopy(base[name])
            out[(name, st)] = None if fn is not None and fn(o) is False else o
    return out


def test_invariants_over_every_combination_of_pod_conditions():
    variants = _pod_variants()
    desired = desired_of(NEW)
    pods = sorted(group(0) | group(1))
    serving_states, current_states = {"ok", "old, Ready"}, {"ok", "Pending", "not Ready", "restarted", "Failed"}
    for combo in itertools.product(POD_STATES, repeat=len(pods)):
        st = dict(zip(pods, combo, strict=True))
        obs = [p for n in pods if (p := variants[(n, st[n])]) is not None]
        states = group_states(desired, obs)
        delete = groups_to_delete(states)
        create = pods_to_create(states)
        where = f"{st}"
        observed_names = {p["metadata"]["name"] for p in obs}
        assert not create & observed_names, f"creates a pod that exists: {where}"
        deleted_eps = {g.endpoint for g in delete}
        for ep in (0, 1):
            mine = {n: st[n] for n in group(ep)}
            g = state(states, ep)
            if create & group(ep):
                assert create >= group(ep) and not group(ep) & observed_names, f"topped up: {where}"
                assert ep not in deleted_eps
            faulty = {"missing", "Failed", "restarted", "terminating"} & set(mine.values())
            if faulty and set(mine.values()) - {"missing", "terminating"}:
                assert ep in deleted_eps, f"half a group left running: {where}"
                assert set(next(d for d in delete if d.endpoint == ep).present) == {
                    n for n, s in mine.items() if s not in ("missing", "terminating")}
            if g.ready:
                assert all(s == "ok" for s in mine.values()), f"ready but {mine}"
            else:
                assert not all(s == "ok" for s in mine.values()), f"not ready but {mine}"
        rolling = [g for g in delete if not g.broken]
        assert len(rolling) <= 1, f"two rolled at once: {where}"
        if rolling:
            g = rolling[0]
            assert len(delete) == 1, f"a roll next to a broken group: {where}"
            other = 1 - g.endpoint
            other_serving = all(st[n] in serving_states for n in group(other))
            me_serving = all(st[n] in serving_states for n in group(g.endpoint))
            other_current_starting = all(st[n] in current_states for n in group(other)) and not other_serving
            assert not other_current_starting, f"rolled while the other (new revision) is starting: {where}"
            assert other_serving or not me_serving, f"took the last serving endpoint down: {where}"
        # progress: nothing broken, both groups whole; someone on the old revision → a roll happens
        if all(s in ("ok", "old, Ready", "old, not Ready") for s in combo) and any(s.startswith("old") for s in combo):
            assert len(delete) == 1, f"rollout stuck: {where}"


def test_groups_are_keyed_by_the_endpoint_label_of_the_desired_pods():
    desired = desired_of(TWO)
    assert find(desired, "Pod", leader(1))["metadata"]["labels"][labels.ENDPOINT] == "1"
    s = state(group_states(desired, world(TWO)), 1)
    assert (s.role, s.endpoint, s.desired, s.serving) == ("decode", 1, tuple(sorted(group(1))), True)


# --- known gap: a change of the group's shape (pods per endpoint) -------------------------------------

DEP16 = {"dataParallel": 16, "tensorParallel": 1, "expertParallel": True}


def test_growing_the_group_shape_rolls_one_endpoint_at_a_time():
    """DEP8 → DEP16 (2 → 4 pods per endpoint): worker-2/3 never existed; the old pods are the old
    revision of the same group (qdd.dev/group-size 2), so one endpoint rolls at a time."""
    new = with_spec(TWO, lambda s: s["decode"].update(topology=DEP16))
    states, delete, _ = decide(new, world(TWO))
    assert all(s.outdated and s.broken is None for s in states)
    assert delete == [("decode", 0)]


def test_shrinking_the_group_shape_keeps_the_groups_whole_until_rolled():
    """DEP16 → DEP8: worker-2/3 are members of the old shape, not strays: children.diff leaves them
    to the group rule, which rolls each group whole, one endpoint at a time."""
    big = with_spec(TWO, lambda s: s["decode"].update(topology=DEP16))
    obs = world(big)
    pruned = {n for _, _, n in diff(desired_of(TWO), obs, UID).prune}
    assert not pruned & {f"{NAME}-decode-{ep}-worker-{k}" for ep in (0, 1) for k in (2, 3)}
