"""The autoscaler's metrics, ``qdd_autoscaler_*`` (declared in qdd.controller.metrics with the
operator's others, served on ``qdd run --metrics-port``; the chart's Grafana dashboard has a row of
them), and the removal of a deployment's label sets."""

from __future__ import annotations

import contextlib

from ..metrics import (AUTOSCALER_DECISION_SECONDS as DECISION_SECONDS, AUTOSCALER_DECISIONS as DECISIONS,
                       AUTOSCALER_DRAINING as DRAINING, AUTOSCALER_DRAINS as DRAINS, AUTOSCALER_EFFECTIVE as EFFECTIVE,
                       AUTOSCALER_GPU_BUDGET as GPU_BUDGET, AUTOSCALER_GPUS_HELD as GPUS_HELD,
                       AUTOSCALER_LATENCY as LATENCY, AUTOSCALER_NEEDED as NEEDED, AUTOSCALER_REQUEST_RATE as REQUEST_RATE,
                       AUTOSCALER_SCALE_WRITES as SCALE_WRITES, AUTOSCALER_SLO_ATTAINABLE as SLO_ATTAINABLE,
                       AUTOSCALER_TARGET as TARGET)

__all__ = ["DECISIONS", "DECISION_SECONDS", "DRAINING", "DRAINS", "EFFECTIVE", "GPUS_HELD", "GPU_BUDGET", "LATENCY",
           "NEEDED", "REQUEST_RATE", "SCALE_WRITES", "SLO_ATTAINABLE", "TARGET", "forget"]

_PER_ROLE = (TARGET, EFFECTIVE, NEEDED, DRAINING)
_PER_DEPLOYMENT = (GPUS_HELD, GPU_BUDGET, SLO_ATTAINABLE)


def forget(namespace: str, name: str) -> None:
    """Remove a deployment's label sets (it is gone, or autoscaling was turned off)."""
    for role in ("prefill", "decode"):
        for g in _PER_ROLE:
            with contextlib.suppress(KeyError):
                g.remove(namespace, name, role)
        for kind in ("observed", "predicted", "target"):
            with contextlib.suppress(KeyError):
                LATENCY.remove(namespace, name, role, kind)
    for g in _PER_DEPLOYMENT:
        with contextlib.suppress(KeyError):
            g.remove(namespace, name)
    for kind in ("observed", "forecast"):
        with contextlib.suppress(KeyError):
            REQUEST_RATE.remove(namespace, name, kind)
    for mode in ("Advise", "On"):
        for outcome in ("decided", "no-profile", "no-metrics"):
            with contextlib.suppress(KeyError):
                DECISIONS.remove(namespace, name, mode, outcome)
