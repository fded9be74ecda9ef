"""kopf registrations. Every trigger calls the same level-triggered reconcile."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from .. import labels
from .reconcile import Reconciler
from .watching import WatchTimeouts

CR = (labels.GROUP, labels.VERSION, labels.PLURAL)
# GitOps tools annotate what they sync; a change there is not a spec change.
IGNORED_FIELDS = ["metadata.annotations", "metadata.labels", "status"]


def _configure(settings: kopf.OperatorSettings) -> None:
    # Keep kopf's bookkeeping on the custom resource itself, in annotations under our group:
    # never in status (the structural schema would prune it) and never in children.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=labels.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=labels.GROUP, key="last-handled-configuration", ignored_fields=IGNORED_FIELDS)
    settings.persistence.finalizer = f"{labels.GROUP}/kopf-finalizer"
    # Reconciles wait on the API server, not the CPU: 30 resources applied at once converged
    # 1.2x faster with 8 than with 4 (make bench-scale, bench/README.md).
    settings.execution.max_workers = 8
    settings.posting.level = logging.WARNING


def _resync_loop(r: Reconciler, stop: threading.Event, resync_seconds: float,
                 leader: Callable[[], bool] | None = None) -> None:
    """Every ``resync_seconds``, one more pass over every resource (until ``stop``); with peering,
    only while ``leader()`` says this replica is the one kopf lets run (kopf pauses its handlers,
    not this thread)."""
    log = logging.getLogger("qdd.resync")
    while not stop.wait(resync_seconds):
        if leader is not None and not leader():
            r.last_pass = time.monotonic()  # a paused replica is healthy, not stuck
            continue
        try:
            keys = r.kube.list_crs(r.namespaces)
        except Exception as e:  # API hiccup: try again next period
            log.warning("resync: cannot list QwenDisaggDeployments: %s", e)
            continue
        for namespace, name in keys:
            try:
                r.reconcile(namespace, name)
            except Exception:
                log.exception("resync of %s/%s failed", namespace, name)
        r.last_pass = time.monotonic()


def register(reconciler_factory: Any, resync_seconds: float, leader: Callable[[], bool] | None = None,
             peering_lifetime: int | None = None, watch: WatchTimeouts | None = None) -> None:
    """Register the handlers. ``reconciler_factory()`` builds the :class:`Reconciler` at startup
    (after kopf has its event loop, before any handler runs).

    The periodic resync is our own thread, not a kopf timer: kopf puts a finalizer on every
    object that has a timer, and a finalizer makes deletion hang whenever the operator is down."""
    state: dict[str, Any] = {}
    stop = threading.Event()

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        _configure(settings)
        (watch or WatchTimeouts()).apply(settings)
        if peering_lifetime is not None:
            settings.peering.lifetime = peering_lifetime
        state["r"] = reconciler_factory()
        state["resync"] = threading.Thread(target=_resync_loop, args=(state["r"], stop, resync_seconds, leader),
                                           name="qdd-resync", daemon=True)
        state["resync"].start()

    @kopf.on.cleanup()
    def shutdown(**_: Any) -> None:
        stop.set()

    def reconcile(namespace: str | None, name: str | None) -> None:
        if namespace and name:
            state["r"].reconcile(namespace, name)

    @kopf.on.resume(*CR)
    @kopf.on.create(*CR)
    @kopf.on.update(*CR, field="spec")
    def on_spec(namespace: str | None, name: str | None, **_: Any) -> None:
        reconcile(namespace, name)

    @kopf.on.delete(*CR, optional=True)
    def on_delete(namespace: str | None, name: str | None, **_: Any) -> None:
        if namespace and name:
            state["r"].forget(namespace, name)

    present = {labels.DEPLOYMENT: kopf.PRESENT}

    @kopf.on.event("", "v1", "pods", labels=present)
    @kopf.on.event("apps", "v1", "statefulsets", labels=present)
    @kopf.on.event("apps", "v1", "deployments", labels=present)
    @kopf.on.event("resource.nvidia.com", "v1beta1", "computedomains", labels=present)
    def on_child(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:  # noqa: A002
        reconcile(namespace, labels.get(f"{CR[0]}/deployment"))

    @kopf.on.probe(id="reconcileAgeSeconds")
    def reconcile_age(**_: Any) -> float:
        r, t = state.get("r"), state.get("resync")
        if t is not None and not t.is_alive():
            raise RuntimeError("the resync thread is dead")  # kopf answers the liveness probe with 500
        return round(time.monotonic() - r.last_pass, 1) if r else -1.0
