"""kopf registrations. Every trigger queues the same level-triggered reconcile
(:class:`qdd.controller.workqueue.WorkQueue`); the handlers return at once."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from .. import labels
from ..render.benchmark import BENCHMARK
from . import metrics, tray_watch
from .informer import ChildCache
from .reconcile import Reconciler
from .watching import WatchTimeouts
from .workqueue import WorkQueue

CR = (labels.GROUP, labels.VERSION, labels.PLURAL)
# GitOps tools annotate what they sync; a change there is not a spec change.
IGNORED_FIELDS = ["metadata.annotations", "metadata.labels", "status"]
CHILD_WATCHES = [("", "v1", "pods"), ("batch", "v1", "jobs")]
"""The children kinds kopf watches: only the benchmark's Jobs and pods (qdd.controller.bench_handlers).
A deployment's children are watched by qdd.controller.informer, which feeds the passes' cache."""
CHILD_EVENT_DELAY_S = 0.5
"""A child's watch event queues its deployment's pass this much later, and the events of that window
share the pass. Each pass of a converging deployment saw one more pod Ready and wrote one more
status: make bench-scale (30 deployments at once) counted 1,228 pod MODIFIED events, 541 passes and
257 status patches with no delay (bench/README.md). A pass is 50-100 ms, so 0.5 s costs little."""
LEADER_TTL_S = 2.0
"""How long one read of the peering object answers whether a child's event queues a pass."""


def _configure(settings: kopf.OperatorSettings) -> None:
    # Keep kopf's bookkeeping on the custom resource itself, in annotations under our group:
    # never in status (the structural schema would prune it) and never in children.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=labels.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=labels.GROUP, key="last-handled-configuration", ignored_fields=IGNORED_FIELDS)
    settings.persistence.finalizer = f"{labels.GROUP}/kopf-finalizer"
    # Watch timeouts: qdd.controller.watching (applied in run()).
    # kopf's executor now runs only the benchmark handlers (sync; ours are async and only queue).
    settings.execution.max_workers = 8
    settings.posting.level = logging.WARNING
    # Watch only the benchmark's Jobs and pods, filtered by the API server: kopf's label filters on
    # handlers are applied client-side, after kopf has parsed (and deep-copied, for its diff base)
    # every event of every pod and Job of the cluster — a deployment's 240 engine pods included
    # (38 % of kopf's thread at make bench-scale, bench/README.md), which qdd's informers watch.
    for resource in CHILD_WATCHES:
        settings.watching.label_selectors[resource] = BENCHMARK


RECONCILE_WORKERS = 8
"""Threads that run passes (the queue's workers). A pass mostly waits on the API server (its lists
and applies go side by side on qdd.controller.kube.API_THREADS). make bench-scale, 30 deployments
at once on 2 busy cores: all Ready in 36.8 s with 4 workers, 28.3 s with 8 (bench/README.md)."""


def recheck_workload_api(r: Reconciler) -> bool:
    """Ask discovery again whether the cluster serves the Workload API (once per resync period:
    one GET) and switch the placement of later passes when it changed: without the API, applying
    a Workload would fail every pass; with it newly served, gang placement is what issue 12 asks
    for. Engine pods rendered for the other placement are then out of date and replaced group by
    group, as on a spec change (docs/placement.md). True when the placement changed."""
    try:
        served = r.kube.serves_workload_api(fresh=True)
    except Exception as e:  # noqa: BLE001 — API hiccup: keep the placement, ask next period
        logging.getLogger("qdd.resync").warning("cannot ask discovery for the Workload API: %s", e)
        return False
    if served == r.gang:
        return False
    logging.getLogger("qdd.resync").warning(
        "the cluster %s the Workload API (scheduling.k8s.io/v1alpha2): placement is now %s",
        "now serves" if served else "no longer serves",
        "gang scheduling through PodGroups" if served else "pod affinity on the NVLink clique (partial placement possible)")
    r.gang = served
    return True


TAKEOVER_POLL_S = 1.0
"""With peering, how often a replica reads the peering object to learn that it now acts: the replica
that takes over passes over every resource within this of the old leader's keep-alive expiring
(issue 23: the standby's first write came 28.1 s after the leader's SIGKILL, 15.5 s of it waiting
for its next resync). One GET per second per replica."""


def _pass_all(r: Reconciler, queue: WorkQueue, cause: str) -> bool:
    """Queue a pass for every resource listed, and for the managed ones no longer listed (their pass
    finds them gone and releases what is held for them). False when the list failed."""
    try:
        keys = r.kube.list_crs(r.namespaces)
    except Exception as e:  # API hiccup: try again next period
        logging.getLogger("qdd.resync").warning("%s: cannot list QwenDisaggDeployments: %s", cause, e)
        return False
    for key in sorted(set(keys) | set(r.managed)):
        metrics.TRIGGERS.labels(cause, labels.KIND, "").inc()
        queue.add(key)
    r.last_pass = time.monotonic()
    return True


def _resync_loop(r: Reconciler, queue: WorkQueue, stop: threading.Event, resync_seconds: float,
                 leader: Callable[[], bool] | None = None, poll_s: float = TAKEOVER_POLL_S) -> None:
    """Every ``resync_seconds``, one more pass queued for every resource (until ``stop``). With peering,
    only while ``leader()`` says this replica is the one kopf lets run (kopf pauses its handlers, not
    this thread), asked every ``poll_s``: the moment it starts to act (start-up or a takeover), a pass
    for every resource at once, not at the next resync."""
    log = logging.getLogger("qdd.resync")
    acting = leader is None
    due = time.monotonic() + resync_seconds
    while not stop.wait(resync_seconds if leader is None else min(poll_s, resync_seconds)):
        if leader is not None:
            if not leader():
                acting = False
                r.last_pass = time.monotonic()  # a paused replica is healthy, not stuck
                continue
            if not acting:
                log.warning("this replica now acts (peering): a pass for every resource")
                acting = _pass_all(r, queue, "takeover")
                due = time.monotonic() + resync_seconds
                continue
            if time.monotonic() < due:
                continue
        due = time.monotonic() + resync_seconds
        recheck_workload_api(r)
        _pass_all(r, queue, "resync")


def _reconcile_age(state: Mapping[str, Any]) -> float:
    """Seconds since the last pass (or resync round); raises, and kopf answers the liveness probe
    with 500, when the resync thread or a reconcile worker is dead."""
    r, t, q = state.get("r"), state.get("resync"), state.get("queue")
    if t is not None and not t.is_alive():
        raise RuntimeError("the resync thread is dead")
    if q is not None and not q.alive():
        raise RuntimeError("a reconcile worker thread is dead")
    return round(time.monotonic() - r.last_pass, 1) if r else -1.0


def _ttl(leader: Callable[[], bool], seconds: float) -> Callable[[], bool]:
    """``leader`` asked at most once per ``seconds`` (it reads the peering object)."""
    last: list[float | bool] = [float("-inf"), False]

    def ask() -> bool:
        now = time.monotonic()
        if now - float(last[0]) >= seconds:
            last[:] = [now, leader()]
        return bool(last[1])
    return ask


def child_event_handler(queue: WorkQueue, leader: Callable[[], bool] | None) -> Callable[[str, dict[str, Any]], None]:
    """What a child's watch event does (qdd.controller.informer): queue its deployment's pass, on
    the replica that acts."""
    acting = _ttl(leader, LEADER_TTL_S) if leader is not None else None

    def on_event(type_: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        dep = (meta.get("labels") or {}).get(labels.DEPLOYMENT)
        if not dep or not meta.get("namespace") or (acting is not None and not acting()):
            return
        metrics.TRIGGERS.labels("child", obj.get("kind", ""), type_).inc()
        queue.add_after((meta["namespace"], dep), CHILD_EVENT_DELAY_S)
    return on_event


def _store_cr(r: Reconciler, event: Mapping[str, Any]) -> None:
    """Keep a custom resource's event in the passes' cache (a copy: kopf keeps its own)."""
    obj = event.get("object")
    if r.kube.crs is not None and obj:
        r.kube.crs.apply_event(event.get("type") or "ADDED", copy.deepcopy(dict(obj)), notify=False)


def _start(state: dict[str, Any], r: Reconciler, stop: threading.Event, resync_seconds: float,
           leader: Callable[[], bool] | None, watch: WatchTimeouts) -> None:
    """The reconciler, its work queue, the children's informers and the resync thread, into ``state``."""
    state["r"] = r
    state["queue"] = queue = WorkQueue(r.reconcile, RECONCILE_WORKERS)
    r.requeue = r.autoscaler.requeue = queue.add_after
    queue.start()
    # The passes read the custom resource from kopf's watch (on_cr in register) and the children
    # from the informers' (qdd.controller.informer): at steady state a pass sends no read at all.
    r.kube.crs = ChildCache(kinds=[labels.KIND])
    r.kube.cache = state["cache"] = ChildCache(on_event=child_event_handler(queue, leader))
    state["cache"].start(r.kube.api, r.namespaces, watch)
    state["resync"] = threading.Thread(target=_resync_loop, args=(r, queue, stop, resync_seconds, leader),
                                       name="qdd-resync", daemon=True)
    state["resync"].start()


def register(reconciler_factory: Any, resync_seconds: float, leader: Callable[[], bool] | None = None,
             peering_lifetime: int | None = None, watch: WatchTimeouts | None = None, nodes: bool = True) -> None:
    """Register the handlers. ``reconciler_factory()`` builds the :class:`Reconciler` at startup
    (after kopf has its event loop, before any handler runs). ``nodes``: watch Nodes for trays
    coming back (qdd.controller.tray_watch; False where the operator may not: Kube.may_watch_nodes).

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
        _start(state, reconciler_factory(), stop, resync_seconds, leader, watch or WatchTimeouts())

    @kopf.on.cleanup()
    def shutdown(**_: Any) -> None:
        stop.set()
        for part in (state.get("queue"), state.get("cache")):
            part and part.stop()

    def reconcile(namespace: str | None, name: str | None) -> None:
        if namespace and name:
            state["queue"].add((namespace, name))

    # async: run on kopf's event loop, not its executor; they only queue a key.
    @kopf.on.resume(*CR)
    @kopf.on.create(*CR)
    @kopf.on.update(*CR, field="spec")
    async def on_spec(namespace: str | None, name: str | None, **_: Any) -> None:
        metrics.TRIGGERS.labels("spec", labels.KIND, "").inc()
        reconcile(namespace, name)

    # A deletion queues one more pass rather than forgetting here: that pass finds the resource gone
    # and releases what is held for it (Reconciler.forget) after any pass of it still running, which
    # would otherwise write its metrics' label sets again once they were removed.
    @kopf.on.delete(*CR, optional=True)
    async def on_delete(namespace: str | None, name: str | None, **_: Any) -> None:
        reconcile(namespace, name)

    # kopf calls the on.event handlers of an event before its create/update handlers (kopf's
    # processing of a resource event), so the pass that on_spec queues reads this event's spec.
    @kopf.on.event(*CR)
    async def on_cr(event: Mapping[str, Any], **_: Any) -> None:
        _store_cr(state["r"], event)

    if nodes:
        tray_watch.register(state)

    @kopf.on.probe(id="reconcileAgeSeconds")
    def reconcile_age(**_: Any) -> float:
        return _reconcile_age(state)
