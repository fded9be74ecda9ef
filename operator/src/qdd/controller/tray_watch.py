"""Nodes watched for trays coming back: a deployment that waits on a node or on room in an NVLink
domain gets a pass when a node's transition can end the wait, not at the next resync.

After a tray reboot the node, its clique label ``nvidia.com/gpu.clique``, its ComputeDomain daemon
and the domain come back one at a time (NVIDIA/ai-cloud-validation#625); a repaired node is
uncordoned or loses its ``node.kubernetes.io/out-of-service`` taint by hand (docs/reliability.md).
None of these is an event of the deployment's children: before this watch, a group waiting to
return to its domain (docs/placement.md) and the conditions that name the tray (``Placed``,
``ComputeDomainReady`` ``TrayRejoining``, ``Degraded`` ``NodeNotReady``) were looked at again only
at the resync.

Each pass records what its deployment waits for (:func:`waiting_of`, :meth:`TrayWatch.observe`):

- ``nodes``: nodes its engine pods are bound to that are lost (the node controller's mark on the
  pod, qdd.controller.nodeloss) or not usable (NotReady, cordoned, a ``node.kubernetes.io/`` taint,
  no clique label): any transition of such a node queues a pass;
- ``cliques``: engine pods not bound yet, whose deployment's other engine pods are bound in these
  NVLink domains (one domain for the whole deployment, ``spec.cluster.sameNVLinkDomain``);
- ``anywhere``: engine pods not bound and no domain to keep to (none bound yet, or one gang per
  group): room in any domain may do.

A node *comes back* (:func:`came_back`) when it turns usable — Ready, schedulable, with a clique
label — or changes clique while usable; that queues the deployments waiting in its clique or
anywhere. Only transitions queue anything: a node event whose state (:class:`NodeState`) is the
one already seen — a heartbeat, a changed image list — queues nothing. The watch's first listing
only fills the cache.

The watch is kopf's, on every Node (:func:`register`): node objects change rarely (the kubelet
reports its status on a change, else every 5 minutes, with its Lease as the heartbeat). Nodes are
cluster-scoped: a namespace-scoped install reads them through the chart's ``-discovery``
ClusterRole; without it (``rbac.discovery=false``) the watch is not registered
(qdd.controller.kube.Kube.may_watch_nodes, asked once at start-up) and these waits end at the
resync, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from .. import labels
from ..preflight.names import ROLE as PREFLIGHT_ROLE
from . import metrics
from .nodeloss import marked_not_ready_by_node_controller
from .placement import CLIQUE

NODES = ("", "v1", "nodes")
NODE_TAINTS = "node.kubernetes.io/"
"""Taints Kubernetes itself sets on a node it keeps pods off (not-ready, unreachable, unschedulable,
out-of-service, …); taints of other keys are the cluster's own and GPU pods may tolerate them."""
ENGINE_ROLES = ("prefill", "decode", PREFLIGHT_ROLE)

Key = tuple[str, str]


@dataclass(frozen=True)
class NodeState:
    """What of a Node decides whether engine pods can run there: its Ready condition is True
    (``ready``), it is not cordoned and has no ``node.kubernetes.io/`` NoSchedule or NoExecute taint
    (``schedulable``), its ``nvidia.com/gpu.clique`` label (``clique``, None without one)."""

    ready: bool
    schedulable: bool
    clique: str | None

    @property
    def usable(self) -> bool:
        return self.ready and self.schedulable and self.clique is not None


def node_state(node: Mapping[str, Any]) -> NodeState:
    """The :class:`NodeState` of a Node object (API JSON, camelCase)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    tainted = any(str(t.get("key") or "").startswith(NODE_TAINTS) and t.get("effect") in ("NoSchedule", "NoExecute")
                  for t in spec.get("taints") or [])
    clique = ((node.get("metadata") or {}).get("labels") or {}).get(CLIQUE)
    return NodeState(ready, not spec.get("unschedulable") and not tainted, str(clique) if clique else None)


def _slim(node: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Node the ComputeDomain's judgement reads (qdd.controller.platform): name, clique
    label, Ready condition. Kept instead of the whole object (its image list alone is kilobytes)."""
    meta = node.get("metadata") or {}
    clique = (meta.get("labels") or {}).get(CLIQUE)
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    return {"metadata": {"name": meta.get("name"), "labels": {CLIQUE: clique} if clique else {}},
            "status": {"conditions": ready}}


def came_back(old: NodeState | None, new: NodeState | None) -> bool:
    """The node turned usable (or was first seen usable after the first listing), or moved to
    another clique while usable: pods waiting for room in its clique may now fit."""
    return new is not None and new.usable and (old is None or not old.usable or old.clique != new.clique)


@dataclass(frozen=True)
class Waiting:
    """What a deployment waits for that only a node can bring (see the module's docstring)."""

    nodes: frozenset[str] = frozenset()
    cliques: frozenset[str] = frozenset()
    anywhere: bool = False

    def __bool__(self) -> bool:
        return bool(self.nodes or self.cliques or self.anywhere)


def waiting_of(pods: Iterable[dict[str, Any]], nodes: Mapping[str, NodeState], one_domain: bool = True) -> Waiting:
    """What the engine pods of one deployment (``pods``: its observed pods; prefill, decode and the
    KV-transfer preflight's) wait for, given the nodes seen (``nodes``, by name; empty when Nodes
    are not watched). ``one_domain``: spec.cluster.sameNVLinkDomain (pods not bound wait in the
    domain of those bound); false: each group picks its own domain, so they wait anywhere."""
    lost: set[str] = set()
    homes: set[str] = set()
    unbound = False
    for p in pods:
        meta = p.get("metadata") or {}
        if (meta.get("labels") or {}).get(labels.ROLE) not in ENGINE_ROLES:
            continue
        node = (p.get("spec") or {}).get("nodeName")
        if not node:
            unbound = unbound or not meta.get("deletionTimestamp")
        elif marked_not_ready_by_node_controller(p) or (node in nodes and not nodes[node].usable):
            lost.add(node)
        elif not meta.get("deletionTimestamp"):
            homes.add(node)
    if not unbound:
        return Waiting(frozenset(lost))
    cliques = frozenset(c for n in homes if n in nodes and (c := nodes[n].clique)) if one_domain else frozenset()
    return Waiting(frozenset(lost), cliques, not cliques)


def to_queue(node: str, old: NodeState | None, new: NodeState | None, waiting: Mapping[Key, Waiting]) -> list[Key]:
    """The deployments whose pass a transition of ``node`` (``old`` → ``new``; None: not seen, or
    deleted) queues: every one waiting on that node, on any change of it; those waiting in its new
    clique or anywhere, when it came back (:func:`came_back`). Sorted; empty when nothing changed."""
    if old == new:
        return []
    back = came_back(old, new)
    return sorted(k for k, w in waiting.items()
                  if node in w.nodes or (back and new is not None and (w.anywhere or new.clique in w.cliques)))


class TrayWatch:
    """The nodes seen (their :class:`NodeState` and the slim object the ComputeDomain's judgement
    reads) and what each deployment waits for. Thread-safe; no I/O: kopf's node events come in
    through :meth:`on_event`, the passes through :meth:`observe`. Without the node watch nothing is
    seen: :meth:`nodes` is empty and only the node controller's marks on pods are waited on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, NodeState] = {}
        self._slims: dict[str, dict[str, Any]] = {}
        self._waiting: dict[Key, Waiting] = {}

    def on_event(self, type_: str | None, node: Mapping[str, Any]) -> list[Key]:
        """A watch event of one Node (``type_``: None for kopf's first listing, ADDED, MODIFIED,
        DELETED): the deployments whose pass it queues (:func:`to_queue`)."""
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return []
        with self._lock:
            old = self._states.get(name)
            new = None if type_ == "DELETED" else node_state(node)
            if new is None:
                self._states.pop(name, None)
                self._slims.pop(name, None)
            else:
                self._states[name], self._slims[name] = new, _slim(node)
            return [] if type_ is None else to_queue(name, old, new, self._waiting)  # a listing: what is, not a change

    def observe(self, key: Key, pods: Iterable[dict[str, Any]], one_domain: bool = True) -> Waiting:
        """Record what deployment ``key`` waits for, from its pods of this pass (:func:`waiting_of`)."""
        with self._lock:
            w = waiting_of(pods, self._states, one_domain)
            if w:
                self._waiting[key] = w
            else:
                self._waiting.pop(key, None)
            return w

    def forget(self, key: Key) -> None:
        with self._lock:
            self._waiting.pop(key, None)

    def nodes(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The slim Node objects (name, clique label, Ready condition) of ``names`` that were seen."""
        with self._lock:
            return {n: self._slims[n] for n in names if n in self._slims}


def register(state: Mapping[str, Any]) -> None:
    """kopf's watch of every Node: each event goes to the reconciler's :class:`TrayWatch`
    (``state["r"].trays``), and the passes it asks for to the work queue (``state["queue"]``). With
    peering kopf runs it only on the replica that acts. On kopf's event loop: it only queues."""

    @kopf.on.event(*NODES)
    async def on_node(event: Mapping[str, Any], **_: Any) -> None:
        r, queue = state.get("r"), state.get("queue")
        if r is None or queue is None:
            return
        for key in r.trays.on_event(event.get("type"), event.get("object") or {}):
            metrics.TRIGGERS.labels("node", "Node", event.get("type") or "").inc()
            queue.add(key)
