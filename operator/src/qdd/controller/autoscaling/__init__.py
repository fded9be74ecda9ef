"""spec.autoscaling in the operator: the per-role scale path, the drains, the decision loop around the
pure policy qdd.autoscale, its status, events and metrics (docs/autoscaling.md).

- ``endpoints``, ``drain``, ``actuate``: pure — which endpoints exist, when a draining one may go,
  the counts to lay out within the GPU budget;
- ``inputs``, ``state``, ``status``: pure — the policy's inputs from qdd.observe / qdd.perf /
  qdd.catalog, its memory as JSON, status.autoscaling and SLOAttainable;
- ``kubeio``: the reads and writes (profile ConfigMap, /scale, drain labels);
- ``autoscaler``: the glue the reconcile pass calls; ``metrics``: qdd_autoscaler_*.
"""

from .autoscaler import Autoscaler

__all__ = ["Autoscaler"]
