"""The canary's I/O side: which URL, when to send, and the state handed to the status.

Called once per reconcile pass (qdd.controller.reconcile) after the status without the canary
is known: the request goes out only when that status is Ready (the KV-transfer preflight passed,
every endpoint and the router ready) and a check is due (qdd.canary.judge.due), so a converged
deployment costs one request per periodSeconds. The request runs inside the pass, bounded by
spec.validation.canary.timeoutSeconds (≤ 120 s): other resources reconcile meanwhile in kopf's
other workers (8, controller.handlers).

``QDD_CANARY_URL_OVERRIDE`` (TEST DOUBLE ONLY): a base URL used instead of the router Service,
with ``{namespace}`` and ``{name}`` replaced; the simulated cluster points it at
hack/fake_canary_router.py, because kwok runs no router. Never set it in a real cluster.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from typing import Any

from .. import names
from ..api import conditions as C
from ..api.conditions import Reason
from ..canary import Answer, CanaryState, canary_generation, complete, due, judge, request_body, state_of
from ..canary.judge import request_hash
from ..plan import Plan

OVERRIDE_ENV = "QDD_CANARY_URL_OVERRIDE"
log = logging.getLogger("qdd.canary")

Send = Callable[[str, dict[str, Any], float], Answer]


def _time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class CanaryChecker:
    """``send``: the HTTP call (qdd.canary.complete; unit tests pass their own). ``override``: the
    test double's URL template (default: $QDD_CANARY_URL_OVERRIDE)."""

    def __init__(self, send: Send = complete, override: str | None = None):
        self.send = send
        self.override = (os.environ.get(OVERRIDE_ENV) or None) if override is None else override
        if self.override:
            log.warning("%s is set (a test setting): the canary goes to %s (the simulated cluster's router TEST "
                        "DOUBLE, or a router outside the cluster), not to the router Services", OVERRIDE_ENV,
                        self.override)

    def base_url(self, plan: Plan) -> str:
        if self.override:
            return self.override.format(namespace=plan.namespace, name=plan.name)
        return f"http://{names.router(plan.name)}.{plan.namespace}.svc:{plan.router.port}"

    def state(self, cr: dict[str, Any], plan: Plan | None, serving: bool, now: dt.datetime) -> CanaryState | None:
        """The canary's state for this pass; sends the request when ``serving`` (Ready without the
        canary) and a check is due. None without a plan (an invalid spec: no condition)."""
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
        generation = canary_generation(plan)
        body = request_body(plan.served_model_name, spec.prompt, spec.max_tokens)
        rh = request_hash(body)
        url = self.base_url(plan)
        if not serving:
            return CanaryState(None, Reason.CANARY_PENDING, "waiting for every endpoint, the router and the KV-transfer "
                               "preflight before sending the canary", record)
        was: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == C.CANARY_PASSED), {})
        if record is not None and not due(record, generation, rh, now, spec.period_seconds,
                                          was.get("reason") == Reason.CANARY_PENDING):
            return state_of(record, url)
        answer = self.send(url, body, float(spec.timeout_seconds))
        new = judge(record, generation, rh, answer, spec.expected, _time(now))
        log.info("%s/%s: canary %s in %.0f ms (generation %s)", plan.namespace, plan.name, new["lastResult"],
                 answer.latency_ms, generation)
        return state_of(new, url)
