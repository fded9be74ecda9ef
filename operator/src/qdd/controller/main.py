"""``qdd run``: the operator process."""

from __future__ import annotations

import logging
import os

import kopf
from prometheus_client import start_http_server

from .handlers import register
from .kube import Kube
from .reconcile import Reconciler


def run(namespaces: list[str] | None, metrics_port: int, liveness_port: int, resync_seconds: float) -> None:
    logging.basicConfig(level=os.environ.get("QDD_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Per-event handler success lines from kopf drown the useful ones; keep its warnings.
    logging.getLogger("kopf.objects").setLevel(os.environ.get("QDD_KOPF_LOG_LEVEL", "WARNING"))
    start_http_server(metrics_port)
    register(lambda: Reconciler(Kube(), namespaces), resync_seconds)
    kopf.run(
        standalone=True,
        namespaces=namespaces or (),
        clusterwide=not namespaces,
        liveness_endpoint=f"http://0.0.0.0:{liveness_port}/healthz",
    )
