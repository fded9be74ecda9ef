"""What a status is computed from besides the children's counts: the ComputeDomain, the KV-transfer
preflight's verdict and the ``Placed`` condition (which may list nodes and pods cluster-wide). Computed
once per status, whether or not the canary's state is added to it."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from .. import labels, names
from ..plan import Plan
from ..preflight.names import ROLE as PREFLIGHT_ROLE
from ..preflight.observe import kv_transfer_verdict
from ..preflight.verdict import Thresholds, Verdict
from .kube import Kube
from .placement import Stuck, free_by_domain, placed, stuck_pods
from .platform import CLIQUE_LABEL, PlatformVerdict, judge_compute_domain
from .schedfacts import said
from .tray_watch import TrayWatch

Inputs = tuple[bool | None, Verdict | None, tuple[bool | None, str, str] | None, PlatformVerdict | None]


def placed_condition(kube: Kube, gang: bool, plan: Plan, desired: list[dict[str, Any]],
                     observed: list[dict[str, Any]]) -> tuple[bool | None, str, str]:
    """The Placed condition, from what the scheduler said (qdd.controller.schedfacts); lists nodes and
    pods cluster-wide only when it blamed GPUs."""
    groups = [o for o in observed if o["kind"] == "PodGroup"]
    pods = [o for o in observed if o["kind"] == "Pod"]
    if not gang:
        told = said(pods)
        return placed(plan, False, [], groups, {"": Stuck(len(told.pods), 0, None, told)} if told else {}, None)
    stuck = stuck_pods(pods, {}, groups)
    domains = None
    if any(s.said is not None and s.said.capacity_only for s in stuck.values()):
        capacity = kube.gpu_nodes_and_pods()
        if capacity is not None:
            nodes, _ = capacity
            stuck = stuck_pods(pods, {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(
                "nvidia.com/gpu.clique", "") for n in nodes}, groups)
            domains = free_by_domain(*capacity)
    return placed(plan, True, [o["metadata"]["name"] for o in desired if o["kind"] == "PodGroup"], groups,
                  stuck, domains)


def _engine_nodes(observed: list[dict[str, Any]], slot: str) -> set[str]:
    """Nodes the engine pods of ``slot`` are bound to."""
    return {o["spec"]["nodeName"] for o in observed if o["kind"] == "Pod" and (o.get("spec") or {}).get("nodeName")
            and (o["metadata"].get("labels") or {}).get(labels.ROLE) in ("prefill", "decode")
            and (o["metadata"].get("labels") or {}).get(labels.SLOT, slot) == slot}


def home_clique(nodes: dict[str, dict[str, Any]]) -> str | None:
    """The NVLink domain of a deployment kept in one (spec.cluster.sameNVLinkDomain): the clique label
    most of its engine pods' nodes (``nodes``, by name) carry; None without a strict majority."""
    top = Counter(c for n in nodes.values() if (c := ((n.get("metadata") or {}).get("labels") or {}).get(
        CLIQUE_LABEL))).most_common(2)
    return top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None


def status_inputs(kube: Kube, gang: bool, plan: Plan | None, desired: list[dict[str, Any]],
                  observed: list[dict[str, Any]], trays: TrayWatch | None = None) -> Inputs:
    """(ComputeDomain Ready — None when none is used —, the preflight's verdict — None when it is off —,
    Placed — None without a plan —, the ComputeDomain's platform verdict — None when none is used).
    ``trays``: the nodes the node watch saw (qdd.controller.tray_watch), for the ComputeDomain's
    tray-rejoin check; None or nothing seen: that check is skipped."""
    cd_ready, cd_verdict = None, None
    if plan is not None and plan.compute_domain:
        cd = next((o for o in observed if o["kind"] == "ComputeDomain"
                   and o["metadata"]["name"] == names.compute_domain(plan.name, plan.slot)), None)
        pod_nodes = _engine_nodes(observed, plan.slot)
        nodes = trays.nodes(pod_nodes) if trays is not None else {}
        cd_verdict = judge_compute_domain(cd, pod_nodes, nodes, home_clique(nodes) if plan.spec.cluster.same_nvlink_domain
                                          else None, dt.datetime.now(dt.timezone.utc))
        cd_ready = cd_verdict.ready
    preflight = [o for o in desired if o["metadata"]["labels"].get(labels.ROLE) == PREFLIGHT_ROLE]
    kv = None
    if plan is not None and preflight:
        pf = plan.spec.kv_transfer.preflight
        kv = kv_transfer_verdict(preflight, observed, Thresholds(min_bulk_gbps=pf.min_bulk_gbps,
                                                                 max_request_ms=pf.max_request_ms))
    return cd_ready, kv, placed_condition(kube, gang, plan, desired, observed) if plan is not None else None, cd_verdict
