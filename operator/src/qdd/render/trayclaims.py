"""One IMEX-channel ResourceClaim per tray for the pods of a StatefulSet. Pure.

NVIDIA's DRA driver publishes one channel device per node and its kubelet plugin prepares one
channel claim per node (docs/facts/dra-driver.md): pods of one ComputeDomain that share a tray
must share one ResourceClaim. Multi-pod endpoints fill whole trays (qdd.plan.build), so their pods
keep one claim each from the ComputeDomain's template. A StatefulSet's single-pod endpoints may be
smaller than a tray (the seed's DEP2 prefill: two per GB200 tray), and a StatefulSet's template can
name only one claim for all its replicas. So qdd creates the claims itself, one per tray-sized
group of ordinals, ``<cr>-<role>[-b]-tray-<g>`` for ordinals ``g*k .. g*k+k-1`` (``k`` pods per
tray), with the spec of the driver's workload template; and a MutatingAdmissionPolicy
(:func:`admission_policy`, installed with the chart) points pod ``i``'s claim at group ``i // k``
when the StatefulSet controller creates it (label ``apps.kubernetes.io/pod-index``). The claim's
allocation is one node's channel, so its pods land on one tray once it is allocated.

Under gang scheduling the pods of one claim are placed in one PodGroup cycle, before the claim's
allocation is written, and kube-scheduler v1.36.3 does not hold the second pod to the node of the
allocation it reuses (kubernetes/kubernetes#140087, fixed upstream by #140089 after v1.36.3:
docs/placement.md, "The gang and shared claims"). So the policy also labels each pod with its
claim (:data:`TRAY_CLAIM`), and under gang scheduling the pods carry a required pod affinity on
``kubernetes.io/hostname`` to the pods of the same claim (:func:`pod_affinity`): the first pod of
a claim in the cycle goes where the scheduler likes and allocates that tray's channel, the others
can only join it. docs/placement.md says why this design and what else was weighed.

The claims' ``domainID`` (the ComputeDomain's UID) is known only once the ComputeDomain exists:
render leaves it empty and the controller fills it (:func:`bind_domain`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .. import labels, names
from ..plan.trays import pods_per_tray, role_trays

if TYPE_CHECKING:
    from ..plan import Plan, RolePlan

DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CLAIM = "imex-channel"
"""The pod-level name of the channel claim (``spec.resourceClaims[].name``)."""
PREFIX = f"{labels.GROUP}/tray-claim-prefix"
PODS_PER_TRAY = f"{labels.GROUP}/pods-per-tray"
COMPUTE_DOMAIN = f"{labels.GROUP}/compute-domain"
"""Annotation on a tray claim: the ComputeDomain whose UID becomes its domainID."""
POD_INDEX = "apps.kubernetes.io/pod-index"
POLICY = "qdd-tray-claims"
TRAY_CLAIM = f"{labels.GROUP}/tray-claim"
"""Pod label the policy sets: the name of the pod's tray claim (at most 40 + 23 characters: the
custom resource's name is at most 40, qdd.api.resource)."""
HOSTNAME = "kubernetes.io/hostname"


def uses_tray_claims(plan: Plan, role: RolePlan) -> bool:
    """Only where pods share a tray: a StatefulSet pod that fills its tray (a DEP4 prefill on a
    4-GPU tray) keeps one claim of its own from the template, as before tray claims, so an upgrade
    of the operator does not restart it."""
    return plan.compute_domain and role.uses_statefulset and pods_per_tray(plan, role) > 1


def claim_spec(domain_id: str, allocation_mode: str = "Single") -> dict[str, Any]:
    """The spec of the driver's workload ResourceClaimTemplate (templates/
    compute-domain-workload-claim-template.tmpl.yaml at 95932046): one ``channel`` request of the
    default channel class and the ComputeDomainChannelConfig naming the domain."""
    return {"devices": {
        "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
        "config": [{"requests": ["channel"], "opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
            "domainID": domain_id, "allocationMode": allocation_mode}}}]}}


def tray_claims(plan: Plan, role: RolePlan) -> list[dict[str, Any]]:
    """The ResourceClaims of ``role``'s StatefulSet, group 0 first; none without tray claims.
    Created once (``on-change: keep``: a claim's spec is immutable and may be in use)."""
    if not uses_tray_claims(plan, role):
        return []
    cd = names.compute_domain(plan.name, plan.slot)
    # No role label: role selectors (Services, the router, the status' pod counts) select pods only,
    # but nothing of a role may be mistaken for an engine object.
    meta_labels = labels.object_labels(plan.name) | {labels.GENERATION: plan.generation, labels.SLOT: plan.slot}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {
        "name": names.tray_claim(plan.name, role.role, g, plan.slot), "namespace": plan.namespace,
        "labels": dict(meta_labels), "annotations": {labels.ON_CHANGE: "keep", COMPUTE_DOMAIN: cd}},
        "spec": claim_spec("")} for g in range(role_trays(plan, role))]


def pod_annotations(plan: Plan, role: RolePlan) -> dict[str, str]:
    """What the admission policy reads on a StatefulSet pod: the claims' common prefix and ``k``."""
    if not uses_tray_claims(plan, role):
        return {}
    prefix = names.tray_claim(plan.name, role.role, 0, plan.slot).rsplit("-", 1)[0]
    return {PREFIX: prefix, PODS_PER_TRAY: str(pods_per_tray(plan, role))}


def pod_affinity(plan: Plan, role: RolePlan, gang: bool) -> dict[str, Any] | None:
    """The podAffinity of a StatefulSet pod that shares a tray claim, under gang scheduling: on the
    node of the pods labelled with the same claim (the API server copies the pod's own
    :data:`TRAY_CLAIM` value into the selector at creation: ``matchLabelKeys``, GA in Kubernetes
    v1.33). The first of them matches its own term and may go anywhere (the scheduler's
    InterPodAffinity lets a pod that is the first of its series through); every later one sees it,
    assumed on its node, within the same gang cycle. Engine pods carry no other pod affinity under
    gang scheduling (qdd.render.placement), so this is their only term. None without gang
    scheduling: pod by pod, the second pod of a claim waits until the first pod's allocation is
    written, and the scheduler then holds it to that node (docs/placement.md)."""
    if not gang or not uses_tray_claims(plan, role):
        return None
    return {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {labels.DEPLOYMENT: plan.name}},
        "matchLabelKeys": [TRAY_CLAIM]}]}


def bind_domain(claim: dict[str, Any], observed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``claim`` with its domainID set to the UID of the observed ComputeDomain it names; None
    while that ComputeDomain is not observed yet (the claim is created on a later pass)."""
    cd_name = (claim["metadata"].get("annotations") or {}).get(COMPUTE_DOMAIN)
    cd = next((o for o in observed if o["kind"] == "ComputeDomain" and o["metadata"]["name"] == cd_name), None)
    uid = cd["metadata"].get("uid") if cd else None
    if not uid:
        return None
    out = copy.deepcopy(claim)
    for c in out["spec"]["devices"]["config"]:
        c["opaque"]["parameters"]["domainID"] = uid
    return out


# CEL of the policy. Pods the StatefulSet controller creates carry the pod-index label; the
# template names group 0 (a template must name a claim), the policy renames it for the ordinal.
_MATCH = (f"has(object.metadata.annotations) && '{PREFIX}' in object.metadata.annotations && "
          f"'{PODS_PER_TRAY}' in object.metadata.annotations && has(object.metadata.labels) && "
          f"'{POD_INDEX}' in object.metadata.labels && has(object.spec.resourceClaims) && "
          f"object.spec.resourceClaims.exists(c, c.name == '{CLAIM}')")
_CLAIM_NAME = (f"object.metadata.annotations['{PREFIX}'] + '-' + "
               f"string(int(object.metadata.labels['{POD_INDEX}']) / int(object.metadata.annotations['{PODS_PER_TRAY}']))")
_APPLY = (f"Object{{metadata: Object.metadata{{labels: {{'{TRAY_CLAIM}': variables.claim}}}}, "
          f"spec: Object.spec{{resourceClaims: [Object.spec.resourceClaims{{name: '{CLAIM}', "
          f"resourceClaimName: variables.claim}}]}}}}")


def admission_policy() -> list[dict[str, Any]]:
    """The cluster-scoped MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in
    Kubernetes v1.36) and its binding that give a StatefulSet pod the tray claim of its ordinal
    and the label :data:`TRAY_CLAIM` naming it (read by :func:`pod_affinity`'s ``matchLabelKeys``:
    mutating admission runs before the API server merges those keys into the selector).
    Pods without qdd's annotations are not touched (matchConditions); ``failurePolicy: Fail``: a
    pod the policy cannot rewrite is refused rather than created with group 0's claim."""
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
              "metadata": {"name": POLICY, "labels": {"app.kubernetes.io/part-of": "qdd"}},
              "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                       "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "matchConditions": [{"name": "qdd-tray-claim", "expression": _MATCH}],
                       "variables": [{"name": "claim", "expression": _CLAIM_NAME}],
                       "mutations": [{"patchType": "ApplyConfiguration",
                                      "applyConfiguration": {"expression": _APPLY}}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": POLICY, "labels": {"app.kubernetes.io/part-of": "qdd"}},
               "spec": {"policyName": POLICY}}
    return [policy, binding]


def stale_claims(observed: list[dict[str, Any]]) -> list[str]:
    """Names of the observed tray claims whose domainID is not the UID of the ComputeDomain they name
    as observed now (the ComputeDomain was deleted and created again: a claim is immutable and was
    bound to the old one, so no pod could get the new domain's channel through it). Not those being
    deleted, nor those whose ComputeDomain is not observed (it is being created)."""
    uids = {o["metadata"]["name"]: o["metadata"].get("uid") for o in observed if o["kind"] == "ComputeDomain"}
    out = []
    for o in observed:
        cd = ((o["metadata"].get("annotations") or {}).get(COMPUTE_DOMAIN) if o["kind"] == "ResourceClaim" else None)
        if not cd or o["metadata"].get("deletionTimestamp") or not uids.get(cd):
            continue
        ids = {c.get("opaque", {}).get("parameters", {}).get("domainID")
               for c in ((o.get("spec") or {}).get("devices") or {}).get("config") or []} - {None, ""}
        if ids and ids != {uids[cd]}:  # a claim without a domainID read is never called stale
            out.append(o["metadata"]["name"])
    return out

