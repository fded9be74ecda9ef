"""The GB200 platform's state, judged from what NVIDIA's DRA driver and the nodes report: whether the
deployment's ComputeDomain serves every tray the engine pods run on, and if not, which tray and why.

Statuses are the real driver's (kubernetes-sigs/dra-driver-nvidia-gpu,
api/nvidia.com/resource/v1beta1/computedomain.go): ``status.status`` Ready|NotReady (the global
state), ``status.nodes[]`` one entry per node whose IMEX daemon joined (``name``, ``ipAddress``,
``cliqueID``, ``index``, ``status`` Ready|NotReady — the daemon's own readiness). The driver's own
comment: workloads should not rely on the global field alone; the per-node entries say more.
Field cases (docs/facts/gb200-platform.md):

- a ComputeDomain that loses a node's entry never turns Ready (dra-driver-nvidia-gpu#1050): the
  tray is named once the wait is over its bound;
- IMEX imports failing on one tray while the domain says Ready (#1417): a NotReady entry under a
  Ready domain is not Ready, and names the tray;
- a tray back after a reboot returns one piece at a time — the node, its clique label, its IMEX
  daemon, then the domain (NVIDIA/ai-cloud-validation#625): each missing piece is named, with the
  wait bounded from the node's return.

Pure: the controller passes the objects it observed; no I/O here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..api.conditions import Reason

CLIQUE_LABEL = "nvidia.com/gpu.clique"

CONVERGE_BOUND_S = 600
"""Seconds a ComputeDomain (or a tray's entry in it) may take to become Ready before qdd calls it
stuck: the driver starts one IMEX daemon per node and each joins within tens of seconds in NVIDIA's
guides; a wait of ten minutes is well past that and short of the engines' start-up budget."""


@dataclass(frozen=True)
class PlatformVerdict:
    """``ready``: every tray of the deployment is served. ``reason``: the ComputeDomainReady reason.
    ``nodes``: the trays named in ``message``. ``stuck``: the wait is over its bound."""

    ready: bool
    reason: str
    message: str
    nodes: tuple[str, ...] = ()
    stuck: bool = False


def _time(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _ready_since(node: dict[str, Any]) -> dt.datetime | None:
    """When the node's Ready condition last turned True (None: not Ready, or unknown)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return _time(c.get("lastTransitionTime")) if c.get("status") == "True" else None
    return None


def _age_s(since: dt.datetime | None, now: dt.datetime) -> float:
    return (now - since).total_seconds() if since else 0.0


def judge_compute_domain(cd: dict[str, Any] | None, pod_nodes: set[str], nodes: dict[str, dict[str, Any]],
                         clique: str | None, now: dt.datetime, bound_s: int = CONVERGE_BOUND_S) -> PlatformVerdict:
    """The verdict for one deployment's ComputeDomain.

    ``pod_nodes``: nodes the deployment's engine pods are bound to (spec.nodeName). ``nodes``: the Node
    objects observed, by name (may be empty when the caller does not watch Nodes: then node-level
    checks are skipped). ``clique``: the NVLink domain the deployment is pinned to (the clique label
    value), or None (then only a tray without any clique label is rejoining). Reasons: Ready, NotReady (waiting, within the bound), NotConverging, ImexNodeNotReady,
    TrayRejoining."""
    if cd is None:
        return PlatformVerdict(False, Reason.COMPUTE_DOMAIN_NOT_READY, "the ComputeDomain does not exist yet")
    name = cd["metadata"]["name"]
    status = cd.get("status") or {}
    entries = {e.get("name"): e for e in status.get("nodes") or [] if e}
    created = _time(cd["metadata"].get("creationTimestamp"))
    for node_name in sorted(pod_nodes):
        node = nodes.get(node_name)
        if node is None:
            continue
        since = _ready_since(node)
        if since is None:
            continue  # a NotReady tray is node loss (qdd.controller.nodeloss), not the domain's
        label = ((node.get("metadata") or {}).get("labels") or {}).get(CLIQUE_LABEL)
        if label is None or (clique and label != clique):
            # engine pods are bound only to nodes with a clique label (required node affinity): one bound
            # to a node without it is on a tray that came back before its label did
            stuck = _age_s(since, now) > bound_s
            domain = f" (the deployment's NVLink domain is {clique})" if clique else ""
            return PlatformVerdict(False, Reason.TRAY_REJOINING,
                                   f"tray {node_name} is back but has {'no ' + CLIQUE_LABEL + ' label' if label is None else f'clique {label}'}"
                                   f"{domain}; GPU Feature Discovery labels a tray after "
                                   "its GPUs and fabric are up" + (f" — over {bound_s} s since it came back: check GPU Feature "
                                                                   "Discovery and the NVLink fabric manager on it" if stuck else ""),
                                   (node_name,), stuck)
    missing = sorted(n for n in pod_nodes if n not in entries)
    not_ready = sorted(n for n in pod_nodes if n in entries and entries[n].get("status", "NotReady") != "Ready")
    globally = status.get("status") == "Ready"
    if globally and not not_ready:
        # An entry missing under a Ready domain is not judged: the driver lists daemons as they join, and
        # with numNodes 0 (what qdd renders) its global Ready does not wait for every node.
        return PlatformVerdict(True, Reason.COMPUTE_DOMAIN_READY, f"ComputeDomain {name} is Ready")
    if globally and not_ready:
        return PlatformVerdict(False, Reason.IMEX_NODE_NOT_READY,
                               f"ComputeDomain {name} reports Ready but the IMEX daemon on {', '.join(not_ready)} is NotReady: "
                               "GPU memory imports on that tray fail (dra-driver-nvidia-gpu#1417); check its compute-domain "
                               "daemon pod and `nvidia-imex-ctl -N` there", tuple(not_ready), True)
    waiting_since = max([t for t in [created] + [_ready_since(nodes[n]) for n in missing + not_ready if n in nodes] if t],
                        default=None)
    stuck = _age_s(waiting_since, now) > bound_s
    named = missing or not_ready
    if not named:
        what = f"ComputeDomain {name} is {status.get('status') or 'without status'}"
    elif missing:
        what = f"ComputeDomain {name} has no entry for {', '.join(missing)} (its IMEX daemon has not joined)"
    else:
        what = f"the IMEX daemon on {', '.join(not_ready)} is NotReady in ComputeDomain {name}"
    if not stuck:
        return PlatformVerdict(False, Reason.COMPUTE_DOMAIN_NOT_READY, f"{what}; waiting for the NVIDIA DRA driver", tuple(named))
    return PlatformVerdict(False, Reason.COMPUTE_DOMAIN_NOT_CONVERGING,
                           f"{what} for over {bound_s} s (dra-driver-nvidia-gpu#1050: a domain that lost a node entry "
                           "never turns Ready): check the compute-domain daemon pods on "
                           f"{', '.join(named) if named else 'the trays'} and `kubectl describe computedomain {name}`",
                           tuple(named), True)
