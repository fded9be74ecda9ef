"""A deployment's engine endpoints as the autoscaler counts them, read from its pods. Pure.

An endpoint is one DP/EP group (a prefill pod, or a decode leader and its workers), named by its
``qdd.dev/role`` and ``qdd.dev/endpoint`` labels. Ready: every pod of it Running and Ready, none
terminating. Draining: its serving pod carries ``qdd.dev/group-role: draining`` (out of the router,
qdd.labels.DRAINING). GPUs: what its pods ask for (``nvidia.com/gpu`` limits), terminating pods
included — a pod being deleted holds its GPUs until it is gone, and the budget holds in every state.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .. import groups
from ... import labels

ENGINE_ROLES = ("prefill", "decode")
POD_INDEX = "apps.kubernetes.io/pod-index"
"""The StatefulSet controller's ordinal label (Kubernetes ≥ 1.28)."""


@dataclass(frozen=True)
class Endpoint:
    role: str
    index: int
    pods: tuple[str, ...]
    """Pods of the endpoint that exist and are not terminating."""
    leader: str | None
    """The pod that serves HTTP (the router's target), when it exists and is not terminating."""
    ready: bool
    draining: bool
    drain_since: float | None
    """Unix seconds the endpoint was taken out of the router (annotation qdd.dev/drain-since)."""


def pod_gpus(pod: dict[str, Any]) -> int:
    """GPUs a pod asks for: the sum of its containers' nvidia.com/gpu limits (requests when unset)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu")
        total += int(value or 0)
    return total


def engine_pods(observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine pods (prefill and decode) among a deployment's children, every slot."""
    return [o for o in observed if o.get("kind") == "Pod"
            and (o["metadata"].get("labels") or {}).get(labels.ROLE) in ENGINE_ROLES]


def held_gpus(observed: list[dict[str, Any]]) -> int:
    """GPUs the deployment's engine pods hold now: every engine pod that exists, terminating ones
    and those of another generation's slot included."""
    return sum(pod_gpus(p) for p in engine_pods(observed))


def _since(pod: dict[str, Any]) -> float | None:
    raw = (pod["metadata"].get("annotations") or {}).get(labels.DRAIN_SINCE)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def endpoint_index(pod: dict[str, Any]) -> int | None:
    """The endpoint a pod belongs to: its qdd.dev/endpoint label (decode groups' bare pods), else its
    StatefulSet ordinal (prefill: the ``apps.kubernetes.io/pod-index`` label, else the name's suffix)."""
    lab = pod["metadata"].get("labels") or {}
    raw = lab.get(labels.ENDPOINT) or lab.get(POD_INDEX) or pod["metadata"]["name"].rsplit("-", 1)[-1]
    return int(raw) if raw.isdigit() else None


def endpoints(observed: list[dict[str, Any]], generation: str) -> dict[str, dict[int, Endpoint]]:
    """role -> endpoint index -> :class:`Endpoint`, for the engine pods of ``generation`` (the one
    the autoscaler scales; another generation's pods are a rollout's business)."""
    by: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for p in engine_pods(observed):
        lab = p["metadata"].get("labels") or {}
        index = endpoint_index(p)
        if lab.get(labels.GENERATION, generation) != generation or index is None:
            continue
        by[(lab[labels.ROLE], index)].append(p)
    out: dict[str, dict[int, Endpoint]] = {r: {} for r in ENGINE_ROLES}
    for (role, index), pods in sorted(by.items()):
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        lead = next((p for p in live if (p["metadata"].get("labels") or {}).get(labels.GROUP_ROLE) != "worker"), None)
        draining = lead is not None and lead["metadata"]["labels"].get(labels.GROUP_ROLE) == labels.DRAINING
        size = max(int((p["metadata"].get("labels") or {}).get(labels.GROUP_SIZE) or 1) for p in pods)
        ready = len(live) == len(pods) >= size and all(groups.pod_ready(p) for p in live)
        out[role][index] = Endpoint(role, index, tuple(sorted(p["metadata"]["name"] for p in live)),
                                    lead["metadata"]["name"] if lead is not None else None, ready, draining,
                                    _since(lead) if lead is not None else None)
    return out


def started_seconds(observed: list[dict[str, Any]]) -> list[float]:
    """Seconds from creation to Ready of each Ready engine pod that serves HTTP (measured starts)."""
    from datetime import datetime

    def ts(s: str) -> float:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

    out = []
    for p in engine_pods(observed):
        if (p["metadata"].get("labels") or {}).get(labels.GROUP_ROLE) == "worker" or not groups.pod_ready(p):
            continue
        ready: dict[str, Any] = next((c for c in (p.get("status") or {}).get("conditions") or []
                                      if c.get("type") == "Ready"), {})
        created = p["metadata"].get("creationTimestamp")
        if ready.get("lastTransitionTime") and created:
            out.append(max(0.0, ts(ready["lastTransitionTime"]) - ts(created)))
    return out
