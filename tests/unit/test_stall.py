"""Stalled after spec.rollout.progressDeadlineSeconds without progress (qdd.controller.stall): only
with a cause the scheduler, the kubelet or the preflight stated (or past the startup budget), with
the age; one Warning event per stall; and how Argo CD's health script reads it."""

from __future__ import annotations

import copy

from qdd.controller.events import transition_events
from qdd.controller.stall import age_text, progress, seconds_to_check, stalled

from .controller_world import T0, cr_of, with_spec, world
from .test_argocd_health import health
from .test_controller_status import cond, status_of

SELECTOR = ("0/36 nodes are available: 36 node(s) didn't match Pod's node affinity/selector. preemption: 0/36 nodes "
            "are available: 36 Preemption is not helpful for scheduling.")


def _at(seconds: int) -> str:
    return f"2030-01-01T{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}Z"


def _pending(objs: list[dict], role: str, why: str | None = SELECTOR, waiting: str | None = None) -> list[dict]:
    """``role``'s pods not bound, marked Unschedulable with ``why`` (or bound, their container waiting in
    ``waiting``)."""
    out = []
    for o in objs:
        if o["kind"] == "Pod" and (o["metadata"].get("labels") or {}).get("qdd.dev/role") == role:
            o = copy.deepcopy(o)
            if why:
                o["spec"].pop("nodeName", None)
                o["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}]}
            if waiting:
                o["status"] = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}],
                               "containerStatuses": [{"name": "engine", "ready": False, "restartCount": 4, "state": {
                                   "waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}}}]}
        out.append(o)
    return out


def _two_passes(cr: dict, obs: list[dict], later: int) -> tuple[dict, dict]:
    """The status at T0 (progress starts) and ``later`` seconds after with nothing changed."""
    first = status_of(cr, obs, now=T0)
    cr = copy.deepcopy(cr)
    cr["status"] = first
    return first, status_of(cr, obs, now=_at(later))


def test_a_deployment_the_scheduler_cannot_place_stalls_at_the_deadline_with_age_and_cause():
    cr = cr_of()
    obs = _pending(world(cr), "decode")
    first, before = _two_passes(cr, obs, 599)
    assert cond(first, "Stalled")["status"] == "False" and cond(before, "Stalled")["status"] == "False"
    assert before["progress"] == first["progress"] and first["progress"]["since"] == T0
    _, after = _two_passes(cr, obs, 700)
    c = cond(after, "Stalled")
    assert (c["status"], c["reason"]) == ("True", "ProgressDeadlineExceeded")
    assert c["message"].startswith("no progress for 11m40s (spec.rollout.progressDeadlineSeconds 600): 2 pods the "
                                   "scheduler cannot place: node selector or affinity (the scheduler: \"0/36 nodes are "
                                   "available: 36 node(s) didn't match Pod's node affinity/selector.")
    assert "decode 0/1" in c["message"]
    assert cond(after, "Ready")["status"] == "False"


def test_the_deadline_is_the_specs():
    cr = with_spec(cr_of(), lambda s: s.setdefault("rollout", {}).update(progressDeadlineSeconds=30))
    _, after = _two_passes(cr, _pending(world(cr), "decode"), 31)
    assert cond(after, "Stalled")["reason"] == "ProgressDeadlineExceeded"
    assert "(spec.rollout.progressDeadlineSeconds 30)" in cond(after, "Stalled")["message"]


def test_pods_loading_a_model_are_not_stalled_before_the_startup_budget():
    """Bound, not Ready, nothing said: a model may load for cluster.startupTimeoutSeconds (3600 s)."""
    cr = cr_of()
    obs = _pending(world(cr), "decode", why=None, waiting=None)
    for o in obs:
        if o["kind"] == "Pod" and o["metadata"]["labels"].get("qdd.dev/role") == "decode":
            o["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    _, at_deadline = _two_passes(cr, obs, 1800)
    assert cond(at_deadline, "Stalled")["status"] == "False"
    _, past = _two_passes(cr, obs, 3601)
    c = cond(past, "Stalled")
    assert c["status"] == "True" and "longer than spec.cluster.startupTimeoutSeconds (3600 s)" in c["message"]
    assert c["message"].startswith("no progress for 1h0m1s")


def test_a_container_in_back_off_is_the_cause():
    cr = cr_of()
    _, after = _two_passes(cr, _pending(world(cr), "decode", why=None, waiting="ImagePullBackOff"), 601)
    msg = cond(after, "Stalled")["message"]
    assert ": ImagePullBackOff (back-off 5m0s restarting failed container)" in msg and "a container cannot start" in msg


def test_a_ready_deployment_is_never_stalled_and_keeps_its_progress_record():
    cr = cr_of()
    first, later = _two_passes(cr, world(cr), 86400 - 1)
    assert cond(later, "Stalled")["status"] == "False" and cond(later, "Ready")["status"] == "True"
    assert later["progress"] == first["progress"]  # no status write for it


def test_progress_moves_only_when_its_key_changes():
    rec = progress(None, "k1", T0)
    assert rec == {"key": "k1", "since": T0}
    assert progress(rec, "k1", _at(50)) == rec
    assert progress(rec, "k2", _at(50)) == {"key": "k2", "since": _at(50)}
    assert stalled(rec, _at(599), 600, 3600, [], "preflight failed") is None
    s = stalled(rec, _at(600), 600, 3600, [], "bulk 3.1 GB/s < 20")
    assert s is not None and s.cause == "the KV-transfer preflight failed: bulk 3.1 GB/s < 20"
    assert seconds_to_check(rec, _at(100), 600, 3600) == 501
    assert seconds_to_check(rec, _at(700), 600, 3600) == 2901
    assert seconds_to_check(rec, _at(4000), 600, 3600) == 60
    assert age_text(3725) == "1h2m5s" and age_text(65) == "1m5s" and age_text(5) == "5s"


def test_one_warning_event_per_stall():
    cr = cr_of()
    obs = _pending(world(cr), "decode")
    first, after = _two_passes(cr, obs, 700)
    events = transition_events(first, after)
    assert [(t, r) for t, r, _ in events] == [("Warning", "ProgressDeadlineExceeded")]
    cr["status"] = after
    again = status_of(cr, obs, now=_at(900))
    assert [e for e in transition_events(after, again) if e[1] == "ProgressDeadlineExceeded"] == []


def _obj(cr: dict, status: dict) -> dict:
    o = copy.deepcopy(cr)
    o["status"] = status
    return o


def test_argo_cd_reads_a_stall_with_nothing_serving_as_degraded():
    cr = cr_of()
    _, after = _two_passes(cr, _pending(world(cr), "decode"), 700)
    h = health(_obj(cr, after))
    assert h["status"] == "Degraded" and h["message"].startswith("no progress for 11m40s")


def test_argo_cd_reads_a_stalled_rollout_whose_old_generation_serves_as_progressing():
    """Surge: the new generation's pods cannot be placed, the old one serves (Degraded False): Argo CD
    shows Progressing with the stall in the message, not a broken application."""
    cr = cr_of()
    _, after = _two_passes(cr, _pending(world(cr), "decode"), 700)
    after["rollout"] = {"generation": "g2", "slot": "b", "serving": "g1/a", "phase": "Surging", "previous": "g1"}
    h = health(_obj(cr, after))
    assert h["status"] == "Progressing"
    assert h["message"].startswith("generation g1 serves; the rollout to generation g2 is stalled: no progress for")
