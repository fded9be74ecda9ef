"""With peering, the replica that starts to act passes over every resource at once (issue 23: the
standby's first write came 15.5 s after kopf resumed it, waiting for its next resync)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from qdd.controller.handlers import _resync_loop


class _Queue:
    def __init__(self) -> None:
        self.added: list[tuple[float, tuple[str, str]]] = []

    def add(self, key: tuple[str, str]) -> None:
        self.added.append((time.monotonic(), key))


def _reconciler(keys: list[tuple[str, str]]) -> SimpleNamespace:
    kube = SimpleNamespace(list_crs=lambda ns: list(keys), serves_workload_api=lambda fresh=False: True)
    return SimpleNamespace(kube=kube, namespaces=[], managed={("ns", "gone")}, gang=True, last_pass=0.0)


def _wait(q: _Queue, n: int) -> None:
    deadline = time.monotonic() + 2
    while len(q.added) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_standby_that_takes_over_passes_over_every_resource_within_a_poll():
    r, q, stop = _reconciler([("ns", "a"), ("ns", "b")]), _Queue(), threading.Event()
    leading = {"now": False}
    t = threading.Thread(target=_resync_loop, args=(r, q, stop, 3600.0, lambda: leading["now"], 0.05), daemon=True)
    t.start()
    try:
        time.sleep(0.3)
        assert q.added == []  # a standby queues nothing
        took_over = time.monotonic()
        leading["now"] = True
        _wait(q, 3)
        assert sorted(k for _, k in q.added) == [("ns", "a"), ("ns", "b"), ("ns", "gone")]
        assert max(at for at, _ in q.added) - took_over < 0.5  # not at the resync (an hour here)
        time.sleep(0.3)
        assert len(q.added) == 3  # once per takeover, then the resync period
        leading["now"] = False
        time.sleep(0.2)
        leading["now"] = True  # lost and taken over again: one more pass each
        _wait(q, 6)
        assert len(q.added) == 6
    finally:
        stop.set()
        t.join(2)


def test_without_peering_the_resync_alone_queues():
    r, q, stop = _reconciler([("ns", "a")]), _Queue(), threading.Event()
    t = threading.Thread(target=_resync_loop, args=(r, q, stop, 0.2), daemon=True)
    t.start()
    time.sleep(0.5)
    stop.set()
    t.join(2)
    assert 1 <= sum(1 for _, k in q.added if k == ("ns", "a")) <= 3
    assert ("ns", "gone") in {k for _, k in q.added}
