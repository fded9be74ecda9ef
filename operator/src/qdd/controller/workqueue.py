"""The resources waiting for a reconcile, drained by a few worker threads of our own.

Semantics of client-go's workqueue (k8s.io/client-go/util/workqueue): a key is queued at most once,
however many triggers ask for it; a key asked for while a worker reconciles it is reconciled once
more after that pass (so no change is missed), never by two workers at once; a pass that raised is
retried after a backoff (1 s doubling to 60 s, reset by a pass that succeeds).

Why not reconcile inside the kopf handler: kopf runs sync handlers on its executor (8 threads) and
calls one per watch event. A handler that ran the pass held a thread for the whole pass (0.1–1 s
while 30 deployments converge on 2 cores), so watch events waited inside kopf and arrived tens of
seconds late, each asking for one more pass: ``make bench-scale`` counted 887 pod events and 715
passes in the 60 s after all 30 deployments were Ready, every event with a resourceVersion from
the convergence (bench/README.md, "bench-scale"). With the queue, a handler returns at once and
the events of one resource that arrive while it waits collapse into one pass.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("qdd.workqueue")

Key = tuple[str, str]
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0


class WorkQueue:
    """``reconcile(namespace, name)`` for every key added, on ``workers`` threads."""

    def __init__(self, reconcile: Callable[[str, str], None], workers: int, name: str = "qdd-reconcile"):
        self._reconcile = reconcile
        lock = threading.Lock()
        self._cond = threading.Condition(lock)      # the workers wait on it
        self._due = threading.Condition(lock)       # the delaying thread waits on it
        self._heap: list[tuple[float, Key]] = []    # (time, key) of add_after; superseded ones skipped
        self._queue: deque[Key] = deque()
        self._queued: set[Key] = set()      # in _queue, or asked for again while processing
        self._processing: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._delayed: dict[Key, float] = {}  # the earliest add_after of it that is waiting: its time
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        # One thread for every delayed add (not a threading.Timer each: a superseded timer would sleep on, a
        # thread per child event and per stall check).
        self._threads.append(threading.Thread(target=self._delay_loop, name=f"{name}-delay", daemon=True))

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            self._due.notify_all()

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def add(self, key: Key) -> None:
        """Ask for one pass of ``key`` (namespace, name); a no-op when one is already queued."""
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Key) -> None:
        if key in self._queued:
            return
        self._queued.add(key)
        if key not in self._processing:  # else queued again by the worker when it is done
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: Key, seconds: float) -> None:
        """:meth:`add` in ``seconds``; a no-op while one for ``key`` is waiting that comes no later, so
        the triggers of one window collapse into one pass; an earlier one replaces a later one (client-go's
        AddAfter keeps the earliest): a stall check due in ten minutes must not hold back a child's event."""
        at = time.monotonic() + seconds
        with self._cond:
            if self._delayed.get(key, float("inf")) <= at:
                return
            self._delayed[key] = at
            heapq.heappush(self._heap, (at, key))
            self._due.notify()

    def _delay_loop(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    at, key = heapq.heappop(self._heap)
                    if self._delayed.get(key) == at:  # else replaced by an earlier one, which has queued it
                        del self._delayed[key]
                        self._add_locked(key)
                self._due.wait(self._heap[0][0] - now if self._heap else None)

    def _get(self) -> Key | None:
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return None
            key = self._queue.popleft()
            self._queued.discard(key)
            self._processing.add(key)
            return key

    def _done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._queued:  # asked for while it ran: once more
                self._queue.append(key)
                self._cond.notify()

    def _work(self) -> None:
        while (key := self._get()) is not None:
            try:
                self._reconcile(*key)
                self._failures.pop(key, None)
            except Exception:  # one resource must not stop the others: retried after a backoff
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                delay = min(BACKOFF_FIRST_S * 2 ** (n - 1), BACKOFF_MAX_S)
                log.exception("reconcile of %s/%s failed (%d in a row): again in %.0f s", *key, n, delay)
                self.add_after(key, delay)
            finally:
                self._done(key)


def wait_idle(q: WorkQueue, timeout: float) -> bool:
    """True once nothing is queued or being processed (tests)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with q._cond:  # noqa: SLF001 — the module's own helper
            if not q._queue and not q._processing:
                return True
        time.sleep(0.01)
    return False
