"""What stands between a deployment whose endpoints are Ready and its Ready condition, read in order
once per pass: every Ready router pod's registration of every serving pod (qdd.controller.registration), then
the canary (qdd.controller.canary), then the accuracy gate (spec.validation.accuracy,
qdd.canary.accuracy). Each is looked at only when the one before holds: a router missing an endpoint
gets no canary, and a benchmark measures only a generation the router serves whole."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..api.conditions import Reason
from ..canary import CanaryState
from ..canary.accuracy import AccuracyState, accuracy_state
from ..canary.registration import Registration, router_pods, serving_pods
from ..plan import Plan
from .canary import CanaryChecker
from .kube import Kube
from .registration import RegistrationChecker


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def accuracy_gate(kube: Kube, cr: dict[str, Any], plan: Plan | None, serving: bool) -> AccuracyState | None:
    """The accuracy gate's state (None without one): one GET of its benchmark per pass, only for a
    deployment that has the gate. ``serving``: everything else is ready (the benchmark may run)."""
    gate = plan.spec.validation.accuracy if plan is not None else None
    if gate is None or plan is None:
        return None
    record = (cr.get("status") or {}).get("accuracy")
    try:
        bench = kube.get_benchmark(plan.namespace, gate.benchmark_name)
    except Exception as e:  # noqa: BLE001 — an API hiccup: the gate waits, the pass goes on
        return AccuracyState(None, Reason.ACCURACY_PENDING, f"cannot read QwenDisaggBenchmark {gate.benchmark_name}: "
                             f"{type(e).__name__}: {str(e)[:200]}", record)
    return accuracy_state(gate, plan.name, plan.generation, bench, record, serving, _now())


def start_gates(registration: RegistrationChecker | None, canary: CanaryChecker, kube: Kube, cr: dict[str, Any],
                plan: Plan | None, observed: list[dict[str, Any]], ready: bool) -> tuple[
                    Registration | None, CanaryState | None, AccuracyState | None]:
    """(registration, canary, accuracy) of this pass; ``ready``: Ready as computed without them."""
    pods = [o for o in observed if o.get("kind") == "Pod"]
    reg = None if registration is None or plan is None else registration.state(
        plan, serving_pods(pods, plan.name, plan.generation, plan.spec.ports.http), ready,
        router_pods(pods, plan.name))
    registered = ready and (reg is None or reg.complete)
    can = canary.state(cr, plan, registered, dt.datetime.now(dt.timezone.utc),
                       waiting=reg.message if reg is not None and not reg.complete else None)
    acc = accuracy_gate(kube, cr, plan, registered and (can is None or can.passed is True))
    return reg, can, acc
