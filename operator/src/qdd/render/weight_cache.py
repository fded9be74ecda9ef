"""The node-local weight cache (``spec.model.cache``) → a ConfigMap, a prefetch DaemonSet and what
each engine pod gains. Pure. Design and alternatives: docs/cold-start.md#node-local-weight-cache.

- ConfigMap ``<cr>-weight-cache``: ``program.py`` (:mod:`qdd.weightcache.program`, standard library
  only), run by the engine image's ``python3``.
- DaemonSet ``<cr>-weight-cache``: one pod per tray the engines may use (their node selector, node
  affinity and tolerations, and ``spec.model.cache.nodeSelector``). Its init container ``prefetch``
  verifies the tray's copy (every byte) or fetches it from the claim, installing only what hashes
  to the pinned digest; its termination message says what it did. The main container ``hold``
  keeps the pod (and so the DaemonSet's view of the tray) until the digest changes. Labels
  ``qdd.dev/role: weight-cache``, ``qdd.dev/weights: <32 hex digits>``; the operator adds
  ``qdd.dev/weight-cache: verified | fetching | failed`` from the init container's status.
- Each engine pod: init container ``weights-select`` (points ``/qdd-model/model`` at the verified
  copy or at the claim, and says which), the tray's cache folder read-only, and a *preferred* pod
  affinity (weight 100) for a tray whose prefetch pod is ``verified``: the scheduler's InterPodAffinity
  score favours such trays, inside the NVLink domain the gang is placed in; nothing requires one.

Host paths: only ``<root>/<namespace>/<64 hex digits>``, ``root`` the operator's (never the spec's); read-only in
every engine container, read-write only in the prefetch init container. No privilege, no added
capability (all dropped), no service-account token.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .. import labels
from ..plan import Plan
from ..plan import weight_cache as wc
from .placement import gpu_node_selector, node_affinity

ROLE = "weight-cache"
PROGRAM_VOLUME = "weight-cache-program"
CACHE_VOLUME = "weight-cache"
LINK_VOLUME = "qdd-model"
MODEL_VOLUME = "models"
TERMINATION_LOG = "/dev/termination-log"
PREFETCH_INIT = "prefetch"
SELECT_INIT = "weights-select"
_PROGRAM_SRC = Path(__file__).resolve().parent.parent / "weightcache" / "program.py"
_LOCKED_DOWN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def name(plan: Plan) -> str:
    """The ConfigMap and DaemonSet of a deployment's cache: ``<cr>-weight-cache`` (both slots)."""
    return f"{plan.name}-{ROLE}"


def _digest(plan: Plan) -> str:
    cache = plan.spec.model.cache
    assert cache is not None
    return cache.digest


def _source(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, read-only mount at /models) of the claim: the remote copy."""
    src = plan.spec.model.source
    assert src is not None and src.pvc is not None
    mount: dict[str, Any] = {"name": MODEL_VOLUME, "mountPath": "/models", "readOnly": True}
    if src.pvc.sub_path:
        mount["subPath"] = src.pvc.sub_path
    return {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": src.pvc.claim_name, "readOnly": True}}, mount


def _cache_volume(plan: Plan, root: str) -> dict[str, Any]:
    # DirectoryOrCreate: a tray that never held this digest gets an empty folder, so an engine pod
    # there still starts (and reads the claim) instead of failing its mount.
    return {"name": CACHE_VOLUME, "hostPath": {"path": wc.tray_folder(root, plan.namespace, _digest(plan)), "type": "DirectoryOrCreate"}}


def _program_volume(plan: Plan) -> dict[str, Any]:
    return {"name": PROGRAM_VOLUME, "configMap": {"name": name(plan), "defaultMode": 0o444}}


def _program_mount() -> dict[str, Any]:
    return {"name": PROGRAM_VOLUME, "mountPath": wc.PROGRAM_DIR, "readOnly": True}


def configmap(plan: Plan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name(plan), "namespace": plan.namespace, "labels": labels.object_labels(plan.name, ROLE)},
            "data": {"program.py": _PROGRAM_SRC.read_text(encoding="utf-8")}}


def _pod_labels(plan: Plan) -> dict[str, str]:
    return labels.object_labels(plan.name, ROLE, {wc.DIGEST_LABEL: wc.digest_label(_digest(plan))})


def daemonset(plan: Plan, root: str) -> dict[str, Any]:
    s = plan.spec
    cache = s.model.cache
    assert cache is not None
    engine = s.engine
    volume, mount = _source(plan)
    program = ["python3", wc.PROGRAM]
    init = {
        "name": PREFETCH_INIT, "image": engine.image, "imagePullPolicy": engine.image_pull_policy,
        "command": [*program, "prefetch", "--source", "/models", "--cache", wc.CACHE_MOUNT, "--digest", cache.digest,
                    "--termination-log", TERMINATION_LOG],
        # Hashing and copying a checkpoint: a few cores, little memory (16 MiB reads, 8 files at once).
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": copy.deepcopy(_LOCKED_DOWN),
        "volumeMounts": [_program_mount(), mount, {"name": CACHE_VOLUME, "mountPath": wc.CACHE_MOUNT}],
    }
    hold = {
        "name": "hold", "image": engine.image, "imagePullPolicy": engine.image_pull_policy,
        "command": [*program, "hold"],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": copy.deepcopy(_LOCKED_DOWN), "volumeMounts": [_program_mount()],
    }
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False, "enableServiceLinks": False, "terminationGracePeriodSeconds": 5,
        "nodeSelector": {**gpu_node_selector(plan), **cache.node_selector},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        *(t.to_k8s() for t in s.cluster.tolerations)],
        "initContainers": [init], "containers": [hold],
        "volumes": [_program_volume(plan), volume, _cache_volume(plan, root)],
    }
    nodes = node_affinity(plan)
    if nodes:
        pod["affinity"] = {"nodeAffinity": nodes}
    if engine.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in engine.image_pull_secrets]
    pod_labels = _pod_labels(plan)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name(plan), "namespace": plan.namespace, "labels": labels.object_labels(plan.name, ROLE)},
            "spec": {"selector": {"matchLabels": {labels.DEPLOYMENT: plan.name, labels.ROLE: ROLE}},
                     # A new digest is a new folder: every tray may start on it at once.
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                     "template": {"metadata": {"labels": pod_labels}, "spec": pod}}}


def objects(plan: Plan, root: str) -> list[dict[str, Any]]:
    """The ConfigMap and the DaemonSet; nothing without ``spec.model.cache``."""
    if plan.spec.model.cache is None:
        return []
    return [configmap(plan), daemonset(plan, root)]


def preferred_term(plan: Plan) -> dict[str, Any]:
    """A tray whose prefetch pod (of any deployment of this namespace) verified this digest."""
    return {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {
        labels.ROLE: ROLE, wc.DIGEST_LABEL: wc.digest_label(_digest(plan)), wc.CACHE_STATE: "verified"}}}}


def add_to_engine_pod(pod: dict[str, Any], plan: Plan, root: str) -> dict[str, Any]:
    """A copy of an engine pod (or pod template) with the cache's init container, volumes, read-only
    mounts and preferred affinity; ``pod`` unchanged without ``spec.model.cache``."""
    if plan.spec.model.cache is None:
        return pod
    out = copy.deepcopy(pod)
    spec = out["spec"]
    vllm = next(c for c in spec["containers"] if c["name"] == "vllm")
    _, model_mount = _source(plan)
    select = {
        "name": SELECT_INIT, "image": vllm["image"], "imagePullPolicy": vllm.get("imagePullPolicy", "IfNotPresent"),
        "command": ["python3", wc.PROGRAM, "select", "--cache", wc.CACHE_MOUNT, "--digest", _digest(plan),
                    "--source", "/models", "--link", wc.MODEL_LINK, "--termination-log", TERMINATION_LOG],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": copy.deepcopy(_LOCKED_DOWN),
        "volumeMounts": [_program_mount(), model_mount,
                         {"name": CACHE_VOLUME, "mountPath": wc.CACHE_MOUNT, "readOnly": True},
                         {"name": LINK_VOLUME, "mountPath": wc.LINK_DIR}],
    }
    spec["initContainers"] = [*spec.get("initContainers", []), select]
    vllm["volumeMounts"] = [*vllm.get("volumeMounts", []),
                            {"name": CACHE_VOLUME, "mountPath": wc.CACHE_MOUNT, "readOnly": True},
                            {"name": LINK_VOLUME, "mountPath": wc.LINK_DIR, "readOnly": True}]
    spec["volumes"] = [*spec.get("volumes", []), _program_volume(plan), _cache_volume(plan, root),
                       {"name": LINK_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    aff = spec["affinity"] = spec.get("affinity") or {}  # the template leaves it empty (None) without node conditions
    pa = aff.setdefault("podAffinity", {})
    pa["preferredDuringSchedulingIgnoredDuringExecution"] = [
        *pa.get("preferredDuringSchedulingIgnoredDuringExecution", []), preferred_term(plan)]
    return out
