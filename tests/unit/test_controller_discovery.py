"""The Workload API asked again on every resync (qdd.controller.handlers.recheck_workload_api,
Kube.serves_workload_api(fresh=True)): a cluster that gains or loses it switches the placement of
later passes; an API error keeps the placement."""

from __future__ import annotations

import json
import os
import threading
import time
from types import SimpleNamespace

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import RESTResponse
from kubernetes.client.exceptions import ApiException

from qdd.controller.handlers import recheck_workload_api
from qdd.controller.kube import WORKLOAD_API, Kube


def _resp(body: dict) -> RESTResponse:
    return RESTResponse(urllib3.HTTPResponse(body=json.dumps(body).encode(), status=200, preload_content=True,
                                             headers={"Content-Type": "application/json"}))


class _Api(ApiClient):
    """The client's own ApiClient, with its HTTP layer answered here: GET /apis/scheduling.k8s.io/v1alpha2."""

    def __init__(self):
        super().__init__()
        self.served: bool | None = True  # None: the request fails with 503
        self.paths: list[str] = []
        self.rest_client = SimpleNamespace(request=self._http)

    def _http(self, method, url, *args, **kwargs):
        self.paths.append(f"{method} {url.split('//', 1)[-1].split('/', 1)[-1]}")
        if self.served is None:
            raise ApiException(status=503, reason="Service Unavailable")
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        return _resp({"kind": "APIResourceList", "groupVersion": WORKLOAD_API, "resources": [
            {"name": "workloads", "kind": "Workload", "namespaced": True, "singularName": "workload", "verbs": ["get"]},
            {"name": "podgroups", "kind": "PodGroup", "namespaced": True, "singularName": "podgroup", "verbs": ["get"]},
            {"name": "podgroups/status", "kind": "PodGroup", "namespaced": True, "singularName": "", "verbs": ["get"]}]})


class _Resources:
    def __init__(self, api: _Api):
        self.api, self.invalidated = api, 0

    def invalidate_cache(self):
        self.invalidated += 1

    def get(self, api_version: str, kind: str):
        from kubernetes.dynamic.exceptions import ResourceNotFoundError
        if not self.api.served:
            raise ResourceNotFoundError(kind)
        return SimpleNamespace(kind=kind)


def _kube(api: _Api) -> Kube:
    k = Kube.__new__(Kube)  # no API server: only what serves_workload_api touches
    k.api, k.dyn, k._res, k._discovery = api, SimpleNamespace(resources=_Resources(api)), {}, threading.Lock()
    for kind in ("Workload", "PodGroup"):
        k._resource(WORKLOAD_API, kind)
    return k


def test_fresh_discovery_follows_the_cluster_and_drops_the_cached_kinds():
    api = _Api()
    k = _kube(api)
    assert k.serves_workload_api() and k.serves_workload_api(fresh=True)
    assert api.paths == [f"GET apis/{WORKLOAD_API}"] and k.dyn.resources.invalidated == 0
    api.served = False  # e.g. the API server restarted without the GenericWorkload gate
    assert not k.serves_workload_api(fresh=True)
    assert k.dyn.resources.invalidated == 1 and not k.serves_workload_api()  # kinds looked up again: gone
    api.served = True
    assert k.serves_workload_api(fresh=True) and k.serves_workload_api()
    assert k.dyn.resources.invalidated == 2


def test_resync_switches_the_placement_when_the_api_comes_or_goes_and_keeps_it_on_errors():
    api = _Api()
    r = SimpleNamespace(kube=_kube(api), gang=True)
    assert recheck_workload_api(r) is False and r.gang is True
    api.served = False
    assert recheck_workload_api(r) is True and r.gang is False
    assert recheck_workload_api(r) is False and r.gang is False
    api.served = None  # 503: not an answer
    assert recheck_workload_api(r) is False and r.gang is False
    api.served = True
    assert recheck_workload_api(r) is True and r.gang is True


class _RacyDiscoverer:
    """What kubernetes.dynamic's LazyDiscoverer does to its cache (discovery.py, client 33.x): an
    invalidation replaces ``_cache`` and fills ``_cache['resources']`` after the requests; a lookup of
    a kind reads ``_cache['resources']``. Two threads at once: ``KeyError: 'resources'`` (issue 23)."""

    def __init__(self):
        self._cache: dict = {"resources": {"Pod": object()}}

    def invalidate_cache(self):
        self._cache = {"library_version": "x"}
        time.sleep(0.001)  # the GETs of /api and /apis
        self._cache["resources"] = {"Pod": object()}

    def get(self, api_version: str, kind: str):
        time.sleep(0.0005)
        return self._cache["resources"][kind]


def test_discovery_lookups_and_invalidations_never_interleave():
    k = Kube.__new__(Kube)
    k.dyn, k._res, k._discovery = SimpleNamespace(resources=_RacyDiscoverer()), {}, threading.Lock()
    errors: list[BaseException] = []

    def lookups():
        for _ in range(200):
            try:
                with k._discovery:
                    k._res.pop(("v1", "Pod"), None)
                k._resource("v1", "Pod")
            except BaseException as e:  # noqa: BLE001 — collected for the assertion
                errors.append(e)

    def invalidations():
        for _ in range(100):
            with k._discovery:
                k.dyn.resources.invalidate_cache()

    threads = [threading.Thread(target=lookups) for _ in range(4)] + [threading.Thread(target=invalidations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_each_process_has_its_own_discovery_cache_file(monkeypatch, tmp_path):
    from qdd.controller.kube import DISCOVERY_DIR_ENV, discovery_cache_file

    monkeypatch.setenv(DISCOVERY_DIR_ENV, str(tmp_path))
    assert discovery_cache_file() == str(tmp_path / f"qdd-discovery-{os.getpid()}.json")
    monkeypatch.delenv(DISCOVERY_DIR_ENV)
    assert discovery_cache_file().endswith(f"qdd-discovery-{os.getpid()}.json")
