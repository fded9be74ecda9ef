"""Each engine pod's start-up, phase by phase, read once from its own log (issue 28 item 4).

A pass calls :meth:`StartupLogs.track` with the deployment's pods; the reader's threads read, once
per container start (pod uid and restart count), the first :data:`LIMIT_BYTES` of the ``vllm``
container's log (``GET pods/{name}/log?container=vllm&limitBytes=N``: from the log's beginning,
where vLLM writes its start-up) with a timeout, and parse it (qdd.observe.startup_log). A pod is read
when its engine serves: a pod with an HTTP server once it is Ready; a headless worker once its
group's leader is Ready (a DP group serves only when every rank has started). A pass never waits on
a read: it takes what has been read (:meth:`entries`); the last of a deployment's reads in flight to
finish asks for one more pass (the operator delays it by qdd.controller.reconcile.STARTUP_PASS_DELAY_S,
so the reads of one window end in one status write).
A read that fails or finds no complete start-up is tried again, :data:`ATTEMPTS` times at most,
:data:`RETRY_S` apart. Bounded: :data:`MAX_PODS` pods per deployment are kept.

Next to the log's phases, what the pod itself says (no read needed): from its scheduling to its
container's start (image pull, volume mounts, init containers: ``beforeStartSeconds``) and from the
container's start to Ready (``toReadySeconds``, at the probes' period).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import labels
from ..observe.startup_log import StartupLog, parse_startup_log
from ..plan import Plan

LIMIT_BYTES = 1 << 20
"""1 MiB from the log's start: a vLLM 0.33 start-up (DEP8 leader, every rank's lines) writes tens of KB."""
TIMEOUT_S = 5.0
ATTEMPTS = 3
RETRY_S = 30.0
MAX_PODS = 288
"""A deployment holds at most 288 engine pods (qdd.plan.build.MAX_ENGINE_PODS)."""
WORKERS = 2
CONTAINER = "vllm"
log = logging.getLogger("qdd.startup")

ReadLog = Callable[[str, str, str, int, float], str]
"""(namespace, pod, container, limit bytes, timeout s) -> the log's text; raises on failure."""


@dataclass
class Entry:
    pod: str
    uid: str
    restarts: int
    node: str | None = None
    parsed: StartupLog | None = None
    error: str | None = None
    attempts: int = 0
    next_try: float = 0.0
    busy: bool = False
    headless: bool = False
    """A worker of a multi-pod endpoint (``--headless``): no API server, so no "Starting vLLM server"
    line; its start is whole once its engine cores logged ``init engine ... took``."""

    def complete(self, parsed: StartupLog | None = None) -> bool:
        p = parsed if parsed is not None else self.parsed
        return p is not None and (p.serving or (self.headless and p.engine_init is not None))


def _ts(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _vllm(pod: dict[str, Any]) -> dict[str, Any]:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            return c
    return {}


def _cond(pod: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def pod_times(pod: dict[str, Any]) -> dict[str, float]:
    """``beforeStartSeconds`` (scheduled → the engine container's start: image pull, mounts, init
    containers) and ``toReadySeconds`` (its start → Ready), from the pod's own status; whole seconds."""
    out: dict[str, float] = {}
    scheduled = _ts(_cond(pod, "PodScheduled").get("lastTransitionTime"))
    started = _ts(((_vllm(pod).get("state") or {}).get("running") or {}).get("startedAt"))
    ready = _cond(pod, "Ready")
    if scheduled is not None and started is not None and started >= scheduled:
        out["beforeStartSeconds"] = started - scheduled
    at = _ts(ready.get("lastTransitionTime")) if ready.get("status") == "True" else None
    if started is not None and at is not None and at >= started:
        out["toReadySeconds"] = at - started
    return out


def serving_engines(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Engine pods whose engine has started serving: Ready (with an HTTP server), or a headless
    worker of a group whose leader is Ready; not being deleted."""
    def ready(p: dict[str, Any]) -> bool:
        return _cond(p, "Ready").get("status") == "True" and not p["metadata"].get("deletionTimestamp")

    engines = [p for p in pods if (p["metadata"].get("labels") or {}).get(labels.ROLE) in ("prefill", "decode")]
    leaders = {((p["metadata"]["labels"]).get(labels.ROLE), p["metadata"]["labels"].get(labels.ENDPOINT))
               for p in engines if p["metadata"]["labels"].get(labels.GROUP_ROLE) == "leader" and ready(p)}
    out = []
    for p in engines:
        lab = p["metadata"]["labels"]
        if lab.get(labels.GROUP_ROLE) == "worker":
            if (lab.get(labels.ROLE), lab.get(labels.ENDPOINT)) in leaders and not p["metadata"].get("deletionTimestamp"):
                out.append(p)
        elif ready(p):
            out.append(p)
    return out


class StartupLogs:
    """``read``: how a log is read (qdd.controller.kube.Kube.pod_log; tests pass their own);
    ``workers`` 0: reads happen inline in :meth:`track` (unit tests)."""

    def __init__(self, read: ReadLog | None = None, workers: int = WORKERS,
                 notify: Callable[[str, str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.read, self.notify, self.clock = read, notify, clock
        self._lock = threading.Lock()
        self._by: dict[tuple[str, str], dict[str, Entry]] = {}
        self._owed: set[tuple[str, str]] = set()
        """Deployments with a finished read that no pass has been asked for yet."""
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="qdd-startup-log") if workers else None

    def track(self, namespace: str, name: str, pods: list[dict[str, Any]]) -> None:
        """Keep the entries of these pods' current container starts; read the ones due."""
        if self.read is None:
            return
        now, due = self.clock(), []
        with self._lock:
            old = self._by.get((namespace, name), {})
            new: dict[str, Entry] = {}
            for p in serving_engines(pods)[:MAX_PODS]:
                meta = p["metadata"]
                restarts = int(_vllm(p).get("restartCount") or 0)
                e = old.get(meta["name"])
                if e is None or e.uid != meta["uid"] or e.restarts != restarts:
                    e = Entry(meta["name"], meta["uid"], restarts, (p.get("spec") or {}).get("nodeName"),
                              headless=(meta.get("labels") or {}).get(labels.GROUP_ROLE) == "worker")
                new[meta["name"]] = e
                done = e.complete()
                if not done and not e.busy and e.attempts < ATTEMPTS and e.next_try <= now:
                    e.busy = True
                    due.append(e)
            self._by[(namespace, name)] = new
        for e in due:
            if self._pool is None:
                self._read(namespace, name, e)
            else:
                self._pool.submit(self._read, namespace, name, e)

    def _read(self, namespace: str, name: str, e: Entry) -> None:
        assert self.read is not None
        try:
            text = self.read(namespace, e.pod, CONTAINER, LIMIT_BYTES, TIMEOUT_S)
            parsed, error = parse_startup_log(text), None
            if not e.complete(parsed):
                error = "no complete start-up in the log's first MiB (the engine's lines not found)"
        except Exception as ex:  # noqa: BLE001 — refused, timeout, RBAC, a pod gone: recorded, retried
            parsed, error = None, f"{type(ex).__name__}: {str(ex)[:200]}"
        with self._lock:
            e.attempts += 1
            e.busy = False
            e.parsed = parsed if parsed is not None else e.parsed
            e.error = error
            e.next_try = self.clock() + RETRY_S
            # One pass for the reads that finish together: the last read of a deployment in flight asks
            # for it (make bench-scale: 563 status patches for 30 deployments, most of them status.startup
            # written once per pod read).
            if parsed is not None or e.attempts >= ATTEMPTS:
                self._owed.add((namespace, name))
            due = ((namespace, name) in self._owed
                   and not any(x.busy for x in self._by.get((namespace, name), {}).values()))
            if due:
                self._owed.discard((namespace, name))
        if self.notify is not None and due:
            try:
                self.notify(namespace, name)
            except Exception:
                log.exception("%s/%s: the pass after a start-up was read failed", namespace, name)

    def entries(self, namespace: str, name: str) -> list[Entry]:
        with self._lock:
            return sorted(self._by.get((namespace, name), {}).values(), key=lambda e: e.pod)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._by.pop((namespace, name), None)
            self._owed.discard((namespace, name))


MAX_LISTED = 64
"""Pods listed in status.startup (the slowest first): ~250 bytes each."""
MAX_ERRORS = 8


def startup_status(entries: list[Entry], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``status.startup``: per engine pod whose start was read, its phases (seconds) and what the pod
    says of its own start; the pods whose log could not be read, and why. None when nothing is known."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    rows, errors = [], []
    for e in entries:
        pod = by_name.get(e.pod)
        row: dict[str, Any] = {"pod": e.pod, "restarts": e.restarts}
        if e.node:
            row["node"] = e.node
        if pod is not None:
            row |= pod_times(pod)
        if e.parsed is not None:
            row |= e.parsed.as_status()
        if e.error and e.attempts:
            errors.append(f"{e.pod}: {e.error}")
        if e.parsed is not None or "toReadySeconds" in row:
            rows.append(row)
    if not rows and not errors:
        return None
    rows.sort(key=lambda r: (-(r.get("toReadySeconds") or 0), r["pod"]))
    out: dict[str, Any] = {"pods": rows[:MAX_LISTED], "read": sum(1 for e in entries if e.parsed is not None)}
    if errors:
        out["errors"] = errors[:MAX_ERRORS]
    return out


def add_startup(status: dict[str, Any], cr: dict[str, Any], plan: Plan | None, observed: list[dict[str, Any]],
                reader: StartupLogs) -> dict[str, Any]:
    """``status`` with status.startup: the reader told of the pods now, its entries written (kept as
    they were for an invalid spec); changed in place."""
    ns, name = cr["metadata"].get("namespace") or "default", cr["metadata"]["name"]
    if plan is None:
        started = (cr.get("status") or {}).get("startup")
    else:
        pods = [o for o in observed if o.get("kind") == "Pod"]
        reader.track(ns, name, pods)
        started = startup_status(reader.entries(ns, name), pods)
    if started is not None:
        status["startup"] = started
    return status
