"""NVLink-domain placement shared by every GPU pod qdd renders (engines and preflight): the node
must carry a clique label, and every GPU pod of the deployment lands in one clique (one GB200
NVL72 domain: GPU Feature Discovery's ``nvidia.com/gpu.clique``; docs/facts/gb200.md).

Two ways, chosen by the controller from the cluster's discovery (``gang``): with the Workload API
the scheduler places gangs in one domain (qdd.render.gang) and engine pods carry no pod affinity;
without it, today's required pod affinity on the clique keeps the deployment together, pod by
pod (the first pod decides the domain: partial placement is possible, docs/placement.md)."""

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


ENGINE_ROLES = ("prefill", "decode")

# Pods that need no GPU stay off GPU trays: GPU Feature Discovery labels every GPU node
# nvidia.com/gpu.present=true. Required, not preferred: a router on a tray would take its CPUs
# and memory from the engines (issue 12 saw it happen with the preference).
CPU_ONLY_NODE_AFFINITY: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}]}}


def clique_pod_affinity_term(deployment: str, roles: tuple[str, ...] = GPU_ROLES) -> dict[str, Any]:
    """The same clique as the GPU pods of ``deployment`` with one of ``roles``."""
    return {"topologyKey": CLIQUE, "labelSelector": {"matchExpressions": [
        {"key": labels.DEPLOYMENT, "operator": "In", "values": [deployment]},
        {"key": labels.ROLE, "operator": "In", "values": list(roles)}]}}


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


def engine_affinity(plan: Plan, gang: bool) -> dict[str, Any]:
    """nodeAffinity (:func:`node_affinity`) and, in one NVLink domain without gang scheduling,
    the podAffinity of an engine pod (with it, the PodGroup's topology constraint does that)."""
    out: dict[str, Any] = {}
    nodes = node_affinity(plan)
    if nodes:
        out["nodeAffinity"] = nodes
    if plan.spec.cluster.same_nvlink_domain and not gang:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [clique_pod_affinity_term(plan.name)]}
    return out


def gpu_node_selector(plan: Plan) -> dict[str, str]:
    """The nodes of the plan's GPU kind (architecture and GPU Feature Discovery's product label),
    then the user's ``cluster.nodeSelector``."""
    return {"kubernetes.io/arch": plan.gpu.node_arch, "nvidia.com/gpu.product": plan.gpu.product_label,
            **plan.spec.cluster.node_selector}
