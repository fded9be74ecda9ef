"""The engine-metrics observer: reads every tracked engine pod on its deployment's period, in
background threads, and keeps a window of reads per pod; a reconcile pass asks it for the
judgement of the reads it has (qdd.observe.judge) and never waits on a read.

A pass calls :meth:`Observer.track` with the deployment's HTTP-serving engine pods (a decode
group's headless workers serve no HTTP: vLLM's API server on the leader reports every rank of its
group under the ``engine`` label) and its spec.observe; the observer's thread reads the pods that
are due through a small pool (:data:`WORKERS`), and when the serving conditions a round computes
differ from the last round's, asks for a pass of that deployment (``notify``): a condition is
raised or cleared within one period, not one resync.

A Prometheus is queried only at a URL the cluster admin gave the operator (``--prometheus-url``,
``--allow-prometheus-url``): spec.observe.prometheus.url is the resource author's, and the operator
would otherwise GET whatever address it names from its own network position (a server-side request
forgery from a namespace-scoped user; docs/security.md). Another URL reads nothing: the serving
conditions are Unknown (PrometheusNotAllowed) naming the field and the fix.

``QDD_ENGINE_METRICS_URL_OVERRIDE`` (a TEST setting): a URL template with ``{namespace}``,
``{pod}``, ``{role}`` used instead of ``http://<podIP>:<port>/metrics``; the simulated cluster
points it at the engine TEST DOUBLE hack/fake_engine_metrics.py, because kwok runs no engine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .. import labels
from ..api.observe import ObserveSpec
from ..observe import Judgement, PodRead, judge
from ..observe.judge import not_allowed
from .engine_metrics import DEFAULT_BOUNDS, Bounds, read_pod, read_prometheus

OVERRIDE_ENV = "QDD_ENGINE_METRICS_URL_OVERRIDE"
PROMETHEUS_ENV = "QDD_PROMETHEUS_URL"
ALLOWED_ENV = "QDD_PROMETHEUS_ALLOWED"
"""Space-separated URLs spec.observe.prometheus.url may name (``qdd run --allow-prometheus-url``)."""
WORKERS = 8
"""Reads in flight at once for all deployments: 200 pods at ~10 ms each fit a 15 s period many
times over (bench/results/observe-scale.json)."""
TICK_S = 1.0
log = logging.getLogger("qdd.observe")

Key = tuple[str, str]


@dataclass(frozen=True)
class Target:
    pod: str
    role: str
    endpoint: int
    url: str


@dataclass
class _Tracked:
    namespace: str
    spec: ObserveSpec
    prometheus: str | None
    targets: dict[str, Target]
    refused: str | None = None
    """Why nothing is read (spec.observe.prometheus.url not allowed); None: read."""
    generation: int | None = None
    lease_seconds: int | None = None
    reads: dict[str, deque[PodRead]] = field(default_factory=dict)
    due: float = 0.0
    busy: bool = False
    last_conditions: tuple[tuple[str, str], ...] = ()
    held: frozenset[tuple[str, str]] = frozenset()
    """The level conditions raised by the last judgement (their hysteresis: qdd.observe.judge)."""


def serving_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine pods that serve HTTP (and so /metrics): prefill and decode pods, not a group's
    headless workers, running with an IP, not being deleted. Never a pod on the host's network:
    qdd renders none, and such a pod's IP is its node's — a pod the resource author labels as an
    engine (children are found by label) would have the operator GET any port of a node
    (docs/security.md, round 4)."""
    out = []
    for p in pods:
        lab = p["metadata"].get("labels") or {}
        if lab.get(labels.ROLE) not in ("prefill", "decode") or lab.get(labels.GROUP_ROLE) == "worker":
            continue
        if (p.get("spec") or {}).get("hostNetwork"):
            continue
        st = p.get("status") or {}
        if p["metadata"].get("deletionTimestamp") or st.get("phase") != "Running" or not st.get("podIP"):
            continue
        out.append(p)
    return out


def _url_key(url: str) -> str:
    return url.rstrip("/")


class Observer:
    """``read``/``read_many``: the pod and Prometheus readers (tests pass their own); ``override``:
    the test URL template (default $QDD_ENGINE_METRICS_URL_OVERRIDE); ``prometheus``: the
    operator-wide Prometheus (default $QDD_PROMETHEUS_URL, ``qdd run --prometheus-url``);
    ``allowed_prometheus``: the other URLs spec.observe.prometheus.url may name (default
    $QDD_PROMETHEUS_ALLOWED, ``qdd run --allow-prometheus-url``; ``prometheus`` is always allowed);
    ``workers`` 0: no thread, :meth:`read_due` reads inline (unit tests, the real-engine test)."""

    def __init__(self, read: Callable[..., PodRead] = read_pod,
                 read_many: Callable[..., dict[str, PodRead]] = read_prometheus,
                 override: str | None = None, prometheus: str | None = None, workers: int = WORKERS,
                 bounds: Bounds = DEFAULT_BOUNDS, notify: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.time, allowed_prometheus: Iterable[str] | None = None):
        self.read, self.read_many, self.bounds, self.notify, self.clock = read, read_many, bounds, notify, clock
        self.override = (os.environ.get(OVERRIDE_ENV) or None) if override is None else override
        self.prometheus = (os.environ.get(PROMETHEUS_ENV) or None) if prometheus is None else prometheus
        allowed = os.environ.get(ALLOWED_ENV, "").split() if allowed_prometheus is None else allowed_prometheus
        self.allowed_prometheus = frozenset(_url_key(u) for u in [*allowed, *([self.prometheus] if self.prometheus else [])])
        if self.override:
            log.warning("%s is set (a test setting): engine metrics are read from %s (the simulated cluster's engine "
                        "TEST DOUBLE), not from the pods", OVERRIDE_ENV, self.override)
        self._lock = threading.Lock()
        self._tracked: dict[Key, _Tracked] = {}
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="qdd-observe") if workers else None
        if self._pool is not None:
            threading.Thread(target=self._loop, name="qdd-observe-loop", daemon=True).start()

    def url(self, namespace: str, pod: dict[str, Any], port: int) -> str:
        meta = pod["metadata"]
        if self.override:
            return self.override.format(namespace=namespace, pod=meta["name"],
                                        role=(meta.get("labels") or {}).get(labels.ROLE, ""))
        ip = pod["status"]["podIP"]
        return f"http://{'[' + ip + ']' if ':' in ip else ip}:{port}/metrics"

    def track(self, namespace: str, name: str, spec: ObserveSpec, pods: list[dict[str, Any]], port: int,
              generation: int | None = None, lease_seconds: int | None = None) -> None:
        """Read these pods from now on (their reads so far are kept; pods gone are dropped)."""
        targets = {}
        for p in serving_pods(pods):
            lab = p["metadata"]["labels"]
            endpoint = labels.index(lab.get(labels.ENDPOINT, "0"))
            if endpoint is not None:  # not a pod qdd made (children are found by label)
                targets[p["metadata"]["name"]] = Target(p["metadata"]["name"], lab[labels.ROLE], endpoint,
                                                        self.url(namespace, p, port))
        prom, refused = self.prometheus, None
        if spec.prometheus is not None:
            asked = spec.prometheus.url
            prom, refused = (asked, None) if _url_key(asked) in self.allowed_prometheus else (None, self.refusal(asked))
        with self._lock:
            t = self._tracked.get((namespace, name))
            if t is None:
                t = self._tracked[(namespace, name)] = _Tracked(namespace, spec, prom, targets)
            t.spec, t.prometheus, t.targets, t.refused = spec, prom, targets, refused
            t.generation, t.lease_seconds = generation, lease_seconds
            for gone in set(t.reads) - set(targets):
                del t.reads[gone]

    def refusal(self, url: str) -> str:
        """Why spec.observe.prometheus.url ``url`` is not read, and what to do."""
        allowed = ", ".join(sorted(self.allowed_prometheus)) or "none"
        return (f"spec.observe.prometheus.url {url} is not a Prometheus the operator may query (the cluster admin "
                f"allows: {allowed}; chart values observe.prometheusUrl and observe.allowedPrometheusUrls): remove "
                "spec.observe.prometheus to read "
                + (f"the operator's Prometheus {self.prometheus}" if self.prometheus else "the engine pods' /metrics")
                + ", or ask the cluster admin to allow that URL")

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._tracked.pop((namespace, name), None)

    def source(self, namespace: str, name: str) -> str:
        with self._lock:
            t = self._tracked.get((namespace, name))
            if t is not None and t.refused is not None:
                return "none"
            return (t.prometheus or "pods") if t is not None else "pods"

    def judgement(self, namespace: str, name: str) -> tuple[Judgement, float | None] | None:
        """(the judgement of the reads kept, the newest read's time) of a tracked deployment; None if
        untracked. Computation on the cache, no read happens here; it keeps the level conditions
        the judgement raised for the next one (their hysteresis)."""
        with self._lock:
            t = self._tracked.get((namespace, name))
            if t is None:
                return None
            reads = {p: list(rs) for p, rs in t.reads.items()}
            reads |= {p: [] for p in t.targets if p not in reads}
            spec, generation, lease, refused, held = t.spec, t.generation, t.lease_seconds, t.refused, t.held
        if refused is not None:
            return not_allowed(refused, generation), None
        newest = max((r.time for rs in reads.values() for r in rs), default=None)
        j = judge(reads, spec.thresholds, spec.window_seconds, self.clock(), generation, lease, held)
        with self._lock:
            if self._tracked.get((namespace, name)) is t:
                t.held = j.held
        return j, newest

    def reads_of(self, namespace: str, name: str, pod: str) -> list[PodRead]:
        """The reads kept of one pod of a tracked deployment, oldest first (empty when none): what
        the autoscaler's drain reads to see an endpoint's in-flight requests finish."""
        with self._lock:
            t = self._tracked.get((namespace, name))
            return list(t.reads.get(pod, ())) if t is not None else []

    # --- reading ----------------------------------------------------------------------------------

    def read_due(self) -> None:
        """Start (or, without a pool, do) the reads of every deployment whose period has come."""
        now = self.clock()
        with self._lock:
            due = [(k, t) for k, t in self._tracked.items()
                   if not t.busy and t.due <= now and t.targets and t.refused is None]
            for _, t in due:
                t.busy, t.due = True, now + t.spec.period_seconds
        for k, t in due:
            if self._pool is None:
                self._round(k, t)
            else:
                self._pool.submit(self._round, k, t)

    def _round(self, k: Key, t: _Tracked) -> None:
        try:
            with self._lock:
                targets, prom = dict(t.targets), t.prometheus
            if prom:
                got = self.read_many(prom, t.namespace, {p: (x.role, x.endpoint) for p, x in targets.items()},
                                     self.bounds)
            else:
                got = {p: self.read(x.url, p, x.role, x.endpoint, self.bounds) for p, x in targets.items()}
            keep = max(t.spec.window_seconds, t.spec.thresholds.stall_seconds) + 2 * t.spec.period_seconds
            with self._lock:
                for p, r in got.items():
                    if p in t.targets:
                        q = t.reads.setdefault(p, deque())
                        q.append(r)
                        while q and r.time - q[0].time > keep:
                            q.popleft()
        finally:
            with self._lock:
                t.busy = False
        self._maybe_notify(k, t)

    def _maybe_notify(self, k: Key, t: _Tracked) -> None:
        got = self.judgement(*k)
        if got is None:
            return
        now = tuple((c["type"], c["status"]) for c in got[0].conditions)
        with self._lock:
            changed, t.last_conditions = now != t.last_conditions, now
        if changed and self.notify is not None:
            try:
                self.notify(*k)
            except Exception:
                log.exception("%s/%s: the pass after a serving condition changed failed", *k)

    def _loop(self) -> None:
        while True:
            try:
                self.read_due()
            except RuntimeError:  # the pool was shut down: the interpreter is exiting
                return
            except Exception:
                log.exception("engine metrics observer")
            time.sleep(TICK_S)
