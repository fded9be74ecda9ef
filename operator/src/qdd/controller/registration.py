"""The router's registered endpoints, read from each Ready router pod for the start gate of the
canary and of benchmarks (qdd.canary.registration decides; this module does the I/O).

Asked only when everything else is ready (every endpoint's pods Ready, the router Deployment
available, the preflight passed, the router serving the current generation): then ``GET
/list_workers`` goes to each Ready router pod (``http://<pod IP>:<router port>``; every pod the
router Service may send a request to) from the canary's kind of event loop — one request per
router pod in flight, each bounded by :data:`TIMEOUT_S` —, and each answer asks for one more pass
(``notify``). A pass never waits on a read: it judges the answers it has. While a router pod lacks
an endpoint its list is read again at most every :data:`POLL_S`; once it lists every serving pod
its answer is kept, so a converged deployment sends nothing more until a serving pod changes (a
new IP, a new generation: a URL it has not listed) or a router pod does (a new pod or a container
restart: its discovery starts from nothing, so its list is read again and Ready waits for it;
qdd.canary.registration.RouterPod).

``QDD_CANARY_URL_OVERRIDE`` (a TEST setting, qdd.controller.canary): each router pod's list is read
from that base URL instead, the simulated cluster's router TEST DOUBLE (hack/fake_canary_router.py),
which answers for every replica alike: kwok runs no router.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from ..canary.client import get_json_async
from ..canary.registration import LIST_PATH, Listing, Registration, RouterPod, endpoint_url, listed_urls, registration
from ..plan import Plan

TIMEOUT_S = 5.0
"""One read of one router pod's list, connect to last byte: the router answers it from memory."""
POLL_S = 2.0
"""Seconds between two reads of a router pod's list while it lacks endpoints (the router's discovery
adds a pod within about a second of its readiness; tests/contract/test_router.py)."""
NOT_READ = "not read yet"
ROUTER_CHANGED = "restarted: its list of workers is read again"
log = logging.getLogger("qdd.registration")

Get = Callable[[str, str, float], Coroutine[Any, Any, tuple[Any, str | None]]]
Key = tuple[str, str]


@dataclass(frozen=True)
class _Seen:
    """One router pod's last answer: the ``instance`` it came from (RouterPod.instance), the base
    URLs it listed or why not (``listed``), when (monotonic seconds)."""

    instance: str
    listed: Listing
    at: float


def pod_url(override: str | None) -> Callable[[Plan, RouterPod], str]:
    """Where a router pod's list is read: ``http://<pod IP>:<spec.router.port>``, or the test
    override (a base URL with ``{namespace}`` and ``{name}``) for every router pod."""
    def url(plan: Plan, router: RouterPod) -> str:
        if override:
            return override.format(namespace=plan.namespace, name=plan.name)
        return endpoint_url(router.ip, plan.router.port)
    return url


class RegistrationChecker:
    """``url(plan, router pod)``: where that pod's list is read (default: :func:`pod_url` without
    override); ``get``: the HTTP
    GET (qdd.canary.client.get_json_async; unit tests pass their own); ``workers``: 0 reads inside
    :meth:`state` (unit tests), else in an event loop of its own; ``notify(namespace, name)``: asks
    for a pass when an answer is in."""

    def __init__(self, url: Callable[[Plan, RouterPod], str] | None = None, get: Get = get_json_async,
                 workers: int = 1, notify: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.url, self.get, self.notify, self.clock = url or pod_url(None), get, notify, clock
        self._loop: asyncio.AbstractEventLoop | None = None
        if workers:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="qdd-registration", daemon=True).start()
        self._lock = threading.Lock()
        self._seen: dict[Key, dict[str, _Seen]] = {}
        """Per resource, per router pod name: its last answer."""
        self._inflight: set[tuple[str, str, str]] = set()
        """(namespace, name, router pod name) of the reads in flight."""

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._seen.pop((namespace, name), None)

    def state(self, plan: Plan | None, pods: dict[str, str], ready: bool,
              routers: Sequence[RouterPod] = ()) -> Registration | None:
        """The registration of ``pods`` (``{url: pod name}``: qdd.canary.registration.serving_pods)
        with every Ready router pod of ``routers`` (qdd.canary.registration.router_pods) for this
        pass; the reads that are due are sent. None when not considered: no plan, no router, or
        ``ready`` False (something else holds Ready back, so the routers' lists would say nothing new)."""
        if plan is None or plan.router.replicas == 0 or not ready:
            return None
        key, want, now = (plan.namespace, plan.name), frozenset(pods), self.clock()
        with self._lock:
            seen = {r.name: s for r in routers if (s := self._seen.get(key, {}).get(r.name)) is not None}
            self._seen[key] = dict(seen)  # router pods gone are forgotten
        lists: dict[str, Listing] = {}
        due: list[RouterPod] = []
        for r in routers:
            s = seen.get(r.name)
            if s is None or s.instance != r.instance:
                lists[r.name] = NOT_READ if s is None else ROUTER_CHANGED
                due.append(r)
                continue
            lists[r.name] = s.listed
            if (isinstance(s.listed, str) or not want <= s.listed) and now - s.at >= POLL_S:
                due.append(r)  # lacks a serving pod, or unread: asked again every POLL_S
        for r in due:
            if self._loop is None:  # workers=0: in the pass
                answer, error = asyncio.run(self.get(self.url(plan, r), LIST_PATH, TIMEOUT_S))
                lists[r.name] = self._keep(key, r, answer, error).listed
                continue
            with self._lock:
                if (*key, r.name) in self._inflight:
                    continue
                self._inflight.add((*key, r.name))
            asyncio.run_coroutine_threadsafe(self._read(key, r, self.url(plan, r)), self._loop)
        return registration(plan.prefill.endpoints + plan.decode.endpoints, pods, lists)

    def _keep(self, key: Key, router: RouterPod, answer: Any, error: str | None) -> _Seen:
        listed = listed_urls(answer) if error is None else None
        if error is None and listed is None:
            error = f"GET {LIST_PATH}: not a router's list of workers (no 'urls' list)"
        seen = _Seen(router.instance, listed if listed is not None else str(error), self.clock())
        with self._lock:
            self._seen.setdefault(key, {})[router.name] = seen
        return seen

    async def _read(self, key: Key, router: RouterPod, url: str) -> None:
        try:
            answer, error = await self.get(url, LIST_PATH, TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 — a client bug is a failed read, not a dead loop
            answer, error = None, f"GET {LIST_PATH}: client error: {type(e).__name__}: {str(e)[:200]}"
        await asyncio.to_thread(self._answered, key, router, answer, error)

    def _answered(self, key: Key, router: RouterPod, answer: Any, error: str | None) -> None:
        self._keep(key, router, answer, error)
        with self._lock:
            self._inflight.discard((*key, router.name))
        if self.notify is not None:
            try:
                self.notify(*key)
            except Exception:
                log.exception("%s/%s: the pass after router pod %s's list of workers failed", *key, router.name)
