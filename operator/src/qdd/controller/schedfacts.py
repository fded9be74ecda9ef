"""What the scheduler said about the pods it could not place, sorted into causes. Pure.

qdd states a cause only when the scheduler has: the ``PodScheduled=False, reason Unschedulable``
condition of a pod (its message is the scheduler's FitError, or its gang's verdict) or the
``PodGroupScheduled=False`` condition of a PodGroup. Before the scheduler has looked, or while a
gang is still forming, there is no fact, and no capacity is blamed (issue 23: a Warning "no domain
can hold it" was posted for gangs that placed a second later; a nodeSelector nothing matched was
reported as a capacity shortage while 72 GPUs were free).

The phrases are the scheduler plugins' own (k8s.io/kubernetes v1.36.3,
pkg/scheduler/framework/plugins): NodeResourcesFit ``Insufficient <resource>`` (noderesources/fit.go),
NodeAffinity ``node(s) didn't match Pod's node affinity/selector`` (nodeaffinity), InterPodAffinity
``... pod affinity rules`` / ``... anti-affinity rules`` (interpodaffinity), TaintToleration
``node(s) had untolerated taint(s)`` (tainttoleration), NodeUnschedulable ``node(s) were
unschedulable`` (nodeunschedulable), DynamicResources ``cannot allocate all claims``, ``resourceclaim
...``, ``device class ... does not exist`` (dynamicresources). A gang's pods that fit but whose group
did not carry ``pod group is unschedulable`` (schedule_one_podgroup.go errPodGroupUnschedulable)
with the GangScheduling plugin's permit message ``waiting for minCount pods from a gang ...``: they
follow their group's cause and have none of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_CAPACITY = "GPU capacity"
CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("node selector or affinity", ("didn't match pod's node affinity/selector",)),
    ("pod affinity", ("pod affinity rules", "anti-affinity rules")),
    ("taint", ("untolerated taint", "taints that the pod didn't tolerate")),
    ("DRA claim", ("resourceclaim", "resource claim", "cannot allocate all claims", "device class")),
    ("cordoned nodes", ("node(s) were unschedulable",)),
    (GPU_CAPACITY, ("insufficient nvidia.com/gpu",)),
    ("CPU or memory", ("insufficient cpu", "insufficient memory", "insufficient ephemeral-storage")),
)
"""(cause, lower-case phrases of the scheduler's messages that state it), in the order they are named."""
AFTER_FIT = ("pod affinity", "DRA claim", "CPU or memory")
"""Causes that block a node the GPU check passed (or, for CPU/memory, the same check): beside GPUs,
they make the shortage not the only reason."""


def causes_of(message: str) -> tuple[str, ...]:
    """The causes a scheduler message states, in :data:`CAUSES` order; () when it states none (a gang
    follower, a message qdd does not know)."""
    low = message.lower()
    return tuple(cause for cause, phrases in CAUSES if any(p.lower() in low for p in phrases))


def _unschedulable(conditions: list[dict[str, Any]] | None, ctype: str) -> dict[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == ctype and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c
    return None


@dataclass(frozen=True)
class Said:
    """What the scheduler said about one gang (or, without gangs, one pod): the ``causes`` it stated,
    ``message``, one of its messages that states them (the first such, trimmed), and the pods it
    marked Unschedulable."""

    causes: tuple[str, ...]
    message: str
    pods: tuple[str, ...]

    @property
    def capacity_only(self) -> bool:
        """The scheduler blamed GPUs, and nothing that could block the nodes that have them: the one case
        qdd calls a capacity shortage. The scheduler reports one reason per node, its first failing filter
        (framework RunFilterPlugins), in the order NodeUnschedulable, TaintToleration, NodeAffinity, ...,
        NodeResourcesFit, ..., InterPodAffinity, DynamicResources (pkg/scheduler/apis/config/v1/
        default_plugins.go). So the nodes it counts as short of GPUs passed the taint, selector and
        cordon checks, and the nodes counted under those (CPU-only nodes, another pool) were never
        candidates; a cause checked after the GPUs (pod affinity, a DRA claim) or CPU/memory is a
        second cause, and then no shortage is claimed."""
        return GPU_CAPACITY in self.causes and not set(self.causes) & set(AFTER_FIT)

    @property
    def text(self) -> str:
        """The causes and the scheduler's words, for a condition message."""
        return f"{' and '.join(self.causes)} (the scheduler: \"{self.message}\")"


def pod_said(pod: dict[str, Any]) -> tuple[tuple[str, ...], str] | None:
    """(causes, message) of a pod that is not bound and that the scheduler marked Unschedulable;
    None otherwise (bound, deleted, or not looked at yet)."""
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return None
    c = _unschedulable((pod.get("status") or {}).get("conditions"), "PodScheduled")
    if c is None:
        return None
    msg = " ".join((c.get("message") or "").split())
    return causes_of(msg), msg


def said(pods: list[dict[str, Any]], pod_group: dict[str, Any] | None = None, limit: int = 300) -> Said | None:
    """What the scheduler said about ``pods`` (one gang's, or any set) and their PodGroup; None when
    it stated no cause for any of them (nothing marked, or only gang followers and a forming gang)."""
    causes: list[str] = []
    message, marked = "", []
    sources: list[tuple[tuple[str, ...], str]] = []
    for p in pods:
        got = pod_said(p)
        if got is not None:
            marked.append(p["metadata"]["name"])
            sources.append(got)
    pg = _unschedulable(((pod_group or {}).get("status") or {}).get("conditions"), "PodGroupScheduled")
    if pg is not None and marked:  # a stale False whose pods are all bound says nothing now
        msg = " ".join((pg.get("message") or "").split())
        sources.append((causes_of(msg), msg))
    for found, msg in sources:
        for c in found:
            if c not in causes:
                causes.append(c)
        if found and not message:
            message = msg
    if not causes:
        return None
    ordered = tuple(c for c, _ in CAUSES if c in causes)
    return Said(ordered, message[:limit] + ("…" if len(message) > limit else ""), tuple(sorted(marked)))
