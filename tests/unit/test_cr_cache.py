"""The custom resources' cache (qdd.controller.kube.Kube.crs, fed by kopf's watch): a resource
whose deletion kopf's watch never reported must not get its children created again. No API server."""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from qdd import labels
from qdd.controller.children import key
from qdd.controller.groups import group_states
from qdd.controller.informer import ChildCache
from qdd.controller.kube import Kube
from qdd.controller.reconcile import Reconciler

from .controller_world import cr_of, desired_of

API = f"{labels.GROUP}/{labels.VERSION}"


class Body:
    def __init__(self, obj: dict[str, Any]):
        self.data = json.dumps(obj).encode()


class CRs:
    """The API server's custom resources: GET by name."""

    def __init__(self, *objs: dict[str, Any]):
        self.objs = {o["metadata"]["name"]: o for o in objs}
        self.gets = 0

    def get(self, name: str, namespace: str, **_: Any) -> Body:
        self.gets += 1
        if name not in self.objs:
            raise NotFoundError(ApiException(status=404, reason="Not Found"))
        return Body(self.objs[name])


def kube_with(server: CRs, *cached: dict[str, Any]) -> Kube:
    kube = Kube.__new__(Kube)
    kube._res, kube._discovery = {(API, labels.KIND): server}, threading.Lock()
    kube.cache, kube.crs = None, ChildCache(kinds=[labels.KIND])
    for cr in cached:  # as kopf's watch delivered it (its listing after a 410: type None)
        kube.crs.apply_event("ADDED", json.loads(json.dumps(cr)), notify=False)
    return kube


def test_a_cached_resource_deleted_behind_kopfs_back_is_found_gone_and_dropped():
    cr = cr_of()
    kube = kube_with(CRs(), cr)
    assert kube.get_cr("default", cr["metadata"]["name"]) is not None  # what the cache still says
    assert kube.confirm_cr(cr) is False
    assert kube.crs.get(labels.KIND, "default", cr["metadata"]["name"]) is None


def test_a_resource_deleted_and_created_again_is_not_the_cached_one():
    cr = cr_of()
    again = cr_of(uid="6f1c2d3e-0000-4000-8000-0000000000aa")
    again["metadata"]["resourceVersion"] = "200"
    kube = kube_with(CRs(again), cr)
    assert kube.confirm_cr(cr) is False
    assert kube.crs.get(labels.KIND, "default", cr["metadata"]["name"])["metadata"]["uid"] == again["metadata"]["uid"]
    assert kube.confirm_cr(again) is True


class Recording:
    """A Kube for _converge: records writes; confirm_cr as the API server answers."""

    def __init__(self, exists: bool):
        self.exists, self.applied, self.confirmed = exists, [], 0

    def confirm_cr(self, cr: dict[str, Any]) -> bool:
        self.confirmed += 1
        return self.exists

    def apply_all(self, objs: list[dict[str, Any]]) -> list[bool]:
        self.applied += [key(o) for o in objs]
        return [True] * len(objs)

    def delete(self, *_: Any) -> None:
        raise AssertionError("nothing to delete")

    def event(self, *_: Any) -> None:
        pass


def test_a_pass_of_a_deleted_resource_creates_none_of_its_children():
    """The garbage collector's deletions of the children of a resource kopf missed the deletion of
    (a watch that listed again after 410, a standby replica taking over) each queue a pass."""
    cr = cr_of()
    desired = desired_of(cr)
    gone = Recording(exists=False)
    r = Reconciler(gone, gang=False)  # type: ignore[arg-type]
    assert r._converge(cr, desired, [], group_states(desired, [])) is None
    assert gone.applied == [] and gone.confirmed == 1

    there = Recording(exists=True)
    r = Reconciler(there, gang=False)  # type: ignore[arg-type]
    assert r._converge(cr, desired, [], group_states(desired, [])) is True
    # all but the tray claims, which wait for the ComputeDomain's UID (qdd.render.trayclaims.bind_domain)
    assert len(there.applied) == len([o for o in desired if o["kind"] != "ResourceClaim"]) and there.confirmed == 1


def test_a_converged_pass_asks_nothing():
    cr = cr_of()
    desired = desired_of(cr)
    k = Recording(exists=False)
    r = Reconciler(k, gang=False)  # type: ignore[arg-type]
    assert r._converge(cr, desired, desired, group_states(desired, desired)) is False
    assert k.confirmed == 0 and k.applied == []
