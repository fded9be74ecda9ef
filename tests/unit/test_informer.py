"""The children's watch-fed cache (qdd.controller.informer): what a pass reads, and when the
operator is told. No API server: the informer's HTTP calls go to a scripted fake."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from qdd import labels
from qdd.controller.informer import ChildCache, Gone, Informer, _path
from qdd.controller.watching import WatchTimeouts


def obj(kind: str, name: str, rv: int, dep: str | None = "seed", ns: str = "team", **meta: Any) -> dict[str, Any]:
    lab = {labels.DEPLOYMENT: dep} if dep else {}
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv),
                                                           "labels": lab, "managedFields": [{"manager": "x"}], **meta}}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, type_: str, o: dict[str, Any]) -> None:
        self.events.append((type_, o["kind"], o["metadata"]["name"]))


class Synced:
    """An informer stand-in: the cache asks whether a kind has listed before."""

    def __init__(self, kind: str, namespace: str | None = None):
        self.kind, self.namespace, self.synced = kind, namespace, threading.Event()


def cache_with(*kinds: str) -> tuple[ChildCache, Recorder, dict[str, Synced]]:
    rec = Recorder()
    c = ChildCache(on_event=rec)
    infs = {k: Synced(k) for k in kinds}
    c.informers = list(infs.values())  # type: ignore[arg-type]
    return c, rec, infs


def test_collection_paths_of_core_and_grouped_kinds():
    assert _path("v1", "Pod", "team") == "/api/v1/namespaces/team/pods"
    assert _path("apps/v1", "StatefulSet", None) == "/apis/apps/v1/statefulsets"
    assert _path("resource.nvidia.com/v1beta1", "ComputeDomain", "t") == \
        "/apis/resource.nvidia.com/v1beta1/namespaces/t/computedomains"
    assert _path("policy/v1", "PodDisruptionBudget", "t") == "/apis/policy/v1/namespaces/t/poddisruptionbudgets"


def test_first_list_is_silent_later_lists_report_what_changed():
    c, rec, infs = cache_with("Pod")
    c.replace("Pod", None, [obj("Pod", "a", 1), obj("Pod", "b", 2)])
    infs["Pod"].synced.set()
    assert rec.events == []  # the operator's start queues every deployment anyway
    c.replace("Pod", None, [obj("Pod", "a", 1), obj("Pod", "b", 5), obj("Pod", "c", 6)])
    assert sorted(rec.events) == [("ADDED", "Pod", "c"), ("MODIFIED", "Pod", "b")]
    rec.events.clear()
    c.replace("Pod", None, [obj("Pod", "c", 6)])  # a and b deleted while the watch was down
    assert sorted(rec.events) == [("DELETED", "Pod", "a"), ("DELETED", "Pod", "b")]
    assert [o["metadata"]["name"] for o in c.children("team", "seed")] == ["c"]


def test_a_list_in_one_namespace_leaves_the_others_alone():
    c, _, _ = cache_with("Pod")
    c.replace("Pod", "a", [obj("Pod", "p", 1, ns="a")])
    c.replace("Pod", "b", [obj("Pod", "p", 2, ns="b")])
    c.replace("Pod", "a", [])
    assert c.children("a", "seed") == [] and len(c.children("b", "seed")) == 1


def test_children_in_managed_kind_order_then_name_copied_without_managed_fields():
    c, _, _ = cache_with()
    for o in (obj("Pod", "z", 1), obj("Deployment", "router", 2), obj("Pod", "a", 3), obj("ComputeDomain", "cd", 4),
              obj("Pod", "other", 5, dep="another"), obj("Service", "s", 6)):
        c.apply_event("ADDED", o)
    got = c.children("team", "seed")
    assert [(o["kind"], o["metadata"]["name"]) for o in got] == [
        ("ComputeDomain", "cd"), ("Service", "s"), ("Pod", "a"), ("Pod", "z"), ("Deployment", "router")]
    assert all("managedFields" not in o["metadata"] for o in got)
    got[0]["metadata"]["name"] = "changed by a pass"
    assert c.children("team", "seed")[0]["metadata"]["name"] == "cd"


def test_watch_events_are_stored_before_the_operator_is_told():
    seen: list[list[str]] = []
    c = ChildCache()
    c.on_event = lambda t, o: seen.append([x["metadata"]["name"] for x in c.children("team", "seed")])
    c.apply_event("ADDED", obj("Pod", "a", 1))
    c.apply_event("DELETED", obj("Pod", "a", 2))
    assert seen == [["a"], []]


def test_a_pod_event_that_changes_only_its_annotations_is_stored_and_asks_for_no_pass():
    c, rec, _ = cache_with()
    c.apply_event("ADDED", obj("Pod", "a", 1, annotations={"engine.sim.qdd.dev/phase": "weights"}))
    c.apply_event("MODIFIED", obj("Pod", "a", 2, annotations={"engine.sim.qdd.dev/phase": "compile"}))
    assert c.children("team", "seed")[0]["metadata"]["annotations"] == {"engine.sim.qdd.dev/phase": "compile"}
    ready = obj("Pod", "a", 3, annotations={"engine.sim.qdd.dev/phase": "compile"})
    ready["status"] = {"phase": "Running"}
    c.apply_event("MODIFIED", ready)  # a change a pass reads (its status, labels, spec) is reported
    # another kind's annotations are read (the router's serving generation): reported
    c.apply_event("ADDED", obj("Deployment", "r", 4, annotations={"x": "1"}))
    c.apply_event("MODIFIED", obj("Deployment", "r", 5, annotations={"x": "2"}))
    assert rec.events == [("ADDED", "Pod", "a"), ("MODIFIED", "Pod", "a"), ("ADDED", "Deployment", "r"),
                          ("MODIFIED", "Deployment", "r")]


def test_answers_to_our_writes_are_seen_unless_the_watch_knows_better():
    c, rec, _ = cache_with()
    c.observe(obj("Pod", "a", 10))  # our apply's answer: the next pass sees it, nobody is told
    assert [o["metadata"]["resourceVersion"] for o in c.children("team", "seed")] == ["10"] and rec.events == []
    c.apply_event("MODIFIED", obj("Pod", "a", 9))  # the watch lags behind our answer: kept
    assert c.children("team", "seed")[0]["metadata"]["resourceVersion"] == "10"
    c.apply_event("MODIFIED", obj("Pod", "a", 12))
    c.observe(obj("Pod", "a", 11))  # an older answer arriving late: ignored
    assert c.children("team", "seed")[0]["metadata"]["resourceVersion"] == "12"
    c.apply_event("DELETED", obj("Pod", "a", 13))
    c.observe(obj("Pod", "a", 12))  # an answer from before the deletion must not bring it back
    assert c.children("team", "seed") == []
    c.observe(obj("Pod", "a", 20))  # created again since: seen
    assert c.children("team", "seed")[0]["metadata"]["resourceVersion"] == "20"
    c.observe({"kind": "Status", "metadata": {}})  # not a child: ignored
    c.observe(obj("Secret", "x", 1))
    assert len(c) == 1


def test_a_child_we_deleted_reads_as_terminating_until_the_watch_says_it_is_gone():
    c, _, _ = cache_with()
    c.apply_event("ADDED", obj("Pod", "leader", 1))
    c.deleting("Pod", "team", "leader")
    [p] = c.children("team", "seed")
    assert p["metadata"]["deletionTimestamp"].endswith("Z") and p["metadata"]["resourceVersion"] == "1"
    c.apply_event("DELETED", obj("Pod", "leader", 2))
    c.deleting("Pod", "team", "leader")  # its DELETED event came first: nothing to mark, no ghost
    assert c.children("team", "seed") == []


def test_a_relabelled_child_moves_to_its_new_deployment():
    c, _, _ = cache_with()
    c.apply_event("ADDED", obj("Pod", "p", 1, dep="one"))
    c.apply_event("MODIFIED", obj("Pod", "p", 2, dep="two"))
    assert c.children("team", "one") == [] and len(c.children("team", "two")) == 1


# --- the informer's list and watch against a scripted API server -------------------------------


class FakeResponse:
    def __init__(self, status: int, body: bytes = b"", chunks: list[bytes] | None = None):
        self.status, self.reason, self._body, self._chunks = status, "x", body, chunks or []
        self.response = self

    @property
    def data(self) -> bytes:
        return self._body

    def read(self) -> bytes:
        return self._body

    def stream(self, amt: Any = None, decode_content: bool = False):
        yield from self._chunks

    def release_conn(self) -> None:
        pass


class FakeApi:
    """Answers GETs from a script: each entry (check of the query, response)."""

    def __init__(self, script: list[FakeResponse]):
        self.script, self.queries = list(script), []

    def param_serialize(self, method: str, path: str, query_params: Any = None, **_: Any) -> tuple:
        self.queries.append((path, dict(query_params)))
        return (method, path)

    def call_api(self, method: str, path: str, _request_timeout: Any = None) -> FakeResponse:
        self.timeout = _request_timeout
        if not self.script:
            time.sleep(0.05)
            raise ConnectionError("script over")
        return self.script.pop(0)

    def response_deserialize(self, resp: FakeResponse, types: Any) -> None:
        raise ApiException(status=resp.status, reason="scripted")


def lines(*events: dict[str, Any]) -> list[bytes]:
    blob = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    return [blob[:7], blob[7:]]  # a line split over two chunks


def test_informer_lists_watches_from_the_lists_version_and_lists_again_on_410():
    pod = obj("Pod", "a", 5)
    listed = {"metadata": {"resourceVersion": "5"}, "items": [{k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}]}
    api = FakeApi([
        FakeResponse(200, json.dumps(listed).encode()),
        FakeResponse(200, chunks=lines({"type": "MODIFIED", "object": {**obj("Pod", "a", 7), "status": {"phase": "Running"}}},
                                       {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})),
        FakeResponse(200, chunks=lines({"type": "ERROR", "object": {"code": 410, "message": "too old"}})),
        FakeResponse(200, json.dumps({"metadata": {"resourceVersion": "20"}, "items": []}).encode()),
    ])
    rec = Recorder()
    c = ChildCache(on_event=rec)
    inf = Informer(api, "v1", "Pod", "team", c, WatchTimeouts(server=300, client=330, inactivity=70))  # type: ignore[arg-type]
    c.informers = [inf]
    inf.start()
    deadline = time.monotonic() + 5
    while len(api.queries) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    inf.stop.set()
    q = api.queries
    assert q[0] == ("/api/v1/namespaces/team/pods", {"labelSelector": "app.kubernetes.io/managed-by=qdd-operator"})
    assert q[1][1] == {"labelSelector": "app.kubernetes.io/managed-by=qdd-operator", "watch": "true",
                       "resourceVersion": "5", "allowWatchBookmarks": "true", "timeoutSeconds": 300}
    assert q[2][1]["resourceVersion"] == "9"  # after the stream ended: from the bookmark's version
    assert "watch" not in q[3][1]  # 410 Gone: listed again
    assert q[4][1]["resourceVersion"] == "20"
    assert api.timeout == (5, 70)  # a silent stream is dropped after the inactivity timeout
    assert rec.events == [("MODIFIED", "Pod", "a"), ("DELETED", "Pod", "a")]
    assert inf.synced.is_set() and c.children("team", "seed") == []


def test_a_kind_the_cluster_does_not_serve_is_an_empty_synced_store():
    api = FakeApi([FakeResponse(404)])
    c = ChildCache()
    inf = Informer(api, "resource.nvidia.com/v1beta1", "ComputeDomain", None, c, WatchTimeouts())  # type: ignore[arg-type]
    c.informers = [inf]
    inf.start()
    assert inf.synced.wait(5)
    inf.stop.set()
    assert c.synced() and c.children("team", "seed") == []


def test_a_watch_error_other_than_410_is_raised():
    inf = Informer(FakeApi([]), "v1", "Pod", None, ChildCache(), WatchTimeouts())  # type: ignore[arg-type]
    with pytest.raises(Gone):
        inf._event({"type": "ERROR", "object": {"code": 410, "message": "too old"}}, "1")
    with pytest.raises(Gone):  # etcd restored from a backup: the server is behind our version
        inf._event({"type": "ERROR", "object": {"code": 504, "message": "Too large resource version"}}, "9")
    with pytest.raises(RuntimeError, match="forbidden"):
        inf._event({"type": "ERROR", "object": {"code": 403, "message": "forbidden"}}, "1")


# --- what a child's event does in the operator (qdd.controller.handlers) ------------------------


class Queue:
    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []

    def add_after(self, key: tuple[str, str], seconds: float) -> None:
        assert seconds == 0.5
        self.keys.append(key)


def test_a_childs_event_queues_its_deployment_only_on_the_replica_that_acts():
    from qdd.controller.handlers import child_event_handler

    q = Queue()
    on = child_event_handler(q, None)  # type: ignore[arg-type]
    on("MODIFIED", obj("Pod", "seed-decode-0-leader", 3))
    on("MODIFIED", obj("Pod", "stranger", 3, dep=None))  # not a deployment's child
    assert q.keys == [("team", "seed")]

    asked = []
    leading = [False]

    def leader() -> bool:
        asked.append(1)
        return leading[0]

    q2 = Queue()
    on2 = child_event_handler(q2, leader)  # type: ignore[arg-type]
    for i in range(50):
        on2("MODIFIED", obj("Pod", f"p{i}", i))
    assert q2.keys == [] and len(asked) == 1  # a standby replica; the peering object read once per 2 s


# --- found by review: a stale cache after the operator's own writes ------------------------------


def test_a_lagging_watch_event_does_not_undo_our_deletion():
    """The pass that deletes a broken group was queued by the first of several status events of one
    pod (a container restart: terminated, restarted, not Ready). The later ones, older than the
    delete, arrive after it: the pod must still read as terminating, or the next pass deletes the
    group again (a second GroupRestart event and restart count for one restart)."""
    c, _, _ = cache_with()
    c.apply_event("ADDED", obj("Pod", "leader", 10, uid="u1"))
    c.deleting("Pod", "team", "leader")
    c.apply_event("MODIFIED", obj("Pod", "leader", 11, uid="u1"))  # sent before our delete reached the API server
    [p] = c.children("team", "seed")
    assert p["metadata"]["resourceVersion"] == "11" and p["metadata"].get("deletionTimestamp")
    c.apply_event("MODIFIED", obj("Pod", "leader", 12, uid="u1", deletionTimestamp="2030-01-01T00:00:00Z"))
    assert c.children("team", "seed")[0]["metadata"]["deletionTimestamp"] == "2030-01-01T00:00:00Z"
    c.apply_event("DELETED", obj("Pod", "leader", 13, uid="u1"))
    c.observe(obj("Pod", "leader", 20, uid="u2"))  # the group created again: a new pod of the same name
    assert not c.children("team", "seed")[0]["metadata"].get("deletionTimestamp")


def test_a_relist_that_misses_a_deleted_object_refuses_a_late_answer_for_it():
    """Deleted while the watch was down: the relist drops it. An answer to an apply sent before the
    deletion, arriving after the relist, must not bring back a ghost the next 10 minutes would keep
    (no watch event ever comes for it; a pass would wait on a pod that does not exist)."""
    c, _, infs = cache_with("Pod")
    c.replace("Pod", None, [obj("Pod", "a", 5)], rv="5")
    infs["Pod"].synced.set()
    c.replace("Pod", None, [], rv="30")  # a was deleted at some revision <= 30
    c.observe(obj("Pod", "a", 6))  # our apply's answer, from before the deletion
    assert c.children("team", "seed") == []
    c.observe(obj("Pod", "a", 31))  # created again after the list: seen
    assert [o["metadata"]["resourceVersion"] for o in c.children("team", "seed")] == ["31"]


def test_a_kind_no_longer_served_is_emptied_at_once_not_at_the_next_relist():
    """The Workload API turned off (or the ComputeDomain CRD removed): the watch answers 404. The
    kind must be listed again now (an empty store), not kept for RELIST_S: the passes would go on
    pruning the cached Workloads through a kind the cluster no longer serves, and fail each time."""
    wl = obj("Workload", "seed-decode-0", 5)
    listed = {"metadata": {"resourceVersion": "5"}, "items": [{k: v for k, v in wl.items() if k not in ("kind", "apiVersion")}]}
    api = FakeApi([FakeResponse(200, json.dumps(listed).encode()), FakeResponse(404), FakeResponse(404)])
    c = ChildCache()
    inf = Informer(api, "scheduling.k8s.io/v1alpha2", "Workload", "team", c, WatchTimeouts())  # type: ignore[arg-type]
    c.informers = [inf]
    inf.start()
    deadline = time.monotonic() + 3
    while c.children("team", "seed") and time.monotonic() < deadline:
        time.sleep(0.01)
    inf.stop.set()
    assert c.children("team", "seed") == []
    assert "watch" not in api.queries[2][1]


def test_tombstones_expire_oldest_first_and_a_mass_deletion_stays_linear(monkeypatch):
    """30 deployments of 240 engine pods deleted at once: 7200 DELETED events. Pruning rebuilt the
    tombstones on every deletion past 1000 (8.1 s under the cache's lock); expired ones are now
    dropped from the front."""
    import qdd.controller.informer as informer

    clock = [1000.0]
    monkeypatch.setattr(informer.time, "monotonic", lambda: clock[0])
    c = ChildCache()
    for i in range(7200):
        c.apply_event("ADDED", obj("Pod", f"p{i}", i + 1), notify=False)
    start = time.perf_counter()
    for i in range(7200):
        c.apply_event("DELETED", obj("Pod", f"p{i}", 7200 + i + 1), notify=False)
    assert time.perf_counter() - start < 1.0
    assert len(c._tombstones) == 7200  # all within TOMBSTONE_S: all kept
    clock[0] += informer.TOMBSTONE_S + 1
    c.apply_event("ADDED", obj("Pod", "q", 20000), notify=False)
    for _ in range(200):  # each deletion drops up to 64 expired ones
        c.apply_event("DELETED", obj("Pod", "q", 20001), notify=False)
    assert list(c._tombstones) == [("Pod", "team", "q")]
    c.observe(obj("Pod", "q", 20001))
    assert c.children("team", "seed") == []
