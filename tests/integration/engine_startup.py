"""Engines that take as long to start as real ones, for integration tests (hack/cluster/engine_stages.py).

``startup_configmap(ns, phases, scale, crash=None)`` is the ConfigMap the cluster's
MutatingAdmissionPolicy copies onto every engine pod created in ``ns`` afterwards.
:class:`Timeline` polls one deployment and its engine pods through the Python client and checks, at
every poll, what must hold whatever the timing: a Ready status of the current spec only when every
engine pod of the generation it serves is Ready; it records what it saw for the report
(docs/reliability.md#engines-that-start-like-engines).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from qdd.catalog.startup import StartupPhases

from .conftest import Kube

PHASE = "engine.sim.qdd.dev/phase"


def startup_configmap(ns: str, phases: StartupPhases, scale: float, crash: str | None = None,
                      crash_after: str | None = None) -> dict[str, Any]:
    data = {**phases.as_durations(), "time-scale": str(int(scale))}
    if crash:
        data["crash"] = crash
    if crash_after:
        data["crash-after"] = crash_after
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qdd-sim-engine-startup", "namespace": ns},
            "data": data}


def ts(s: str | None) -> float:
    """RFC 3339 (seconds resolution, as the API server writes conditions) -> epoch seconds."""
    assert s, "no timestamp"
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def deleted_at(p: dict[str, Any]) -> str:
    """When deletion was asked (RFC 3339): deletionTimestamp is that time plus the grace period."""
    at = ts(p["metadata"]["deletionTimestamp"]) - (p["metadata"].get("deletionGracePeriodSeconds") or 0)
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def pod_ready(p: dict[str, Any]) -> bool:
    return (p.get("status") or {}).get("phase") == "Running" and cond(p, "Ready").get("status") == "True"


@dataclass
class Poll:
    t: float
    ready: bool
    """Ready=True for the current spec (observedGeneration = generation)."""
    serving: str
    """status.rollout.serving: generation/slot the router sends traffic to."""
    serving_ok: bool
    """Every engine pod of the serving generation is there, not terminating, and Ready: a request sent now is answered."""
    phases: dict[str, str]


def _serves(pods: list[dict[str, Any]], serving: str) -> bool:
    gen = serving.split("/")[0]
    mine = [p for p in pods if p["metadata"]["labels"].get("qdd.dev/generation") == gen]
    return bool(gen) and {p["metadata"]["labels"]["qdd.dev/role"] for p in mine} == {"prefill", "decode"} and all(
        pod_ready(p) and not p["metadata"].get("deletionTimestamp") for p in mine)


class Timeline:
    """Polls one deployment; a watch on its pods records every version of each (``seen``, by uid)
    and the first deletionTimestamp of each (``deleted``), which polls could miss: kwok deletes a
    pod within milliseconds of its deletionTimestamp."""

    def __init__(self, kube: Kube, name: str, ns: str) -> None:
        from kubernetes import client

        self.kube, self.name, self.ns = kube, name, ns
        self.polls: list[Poll] = []
        self.check_ready = True
        """Check, at every poll, that Ready=True comes with every served engine Ready (off once a
        test injects a crash: the status can only learn of it after the pod says so)."""
        self.deleted: dict[str, tuple[str, str]] = {}
        """Engine pod uid -> (name, when its deletion was asked, RFC 3339)."""
        self.seen: dict[str, dict[str, Any]] = {}
        api = kube.api_client()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._stop = threading.Event()
        rv = self.core.list_namespaced_pod(ns).metadata.resource_version
        self._thread = threading.Thread(target=self._watch, args=(rv,), daemon=True)
        self._thread.start()

    def _watch(self, rv: str) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            w = watch.Watch()
            for ev in w.stream(self.core.list_namespaced_pod, self.ns, resource_version=rv, timeout_seconds=5,
                               label_selector=f"qdd.dev/deployment={self.name}"):
                p = self.core.api_client.sanitize_for_serialization(ev["object"])
                rv = p["metadata"]["resourceVersion"]
                uid = p["metadata"]["uid"]
                self.seen[uid] = p
                if p["metadata"].get("deletionTimestamp") and uid not in self.deleted:
                    self.deleted[uid] = (p["metadata"]["name"], deleted_at(p))
                if self._stop.is_set():
                    w.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def cr(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object("qdd.dev", "v1alpha1", self.ns, "qwendisaggdeployments", self.name)

    def engines(self) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_pod(self.ns, label_selector=f"qdd.dev/deployment={self.name}").items
        pods = [self.core.api_client.sanitize_for_serialization(p) for p in items]
        return [p for p in pods if (p["metadata"].get("labels") or {}).get("qdd.dev/role") in ("prefill", "decode")]

    def poll(self) -> Poll:
        # Pods, then the custom resource, then pods again: a generation served at the second read
        # was served by the pods of the first (qdd switches only to a Ready generation, deletes the
        # old one only after); a Ready read second is checked against the pods read third.
        before = self.engines()
        obj = self.cr()
        after = self.engines()
        st = obj.get("status") or {}
        current = st.get("observedGeneration") == obj["metadata"]["generation"]
        ready = current and cond(obj, "Ready").get("status") == "True"
        serving = (st.get("rollout") or {}).get("serving", "")
        poll = Poll(time.monotonic(), ready, serving, _serves(before, serving),
                    {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(PHASE, "") for p in after})
        if ready and self.check_ready:
            assert _serves(after, serving), \
                f"Ready=True while the generation it serves ({serving}) is not all Ready: {poll.phases}"
        self.polls.append(poll)
        return poll

    def until(self, done, timeout: float, desc: str, interval: float = 0.25) -> dict[str, Any]:
        """Poll until ``done(cr, poll)`` is truthy; returns the custom resource then."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.poll()
            obj = self.cr()
            if done(obj, p):
                return obj
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {desc}; last poll {p}")
            time.sleep(interval)

    def gap(self, since: float) -> float:
        """Seconds (between polls) after ``since`` during which the serving generation could not answer:
        for the report; assertions use the objects' own times."""
        out, prev = 0.0, None
        for p in self.polls:
            if p.t < since:
                continue
            if prev is not None and not prev.serving_ok:
                out += p.t - prev.t
            prev = p
        return out
