"""The router's registered endpoints, read for the start gate of the canary and of benchmarks
(qdd.canary.registration decides; this module does the I/O).

Asked only when everything else is ready (every endpoint's pods Ready, the router Deployment
available, the preflight passed, the router serving the current generation): then ``GET
/list_workers`` goes to the router (the canary's URL: its Service, or QDD_CANARY_URL_OVERRIDE in
the simulated cluster) from the canary's kind of event loop — one request per resource in flight,
bounded by :data:`TIMEOUT_S` —, and its answer asks for one more pass (``notify``). While endpoints
are missing, the list is read again at most every :data:`POLL_S`; once every serving pod is
listed the answer is kept for that set of pods, so a converged deployment sends nothing more
until a serving pod changes (a new IP, a new generation) or a router pod does (a new pod or a
container restart: its discovery starts from nothing, so the list is read again and Ready waits for
it; qdd.canary.registration.router_instances).

With several router replicas the Service answers from one of them: each discovers the same pods
from the API server, so one replica's list stands for all (docs/facts/router-pd.md); a replica that
restarts changes the instances, and the list is read again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..canary.client import get_json_async
from ..canary.registration import LIST_PATH, Registration, listed_urls, registration
from ..plan import Plan

TIMEOUT_S = 5.0
"""One read of the list, connect to last byte: the router answers it from memory."""
POLL_S = 2.0
"""Seconds between two reads while endpoints are missing (the router's discovery adds a pod within
about a second of its readiness; tests/contract/test_router.py)."""
ROUTER_CHANGED = "a router pod is new or restarted: its list of workers is read again"
log = logging.getLogger("qdd.registration")

Get = Callable[[str, str, float], Coroutine[Any, Any, tuple[Any, str | None]]]
Key = tuple[str, str]


@dataclass
class _Seen:
    pods: frozenset[str]
    """The serving pods' URLs and the router instances the last answer was judged for."""
    listed: frozenset[str] | None
    error: str | None
    at: float


def _routers(keys: frozenset[str]) -> frozenset[str]:
    return frozenset(k for k in keys if k.startswith("router:"))


class RegistrationChecker:
    """``get``: the HTTP GET (qdd.canary.client.get_json_async; unit tests pass their own);
    ``base_url``: the router's base URL of a plan (the canary's, :meth:`CanaryChecker.base_url`);
    ``workers``: 0 reads inside :meth:`state` (unit tests), else in an event loop of its own;
    ``notify(namespace, name)``: asks for a pass when an answer is in."""

    def __init__(self, base_url: Callable[[Plan], str], get: Get = get_json_async, workers: int = 1,
                 notify: Callable[[str, str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.base_url, self.get, self.notify, self.clock = base_url, get, notify, clock
        self._loop: asyncio.AbstractEventLoop | None = None
        if workers:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="qdd-registration", daemon=True).start()
        self._lock = threading.Lock()
        self._seen: dict[Key, _Seen] = {}
        self._inflight: set[Key] = set()

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._seen.pop((namespace, name), None)

    def state(self, plan: Plan | None, pods: dict[str, str], ready: bool,
              routers: frozenset[str] = frozenset()) -> Registration | None:
        """The registration of ``pods`` (``{url: pod name}``: qdd.canary.registration.serving_pods)
        for this pass; a read is sent when due. ``routers``: the router instances
        (qdd.canary.registration.router_instances); a complete answer is kept only while they and
        the pods stay the same. None when not considered: no plan, no router, or
        ``ready`` False (something else holds Ready back, so the router's list would say nothing new)."""
        if plan is None or plan.router.replicas == 0 or not ready:
            return None
        key, want = (plan.namespace, plan.name), frozenset(pods) | {f"router:{r}" for r in routers}
        planned = plan.prefill.endpoints + plan.decode.endpoints
        with self._lock:
            seen = self._seen.get(key)
        restarted = seen is not None and _routers(seen.pods) != _routers(want)
        if seen is not None and not restarted:
            got = registration(planned, pods, seen.listed, seen.error)
            if got.complete and seen.pods == want:
                return got  # every serving pod listed: nothing to ask until they change
            if self.clock() - seen.at < POLL_S or key in self._inflight:
                return got
        elif restarted and seen is not None:
            # the list was read from router instances that are gone or restarted: it no longer shows
            # that every pod is registered (what it lacked, it still lacks: its message stays)
            got = registration(planned, pods, seen.listed, seen.error)
            if got.complete:
                got = registration(planned, pods, None, ROUTER_CHANGED)
            if key in self._inflight:
                return got
        else:
            got = registration(planned, pods, None, "not read yet")
        url = self.base_url(plan)
        if self._loop is None:
            answer, error = asyncio.run(self.get(url, LIST_PATH, TIMEOUT_S))  # workers=0: in the pass
            seen = self._keep(key, want, answer, error)
            return registration(planned, pods, seen.listed, seen.error)
        with self._lock:
            if key not in self._inflight:
                self._inflight.add(key)
                asyncio.run_coroutine_threadsafe(self._read(key, want, url), self._loop)
        return got

    def _keep(self, key: Key, want: frozenset[str], answer: Any, error: str | None) -> _Seen:
        listed = listed_urls(answer) if error is None else None
        if error is None and listed is None:
            error = f"GET {LIST_PATH}: not a router's list of workers (no 'urls' list)"
        seen = _Seen(want, listed, error, self.clock())
        with self._lock:
            self._seen[key] = seen
        return seen

    async def _read(self, key: Key, want: frozenset[str], url: str) -> None:
        try:
            answer, error = await self.get(url, LIST_PATH, TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 — a client bug is a failed read, not a dead loop
            answer, error = None, f"GET {LIST_PATH}: client error: {type(e).__name__}: {str(e)[:200]}"
        await asyncio.to_thread(self._answered, key, want, answer, error)

    def _answered(self, key: Key, want: frozenset[str], answer: Any, error: str | None) -> None:
        self._keep(key, want, answer, error)
        with self._lock:
            self._inflight.discard(key)
        if self.notify is not None:
            try:
                self.notify(*key)
            except Exception:
                log.exception("%s/%s: the pass after the router's list of workers failed", *key)
