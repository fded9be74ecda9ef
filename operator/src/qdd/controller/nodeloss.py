"""Engine pods on a lost node, read from the pods alone (no node read, no cluster-wide RBAC). Pure.

What Kubernetes does when a node's kubelet stops reporting or reports NotReady (k8s.io/kubernetes
v1.36.3): after ``--node-monitor-grace-period`` (50 s by default) the node lifecycle controller
sets the node's Ready condition Unknown (or False), taints it ``node.kubernetes.io/unreachable`` (or
``not-ready``) with effect NoExecute, and turns the Ready condition of every pod bound there to
False — only Ready: ``MarkPodsNotReady`` (pkg/controller/util/node/controller_utils.go) copies the
condition and flips its status, and posts a ``NodeNotReady`` event on the pod. A kubelet that sets a
pod not ready sets ContainersReady False with it (reason ContainersNotReady), so **Ready False with
ContainersReady True** is the node controller's mark (qdd renders no readiness gates, the other
source of that pair). Once the pod's toleration of the taint runs out, the taint eviction controller
adds ``DisruptionTarget`` (reason ``DeletionByTaintManager``) and deletes the pod; with no kubelet to
confirm, the pod stays Terminating until the Node is deleted or tainted
``node.kubernetes.io/out-of-service`` (non-graceful node shutdown: the pod garbage collector then
deletes terminating pods of that NotReady node, pkg/controller/podgc gcTerminating, every 20 s).

qdd's engine pods have fixed names (``<cr>-decode-<n>-leader``, the StatefulSet's ``<cr>-prefill-<n>``),
so a group cannot be created again while such a pod exists: qdd says so and names the fix, and
does not force-delete (it cannot tell a powered-off tray from a partitioned one whose engines still
run and still hold NVLink/IMEX state; Kubernetes leaves that call to whoever fences the node).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def _conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}


def marked_not_ready_by_node_controller(pod: dict[str, Any]) -> bool:
    """The node lifecycle controller has set this pod not ready: its node is NotReady or unreachable."""
    c = _conditions(pod)
    return (bool(pod.get("spec", {}).get("nodeName")) and c.get("Ready", {}).get("status") == "False"
            and c.get("ContainersReady", {}).get("status") == "True")


def evicted_by_taint(pod: dict[str, Any]) -> bool:
    """The taint eviction controller deleted this pod (a NoExecute taint it no longer tolerates)."""
    c = _conditions(pod).get("DisruptionTarget", {})
    return c.get("status") == "True" and c.get("reason") == "DeletionByTaintManager"


@dataclass(frozen=True)
class LostPod:
    name: str
    node: str
    since: str
    """When the node controller set it not ready (the Ready condition's lastTransitionTime)."""
    terminating: bool
    evicted: bool

    @property
    def text(self) -> str:
        """For a condition message and an event: what happened, and what frees the pod's name."""
        if not self.terminating:
            return (f"pod {self.name} is on node {self.node}, which is NotReady or unreachable (pod set not ready by "
                    f"the node controller at {self.since}): Kubernetes evicts it when its toleration of the node's "
                    "NoExecute taint runs out (spec.cluster.nodeLossTolerationSeconds), and its endpoint is recreated")
        how = "evicted (NoExecute taint)" if self.evicted else "deleted"
        return (f"pod {self.name} was {how} but stays Terminating on node {self.node}, which is NotReady or unreachable "
                f"since {self.since}: no kubelet confirms the deletion, and its endpoint is recreated (same pod "
                f"names) only once it is gone. If the node is down, fence it: `kubectl taint node {self.node} "
                f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute` (non-graceful node shutdown: the pod garbage collector "
                "then deletes it) or `kubectl delete node` it")


def lost_pod(pod: dict[str, Any]) -> LostPod | None:
    """The pod as a :class:`LostPod` when its node is lost, else None."""
    if not marked_not_ready_by_node_controller(pod):
        return None
    return LostPod(pod["metadata"]["name"], pod["spec"]["nodeName"],
                   _conditions(pod)["Ready"].get("lastTransitionTime") or "an unknown time",
                   bool(pod["metadata"].get("deletionTimestamp")), evicted_by_taint(pod))


def lost_pods(pods: list[dict[str, Any]]) -> list[LostPod]:
    """The pods of ``pods`` whose node is lost, by name."""
    found = (lost_pod(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"]))
    return [p for p in found if p is not None]
