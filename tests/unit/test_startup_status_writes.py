"""Issue 23: a pass whose only change is a start-up log read does not write the status right after
another write; the read's own pass, STARTUP_PASS_DELAY_S later, or the next write carries it. And a
pass that computes what the operator last wrote writes nothing, though its cache still holds the
status of before."""

from __future__ import annotations

from qdd.controller.reconcile import STARTUP_PASS_DELAY_S, Reconciler
from qdd.controller.startup_logs import RETRY_S, StartupLogs

from .test_controller_status import NAME, SEED, FakeKube, router_canary
from .test_startup_logs_reader import LOG


def test_a_startup_only_change_waits_for_its_own_pass_then_is_written():
    clock = [1000.0]
    failing = {"on": True}

    def read(ns, pod, container, limit, timeout):
        if failing["on"]:
            raise TimeoutError("read timed out")
        return LOG
    kube = FakeKube(SEED)
    startup = StartupLogs(read=read, workers=0, clock=lambda: clock[0])
    requeued: list[float] = []
    r = Reconciler(kube, gang=True, canary=router_canary(), startup=startup)  # type: ignore[arg-type]
    r.requeue = lambda key, after: requeued.append(after)
    r.clock = lambda: clock[0]
    for _ in range(4):
        r.once("default", NAME)
        kube.settle()
    r.once("default", NAME)
    st = kube.cr["status"]["startup"]
    assert st["read"] == 0 and st.get("errors")  # every engine's first read failed: listed
    # The reads are due again, and the status was written a moment ago (a pass for another reason).
    clock[0] += RETRY_S
    failing["on"] = False
    r._written[("default", NAME)] = (*r._written[("default", NAME)][:2], clock[0] - 1)
    kube.take()
    requeued.clear()
    r.once("default", NAME)
    assert [w for w in kube.take() if w[0] == "patch-status"] == []  # held back
    assert STARTUP_PASS_DELAY_S in requeued
    assert kube.cr["status"]["startup"]["read"] == 0
    clock[0] += STARTUP_PASS_DELAY_S
    r.once("default", NAME)  # the pass the reads asked for
    assert [w for w in kube.take() if w[0] == "patch-status"] == [("patch-status", "QwenDisaggDeployment", NAME)]
    st = kube.cr["status"]["startup"]
    assert st["read"] == len(st["pods"]) > 0 and not st.get("errors")


def test_a_pass_on_a_stale_cache_does_not_write_again_what_was_just_written():
    kube = FakeKube(SEED)
    r = Reconciler(kube, gang=True, canary=router_canary())  # type: ignore[arg-type]
    r.requeue = lambda key, after: None
    for _ in range(4):
        r.once("default", NAME)
        kube.settle()
    r.once("default", NAME)
    kube.take()
    written = kube.cr["status"]
    kube.cr["status"] = {}  # the watch has not delivered the write yet: the cache holds the status of before
    r.once("default", NAME)
    assert [w for w in kube.take() if w[0] == "patch-status"] == []
    kube.cr["status"] = written
    r.forget("default", NAME)
    assert ("default", NAME) not in r._written
