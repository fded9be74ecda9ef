"""How long an engine pod stays bound to a node that is NotReady or unreachable, when
``spec.cluster.nodeLossTolerationSeconds`` is set: rendered after the GPU taint's toleration and the
user's (``spec.cluster.tolerations``, which may not name these keys then: qdd.api.rules). A user
toleration of every taint (no key) keeps tolerating the rest; for these two taints the shorter time
wins (one without tolerationSeconds counts as forever).

Kubernetes' node lifecycle controller taints a node ``node.kubernetes.io/not-ready:NoExecute``
(its kubelet reports NotReady) or ``node.kubernetes.io/unreachable:NoExecute`` (its kubelet stopped
reporting for ``--node-monitor-grace-period``, 50 s by default in v1.36); the taint eviction
controller deletes a pod bound there once the shortest ``tolerationSeconds`` of its tolerations
of that taint has passed (k8s.io/kubernetes v1.36.3 pkg/controller/tainteviction
getMinTolerationTime). Without a toleration of its own, the DefaultTolerationSeconds admission
plugin gives every pod both with 300 s (plugin/pkg/admission/defaulttolerationseconds; it adds
one only when no toleration of the pod already matches the key with effect NoExecute or any).
Why qdd leaves the field unset by default, and what the value buys: docs/reliability.md#node-loss.
"""

from __future__ import annotations

from typing import Any

from ..api.rules import NODE_LOSS_TAINTS


def node_loss_tolerations(seconds: int | None) -> list[dict[str, Any]]:
    """The NoExecute tolerations of both node-loss taints with ``seconds`` (none when unset: the
    admission plugin's defaults then apply)."""
    if seconds is None:
        return []
    return [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for k in NODE_LOSS_TAINTS]

