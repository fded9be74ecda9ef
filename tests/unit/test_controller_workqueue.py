"""qdd.controller.workqueue: one queued pass per key however many triggers, a pass asked for while
one runs runs once more after it, never two passes of one key at once, retries after a failure."""

from __future__ import annotations

import threading
import time

from qdd.controller import workqueue
from qdd.controller.workqueue import WorkQueue, wait_idle


def test_triggers_of_a_waiting_key_collapse_into_one_pass():
    gate, passes = threading.Event(), []
    q = WorkQueue(lambda ns, n: (gate.wait(5), passes.append((ns, n))), workers=1)
    q.start()
    q.add(("ns", "blocker"))  # holds the only worker while the triggers below arrive
    time.sleep(0.05)
    for _ in range(500):  # e.g. 500 pod events of one deployment
        q.add(("ns", "a"))
    q.add(("ns", "b"))
    assert len(q) == 2
    gate.set()
    assert wait_idle(q, 5)
    assert passes == [("ns", "blocker"), ("ns", "a"), ("ns", "b")]
    q.stop()


def test_a_key_added_while_it_runs_runs_once_more_and_never_twice_at_once():
    started, release = threading.Event(), threading.Event()
    running, most, passes = [0], [0], []
    lock = threading.Lock()

    def reconcile(ns: str, n: str) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        passes.append(n)
        if len(passes) == 1:
            started.set()
            release.wait(5)
        with lock:
            running[0] -= 1

    q = WorkQueue(reconcile, workers=4)
    q.start()
    q.add(("ns", "a"))
    assert started.wait(5)
    for _ in range(10):
        q.add(("ns", "a"))  # the change these stand for came after the running pass read the cluster
    release.set()
    assert wait_idle(q, 5)
    assert passes == ["a", "a"]
    assert most[0] == 1
    q.stop()


def test_a_failed_pass_is_retried_after_the_backoff(monkeypatch):
    monkeypatch.setattr(workqueue, "BACKOFF_FIRST_S", 0.05)
    calls: list[float] = []

    def reconcile(ns: str, n: str) -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise RuntimeError("API server unavailable")

    q = WorkQueue(reconcile, workers=1)
    q.start()
    q.add(("ns", "a"))
    end = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < end:
        time.sleep(0.01)
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1  # 0.05 s, then doubled
    assert q.alive()
    q.stop()


def test_delayed_adds_of_one_window_collapse_into_one_pass():
    passes: list[tuple[str, str]] = []
    q = WorkQueue(lambda ns, n: passes.append((ns, n)), workers=1)
    q.start()
    try:
        for _ in range(20):
            q.add_after(("team", "seed"), 0.2)
        q.add_after(("team", "other"), 0.2)
        assert passes == []  # nothing before the delay
        time.sleep(0.6)
        assert sorted(passes) == [("team", "other"), ("team", "seed")]
        q.add_after(("team", "seed"), 0.05)  # a later window: one more pass
        time.sleep(0.3)
        assert passes.count(("team", "seed")) == 2
    finally:
        q.stop()


def test_an_earlier_add_after_replaces_a_later_one_and_the_later_one_is_dropped():
    """A stall check due much later (qdd.controller.stall) must not hold back a child's event."""
    import threading as _t
    import time as _time

    from qdd.controller.workqueue import WorkQueue, wait_idle

    done: list[float] = []
    ran = _t.Event()

    def reconcile(ns: str, name: str) -> None:
        done.append(_time.monotonic())
        ran.set()

    q = WorkQueue(reconcile, 1)
    q.start()
    try:
        start = _time.monotonic()
        q.add_after(("ns", "a"), 0.6)
        q.add_after(("ns", "a"), 0.05)   # earlier: replaces it
        q.add_after(("ns", "a"), 0.3)    # later than the waiting one: a no-op
        assert ran.wait(2) and done[0] - start < 0.3
        _time.sleep(0.8)
        assert wait_idle(q, 2) and len(done) == 1 and q._delayed == {}
    finally:
        q.stop()
