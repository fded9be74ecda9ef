"""The canary's I/O side: which URL, when to send, and the state handed to the status.

Called once per reconcile pass (qdd.controller.reconcile) after the status without the canary
is known: a request goes out only when that status is Ready (the KV-transfer preflight passed,
every endpoint and the router ready) and a check is due (qdd.canary.judge.due), so a converged
deployment costs one request per periodSeconds.

The request never runs inside a pass: it goes to the canary's own event loop (one thread; at most
one request in flight per resource, :data:`MAX_IN_FLIGHT` for all of them), and when it is
answered the loop asks for one more pass of that resource (``notify``), which judges the answer
and writes the status. A hung or slow router (its image is the resource author's) therefore holds
no reconcile worker, no resync and no other resource's canary: it costs one coroutine and one
socket until its deadline (timeoutSeconds ≤ 120 s, for the whole exchange:
:func:`qdd.canary.client.complete_async`). The checks before issue 21 ran in a pool of 4 threads
that 4 such routers held.

``QDD_CANARY_URL_OVERRIDE`` (a TEST setting): a base URL used instead of the router Service, with
``{namespace}`` and ``{name}`` replaced; the simulated cluster points it at the router TEST DOUBLE
hack/fake_canary_router.py, because kwok runs no router. Never set it in a real cluster.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .. import names
from ..api import conditions as C
from ..api.conditions import Reason
from ..canary import Answer, CanaryState, canary_generation, due, judge, request_body, state_of
from ..canary.client import complete_async
from ..canary.judge import request_hash, same_baseline
from ..plan import Plan

OVERRIDE_ENV = "QDD_CANARY_URL_OVERRIDE"
MAX_IN_FLIGHT = 256
"""Canary requests in flight at once, for all resources together: one per deployment, so a cluster
of fewer deployments never waits; each holds at most 1 MiB of answer (256 MiB at worst)."""
log = logging.getLogger("qdd.canary")

Send = Callable[[str, dict[str, Any], float], Answer | Awaitable[Answer]]
Key = tuple[str, str]


def _time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class CanaryChecker:
    """``send``: the HTTP call, a coroutine function or a plain one (qdd.canary.complete_async; unit
    tests pass their own). ``override``: the test URL template (default: $QDD_CANARY_URL_OVERRIDE).
    ``workers``: 0 sends inside :meth:`state` (unit tests, the real-engine test), else the requests
    go to the event loop. ``notify(namespace, name)``: asks for a pass once an answer is in (the
    Reconciler sets it to its ``reconcile``)."""

    def __init__(self, send: Send = complete_async, override: str | None = None, workers: int = 1,
                 notify: Callable[[str, str], None] | None = None):
        self.send = send
        self.notify = notify
        self.override = (os.environ.get(OVERRIDE_ENV) or None) if override is None else override
        if self.override:
            log.warning("%s is set (a test setting): the canary goes to %s (the simulated cluster's router TEST "
                        "DOUBLE, or a router outside the cluster), not to the router Services", OVERRIDE_ENV,
                        self.override)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        if workers:
            self._loop = asyncio.new_event_loop()
            self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
            threading.Thread(target=self._loop.run_forever, name="qdd-canary", daemon=True).start()
        self._lock = threading.Lock()
        self._inflight: set[Key] = set()
        self._done: dict[Key, tuple[str, str, Answer, str]] = {}
        """Answers not yet judged, by resource: (generation, request hash, answer, time answered)."""

    def base_url(self, plan: Plan) -> str:
        if self.override:
            return self.override.format(namespace=plan.namespace, name=plan.name)
        return f"http://{names.router(plan.name)}.{plan.namespace}.svc:{plan.router.port}"

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._done.pop((namespace, name), None)

    def state(self, cr: dict[str, Any], plan: Plan | None, serving: bool, now: dt.datetime,
              waiting: str | None = None) -> CanaryState | None:
        """The canary's state for this pass: an answer that came in is judged; a due check is sent
        when ``serving`` (Ready without the canary). None without a plan (no condition). ``waiting``:
        what the pending canary waits for, when known (the router's registration of the endpoints)."""
        if plan is None:
            return None
        spec = plan.spec.validation.canary
        if not spec.enabled:
            return CanaryState(True, Reason.CANARY_DISABLED, "spec.validation.canary.enabled is false")
        if plan.router.replicas == 0:
            return CanaryState(True, Reason.CANARY_NO_ROUTER, "spec.router.replicas is 0: no router to send the canary "
                               "through")
        status = cr.get("status") or {}
        record = status.get("canary")
        key, generation = (plan.namespace, plan.name), canary_generation(plan)
        body = request_body(plan.served_model_name, spec.prompt, spec.max_tokens)
        rh, url = request_hash(body), self.base_url(plan)
        with self._lock:
            answered = self._done.pop(key, None)
        if answered is not None and answered[:2] == (generation, rh):
            return self._judged(plan, record, answered, url)
        if not serving:
            return CanaryState(None, Reason.CANARY_PENDING, f"{waiting}, before sending the canary" if waiting else
                               "waiting for every endpoint, the router and the KV-transfer preflight before sending "
                               "the canary", record)
        was: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == C.CANARY_PASSED), {})
        if record is not None and not due(record, generation, rh, now, spec.period_seconds,
                                          was.get("reason") == Reason.CANARY_PENDING and was.get("message") != _SENT):
            return state_of(record, url)
        if self._loop is None:
            answer = self.send(url, body, float(spec.timeout_seconds))
            if inspect.isawaitable(answer):
                answer = asyncio.run(_awaited(answer))
            return self._judged(plan, record, (generation, rh, answer, _time(now)), url)
        with self._lock:
            if key not in self._inflight:
                self._inflight.add(key)
                asyncio.run_coroutine_threadsafe(self._check(key, url, body, float(spec.timeout_seconds), generation,
                                                             rh), self._loop)
        if record is not None and same_baseline(record, generation, rh):
            return state_of(record, url)  # the last result holds until the answer is in
        return CanaryState(None, Reason.CANARY_PENDING, _SENT, record)

    def _judged(self, plan: Plan, record: dict[str, Any] | None, answered: tuple[str, str, Answer, str],
                url: str) -> CanaryState:
        generation, rh, answer, at = answered
        new = judge(record, generation, rh, answer, plan.spec.validation.canary.expected, at)
        log.info("%s/%s: canary %s in %.0f ms (generation %s)", plan.namespace, plan.name, new["lastResult"],
                 answer.latency_ms, generation)
        return state_of(new, url)

    async def _send(self, url: str, body: dict[str, Any], timeout_s: float) -> Answer:
        if inspect.iscoroutinefunction(self.send):
            return await self.send(url, body, timeout_s)
        return await asyncio.to_thread(self.send, url, body, timeout_s)  # type: ignore[arg-type]

    async def _check(self, key: Key, url: str, body: dict[str, Any], timeout_s: float, generation: str,
                     rh: str) -> None:
        """In the loop: send, keep the answer, ask for a pass of the resource (off the loop: the
        pass does blocking I/O)."""
        assert self._slots is not None
        try:
            async with self._slots:
                answer = await self._send(url, body, timeout_s)
        except Exception as e:  # noqa: BLE001 — a client bug is a failed check, not a dead loop
            answer = Answer(None, f"canary client error: {type(e).__name__}: {str(e)[:200]}", None, 0.0)
        await asyncio.to_thread(self._answered, key, generation, rh, answer)

    def _answered(self, key: Key, generation: str, rh: str, answer: Answer) -> None:
        with self._lock:
            self._done[key] = (generation, rh, answer, _time(_now()))
            self._inflight.discard(key)
        if self.notify is not None:
            try:
                self.notify(*key)
            except Exception:
                log.exception("%s/%s: the pass after the canary's answer failed", *key)


async def _awaited(answer: Awaitable[Answer]) -> Answer:
    return await answer


_SENT = "the canary request is on its way to the router"
