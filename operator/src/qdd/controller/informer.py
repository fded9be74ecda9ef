"""A watch-fed cache of qdd's children: client-go's informer (list, then watch from the list's
resourceVersion; list again when the API server answers 410 Gone), reduced to what a pass needs.

Why: a pass used to list the 12 child kinds of its deployment (one GET each, side by side). While
30 deployments converge on a loaded API server those lists took 542 ms p50 and 1.29 s p90 of a pass
(make bench-scale, bench/README.md) — the reconcile p50 of 719 ms was mostly waiting for them. With
one list + watch per kind for the whole operator, a pass reads its children from memory.

What the cache guarantees (the same as controller-runtime's cached client):

* A pass queued by a child's watch event sees at least that event: the store is updated before
  the deployment is queued (:class:`ChildCache` calls ``on_event`` after storing).
* A pass sees its own writes: :meth:`ChildCache.observe` stores the object the API server
  answered an apply or patch with, and :meth:`ChildCache.deleting` marks a deleted child as
  terminating, so the next pass neither creates nor deletes it again. An answer older than what
  the watch already delivered (resourceVersion compared as etcd's integer revision) is ignored,
  and so is one for an object the watch has since seen deleted (a tombstone per deleted object).
* Everything else is eventually consistent: a pass may see the children as they were a moment
  ago; the watch event of every change queues one more pass (reconciles are level-triggered).

Watch-stream timeouts are the operator's (qdd.controller.watching): ``timeoutSeconds`` =
``server``, a read with no byte (bookmarks included) for ``inactivity`` seconds drops the stream,
and no stream lives longer than ``client``; each reconnects from the last resourceVersion seen.
A kind the cluster does not serve (the ComputeDomain CRD not installed, no Workload API) is an
empty, synced store, listed again every ``UNSERVED_RETRY_S`` seconds.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import labels
from .children import MANAGED_KINDS
from .watching import WatchTimeouts

log = logging.getLogger("qdd.informer")

SELECTOR = f"{labels.MANAGED_BY}={labels.FIELD_MANAGER}"
"""Every child qdd renders carries it (qdd.labels.object_labels); the API server filters by it."""
UNSERVED_RETRY_S = 30.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
RELIST_S = 600.0
"""A kind is listed afresh when a watch stream ends (every ``server`` timeout at most) and its last
list is older than this: the safety net for an event a watch lost without failing (client-go
relists only on failure). The differences are reported like watch events."""
TOMBSTONE_S = 120.0
"""How long a deleted object's last resourceVersion is kept to refuse stale write-backs of it."""

Ref = tuple[str, str, str]  # (kind, namespace, name)
OnEvent = Callable[[str, dict[str, Any]], None]  # (ADDED | MODIFIED | DELETED, object)


class Gone(Exception):
    """The API server no longer has the resourceVersion the watch asked for (410): list again."""


def _rv(obj: dict[str, Any]) -> int | None:
    try:
        return int(obj["metadata"].get("resourceVersion") or "")
    except ValueError:
        return None


_UNREAD_POD_METADATA = frozenset({"annotations", "managedFields", "resourceVersion"})
"""What of a pod no pass reads: its annotations (qdd decides from labels, spec and status), and
bookkeeping."""


def unread_change(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """``new`` is a pod that differs from the cached ``old`` only in what no pass reads: its event
    queues no pass. The simulated engines' start-up phases are pod annotations (hack/cluster/
    engine_stages.py): with them, 10 watch events per engine pod asked for passes while make
    bench-scale converged; elsewhere it is e.g. another controller's annotation."""
    if old is None or new.get("kind") != "Pod":
        return False

    def read(o: dict[str, Any]) -> dict[str, Any]:
        return {**o, "metadata": {k: v for k, v in (o.get("metadata") or {}).items() if k not in _UNREAD_POD_METADATA}}
    return read(old) == read(new)


def _path(api_version: str, kind: str, namespace: str | None) -> str:
    """The collection URL of ``kind``: every managed kind's plural is its lower-case name + s."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{ns}/{kind.lower()}s"


class Informer:
    """One kind (in one namespace, or cluster-wide when ``namespace`` is None): its objects carrying
    :data:`SELECTOR`, kept up to date by a watch on a daemon thread. Stores into ``store``."""

    def __init__(self, api: client.ApiClient, api_version: str, kind: str, namespace: str | None,
                 store: ChildCache, timeouts: WatchTimeouts):
        self.api, self.api_version, self.kind, self.namespace = api, api_version, kind, namespace
        self.store, self.timeouts = store, timeouts
        self.synced = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"qdd-informer-{kind.lower()}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _get(self, query: list[tuple[str, Any]], read_timeout: float) -> Any:
        """GET the collection with ``query``: the urllib3 response, not read yet (a watch streams).
        Raises ApiException for an error status, as the client's own calls do."""
        req = self.api.param_serialize("GET", _path(self.api_version, self.kind, self.namespace), query_params=query,
                                       header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        resp = self.api.call_api(*req, _request_timeout=(5, read_timeout))
        if not 200 <= resp.status <= 299:
            resp.read()
            self.api.response_deserialize(resp, {})
            raise ApiException(status=resp.status, reason=resp.reason)
        return resp.response

    def _list(self) -> str:
        """Replace this kind's objects by a fresh list; its resourceVersion."""
        try:
            body = json.loads(self._get([("labelSelector", SELECTOR)], 60).data)
        except ApiException as e:
            if e.status != 404:
                raise
            self.store.replace(self.kind, self.namespace, [])  # not served: nothing of it can exist
            self.synced.set()
            return ""
        items = body.get("items") or []
        for item in items:
            item["apiVersion"], item["kind"] = self.api_version, self.kind
        rv = str(body["metadata"].get("resourceVersion") or "")
        self.store.replace(self.kind, self.namespace, items, rv)
        self.synced.set()
        return rv

    def _watch(self, rv: str) -> str:
        """Watch from ``rv`` until the stream ends; the last resourceVersion seen. Raises Gone."""
        query = [("labelSelector", SELECTOR), ("watch", "true"), ("resourceVersion", rv),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", int(self.timeouts.server))]
        resp = self._get(query, self.timeouts.inactivity)
        end = time.monotonic() + self.timeouts.client
        try:
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        rv = self._event(json.loads(line), rv)
                if time.monotonic() > end or self.stop.is_set():
                    break
        finally:
            resp.release_conn()
        return rv

    def _event(self, ev: dict[str, Any], rv: str) -> str:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            # 410: compacted away. 504 "Too large resource version": the API server is behind the
            # version we hold (etcd restored from a backup); client-go lists again for both.
            if obj.get("code") in (410, 504):
                raise Gone(obj.get("message", ""))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        new_rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            return new_rv
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        self.store.apply_event(str(kind), obj)
        return new_rv

    def _run(self) -> None:
        rv, backoff, listed = "", BACKOFF_FIRST_S, 0.0
        while not self.stop.is_set():
            try:
                if not rv or time.monotonic() - listed > RELIST_S:
                    rv, listed = self._list(), time.monotonic()
                    if not rv:  # not served
                        self.stop.wait(UNSERVED_RETRY_S)
                        continue
                rv = self._watch(rv)
                backoff = BACKOFF_FIRST_S
            except Gone:
                log.info("%s: resourceVersion %s too old: listing again", self.kind, rv)
                rv = ""
            except Exception as e:  # noqa: BLE001 — API server down, connection reset, read timeout
                if isinstance(e, ApiException) and e.status in (404, 410):
                    rv = ""  # 404: no longer served (CRD removed, API turned off): the list empties it
                log.debug("%s: watch ended (%s): again in %.1f s", self.kind, e, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)


class ChildCache:
    """Every qdd child of the managed kinds, indexed by (namespace, deployment label).

    ``on_event(type, obj)`` is called after each change a watch delivered (not for the first
    list, nor for the answers of our own writes): the operator queues the deployment."""

    def __init__(self, on_event: OnEvent | None = None, kinds: list[str] | None = None):
        self.on_event = on_event
        self._lock = threading.Lock()
        self._objs: dict[Ref, dict[str, Any]] = {}
        self._by_owner: dict[tuple[str, str], set[Ref]] = {}
        self._tombstones: dict[Ref, tuple[int, float]] = {}
        self._deleted: dict[Ref, tuple[str | None, str]] = {}
        """What :meth:`deleting` marked: (uid, deletionTimestamp). A deletion cannot be undone, so a
        later version of the same object (a watch event sent before our delete arrived) keeps the mark."""
        self.informers: list[Informer] = []
        self._order = {kind: i for i, kind in enumerate(kinds or [k for _, k in MANAGED_KINDS])}

    def start(self, api: client.ApiClient, namespaces: list[str], timeouts: WatchTimeouts) -> None:
        """One informer per managed kind (and per namespace when ``namespaces`` is not empty)."""
        scopes: list[str | None] = list(namespaces) if namespaces else [None]
        for ns in scopes:
            for api_version, kind in MANAGED_KINDS:
                self.informers.append(Informer(api, api_version, kind, ns, self, timeouts))
        for inf in self.informers:
            inf.start()

    def stop(self) -> None:
        for inf in self.informers:
            inf.stop.set()

    def synced(self) -> bool:
        """Every informer has listed at least once (before that, passes list from the API server)."""
        return bool(self.informers) and all(inf.synced.is_set() for inf in self.informers)

    @staticmethod
    def _ref(obj: dict[str, Any]) -> Ref:
        m = obj["metadata"]
        return obj["kind"], m.get("namespace", ""), m["name"]

    def _put(self, ref: Ref, obj: dict[str, Any]) -> None:
        old = self._objs.get(ref)
        if old is not None:
            self._unindex(ref, old)
        meta = obj["metadata"]
        meta.pop("managedFields", None)  # a third of a pod's bytes; no pass reads it
        mark = self._deleted.get(ref)
        if mark is not None:
            if mark[0] != meta.get("uid"):
                del self._deleted[ref]  # another object of the same name: created again
            elif not meta.get("deletionTimestamp"):
                obj["metadata"] = meta = {**meta, "deletionTimestamp": mark[1]}
        self._objs[ref] = obj
        dep = (obj["metadata"].get("labels") or {}).get(labels.DEPLOYMENT)
        if dep:
            self._by_owner.setdefault((ref[1], dep), set()).add(ref)

    def _unindex(self, ref: Ref, obj: dict[str, Any]) -> None:
        dep = (obj["metadata"].get("labels") or {}).get(labels.DEPLOYMENT)
        if not dep:
            return
        owned = self._by_owner.get((ref[1], dep))
        if owned is not None:
            owned.discard(ref)
            if not owned:
                del self._by_owner[(ref[1], dep)]

    def _drop(self, ref: Ref, rv: int | None) -> None:
        self._deleted.pop(ref, None)
        old = self._objs.pop(ref, None)
        if old is not None:
            self._unindex(ref, old)
        if rv is not None:
            now = time.monotonic()
            # Oldest first (a dict keeps insertion order): expired ones are dropped from the front, each
            # once. Rebuilding the dict on every deletion past a size made a mass deletion quadratic
            # under the lock (7200 pods' DELETED events: 8.1 s).
            self._tombstones.pop(ref, None)
            self._tombstones[ref] = (rv, now)
            for k, (_, t) in list(itertools.islice(self._tombstones.items(), 64)):
                if now - t < TOMBSTONE_S:
                    break
                del self._tombstones[k]

    def replace(self, kind: str, namespace: str | None, items: list[dict[str, Any]], rv: str = "") -> None:
        """A fresh list of ``kind`` at resourceVersion ``rv``: what it lacks was deleted (at ``rv``
        or before: an answer to our write at or before ``rv`` is refused), what differs changed (each
        reported to ``on_event`` — unless this is the kind's first list)."""
        try:
            list_rv: int | None = int(rv)
        except ValueError:
            list_rv = None
        events: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            first = not any(inf.kind == kind and inf.namespace == namespace and inf.synced.is_set()
                            for inf in self.informers)
            fresh = {self._ref(o): o for o in items}
            for ref in [r for r in self._objs if r[0] == kind and (namespace is None or r[1] == namespace)]:
                if ref not in fresh:
                    events.append(("DELETED", self._objs[ref]))
                    self._drop(ref, list_rv)
            for ref, obj in fresh.items():
                old = self._objs.get(ref)
                if old is not None and (_rv(old) or 0) >= (_rv(obj) or 0):
                    continue  # unchanged, or an answer to our write newer than the list
                events.append(("ADDED" if old is None else "MODIFIED", obj))
                self._put(ref, obj)
        if not first:
            self._notify(events)

    def apply_event(self, type_: str, obj: dict[str, Any], notify: bool = True) -> None:
        """A watch event: store it (unless an answer to our own write already stored a newer
        version: the watch delivers that one too, later), then report it."""
        ref, rv = self._ref(obj), _rv(obj)
        with self._lock:
            if type_ == "DELETED":
                self._drop(ref, rv)
            else:
                old = self._objs.get(ref)
                if type_ == "MODIFIED" and unread_change(old, obj):
                    notify = False
                if old is None or rv is None or (_rv(old) or 0) <= rv:
                    self._tombstones.pop(ref, None)  # created again
                    self._put(ref, obj)
        if notify:
            self._notify([(type_, obj)])

    def _notify(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        if self.on_event is None:
            return
        for type_, obj in events:
            try:
                self.on_event(type_, obj)
            except Exception:  # a broken callback must not stop the watch
                log.exception("child event handler failed")

    def observe(self, obj: dict[str, Any]) -> None:
        """The API server's answer to one of our writes (apply, patch): stored unless the watch has
        already delivered something newer, or the object's deletion."""
        if obj.get("kind") not in self._order or not (obj.get("metadata") or {}).get("name"):
            return
        ref, rv = self._ref(obj), _rv(obj)
        with self._lock:
            old = self._objs.get(ref)
            if rv is not None and old is not None and (_rv(old) or 0) >= rv:
                return
            dead = self._tombstones.get(ref)
            if dead is not None and (rv is None or rv <= dead[0]):
                return
            self._put(ref, obj)

    def deleting(self, kind: str, namespace: str, name: str) -> None:
        """We asked the API server to delete this child: until its watch says more, it is
        terminating (a pass must neither delete it again nor create one of the same name)."""
        ref = (kind, namespace, name)
        with self._lock:
            old = self._objs.get(ref)
            if old is None or old["metadata"].get("deletionTimestamp"):
                return
            self._deleted[ref] = (old["metadata"].get("uid"), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self._put(ref, dict(old))

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of one object, or None when the cache does not hold it."""
        with self._lock:
            obj = self._objs.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def children(self, namespace: str, deployment: str) -> list[dict[str, Any]]:
        """Copies of the deployment's children, in MANAGED_KINDS order, then by name (as the lists
        returned them): a pass may change what it reads without changing the cache."""
        with self._lock:
            refs = sorted(self._by_owner.get((namespace, deployment), ()), key=lambda r: (self._order[r[0]], r[2]))
            objs = [self._objs[r] for r in refs]
        return copy.deepcopy(objs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)
