"""Gang and NVLink-domain placement through Kubernetes' own Workload API. Pure.

The scheduler, not qdd, decides where a deployment goes: qdd says which pods belong together and
that they must share one value of the node label ``nvidia.com/gpu.clique`` (one GB200 NVL72
NVLink domain). Objects (``scheduling.k8s.io/v1alpha2``, Kubernetes v1.36 with the alpha gates
GenericWorkload, GangScheduling and TopologyAwareWorkloadScheduling; field names from
k8s.io/api v0.36.3 scheduling/v1alpha2/types.go; docs/placement.md):

- one ``Workload`` named like the custom resource: its ``podGroupTemplates`` say what a group of
  this deployment is (``spec.schedulingPolicy.gang.minCount``, ``schedulingConstraints.topology``
  ``[{key: nvidia.com/gpu.clique}]``), ``spec.controllerRef`` names the custom resource;
- ``PodGroup`` objects, the runtime instances the scheduler reads (it copies nothing from the
  Workload: each PodGroup carries its own policy and constraints);
- every engine pod of a group says ``spec.schedulingGroup.podGroupName``.

``spec.cluster.sameNVLinkDomain: true``: one PodGroup ``<cr>-engines`` holds every engine pod
(each prefill endpoint and each decode DP/EP group), gang minCount = all of them: the scheduler
binds all of them in one domain or none (the TopologyPlacementGenerator plugin tries one
placement per clique value, the GangScheduling plugin holds every pod at Permit until minCount
are placed). Later pods of that group (a prefill scale-up, a recreated group) join the domain of
the pods already bound, or stay Pending. ``false``: one PodGroup ``<cr>-<role>-<endpoint>`` per
multi-pod endpoint (a decode leader and its workers), each all-or-nothing in its own domain;
single-pod endpoints need no group. A DP/EP group is never split across domains in either mode.

PodGroup and Workload specs are immutable (k8s.io/kubernetes v1.36.3
pkg/apis/scheduling/v1alpha2/zz_generated.validations.go), and a PodGroup being deleted stays while
any running pod names it (the PodGroupProtection finalizer, pkg/controller/scheduling/
podgroupprotection). So (annotation ``qdd.dev/on-change``, read by qdd.controller.children):
the Workload and a per-endpoint PodGroup are deleted and created again when they change (an
endpoint's PodGroup changes only with its group size, when its pods are replaced anyway); the
``<cr>-engines`` PodGroup is created once and kept: its minCount is the engine pod count of the
first placement, a later scale-up joins its domain. Scaling below that count leaves a gang that
a recreated pod cannot complete (docs/placement.md, "Limits").
"""

from __future__ import annotations

from typing import Any

from .. import labels, names
from ..plan import Plan, RolePlan
from .placement import CLIQUE

API_VERSION = "scheduling.k8s.io/v1alpha2"
ENGINES_TEMPLATE = "engines"


def _group_template(role: str) -> str:
    return f"{role}-group"


def _policy(min_count: int) -> dict[str, Any]:
    return {"schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE}]}}


def engine_pod_count(plan: Plan) -> int:
    """Engine pods of the deployment: endpoints × pods per endpoint, both roles."""
    return sum(r.endpoints * r.pods_per_endpoint for r in (plan.prefill, plan.decode))


def _grouped_roles(plan: Plan) -> list[RolePlan]:
    """Roles whose endpoints are multi-pod groups (a PodGroup each when the deployment may span domains)."""
    return [r for r in (plan.prefill, plan.decode) if not r.uses_statefulset and r.endpoints > 0]


def pod_group(plan: Plan, role: str, endpoint: int) -> str | None:
    """The PodGroup an engine pod of ``role`` endpoint ``endpoint`` belongs to; None when it needs
    none (a single-pod endpoint of a deployment that may span NVLink domains)."""
    if plan.spec.cluster.same_nvlink_domain:
        return names.engines_pod_group(plan.name, plan.slot)
    if plan.role(role).uses_statefulset:
        return None
    return names.endpoint_pod_group(plan.name, role, endpoint, plan.slot)


def _meta(plan: Plan, name: str, on_change: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.namespace, "labels": labels.object_labels(plan.name, None),
            "annotations": {labels.ON_CHANGE: on_change}}


def _pod_group(plan: Plan, name: str, template: str, min_count: int, on_change: str) -> dict[str, Any]:
    meta = _meta(plan, name, on_change)
    # A PodGroup belongs to one generation's slot; the Workload is shared by both (its templates
    # are the current spec's: a PodGroup carries its own copy of the policy).
    meta["labels"] |= {labels.GENERATION: plan.generation, labels.SLOT: plan.slot}
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": meta, "spec": {
        "podGroupTemplateRef": {"workload": {"workloadName": names.workload(plan.name),
                                             "podGroupTemplateName": template}},
        **_policy(min_count)}}


def gang_objects(plan: Plan) -> list[dict[str, Any]]:
    """The Workload and its PodGroups (nothing when no pod needs a group), Workload first."""
    if plan.spec.cluster.same_nvlink_domain:
        count = engine_pod_count(plan)
        if count == 0:
            return []
        templates = [{"name": ENGINES_TEMPLATE, **_policy(count)}]
        groups = [_pod_group(plan, names.engines_pod_group(plan.name, plan.slot), ENGINES_TEMPLATE, count, "keep")]
    else:
        roles = _grouped_roles(plan)
        if not roles:
            return []
        templates = [{"name": _group_template(r.role), **_policy(r.pods_per_endpoint)} for r in roles]
        groups = [_pod_group(plan, names.endpoint_pod_group(plan.name, r.role, ep, plan.slot), _group_template(r.role),
                             r.pods_per_endpoint, "replace") for r in roles for ep in range(r.endpoints)]
    workload = {"apiVersion": API_VERSION, "kind": "Workload",
                "metadata": _meta(plan, names.workload(plan.name), "replace"),
                "spec": {"controllerRef": {"apiGroup": labels.GROUP, "kind": labels.KIND, "name": plan.name},
                         "podGroupTemplates": templates}}
    return [workload, *groups]
