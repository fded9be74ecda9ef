"""Every per-resource structure of the operator is released when the resource goes (issue 23: RSS
grew ~0.23 MiB per deployment created and deleted). One test per structure: the render cache, the
reconciler's own sets and the canary's answers, the metrics' label sets, the work queue, the
children's cache (objects, owner index, deletion marks, tombstones) and the custom resources' cache."""

from __future__ import annotations

import asyncio
import copy
import threading
import time

import pytest
from prometheus_client import REGISTRY

from qdd import labels
from qdd.canary import Answer
from qdd.controller import informer
from qdd.controller import reconcile as rec
from qdd.controller.canary import CanaryChecker
from qdd.controller.informer import ChildCache
from qdd.controller.reconcile import Reconciler
from qdd.controller.rendercache import RenderCache
from qdd.controller.workqueue import WorkQueue, wait_idle

from .controller_world import cr_of, with_spec
from .test_controller_status import NAME, SEED, FakeKube, router_canary


def _series(name: str, namespace: str, cr: str) -> list[dict[str, str]]:
    return [s.labels for m in REGISTRY.collect() for s in m.samples
            if s.name == name and s.labels.get("namespace") == namespace and s.labels.get("name") == cr]


class GoneKube(FakeKube):
    """FakeKube whose custom resource can be deleted."""

    gone = False

    def get_cr(self, namespace: str, name: str) -> dict | None:
        return None if self.gone else super().get_cr(namespace, name)


def test_render_cache_keeps_only_the_current_spec_and_forgets_a_deleted_resource():
    c: RenderCache[int] = RenderCache(max_resources=3)
    calls: list[str] = []

    def compute(tag: str) -> int:
        calls.append(tag)
        return len(calls)

    assert c.get(("ns", "a"), "v1", "slot-a", lambda: compute("a1")) == 1
    assert c.get(("ns", "a"), "v1", "slot-a", lambda: compute("again")) == 1  # reused
    c.get(("ns", "a"), "v1", "slot-b", lambda: compute("a1b"))
    assert len(c) == 2
    c.get(("ns", "a"), "v2", "slot-a", lambda: compute("a2"))  # a new spec: the old renders are dead
    assert len(c) == 1
    c.forget(("ns", "a"))
    assert len(c) == 0 and c.resources() == []
    for i in range(5):  # more resources than the bound: the least recently used go
        c.get(("ns", f"r{i}"), "v", "x", lambda: compute("r"))
    assert c.resources() == [("ns", "r2"), ("ns", "r3"), ("ns", "r4")]


def test_a_pass_that_finds_the_resource_gone_releases_renders_canary_and_metric_label_sets(monkeypatch):
    monkeypatch.setattr(rec, "_RENDERED", RenderCache())
    kube = GoneKube(SEED)
    r = Reconciler(kube, gang=True, canary=router_canary())  # type: ignore[arg-type]
    for _ in range(3):
        r.once("default", NAME)
        kube.settle()
    assert rec._RENDERED.resources() == [("default", NAME)]
    assert ("default", NAME) in r.managed
    assert {s["role"] for s in _series("qdd_ready_endpoints", "default", NAME)} == {"prefill", "decode"}
    assert {s["role"] for s in _series("qdd_desired_endpoints", "default", NAME)} == {"prefill", "decode"}
    r.canary._done[("default", NAME)] = ("g", "h", Answer(" Paris.", None, 200, 1.0), "t")  # an answer not judged
    kube.gone = True
    assert r.once("default", NAME) == "gone"
    assert rec._RENDERED.resources() == [] and len(rec._RENDERED) == 0
    assert r.managed == set()
    assert r.canary._done == {}
    assert _series("qdd_ready_endpoints", "default", NAME) == []
    assert _series("qdd_desired_endpoints", "default", NAME) == []
    assert r._running == set() and r._pending == set()


def test_renders_of_a_resource_recreated_under_the_same_name_replace_the_old_ones(monkeypatch):
    """What churn does (a GitOps loop recreating a deployment): same name, new uid."""
    monkeypatch.setattr(rec, "_RENDERED", RenderCache())
    for i in range(4):
        rec._desired_cached(cr_of(uid=f"6f1c2d3e-0000-4000-8000-00000000000{i}"), True)
        rec._desired_cached(with_spec(cr_of(uid=f"6f1c2d3e-0000-4000-8000-00000000000{i}"),
                                      lambda s: s["workload"].update(concurrency=5120)), True, "b")
    assert len(rec._RENDERED) == 1


def test_canary_answers_in_flight_when_the_resource_goes_are_released():
    """An answer that comes in after the deletion asks for a pass; that pass forgets it."""
    answered = threading.Event()
    c = CanaryChecker(lambda url, body, t: Answer(" Paris.", None, 200, 1.0), override="http://x", workers=1,
                      notify=lambda ns, n: (c.forget(ns, n), answered.set()))
    c._inflight.add(("ns", "gone"))
    assert c._loop is not None  # workers=1: requests go to the checker's event loop
    asyncio.run_coroutine_threadsafe(c._check(("ns", "gone"), "http://x", {}, 1.0, "g", "h"), c._loop)
    assert answered.wait(5)
    assert c._done == {} and c._inflight == set()


def test_work_queue_holds_nothing_of_a_key_once_its_passes_are_done():
    outcomes = {"fail": 2}

    def reconcile(ns: str, name: str) -> None:
        if name == "fail" and outcomes["fail"]:
            outcomes["fail"] -= 1
            raise RuntimeError("API hiccup")

    q = WorkQueue(reconcile, 2)
    q.start()
    try:
        for i in range(50):
            q.add(("ns", f"r{i}"))
            q.add_after(("ns", f"r{i}"), 0.01)
        q.add(("ns", "fail"))  # fails twice (retried after 1 s, then 2 s), then passes: e.g. found gone
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (q._failures or q._delayed or outcomes["fail"]):
            time.sleep(0.05)
        assert wait_idle(q, 5)
        assert q._failures == {} and q._delayed == {} and q._queued == set() and q._processing == set()
        assert len(q._queue) == 0
    finally:
        q.stop()


def _child(kind: str, name: str, rv: int, dep: str = "d1", uid: str | None = None) -> dict:
    return {"apiVersion": "v1", "kind": kind, "metadata": {
        "name": name, "namespace": "ns", "resourceVersion": str(rv), "uid": uid or f"uid-{name}",
        "labels": {labels.DEPLOYMENT: dep}, "managedFields": [{"manager": "x"}]}}


def test_children_cache_releases_objects_owner_index_and_deletion_marks_of_a_deleted_deployment():
    cache = ChildCache()
    pods = [_child("Pod", f"p{i}", 10 + i) for i in range(5)]
    for p in pods:
        cache.apply_event("ADDED", copy.deepcopy(p), notify=False)
    cache.apply_event("ADDED", _child("Service", "svc", 20), notify=False)
    cache.deleting("Pod", "ns", "p0")  # our own delete: a mark until the watch says more
    assert len(cache.children("ns", "d1")) == 6 and cache._deleted
    for i, p in enumerate(pods):
        cache.apply_event("DELETED", {**p, "metadata": {**p["metadata"], "resourceVersion": str(30 + i)}}, notify=False)
    cache.apply_event("DELETED", _child("Service", "svc", 40), notify=False)
    assert len(cache) == 0
    assert cache._by_owner == {} and cache._deleted == {}


def test_children_cache_tombstones_expire(monkeypatch):
    """A tombstone refuses a stale write-back for TOMBSTONE_S; then a later deletion drops it."""
    now = [1000.0]
    monkeypatch.setattr(informer.time, "monotonic", lambda: now[0])
    cache = ChildCache()
    for i in range(100):
        cache.apply_event("ADDED", _child("Pod", f"p{i}", i + 1), notify=False)
        cache.apply_event("DELETED", _child("Pod", f"p{i}", i + 200), notify=False)
    assert len(cache._tombstones) == 100
    now[0] += informer.TOMBSTONE_S + 1
    for i in range(2):  # each deletion drops up to 64 expired ones, oldest first
        cache.apply_event("DELETED", _child("Pod", f"late{i}", 1000 + i), notify=False)
    assert sorted(cache._tombstones) == [("Pod", "ns", "late0"), ("Pod", "ns", "late1")]


def test_a_relist_releases_what_the_watch_lost():
    """A deletion whose watch event was lost: the kind's next list drops the object and its index."""
    cache = ChildCache()
    cache.apply_event("ADDED", _child("Pod", "p", 5), notify=False)
    cache.replace("Pod", None, [], "50")
    assert len(cache) == 0 and cache._by_owner == {}


@pytest.mark.parametrize("how", ["event", "confirm"])
def test_custom_resource_cache_releases_a_deleted_resource(how):
    crs = ChildCache(kinds=[labels.KIND])
    cr = {"apiVersion": "qdd.dev/v1alpha1", "kind": labels.KIND,
          "metadata": {"name": "x", "namespace": "ns", "uid": "u", "resourceVersion": "7"}}
    crs.apply_event("ADDED", copy.deepcopy(cr), notify=False)
    assert crs.get(labels.KIND, "ns", "x") is not None
    if how == "event":
        crs.apply_event("DELETED", {**cr, "metadata": {**cr["metadata"], "resourceVersion": "9"}}, notify=False)
    else:  # Kube.confirm_cr's answer 404: what it stores
        crs.apply_event("DELETED", {"kind": labels.KIND, "metadata": {"name": "x", "namespace": "ns"}}, notify=False)
    assert len(crs) == 0 and crs._by_owner == {}


def test_delayed_adds_hold_no_thread_each():
    """A thousand delayed adds (child events, stall checks) use the queue's one delaying thread."""
    q = WorkQueue(lambda ns, n: None, 1)
    q.start()
    try:
        before = threading.active_count()
        for i in range(1000):
            q.add_after(("ns", f"r{i}"), 60.0)
            q.add_after(("ns", f"r{i}"), 0.01)  # supersedes: the 60 s entry is skipped when its time comes
        assert threading.active_count() == before
        assert wait_idle(q, 5)
        deadline = time.monotonic() + 5
        while q._delayed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert q._delayed == {}
    finally:
        q.stop()
