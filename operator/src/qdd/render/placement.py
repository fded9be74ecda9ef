"""NVLink-domain placement shared by every GPU pod qdd renders (engines and preflight): the node
must carry a clique label, and every GPU pod of the deployment lands in one clique (one GB200
NVL72 domain: GPU Feature Discovery's ``nvidia.com/gpu.clique``; docs/facts/gb200.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import labels
from ..preflight.names import ROLE as PREFLIGHT_ROLE

if TYPE_CHECKING:
    from ..plan import Plan

CLIQUE = "nvidia.com/gpu.clique"
GPU_ROLES = ("prefill", "decode", PREFLIGHT_ROLE)


def clique_node_affinity() -> dict[str, Any]:
    """Nodes that belong to an NVLink clique."""
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": CLIQUE, "operator": "Exists"}]}]}}


def clique_pod_affinity_term(deployment: str) -> dict[str, Any]:
    """The same clique as every other GPU pod of ``deployment``."""
    return {"topologyKey": CLIQUE, "labelSelector": {"matchExpressions": [
        {"key": labels.DEPLOYMENT, "operator": "In", "values": [deployment]},
        {"key": labels.ROLE, "operator": "In", "values": list(GPU_ROLES)}]}}


def clique_affinity(deployment: str) -> dict[str, Any]:
    """nodeAffinity and podAffinity of an engine pod kept in its deployment's NVLink domain."""
    return {"nodeAffinity": clique_node_affinity(),
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [clique_pod_affinity_term(deployment)]}}


def gpu_node_selector(plan: Plan) -> dict[str, str]:
    """The nodes of the plan's GPU kind (architecture and GPU Feature Discovery's product label),
    then the user's ``cluster.nodeSelector``."""
    return {"kubernetes.io/arch": plan.gpu.node_arch, "nvidia.com/gpu.product": plan.gpu.product_label,
            **plan.spec.cluster.node_selector}
