"""Desired vs observed children: what to apply and what to prune. Pure."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .. import labels
from ..hashing import content_hash

APPLIED_HASH = f"{labels.GROUP}/applied-hash"
"""Annotation on every child: hash of the manifest qdd last applied; equal hash → no API write."""


# Kinds qdd manages, with the API version to list them by. Order = apply order: a PodGroup is
# admitted only when its Workload exists (the PodGroupWorkloadExists admission plugin).
MANAGED_KINDS: list[tuple[str, str]] = [
    ("resource.nvidia.com/v1beta1", "ComputeDomain"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("scheduling.k8s.io/v1alpha2", "Workload"),
    ("scheduling.k8s.io/v1alpha2", "PodGroup"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("qdd.dev/v1alpha1", "QwenDisaggRoleScale"),
]


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def manifest_hash(obj: dict[str, Any]) -> str:
    return content_hash(obj, 16)


def owned(owner_uid: str, obj: dict[str, Any]) -> bool:
    """True when ``obj`` is controlled by the custom resource with ``owner_uid``."""
    return any(r.get("uid") == owner_uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


def genuine(observed: list[dict[str, Any]], owner_uid: str) -> list[dict[str, Any]]:
    """``observed`` without the engine pods (role prefill or decode) that are not this resource's:
    an engine pod counts when its controller is the resource (a bare pod qdd created) or an object
    the resource controls (its StatefulSets, Jobs). Children are listed by label, and anyone who may
    create pods in the namespace can label one: before (round 4), a pod labelled as a decode
    endpoint of another revision made the operator delete that endpoint's real pods (a group
    "outdated"), on every pass it was there, and a non-numeric endpoint label raised in every pass.
    Kubernetes' own controllers act on the pods whose controller reference names them likewise."""
    ctrl = {owner_uid} | {o["metadata"].get("uid") for o in observed if o["kind"] != "Pod" and owned(owner_uid, o)}

    def mine(o: dict[str, Any]) -> bool:
        if o["kind"] != "Pod" or (o["metadata"].get("labels") or {}).get(labels.ROLE) not in ("prefill", "decode"):
            return True
        return any(r.get("controller") and r.get("uid") in ctrl for r in o["metadata"].get("ownerReferences") or [])
    return [o for o in observed if mine(o)]


def with_owner(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` carrying the owner reference (controller) and its manifest hash."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta["ownerReferences"] = [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }]
    meta.setdefault("annotations", {})[APPLIED_HASH] = manifest_hash(obj)
    return out


@dataclass
class Diff:
    """``apply``: objects to server-side apply; ``prune``: (apiVersion, kind, name) to delete;
    ``replace``: immutable objects (Jobs) whose desired manifest changed: deleted now, created
    again by a later pass once gone."""

    apply: list[dict[str, Any]] = field(default_factory=list)
    prune: list[tuple[str, str, str]] = field(default_factory=list)
    replace: list[tuple[str, str, str]] = field(default_factory=list)


def diff(desired: list[dict[str, Any]], observed: list[dict[str, Any]], owner_uid: str) -> Diff:
    """Bare Pods are created once and never re-applied (their spec is immutable): a changed pod is
    replaced through its group's revision (:mod:`.groups`). Jobs, and Workloads and PodGroups
    that say ``on-change: replace``, are deleted when they changed (created again by a later
    pass); ``on-change: keep`` ones are only created. Everything else is applied when its
    manifest hash changed. Observed children of this owner that are not desired are pruned (once:
    one already terminating is not deleted again on every pass)."""
    seen = {key(o): o for o in observed}
    out = Diff()
    for d in desired:
        o = seen.get(key(d))
        have = (o["metadata"].get("annotations") or {}).get(APPLIED_HASH) if o else None
        changed = have != d["metadata"]["annotations"][APPLIED_HASH]
        if o is None:
            out.apply.append(d)
        elif _replaced_on_change(d):
            if changed and not o["metadata"].get("deletionTimestamp"):
                out.replace.append((d["apiVersion"], d["kind"], d["metadata"]["name"]))
        elif d["kind"] != "Pod" and changed and _on_change(d) != "keep":
            out.apply.append(d)
    wanted = {key(d) for d in desired}
    groups = {_group(d) for d in desired if d["kind"] == "Pod"}
    for o in observed:
        if key(o) in wanted or not owned(owner_uid, o) or o["metadata"].get("deletionTimestamp"):
            continue
        if o["kind"] == "Pod" and _group(o) in groups:
            continue  # a member of a group of the old shape: rolled with its group (.groups)
        out.prune.append((o["apiVersion"], o["kind"], o["metadata"]["name"]))
    return out


def _on_change(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(labels.ON_CHANGE)


def _replaced_on_change(obj: dict[str, Any]) -> bool:
    return obj["kind"] == "Job" or _on_change(obj) == "replace"


def _group(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    lab = obj["metadata"].get("labels") or {}
    return lab.get(labels.ROLE), lab.get(labels.ENDPOINT)
