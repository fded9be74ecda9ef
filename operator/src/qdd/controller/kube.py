"""Thin adapter over the Kubernetes API (dynamic client): list, apply, delete, status, events.
No decisions here; every write is counted in ``qdd_api_writes_total``."""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from .. import labels
from ..safetext import safe_text
from .children import MANAGED_KINDS
from .informer import ChildCache
from .metrics import API_WRITES, RECONCILE_STEP_SECONDS

log = logging.getLogger("qdd.kube")
TIMEOUT = (5, 30)
"""(connect, read) seconds for every API call: a call that hangs must not hold a reconcile (and
with it every later trigger of that resource) forever."""


WORKLOAD_API = "scheduling.k8s.io/v1alpha2"
CAPACITY_TTL_S = 2.0
"""How long one cluster-wide list of GPU nodes and pods answers the Placed condition's free-GPU
message (it names capacity, decides nothing)."""

API_THREADS = 16
"""Threads that send one reconcile's lists and applies side by side (shared by all reconciles)."""


DISCOVERY_DIR_ENV = "QDD_DISCOVERY_CACHE_DIR"


def discovery_cache_file() -> str:
    """This process's discovery cache file: under ``$QDD_DISCOVERY_CACHE_DIR`` (the chart mounts an
    emptyDir per pod) or the temp directory, named by the process id so that replicas sharing a
    directory (two on one host) never share a file."""
    where = os.environ.get(DISCOVERY_DIR_ENV) or tempfile.gettempdir()
    return os.path.join(where, f"qdd-discovery-{os.getpid()}.json")


def load_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    # One kept-alive connection per thread that may call at once (the API threads and kopf's
    # workers): with the client's default pool (10 on 2 cores) urllib3 discarded connections and
    # every call beyond opened a new TLS connection (bench-scale: "Connection pool is full").
    cfg.connection_pool_maxsize = API_THREADS + 16
    return client.ApiClient(cfg)


def _json(resp: Any) -> Any:
    """The body of a dynamic-client call made with ``serialize=False``. The client's own
    ResourceInstance (JSON → attribute objects → dict) was a third of the CPU of listing a
    deployment's children (py-spy during make bench-scale, bench/README.md)."""
    return json.loads(resp.data)


class Kube:
    def __init__(self, api: client.ApiClient | None = None):
        self.api = api or load_client()
        # Each operator process its own discovery cache file: the client's default is one file per
        # API server host in the temp directory, which two replicas on one host read and write at
        # once ("load cache error", issue 23).
        self.dyn = DynamicClient(self.api, cache_file=discovery_cache_file())
        self._res: dict[tuple[str, str], Any] = {}
        self._discovery = threading.Lock()
        """The dynamic client's discovery is not thread-safe: a lookup rebuilds ``_cache['resources']``
        while another reads it (``KeyError: 'resources'`` in a child event's handler, issue 23). Every
        lookup and invalidation of this client goes through this lock."""
        # No typed API class (CoreV1Api): its lazy import took 2.2 s (cProfile, bench/README.md
        # "bench-scale") and 21 MiB of the operator's memory; pods, nodes and events go through
        # the dynamic client like every other kind.
        for api_version, kind in [*MANAGED_KINDS, ("v1", "Node"), ("v1", "Event")]:  # discovery once, at start
            self._resource(api_version, kind)
        # The children's kinds are listed side by side: a pass waits for the slowest list, not the sum
        # of 11 (a converged pass: 150 ms one after the other on a quiet 2-core machine).
        self._lists = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="qdd-api")
        self._capacity_lock = threading.Lock()
        self._capacity: tuple[float, Any] = (0.0, None)
        self.cache: ChildCache | None = None
        """The children as the operator's watches deliver them (qdd.controller.informer); None, or
        not yet synced: lists from the API server."""
        self.crs: ChildCache | None = None
        """The custom resources as kopf's watch delivers them (qdd.controller.handlers feeds it from an
        on.event handler) and as status patches return them; None (nothing feeds it): read each time."""

    def _resource(self, api_version: str, kind: str) -> Any | None:
        k = (api_version, kind)
        with self._discovery:
            if k not in self._res:
                try:
                    self._res[k] = self.dyn.resources.get(api_version=api_version, kind=kind)
                except ResourceNotFoundError:
                    return None  # e.g. the ComputeDomain CRD is not installed
            return self._res[k]

    def _required(self, api_version: str, kind: str) -> Any:
        """The resource of a kind qdd cannot work without (its own, the core and apps kinds)."""
        res = self._resource(api_version, kind)
        if res is None:
            raise RuntimeError(f"the API server does not serve {api_version} {kind}")
        return res

    def may_watch_nodes(self) -> bool:
        """Whether this operator may list and watch Nodes (two SelfSubjectAccessReviews, which every
        authenticated user may create): the node watch (qdd.controller.tray_watch) is registered only
        then. Nodes are cluster-scoped: a namespace-scoped install has them through the chart's
        ``-discovery`` ClusterRole, not without it. False, with a warning, when denied or not answered."""
        why = "denied (a namespace-scoped install without rbac.discovery?)"
        try:
            review = self._required("authorization.k8s.io/v1", "SelfSubjectAccessReview")
            allowed = [bool(_json(review.create(body={
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "resource": "nodes"}}}, serialize=False,
                _request_timeout=TIMEOUT)).get("status", {}).get("allowed")) for verb in ("list", "watch")]
        except Exception as e:  # noqa: BLE001 — an API hiccup at start-up: run without the watch, and say so
            allowed, why = [False], f"not answered: {type(e).__name__}: {str(e)[:200]}"
        if not all(allowed):
            log.warning("listing and watching Nodes is %s: no node watch; deployments waiting on a tray coming "
                        "back are looked at again at the resync (docs/reliability.md)", why)
        return all(allowed)

    def serves_workload_api(self, fresh: bool = False) -> bool:
        """The API server serves scheduling.k8s.io/v1alpha2 Workload and PodGroup (Kubernetes
        v1.36 with the GenericWorkload gate and that API version on). Discovery cannot see the
        scheduler's gates (GangScheduling, TopologyAwareWorkloadScheduling): docs/placement.md.

        ``fresh``: ask the API server now (one GET of the group version's resource list, what the
        resync does every period) instead of the discovery read at start; when the answer changed,
        the dynamic client's discovery cache is dropped so that the two kinds are looked up again."""
        if not fresh:
            return all(self._resource(WORKLOAD_API, k) is not None for k in ("Workload", "PodGroup"))
        try:
            group, version = WORKLOAD_API.split("/")
            found = client.CustomObjectsApi(self.api).get_api_resources(group, version, _request_timeout=TIMEOUT)
            served = {"workloads", "podgroups"} <= {r.name for r in (found.resources or [])}
        except ApiException as e:
            if e.status != 404:
                raise
            served = False
        cached = all(self._res.get((WORKLOAD_API, k)) is not None for k in ("Workload", "PodGroup"))
        if served != cached:
            with self._discovery:
                self.dyn.resources.invalidate_cache()
                for k in ("Workload", "PodGroup"):
                    self._res.pop((WORKLOAD_API, k), None)
            for k in ("Workload", "PodGroup"):
                self._resource(WORKLOAD_API, k)
        return served

    def get_cr(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The custom resource: from :attr:`crs` when it holds it, else read (and kept there)."""
        cached = self.crs.get(labels.KIND, namespace, name) if self.crs is not None else None
        if cached is not None:
            return cached
        res = self._required(f"{labels.GROUP}/{labels.VERSION}", labels.KIND)
        try:
            cr = _json(res.get(name=name, namespace=namespace, serialize=False, _request_timeout=TIMEOUT))
        except NotFoundError:
            return None
        if self.crs is not None:
            self.crs.observe(copy.deepcopy(cr))
        return cr

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A QwenDisaggBenchmark (the accuracy gate's, spec.validation.accuracy.benchmarkName): one GET;
        None when it does not exist or its CRD is not installed."""
        res = self._resource(f"{labels.GROUP}/{labels.VERSION}", "QwenDisaggBenchmark")
        if res is None:
            return None
        try:
            return _json(res.get(name=name, namespace=namespace, serialize=False, _request_timeout=TIMEOUT))
        except NotFoundError:
            return None

    def confirm_cr(self, cr: dict[str, Any]) -> bool:
        """Whether ``cr`` (as :meth:`get_cr` returned it) still exists, not being deleted: one GET when
        it came from :attr:`crs`. kopf's watch, when it lists again (after 410 Gone, or when peering
        resumes a paused replica), reports what exists but never what was deleted meanwhile; a cached
        resource deleted then would otherwise have its children created again, and again after the
        garbage collector removes them, until the resync's list. A gone or replaced one is updated in
        :attr:`crs`."""
        if self.crs is None:
            return True  # read fresh by this pass already
        meta = cr["metadata"]
        res = self._required(f"{labels.GROUP}/{labels.VERSION}", labels.KIND)
        try:
            fresh = _json(res.get(name=meta["name"], namespace=meta["namespace"], serialize=False,
                                  _request_timeout=TIMEOUT))
        except NotFoundError:
            self.crs.apply_event("DELETED", {"kind": labels.KIND, "metadata": {
                "name": meta["name"], "namespace": meta["namespace"]}}, notify=False)
            return False
        self.crs.observe(copy.deepcopy(fresh))
        fm = fresh["metadata"]
        return fm.get("uid") == meta.get("uid") and not fm.get("deletionTimestamp")

    def list_crs(self, namespaces: list[str]) -> list[tuple[str, str]]:
        """(namespace, name) of every QwenDisaggDeployment in ``namespaces`` (all when empty)."""
        res = self._required(f"{labels.GROUP}/{labels.VERSION}", labels.KIND)
        lists = ([res.get(namespace=ns, serialize=False, _request_timeout=TIMEOUT) for ns in namespaces] if namespaces
                 else [res.get(serialize=False, _request_timeout=TIMEOUT)])
        per_scope = [_json(lst)["items"] for lst in lists]
        scopes: list[str | None] = list(namespaces) if namespaces else [None]
        for scope, items in zip(scopes, per_scope, strict=True):
            for i in items:
                i.setdefault("apiVersion", f"{labels.GROUP}/{labels.VERSION}")
                i.setdefault("kind", labels.KIND)
            if self.crs is not None:  # a fresh read each resync period, whatever kopf's watch missed
                self.crs.replace(labels.KIND, scope, items)
        return sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for items in per_scope for i in items)

    def peering_status(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        """``status`` of kopf's peering object (ClusterKopfPeering, or KopfPeering in ``namespace``);
        None when it is missing or cannot be read."""
        from .peering import CLUSTER_KIND, GROUP, NAMESPACED_KIND, VERSION

        res = self._resource(f"{GROUP}/{VERSION}", NAMESPACED_KIND if namespace else CLUSTER_KIND)
        if res is None:
            return None
        try:
            body = res.get(name=name, namespace=namespace, _request_timeout=TIMEOUT).to_dict()
        except Exception as e:  # noqa: BLE001 — no leadership while the API server cannot say
            log.warning("cannot read the peering object %s: %s", name, e)
            return None
        return body.get("status") or {}

    def list_children(self, namespace: str, cr: str) -> list[dict[str, Any]]:
        """Every child of ``cr`` (the deployment label), of every kind in MANAGED_KINDS the cluster
        serves, in that order: from :attr:`cache` once it has synced, else listed."""
        if self.cache is not None and self.cache.synced():
            return self.cache.children(namespace, cr)

        def one(api_version: str, kind: str) -> list[dict[str, Any]]:
            res = self._resource(api_version, kind)
            if res is None:
                return []
            items = _json(res.get(namespace=namespace, label_selector=f"{labels.DEPLOYMENT}={cr}", serialize=False,
                                  _request_timeout=TIMEOUT))["items"]
            for item in items:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                item["metadata"].pop("managedFields", None)
            return items
        futures = [self._lists.submit(one, v, k) for v, k in MANAGED_KINDS]
        return [item for f in futures for item in f.result()]

    def apply(self, obj: dict[str, Any]) -> bool:
        """Server-side apply. False (nothing to do) when the namespace is being deleted."""
        res = self._resource(obj["apiVersion"], obj["kind"])
        if res is None:
            raise RuntimeError(f"{obj['apiVersion']} {obj['kind']} is not served by this cluster (is its CRD installed?)")
        try:
            resp = res.server_side_apply(body=obj, namespace=obj["metadata"].get("namespace"),
                                         field_manager=labels.FIELD_MANAGER, force_conflicts=True, serialize=False,
                                         _request_timeout=TIMEOUT)
        except ApiException as e:
            if e.status == 403 and "being terminated" in str(e.body or ""):
                log.info("namespace %s is being deleted: not applying %s/%s", obj["metadata"].get("namespace"),
                         obj["kind"], obj["metadata"]["name"])
                return False
            raise
        API_WRITES.labels("apply", obj["kind"]).inc()
        if self.cache is not None:  # the next pass sees its own write (qdd.controller.informer)
            self.cache.observe(_json(resp))
        return True

    def apply_all(self, objs: list[dict[str, Any]]) -> list[bool]:
        """:meth:`apply` of each, side by side (they do not depend on each other); raises the first
        error after all have been tried."""
        futures = [self._lists.submit(self.apply, o) for o in objs]
        return [f.result() for f in futures]

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        res = self._required(api_version, kind)
        try:
            res.delete(name=name, namespace=namespace, propagation_policy="Background", _request_timeout=TIMEOUT)
            API_WRITES.labels("delete", kind).inc()
        except NotFoundError:
            pass
        if self.cache is not None:
            self.cache.deleting(kind, namespace, name)

    def annotate(self, api_version: str, kind: str, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge-patch annotations onto an object (qdd.controller.tray_repair's resync of a claim).
        An object gone since it was listed is not an error."""
        try:
            self._required(api_version, kind).patch(
                name=name, namespace=namespace, body={"metadata": {"annotations": annotations}},
                content_type="application/merge-patch+json", serialize=False, _request_timeout=TIMEOUT)
            API_WRITES.labels("patch", kind).inc()
        except NotFoundError:
            return

    def label_pod(self, namespace: str, name: str, pod_labels: dict[str, str]) -> None:
        """Merge-patch labels onto a pod (metadata is mutable; the pod is not restarted). A pod
        gone since it was listed is not an error."""
        try:
            resp = self._required("v1", "Pod").patch(
                name=name, namespace=namespace, body={"metadata": {"labels": pod_labels}},
                content_type="application/merge-patch+json", serialize=False, _request_timeout=TIMEOUT)
            API_WRITES.labels("patch", "Pod").inc()
        except NotFoundError:
            return
        if self.cache is not None:
            pod = _json(resp)
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            self.cache.observe(pod)

    def label_pods(self, namespace: str, pods: list[tuple[str, dict[str, str]]]) -> None:
        """:meth:`label_pod` of each (name, labels), side by side: a new deployment's StatefulSet
        pods are labelled in one pass (180 patches for make bench-scale's 30 deployments)."""
        for f in [self._lists.submit(self.label_pod, namespace, name, lab) for name, lab in pods]:
            f.result()

    def pod_log(self, namespace: str, name: str, container: str, limit_bytes: int, timeout: float) -> str:
        """The first ``limit_bytes`` of a container's log (``pods/log``, from its beginning), within
        ``timeout`` seconds; raises ApiException or a connection error (qdd.controller.startup_logs)."""
        req = self.api.param_serialize(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log",
            query_params=[("container", container), ("limitBytes", limit_bytes)],
            # kube-apiserver answers pods/log as text/plain whatever is asked, but refuses an Accept
            # of text/plain alone with 406 (v1.36.3): the client's own default is application/json.
            header_params={"Accept": "application/json, */*"}, auth_settings=["BearerToken"])
        resp = self.api.call_api(*req, _request_timeout=(min(5.0, timeout), timeout))
        body = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason)
        text: str = body[:limit_bytes].decode("utf-8", "replace")
        return text

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the status. A resource deleted since it was read is not an error: its
        status is gone with it (a status write racing a deletion)."""
        res = self._required(f"{labels.GROUP}/{labels.VERSION}", labels.KIND)
        try:
            resp = res.status.patch(name=name, namespace=namespace, body={"status": status},
                                    content_type="application/merge-patch+json", serialize=False,
                                    _request_timeout=TIMEOUT)
        except NotFoundError:
            log.info("%s/%s is gone: its status is not written", namespace, name)
            return
        API_WRITES.labels("patch-status", labels.KIND).inc()
        if self.crs is not None:
            self.crs.observe(_json(resp))  # the next pass compares its status with what it wrote

    def gpu_nodes_and_pods(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """(every node carrying nvidia.com/gpu.clique, every pod bound to a node and not finished,
        cluster-wide); None when RBAC does not allow it (namespace-scoped install). One answer
        serves every pass of the next ``CAPACITY_TTL_S`` seconds: while 30 deployments converge
        many of them ask at once (a gang waits a scheduling cycle), and each list of 182 nodes and
        their pods cost ~10 % of the operator's CPU (py-spy, make bench-scale, bench/README.md)."""
        start = time.perf_counter()
        try:
            with self._capacity_lock:  # one list at a time; the passes waiting for it take its answer
                at, value = self._capacity
                if value is not None and time.monotonic() - at < CAPACITY_TTL_S:
                    return value
                value = self._gpu_nodes_and_pods()
                self._capacity = (time.monotonic(), value)
                return value
        finally:  # part of the pass's status step, shown on its own
            RECONCILE_STEP_SECONDS.labels("capacity").observe(time.perf_counter() - start)

    def _gpu_nodes_and_pods(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        # Raw JSON, not the client's typed models: converting 180 nodes and their pods to models and
        # back took 340 ms of a pass (cProfile).
        try:
            nodes = self._required("v1", "Node").get(label_selector="nvidia.com/gpu.clique", serialize=False,
                                                      _request_timeout=TIMEOUT)
            pods = self._required("v1", "Pod").get(
                field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed", serialize=False,
                _request_timeout=TIMEOUT)
        except ApiException as e:
            if e.status == 403:
                return None
            raise
        return _json(nodes)["items"], _json(pods)["items"]

    def event(self, cr: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the custom resource (kubectl describe shows it)."""
        meta = cr["metadata"]
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": cr["apiVersion"], "kind": cr["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "type": type_, "reason": reason, "message": safe_text(message, 1000), "firstTimestamp": now, "lastTimestamp": now,
            "count": 1, "source": {"component": "qdd-operator"}, "reportingComponent": "qdd-operator",
        }
        try:
            self._required("v1", "Event").create(body=body, namespace=meta["namespace"], serialize=False,
                                                 _request_timeout=TIMEOUT)
            API_WRITES.labels("create", "Event").inc()
        except ApiException as e:
            log.warning("could not post event %s: %s", reason, e.reason)
