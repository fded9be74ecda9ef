"""The ``Placed`` condition: where the scheduler put the deployment's gangs, or why it cannot. Pure.

With the Workload API the scheduler reports each PodGroup's outcome in its
``status.conditions[type=PodGroupScheduled]`` (reason ``Unschedulable`` when no placement — no
NVLink domain — holds the whole gang; k8s.io/api v0.36.3 scheduling/v1alpha2). qdd turns that into
numbers a user can act on: the GPUs the gang asks for and, per domain (``nvidia.com/gpu.clique``),
the free GPUs and the largest free block on one node, counted from the nodes' allocatable
``nvidia.com/gpu`` minus the GPU requests of the pods bound there (not finished).
Without the Workload API there is no gang: the condition says partial placement is possible.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .. import names
from ..plan import Plan
from .schedfacts import Said, said

CLIQUE = "nvidia.com/gpu.clique"
GPU = "nvidia.com/gpu"
DOMAINS_LISTED = 8
"""Domains named in a message, most free GPUs first (a status must stay small)."""

INSUFFICIENT = "InsufficientNVLinkDomainCapacity"
UNSCHEDULABLE = "Unschedulable"
"""Placed False for a cause other than GPUs that the scheduler stated (a selector, an affinity, a taint,
a DRA claim): no capacity is blamed and no capacity event posted."""
NO_GANG = "NoGangScheduling"


@dataclass(frozen=True)
class Domain:
    """One NVLink domain: ``free`` GPUs in all, ``largest`` free GPUs on one node, ``nodes`` in it."""

    clique: str
    free: int
    largest: int
    nodes: int


def _gpus(resources: dict[str, Any] | None) -> int:
    try:
        return int(str((resources or {}).get(GPU, 0)))
    except ValueError:
        return 0


def _pod_gpus(pod: dict[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and any init container (the scheduler's rule)."""
    spec = pod.get("spec") or {}
    run = sum(_gpus((c.get("resources") or {}).get("requests")) for c in spec.get("containers") or [])
    init = max((_gpus((c.get("resources") or {}).get("requests")) for c in spec.get("initContainers") or []), default=0)
    return max(run, init)


def free_by_domain(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[Domain]:
    """Free GPUs per clique, most free first. ``nodes``: Node objects; ``pods``: every pod bound to a
    node and not finished (the caller lists them). Nodes without a clique label or not Ready are
    left out (nothing schedules there)."""
    used: dict[str, int] = defaultdict(int)
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            used[node] += _pod_gpus(p)
    per: dict[str, list[int]] = defaultdict(list)
    for n in nodes:
        clique = (n["metadata"].get("labels") or {}).get(CLIQUE)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or [])
        if clique and ready and not (n.get("spec") or {}).get("unschedulable"):
            per[clique].append(max(0, _gpus((n.get("status") or {}).get("allocatable")) - used[n["metadata"]["name"]]))
    out = [Domain(c, sum(v), max(v), len(v)) for c, v in per.items()]
    return sorted(out, key=lambda d: (-d.free, -d.largest, d.clique))


def _scheduled(pg: dict[str, Any]) -> dict[str, Any]:
    for c in (pg.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodGroupScheduled":
            return c
    return {}


def unschedulable(pod_groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PodGroups the scheduler could not place (PodGroupScheduled False, Unschedulable)."""
    return [pg for pg in pod_groups if _scheduled(pg).get("status") == "False"
            and _scheduled(pg).get("reason") == "Unschedulable"]


def _asked(plan: Plan, group: str) -> tuple[str, int, int]:
    """(what the group is, GPUs, pods) of one of the deployment's PodGroups, in either slot (a rollout's
    new generation names its PodGroups with the slot, ``<cr>-engines-b``)."""
    p, d = plan.prefill, plan.decode
    for slot in ("a", "b"):
        if group == names.engines_pod_group(plan.name, slot):
            return (f"the whole deployment ({p.endpoints} x {p.topology_name} prefill + {d.endpoints} x "
                    f"{d.topology_name} decode)", plan.gpus, sum(r.endpoints * r.pods_per_endpoint for r in (p, d)))
        for r in (p, d):
            for ep in range(r.endpoints):
                if group == names.endpoint_pod_group(plan.name, r.role, ep, slot):
                    return f"{r.role} endpoint {ep} ({r.topology_name})", r.gpus_per_endpoint, r.pods_per_endpoint
    return f"PodGroup {group}", 0, 0


def _domains_text(domains: list[Domain] | None) -> str:
    if domains is None:
        return "free GPUs per domain unknown (the operator cannot list nodes and pods cluster-wide)"
    if not domains:
        return f"no Ready node carries the {CLIQUE} label"
    listed = ", ".join(f"{d.clique}: {d.free} GPUs free on {d.nodes} nodes (at most {d.largest} on one node)"
                       for d in domains[:DOMAINS_LISTED])
    more = f", and {len(domains) - DOMAINS_LISTED} more" if len(domains) > DOMAINS_LISTED else ""
    return f"free GPUs per NVLink domain ({CLIQUE}): {listed}{more}"


@dataclass(frozen=True)
class Stuck:
    """Pods of one PodGroup the scheduler marked Unschedulable: how many, their GPUs, the clique of the
    group's pods already bound (None when none is: the whole gang waits), and what the scheduler said
    (qdd.controller.schedfacts; None: it stated no cause yet)."""

    pods: int
    gpus: int
    bound_in: str | None = None
    said: Said | None = None


def _group_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")


def stuck_pods(pods: list[dict[str, Any]], clique_of_node: dict[str, str],
               pod_groups: list[dict[str, Any]] | None = None) -> dict[str, Stuck]:
    """Per PodGroup (``spec.schedulingGroup.podGroupName``) for which the scheduler stated a cause
    (a pod's or the PodGroup's Unschedulable message, qdd.controller.schedfacts): its pods that are not
    bound and that the scheduler marked Unschedulable. A PodGroup's own PodGroupScheduled stays True
    once its first gang was placed (the scheduler never sets it back, schedule_one_podgroup.go
    updatePodGroupCondition), so a recreated group that cannot come back shows only in its pods."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    bound_in: dict[str, str] = {}
    for p in pods:
        group = _group_of(p)
        if not group or p["metadata"].get("deletionTimestamp"):
            continue
        node = p["spec"].get("nodeName")
        if node:
            bound_in.setdefault(group, clique_of_node.get(node, ""))
        else:
            by_group[group].append(p)
    pgs = {pg["metadata"]["name"]: pg for pg in pod_groups or []}
    out: dict[str, Stuck] = {}
    for group, waiting in by_group.items():
        s = said(waiting, pgs.get(group))
        if s is None:
            continue  # nothing marked, or a gang still forming: no fact to report
        marked = [p for p in waiting if p["metadata"]["name"] in s.pods]
        out[group] = Stuck(len(marked), sum(_pod_gpus(p) for p in marked), bound_in.get(group) or None, s)
    return out


def _stuck_text(plan: Plan, group: str, stuck: Stuck) -> str:
    what, gpus, pods = _asked(plan, group)
    if stuck.bound_in:
        return (f"{stuck.pods} pods ({stuck.gpus} GPUs) of {what} cannot be placed in NVLink domain {stuck.bound_in}, "
                "where the rest of the gang is bound")
    return f"{what}: {gpus} GPUs in {pods} pods asked in one NVLink domain; no domain can hold it"


def placed(plan: Plan, gang: bool, desired_groups: list[str], pod_groups: list[dict[str, Any]],
           stuck: dict[str, Stuck], domains: list[Domain] | None) -> tuple[bool | None, str, str]:
    """(status, reason, message) of ``Placed``. ``desired_groups``: names of the PodGroups qdd
    renders; ``pod_groups``: the observed ones; ``stuck``: :func:`stuck_pods` of the engine pods
    (without the Workload API: keyed by ``""``); ``domains``: :func:`free_by_domain` (None when
    not listed). A capacity shortage (:data:`INSUFFICIENT`) only when the scheduler blamed GPUs and
    nothing else for every stuck gang; another cause it stated is :data:`UNSCHEDULABLE`, in its words."""
    if not gang:
        told = next((s.said for s in stuck.values() if s.said is not None), None)
        return (not stuck, NO_GANG,
                "no gang scheduling: partial placement possible (the cluster does not serve the Workload API, "
                "scheduling.k8s.io/v1alpha2 PodGroup); the pods are kept in one NVLink domain by pod affinity, "
                "one pod at a time" + (f"; pods the scheduler cannot place: {told.text}" if told else ""))
    if not desired_groups:
        return True, "NotRequired", "no multi-pod group: every endpoint is one pod"
    mine = {g: s for g, s in sorted(stuck.items()) if g in desired_groups and s.said is not None}
    if mine and all(s.said is not None and s.said.capacity_only for s in mine.values()):
        parts = [_stuck_text(plan, g, s) for g, s in mine.items()]
        return (False, INSUFFICIENT, "; ".join(parts) + "; no pod of it is bound (the scheduler retries when "
                "capacity frees); " + _domains_text(domains))
    if mine:
        parts = [f"{_asked(plan, g)[0]}: {s.pods} pods the scheduler cannot place: {s.said.text}"
                 for g, s in mine.items() if s.said is not None]
        return False, UNSCHEDULABLE, "; ".join(parts)
    by_name = {pg["metadata"]["name"]: pg for pg in pod_groups}
    done = [g for g in desired_groups if _scheduled(by_name.get(g, {})).get("status") == "True"]
    if len(done) == len(desired_groups):
        return True, "GangScheduled", f"{len(done)} PodGroup(s) placed, each all-or-nothing in one NVLink domain"
    return None, "Scheduling", f"{len(done)}/{len(desired_groups)} PodGroup(s) placed; waiting for the scheduler"
