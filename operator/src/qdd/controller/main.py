"""``qdd run``: the operator process."""

from __future__ import annotations

import logging
import os
import threading

import kopf
from prometheus_client import start_http_server

from .bench_handlers import register_benchmarks
from . import diagnostics
from .benchmark import BenchmarkReconciler
from .handlers import register
from .kube import Kube
from .peers import BURST_WINDOW_S
from .observer import Observer
from .peering import DEFAULT_LIFETIME_SECONDS, Leadership, default_priority, identity
from .reconcile import Reconciler
from .startup_logs import StartupLogs
from .watching import WatchTimeouts


def run(namespaces: list[str] | None, metrics_port: int, liveness_port: int, resync_seconds: float,
        peering: str | None = None, priority: int | None = None,
        peering_lifetime: int = DEFAULT_LIFETIME_SECONDS, watch: WatchTimeouts | None = None,
        peer_restart_window: float = BURST_WINDOW_S, prometheus_url: str | None = None,
        allowed_prometheus: list[str] | None = None) -> None:
    """Run the operator. ``peering``: the name of kopf's peering object shared by the replicas
    (mandatory peering; None: standalone, one replica). ``priority``: this replica's (default: from
    its identity, controller.peering.default_priority). ``watch``: kopf's watch-stream timeouts
    (controller.watching; None: its defaults). ``peer_restart_window``: seconds a burst of prefill
    replacements must have settled before decode's one recycle (controller.peers). ``prometheus_url``:
    where engine metrics are read for deployments without spec.observe.prometheus (None:
    $QDD_PROMETHEUS_URL, else each pod's /metrics). ``allowed_prometheus``: the other URLs a
    spec.observe.prometheus.url may name (None: $QDD_PROMETHEUS_ALLOWED; a URL not allowed is not
    queried: docs/security.md)."""
    logging.basicConfig(level=os.environ.get("QDD_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Per-event handler success lines from kopf drown the useful ones; keep its warnings.
    logging.getLogger("kopf.objects").setLevel(os.environ.get("QDD_KOPF_LOG_LEVEL", "WARNING"))
    start_http_server(metrics_port)
    diagnostics.install()

    def reconciler() -> Reconciler:
        kube = Kube()
        return Reconciler(kube, namespaces, peer_window_s=peer_restart_window,
                          observer=Observer(prometheus=prometheus_url, allowed_prometheus=allowed_prometheus),
                          registration=True, startup=StartupLogs(read=kube.pod_log))

    try:  # a namespace-scoped install may not watch Nodes: then the operator starts without the node watch
        nodes = Kube().may_watch_nodes()
    except Exception as e:  # noqa: BLE001 — a start-up hiccup: run without the watch, as may_watch_nodes does
        logging.getLogger("qdd.kube").warning("cannot ask whether Nodes may be watched (%s): no node watch", e)
        nodes = False
    if peering is None:
        register(reconciler, resync_seconds, watch=watch, nodes=nodes)
        register_benchmarks(lambda: BenchmarkReconciler(Kube(), namespaces), resync_seconds)
        kopf.run(standalone=True, namespaces=namespaces or (), clusterwide=not namespaces,
                 liveness_endpoint=f"http://0.0.0.0:{liveness_port}/healthz")
        return
    me = identity()
    prio = default_priority(me) if priority is None else priority
    # Namespaced mode peers through a KopfPeering in each watched namespace; qdd reads the first.
    where = namespaces[0] if namespaces else None
    clients: dict[str, Kube] = {}  # one client for the leadership reads, made on first use (after kopf starts)
    made = threading.Lock()

    def read_peering() -> dict | None:
        # Made once: ``setdefault("kube", Kube())`` built a client (discovery, connection pool) on every read.
        with made:
            if "kube" not in clients:
                clients["kube"] = Kube()
        return clients["kube"].peering_status(peering, where)

    leader = Leadership(read_peering, me, prio)
    logging.getLogger("qdd.peering").info("peering %s as %s with priority %d", peering, me, prio)
    register(reconciler, resync_seconds, leader=leader,
             peering_lifetime=peering_lifetime,
             watch=watch, nodes=nodes)
    register_benchmarks(lambda: BenchmarkReconciler(Kube(), namespaces), resync_seconds, leader=leader)
    kopf.run(standalone=False, peering_name=peering, priority=prio, namespaces=namespaces or (),
             clusterwide=not namespaces, liveness_endpoint=f"http://0.0.0.0:{liveness_port}/healthz")
