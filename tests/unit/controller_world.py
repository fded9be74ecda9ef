"""A hand-made cluster for the controller's pure functions: the custom resource as the API server
returns it, the children qdd renders (exactly as the reconcile builds them), and observed children
as the API server and the built-in controllers would report them (defaulted fields, status,
StatefulSet pods, router pods, preflight Job pods). Plain dicts; every helper returns copies."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from qdd.api import parse_resource
from qdd.controller.children import with_owner
from qdd.controller.groups import group_states
from qdd.controller.status import Observed
from qdd.plan import Plan, build_plan
from qdd.preflight.result import compact
from qdd.render import render_all

from ..conftest import EXAMPLES, ROOT, load

UID = "6f1c2d3e-0000-4000-8000-00000000c0de"
OTHER_UID = "6f1c2d3e-0000-4000-8000-0000000000ff"
SEED = EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
T0, T1 = "2030-01-01T00:00:00Z", "2030-01-01T00:05:00Z"
STS_REV = "qwen35-prefill-7d9f8c6b5"
PASSED = json.loads((ROOT / "bench" / "results" / "nixl-preflight-h200x2.json").read_text())["nvlink"]


def cr_of(path: Path = SEED, mutate: Callable[[dict[str, Any]], None] | None = None, generation: int = 1,
          uid: str = UID) -> dict[str, Any]:
    """The custom resource as read from the API server (uid, generation, namespace)."""
    cr = copy.deepcopy(load(path))
    cr["metadata"].update(uid=uid, generation=generation, resourceVersion="100", namespace="default",
                          creationTimestamp=T0)
    if mutate:
        mutate(cr)
    return cr


def with_spec(cr: dict[str, Any], mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A spec change: a copy of ``cr`` with ``mutate(spec)`` applied and the generation bumped."""
    out = copy.deepcopy(cr)
    mutate(out["spec"])
    out["metadata"]["generation"] += 1
    return out


def plan_of(cr: dict[str, Any]) -> Plan:
    return build_plan(parse_resource(cr))


def desired_of(cr: dict[str, Any]) -> list[dict[str, Any]]:
    """What the reconcile applies for ``cr``: ``qdd render``'s objects (preflight included), owned."""
    return copy.deepcopy(_desired(json.dumps({k: cr[k] for k in ("apiVersion", "kind", "metadata", "spec")},
                                             sort_keys=True)))


@functools.lru_cache(maxsize=64)
def _desired(cr_json: str) -> list[dict[str, Any]]:  # rendering takes ~0.1 s; tests render the same CRs often
    cr = json.loads(cr_json)
    return [with_owner(o, cr) for o in render_all(plan_of(cr))]


def preflight_of(desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in desired if (o["metadata"].get("labels") or {}).get("qdd.dev/role") == "preflight"]


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} matches"
    return hits[0]


def names_of(objs: list[dict[str, Any]], kind: str | None = None) -> list[str]:
    return [o["metadata"]["name"] for o in objs if kind is None or o["kind"] == kind]


def _owner_ref(kind: str, name: str, uid: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def running(ready: bool = True, restarts: int = 0, phase: str = "Running") -> dict[str, Any]:
    return {"phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True"},
                           {"type": "Ready", "status": "True" if ready and phase == "Running" else "False"}],
            "containerStatuses": [{"name": "engine", "ready": ready, "restartCount": restarts,
                                   "state": {"running": {"startedAt": T0}}}]}


def live(obj: dict[str, Any], n: int = 0) -> dict[str, Any]:
    """``obj`` as the API server returns it after it was applied: server fields, defaulted spec
    fields qdd never set, and a status saying it converged."""
    o = copy.deepcopy(obj)
    meta = o["metadata"]
    meta.update(uid=f"child-{n:04d}", resourceVersion=str(1000 + n), creationTimestamp=T0, generation=1)
    kind = o["kind"]
    if kind == "Pod":
        o["spec"].setdefault("dnsPolicy", "ClusterFirst")
        o["spec"]["nodeName"] = f"gb200-{n:02d}"
        o["status"] = running()
    elif kind == "StatefulSet":
        o["spec"]["revisionHistoryLimit"] = 10
        r = o["spec"]["replicas"]
        o["status"] = {"observedGeneration": 1, "replicas": r, "readyReplicas": r, "availableReplicas": r,
                       "currentReplicas": r, "updatedReplicas": r, "currentRevision": STS_REV,
                       "updateRevision": STS_REV}
    elif kind == "Deployment":
        o["spec"]["progressDeadlineSeconds"] = 600
        r = o["spec"].get("replicas", 1)
        o["status"] = {"observedGeneration": 1, "replicas": r, "readyReplicas": r, "availableReplicas": r,
                       "updatedReplicas": r}
    elif kind == "Job":
        o["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    elif kind == "ComputeDomain":
        o["status"] = {"status": "Ready"}
    elif kind == "Service":
        o["spec"].setdefault("sessionAffinity", "None")
    return o


def sts_pods(sts: dict[str, Any], count: int | None = None, revision: str = STS_REV,
             status: Callable[[], dict[str, Any]] = running) -> list[dict[str, Any]]:
    """The pods the StatefulSet controller makes: template labels + controller-revision-hash,
    owned by the StatefulSet (not by the custom resource)."""
    t = sts["spec"]["template"]
    name = sts["metadata"]["name"]
    out = []
    for i in range(sts["spec"]["replicas"] if count is None else count):
        lb = {**t["metadata"]["labels"], "controller-revision-hash": revision,
              "statefulset.kubernetes.io/pod-name": f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)}
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{i}", "namespace": sts["metadata"]["namespace"], "labels": lb,
                                 "uid": f"sts-pod-{i}", "ownerReferences": [
                                     _owner_ref("StatefulSet", name, sts["metadata"].get("uid", "sts-uid"))]},
                    "spec": copy.deepcopy(t["spec"]), "status": status()})
    return out


def router_pods(dep: dict[str, Any]) -> list[dict[str, Any]]:
    t = dep["spec"]["template"]
    name = dep["metadata"]["name"]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-5d8f7-x{i}", "namespace": dep["metadata"]["namespace"],
                          "labels": {**t["metadata"]["labels"], "pod-template-hash": "5d8f7"},
                          "ownerReferences": [_owner_ref("ReplicaSet", f"{name}-5d8f7", "rs-uid")]},
             "spec": copy.deepcopy(t["spec"]), "status": running()} for i in range(dep["spec"].get("replicas", 1))]


def job_pod(job: dict[str, Any], result: dict[str, Any] | None | str = None) -> dict[str, Any]:
    """The pod of a preflight Job; a fetch pod carries ``result`` (a dict is compacted as the real
    fetch container does) in its termination message."""
    t = job["spec"]["template"]
    name = job["metadata"]["name"]
    side = job["metadata"]["labels"]["qdd.dev/preflight"]
    if result is None:
        state: dict[str, Any] = {"running": {"startedAt": T0}}
        phase = "Running"
    else:
        msg = result if isinstance(result, str) else compact(result)
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "message": msg}}
        phase = "Succeeded"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-q7x2k", "namespace": job["metadata"]["namespace"],
                         "labels": {**t["metadata"]["labels"], "batch.kubernetes.io/job-name": name},
                         "ownerReferences": [_owner_ref("Job", name, job["metadata"].get("uid", "job-uid"),
                                                        "batch/v1")]},
            "spec": copy.deepcopy(t["spec"]), "status": {"phase": phase,
                                                          "containerStatuses": [{"name": side, "state": state}]}}


def world(cr: dict[str, Any], preflight_result: dict[str, Any] | None = PASSED) -> list[dict[str, Any]]:
    """Steady state: every desired child exists as applied and converged, the StatefulSet's pods and
    the router's pods are Running and Ready, the preflight Jobs completed with ``preflight_result``."""
    desired = desired_of(cr)
    out = [live(o, i) for i, o in enumerate(desired)]
    for o in list(out):
        if o["kind"] == "StatefulSet":
            out += sts_pods(o)
        elif o["kind"] == "Deployment":
            out += router_pods(o)
        elif o["kind"] == "Job":
            side = o["metadata"]["labels"]["qdd.dev/preflight"]
            out.append(job_pod(o, preflight_result if side == "fetch" else {"pass": True}))
    return out


def replace(objs: list[dict[str, Any]], kind: str, name: str,
            fn: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """A copy of ``objs`` where ``fn`` changed (in place) the one object ``kind``/``name``; when
    ``fn`` returns False the object is removed."""
    out, hit = [], False
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            hit = True
            o = copy.deepcopy(o)
            if fn(o) is False:
                continue
        out.append(o)
    assert hit, f"{kind}/{name} not observed"
    return out


def terminating(o: dict[str, Any]) -> None:
    o["metadata"]["deletionTimestamp"] = T1
    o["metadata"]["deletionGracePeriodSeconds"] = 30


def gone(_: dict[str, Any]) -> bool:
    return False


def observed(cr: dict[str, Any], objs: list[dict[str, Any]]) -> Observed:
    """The reconcile's :class:`Observed` for ``objs`` (children by key + group states)."""
    return Observed({(o["kind"], o["metadata"]["name"]): o for o in objs}, group_states(desired_of(cr), objs))


def dump(objs: Any) -> str:
    return yaml.safe_dump(objs, sort_keys=True)
