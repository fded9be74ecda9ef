"""A replaced prefill pod under running decode groups (qdd.controller.peers, the reconcile's use
of it and the status it writes): recycled where the engine profile keeps the stale NIXL agent."""

from __future__ import annotations


import dataclasses

from qdd.catalog import ENGINE_PROFILES
from qdd.controller.groups import GroupState
from qdd.controller.peers import prefill_pod_uids, replaced, stale_decode_groups


def _pod(name: str, role: str, uid: str, created: str, deleting: bool = False) -> dict:
    meta = {"name": name, "uid": uid, "creationTimestamp": created, "labels": {"qdd.dev/role": role}}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"kind": "Pod", "metadata": meta}


def _group(endpoint: int, *pods: str, broken: str | None = None) -> GroupState:
    return GroupState("decode", endpoint, pods, pods, (), True, broken, False)


OBSERVED = [
    _pod("x-prefill-0", "prefill", "new-0", "2030-01-01T00:10:00Z"),
    _pod("x-prefill-1", "prefill", "u-1", "2030-01-01T00:00:00Z"),
    _pod("x-prefill-2", "prefill", "u-2-old", "2030-01-01T00:00:00Z", deleting=True),
    _pod("x-decode-0-0", "decode", "d0", "2030-01-01T00:01:00Z"),
    _pod("x-decode-0-1", "decode", "d1", "2030-01-01T00:01:00Z"),
    _pod("x-decode-1-0", "decode", "d2", "2030-01-01T00:20:00Z"),  # created after the replacement
    _pod("x-decode-1-1", "decode", "d3", "2030-01-01T00:20:00Z"),
    _pod("x-decode-3-0", "decode", "d4", "2030-01-01T00:10:00Z"),  # the replacement's second: recycled
    _pod("x-decode-3-1", "decode", "d5", "2030-01-01T00:10:00Z"),
]


def test_prefill_uids_leave_terminating_pods_out():
    assert prefill_pod_uids(OBSERVED) == {"x-prefill-0": "new-0", "x-prefill-1": "u-1"}


def test_a_new_uid_under_a_recorded_name_is_a_replacement_a_new_name_is_a_scale_up():
    recorded = {"x-prefill-0": "old-0", "x-prefill-1": "u-1"}
    assert replaced(recorded, {"x-prefill-0": "new-0", "x-prefill-1": "u-1", "x-prefill-5": "u-5"}) == ["x-prefill-0"]
    assert replaced({}, {"x-prefill-0": "new-0"}) == []  # nothing recorded yet (first pass)


def test_only_groups_older_than_the_replacement_are_stale():
    states = [_group(0, "x-decode-0-0", "x-decode-0-1"), _group(1, "x-decode-1-0", "x-decode-1-1"),
              _group(2, "x-decode-2-0", broken="pod x-decode-2-1 is gone"), _group(3, "x-decode-3-0", "x-decode-3-1")]
    stale = stale_decode_groups(states, OBSERVED, ["x-prefill-0"])
    assert [g.endpoint for g in stale] == [0, 3]
    assert stale_decode_groups(states, OBSERVED, []) == []


def test_every_known_engine_profile_keeps_the_stale_agent():
    # vLLM 0.33 drops it only when a new engine answers at the same host:port, or after engine_ttl.
    assert {v: p.nixl_recovers_peer_restart for v, p in ENGINE_PROFILES.items()} == {
        v: False for v in ENGINE_PROFILES}


def test_status_keeps_peer_restart_until_decode_is_ready_and_records_prefill_uids():
    from qdd.controller.status import compute_status

    from .controller_world import cr_of, observed, plan_of, world

    cr = cr_of()
    objs = world(cr)
    plan, obs = plan_of(cr), observed(cr, objs)
    decode_pods = [o for o in objs if o["kind"] == "Pod" and o["metadata"]["labels"].get("qdd.dev/role") == "decode"]
    without_decode = observed(cr, [o for o in objs if o not in decode_pods])
    st = compute_status(cr, plan, [], without_decode, "2030-01-01T00:05:00Z", True, None, "prefill pod x replaced: …")
    assert st["peerRestart"].startswith("prefill pod x replaced")
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PeerRestarted")
    assert len(st["prefillPods"]) == 4 and all(st["prefillPods"].values())
    # The next pass, decode groups still coming back: kept from the stored status.
    kept = compute_status({**cr, "status": st}, plan, [], without_decode, "2030-01-01T00:06:00Z", True, None)
    assert kept["peerRestart"] == st["peerRestart"]
    # Decode all Ready again: cleared, Degraded False.
    back = compute_status({**cr, "status": st}, plan, [], obs, "2030-01-01T00:07:00Z", True, None)
    assert "peerRestart" not in back
    assert next(c for c in back["conditions"] if c["type"] == "Degraded")["status"] == "False"


def test_a_deleted_prefill_pod_stays_recorded_until_its_replacement_appears():
    from qdd.controller.status import compute_status

    from .controller_world import cr_of, observed, plan_of, world

    cr = cr_of()
    objs = world(cr)
    plan = plan_of(cr)
    first = compute_status(cr, plan, [], observed(cr, objs), "2030-01-01T00:05:00Z", True, None)
    victim = sorted(first["prefillPods"])[1]
    # Between the deletion and the StatefulSet's new pod: the name is kept with its old UID.
    between = [o for o in objs if o["metadata"]["name"] != victim]
    mid = compute_status({**cr, "status": first}, plan, [], observed(cr, between), "2030-01-01T00:05:01Z", True, None)
    assert mid["prefillPods"][victim] == first["prefillPods"][victim]
    # The new pod: a new UID under the recorded name is a replacement.
    current = dict(prefill_pod_uids(between), **{victim: "a-new-uid"})
    assert replaced(mid["prefillPods"], current) == [victim]


class _RecordingKube:
    def __init__(self):
        self.deleted, self.events = [], []

    def delete(self, api_version, kind, namespace, name):
        self.deleted.append(name)

    def event(self, cr, type_, reason, message):
        self.events.append((type_, reason, message))


def _setup(recovers: bool = False, victims: int = 1):
    """The seed's world with ``victims`` prefill pods replaced (same name, new UID, created after decode)."""
    from qdd.controller.groups import group_states
    from qdd.controller.reconcile import Reconciler

    from .controller_world import cr_of, desired_of, plan_of, world

    cr = cr_of()
    objs = world(cr)
    first = {o["metadata"]["name"]: o["metadata"]["uid"] for o in objs
             if o["kind"] == "Pod" and o["metadata"]["labels"].get("qdd.dev/role") == "prefill"}
    names = sorted(first)[1:1 + victims]
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] in names:
            o["metadata"].update(uid=f"replacement-{o['metadata']['name']}", creationTimestamp="2999-01-01T00:00:00Z")
    cr["status"] = {"prefillPods": first}
    plan = plan_of(cr)
    plan = dataclasses.replace(plan, profile=dataclasses.replace(plan.profile, nixl_recovers_peer_restart=recovers))
    r = Reconciler.__new__(Reconciler)
    r.kube, r.requeue, r.peer_window_s = _RecordingKube(), None, 30.0
    return r, cr, plan, objs, group_states(desired_of(cr), objs), names


def test_a_replacement_opens_a_burst_and_recycles_nothing_yet():
    r, cr, plan, objs, states, (victim,) = _setup()
    msg, pending = r._recycle_peers_of_replaced_prefill(cr, plan, objs, states)
    assert msg is None and r.kube.deleted == [] and r.kube.events == []
    assert pending is not None and pending["pods"] == [victim] and pending["since"] == pending["last"]


def test_a_settled_burst_recycles_decode_once_for_all_its_replacements():
    """A drain of a tray with two prefill pods: both replaced (one, then the other) → one recycle."""
    r, cr, plan, objs, states, victims = _setup(victims=2)
    cr["status"]["peerRestartPending"] = {"pods": [victims[0]], "since": "2020-01-01T00:00:00Z",
                                          "last": "2020-01-01T00:00:00Z"}
    cr["status"]["prefillPods"][victims[0]] = f"replacement-{victims[0]}"  # recorded by the first one's pass
    msg, pending = r._recycle_peers_of_replaced_prefill(cr, plan, objs, states)
    assert msg is None and pending is not None and pending["pods"] == victims  # the second joins: window again
    cr["status"]["peerRestartPending"] = {**pending, "last": "2020-01-01T00:00:00Z"}
    cr["status"]["prefillPods"] = {**cr["status"]["prefillPods"], **{v: f"replacement-{v}" for v in victims}}
    msg, pending = r._recycle_peers_of_replaced_prefill(cr, plan, objs, states)
    assert pending is None and msg is not None and all(v in msg for v in victims) and "decode endpoint 0" in msg
    assert sorted(r.kube.deleted) == sorted(n for n in r.kube.deleted if "-decode-0-" in n) and len(r.kube.deleted) == 2
    assert [e[:2] for e in r.kube.events] == [("Warning", "PeerRestarted")]


def test_a_burst_waits_while_a_prefill_pod_is_missing_or_not_ready():
    from qdd.controller.peers import settled

    r, cr, plan, objs, states, (victim,) = _setup()
    pending = {"pods": [victim], "since": "2020-01-01T00:00:00Z", "last": "2020-01-01T00:00:00Z"}
    assert settled(pending, objs, plan.prefill.endpoints, "2020-01-01T00:00:40Z") == 0
    late = [dict(o, status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                               "lastTransitionTime": "2020-01-01T00:00:20Z"}]})
            if o["metadata"]["name"] == victim else o for o in objs]
    assert settled(pending, late, plan.prefill.endpoints, "2020-01-01T00:00:40Z") == 10  # from turning Ready
    assert settled(pending, objs, plan.prefill.endpoints, "2020-01-01T00:00:10Z") == 20
    missing = [o for o in objs if o["metadata"]["name"] != victim]
    assert settled(pending, missing, plan.prefill.endpoints, "2020-01-01T01:00:00Z") == float("inf")
    starting = [dict(o, status={"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]})
                if o["metadata"]["name"] == victim else o for o in objs]
    assert settled(pending, starting, plan.prefill.endpoints, "2020-01-01T01:00:00Z") == float("inf")


def test_ready_is_false_while_a_burst_is_pending():
    from qdd.controller.status import compute_status

    from .controller_world import cr_of, observed, plan_of, world

    cr = cr_of()
    objs = world(cr)
    pending = {"pods": ["x"], "since": "2030-01-01T00:05:00Z", "last": "2030-01-01T00:05:00Z"}
    st = compute_status(cr, plan_of(cr), [], observed(cr, objs), "2030-01-01T00:05:00Z", True, None,
                        peer_pending=pending)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PeerRestartPending")
    assert "decode is recycled once" in ready["message"] and st["peerRestartPending"] == pending
    assert "peerRestartPending" not in compute_status(cr, plan_of(cr), [], observed(cr, objs), "2030-01-01T00:05:00Z",
                                                      True, None)


def test_a_profile_with_the_fix_leaves_decode_untouched():
    r, cr, plan, objs, states, _ = _setup(recovers=True)
    assert r._recycle_peers_of_replaced_prefill(cr, plan, objs, states) == (None, None)
    assert r.kube.deleted == [] and r.kube.events == []
