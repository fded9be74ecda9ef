"""The canary's I/O side: which URL, when to send, and the state handed to the status.

Called once per reconcile pass (qdd.controller.reconcile) after the status without the canary
is known: a request goes out only when that status is Ready (the KV-transfer preflight passed,
every endpoint and the router ready) and a check is due (qdd.canary.judge.due), so a converged
deployment costs one request per periodSeconds.

The request never runs inside a pass: it goes to a small shared pool (:data:`WORKERS` threads, at
most one request in flight per resource), and when it is answered the pool asks for one more pass
of that resource (``notify``), which judges the answer and writes the status. A hung or slow router
(its image is the resource author's) therefore holds no reconcile worker and no resync; it delays
only other resources' canaries, and each request ends after timeoutSeconds (≤ 120 s).

``QDD_CANARY_URL_OVERRIDE`` (a TEST setting): a base URL used instead of the router Service, with
``{namespace}`` and ``{name}`` replaced; the simulated cluster points it at the router TEST DOUBLE
hack/fake_canary_router.py, because kwok runs no router. Never set it in a real cluster.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import names
from ..api import conditions as C
from ..api.conditions import Reason
from ..canary import Answer, CanaryState, canary_generation, complete, due, judge, request_body, state_of
from ..canary.judge import request_hash, same_baseline
from ..plan import Plan

OVERRIDE_ENV = "QDD_CANARY_URL_OVERRIDE"
WORKERS = 4
"""Canary requests in flight at once, for all resources together (each takes ~0.5 s on the CPU
engines of tests/realengine; a GPU deployment answers 16 tokens faster)."""
log = logging.getLogger("qdd.canary")

Send = Callable[[str, dict[str, Any], float], Answer]
Key = tuple[str, str]


def _time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class CanaryChecker:
    """``send``: the HTTP call (qdd.canary.complete; unit tests pass their own). ``override``: the
    test URL template (default: $QDD_CANARY_URL_OVERRIDE). ``workers``: the pool's size; 0 sends
    inside :meth:`state` (unit tests, the real-engine test). ``notify(namespace, name)``: asks for a
    pass once an answer is in (the Reconciler sets it to its ``reconcile``)."""

    def __init__(self, send: Send = complete, override: str | None = None, workers: int = WORKERS,
                 notify: Callable[[str, str], None] | None = None):
        self.send = send
        self.notify = notify
        self.override = (os.environ.get(OVERRIDE_ENV) or None) if override is None else override
        if self.override:
            log.warning("%s is set (a test setting): the canary goes to %s (the simulated cluster's router TEST "
                        "DOUBLE, or a router outside the cluster), not to the router Services", OVERRIDE_ENV,
                        self.override)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="qdd-canary") if workers else None
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

    def state(self, cr: dict[str, Any], plan: Plan | None, serving: bool, now: dt.datetime) -> CanaryState | None:
        """The canary's state for this pass: an answer that came in is judged; a due check is sent
        when ``serving`` (Ready without the canary). None without a plan (no condition)."""
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
            return CanaryState(None, Reason.CANARY_PENDING, "waiting for every endpoint, the router and the KV-transfer "
                               "preflight before sending the canary", record)
        was: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == C.CANARY_PASSED), {})
        if record is not None and not due(record, generation, rh, now, spec.period_seconds,
                                          was.get("reason") == Reason.CANARY_PENDING and was.get("message") != _SENT):
            return state_of(record, url)
        if self._pool is None:
            answer = self.send(url, body, float(spec.timeout_seconds))
            return self._judged(plan, record, (generation, rh, answer, _time(now)), url)
        with self._lock:
            if key not in self._inflight:
                self._inflight.add(key)
                self._pool.submit(self._check, key, url, body, float(spec.timeout_seconds), generation, rh)
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

    def _check(self, key: Key, url: str, body: dict[str, Any], timeout_s: float, generation: str, rh: str) -> None:
        """In the pool: send, keep the answer, ask for a pass of the resource."""
        try:
            answer = self.send(url, body, timeout_s)
        except Exception as e:  # noqa: BLE001 — a client bug is a failed check, not a dead pool thread
            answer = Answer(None, f"canary client error: {type(e).__name__}: {str(e)[:200]}", None, 0.0)
        with self._lock:
            self._done[key] = (generation, rh, answer, _time(_now()))
            self._inflight.discard(key)
        if self.notify is not None:
            try:
                self.notify(*key)
            except Exception:
                log.exception("%s/%s: the pass after the canary's answer failed", *key)


_SENT = "the canary request is on its way to the router"
