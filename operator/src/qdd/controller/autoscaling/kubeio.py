"""The autoscaler's reads and writes on the API server: the performance profile's ConfigMap, a
QwenDisaggRoleScale's ``/scale`` and ``/status``, and a serving pod's drain label.

Writes of ``spec.replicas`` go through the scale subresource with their own field manager
(qdd.labels.AUTOSCALER_FIELD_MANAGER): the path an HPA or ``kubectl scale`` takes too, so there is
one way a count changes, whoever the writer is.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from ... import labels
from ...api.rolescale import API_VERSION, KIND
from ...perf.profile import CONFIGMAP_KEY, PerfProfile, configmap_name, load_profile
from ..kube import TIMEOUT, Kube
from ..metrics import API_WRITES

log = logging.getLogger("qdd.autoscaler")
PROFILE_TTL_S = 30.0
"""A profile ConfigMap is read at most this often per deployment (it changes when a benchmark
calibrates it, qdd.perf.measured)."""


class ProfileSource:
    """``<deployment>-perf-profile`` (qdd.perf.profile), read with a TTL: (profile, what was read or
    why it could not be)."""

    def __init__(self, kube: Kube, ttl_s: float = PROFILE_TTL_S):
        self.kube, self.ttl_s = kube, ttl_s
        self._cache: dict[tuple[str, str], tuple[float, PerfProfile | None, str]] = {}

    def get(self, namespace: str, deployment: str) -> tuple[PerfProfile | None, str]:
        hit = self._cache.get((namespace, deployment))
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1], hit[2]
        profile, text = self._read(namespace, deployment)
        self._cache[(namespace, deployment)] = (time.monotonic(), profile, text)
        return profile, text

    def forget(self, namespace: str, deployment: str) -> None:
        self._cache.pop((namespace, deployment), None)

    def _read(self, namespace: str, deployment: str) -> tuple[PerfProfile | None, str]:
        name = configmap_name(deployment)
        where = f"ConfigMap {name}"
        try:
            cm = self.kube._required("v1", "ConfigMap").get(name=name, namespace=namespace, _request_timeout=TIMEOUT)
        except NotFoundError:
            return None, (f"{where} not found: create it with `qdd perf profile -f <cr.yaml> -o configmap` "
                          "(docs/performance-model.md)")
        except ApiException as e:
            return None, f"{where} cannot be read: {e.reason}"
        text = ((cm.to_dict().get("data") or {}).get(CONFIGMAP_KEY))
        if not text:
            return None, f"{where} has no key {CONFIGMAP_KEY}"
        try:
            profile = load_profile(text)
        except ValueError as e:
            return None, f"{where}: {str(e).splitlines()[0][:300]}"
        return profile, f"{where} ({profile.database}; ISL/OSL {profile.isl}/{profile.osl})"


def scale(kube: Kube, namespace: str, name: str, replicas: int) -> None:
    """Write ``spec.replicas`` of a QwenDisaggRoleScale through its scale subresource (a merge patch
    of the Scale object, as ``kubectl scale`` does)."""
    res = kube._required(API_VERSION, KIND)
    resp = res.subresources["scale"].patch(
        name=name, namespace=namespace, body={"spec": {"replicas": replicas}}, field_manager=labels.AUTOSCALER_FIELD_MANAGER,
        content_type="application/merge-patch+json", serialize=False, _request_timeout=TIMEOUT)
    API_WRITES.labels("patch-scale", KIND).inc()
    del resp


def role_scale_status(kube: Kube, obj: dict[str, Any], status: dict[str, Any]) -> None:
    """Merge-patch a QwenDisaggRoleScale's status (skipped when it would not change)."""
    if all((obj.get("status") or {}).get(k) == v for k, v in status.items()):
        return
    res = kube._required(API_VERSION, KIND)
    try:
        resp = res.status.patch(name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"],
                                body={"status": status}, content_type="application/merge-patch+json", serialize=False,
                                _request_timeout=TIMEOUT)
    except NotFoundError:
        return
    API_WRITES.labels("patch-status", KIND).inc()
    if kube.cache is not None:
        kube.cache.observe(json.loads(resp.data))


def mark_draining(kube: Kube, namespace: str, pod: str, draining: bool, now: float) -> None:
    """Take a serving pod out of the router's selectors (``qdd.dev/group-role: draining``, the time
    in ``qdd.dev/drain-since``), or put it back (``leader``, the annotation removed)."""
    body = {"metadata": {"labels": {labels.GROUP_ROLE: labels.DRAINING if draining else "leader"},
                         "annotations": {labels.DRAIN_SINCE: f"{now:.3f}" if draining else None}}}
    try:
        resp = kube._required("v1", "Pod").patch(name=pod, namespace=namespace, body=body,
                                                 content_type="application/merge-patch+json", serialize=False,
                                                 _request_timeout=TIMEOUT)
    except NotFoundError:
        return
    API_WRITES.labels("patch", "Pod").inc()
    if kube.cache is not None:
        obj = json.loads(resp.data)
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        kube.cache.observe(obj)
