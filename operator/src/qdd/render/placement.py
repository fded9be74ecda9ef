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


def node_affinity(plan: Plan) -> dict[str, Any] | None:
    """Required node affinity of every GPU pod: one nodeSelectorTerm holding the clique requirement
    (when the deployment stays in one NVLink domain) and the user's ``cluster.nodeAffinity``, so
    they are ANDed. Separate terms would be ORed: a node meeting the user's term alone would do
    (the failure NVIDIA/nvcf#1651 reports). None when there is nothing to require."""
    exprs = list(clique_node_affinity()["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                 ["matchExpressions"]) if plan.spec.cluster.same_nvlink_domain else []
    exprs += [r.to_k8s() for r in plan.spec.cluster.node_affinity]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}} \
        if exprs else None


def engine_affinity(plan: Plan) -> dict[str, Any]:
    """nodeAffinity (:func:`node_affinity`) and, in one NVLink domain, the podAffinity of an engine pod."""
    out: dict[str, Any] = {}
    nodes = node_affinity(plan)
    if nodes:
        out["nodeAffinity"] = nodes
    if plan.spec.cluster.same_nvlink_domain:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [clique_pod_affinity_term(plan.name)]}
    return out


def gpu_node_selector(plan: Plan) -> dict[str, str]:
    """The nodes of the plan's GPU kind (architecture and GPU Feature Discovery's product label),
    then the user's ``cluster.nodeSelector``."""
    return {"kubernetes.io/arch": plan.gpu.node_arch, "nvidia.com/gpu.product": plan.gpu.product_label,
            **plan.spec.cluster.node_selector}
