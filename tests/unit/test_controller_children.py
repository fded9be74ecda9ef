"""controller/children.py: desired vs observed → apply / prune / replace, owner references, hashes.

Desired objects are what the reconcile builds (render + preflight, owned); observed ones are those
objects as the API server returns them (defaulted fields, status) plus what the built-in
controllers make (StatefulSet pods, router pods, Job pods)."""

from __future__ import annotations

import copy

import pytest

from qdd import labels
from qdd.controller.children import APPLIED_HASH, MANAGED_KINDS, diff, key, manifest_hash, owned, with_owner
from qdd.render import render

from ..conftest import ALL_SEED_EXAMPLES
from .controller_world import (
    OTHER_UID, UID, cr_of, desired_of, find, gone, live, names_of, plan_of, replace, terminating, with_spec,
    world)

NAME = "qwen35-397b-4xdep2-1xdep8-cc4096"


def _variants() -> list[tuple[str, dict]]:
    out = [(p.stem, cr_of(p)) for p in ALL_SEED_EXAMPLES]
    out += [
        ("two-decode-endpoints", cr_of(mutate=lambda c: c["spec"]["decode"].update(endpoints=2))),
        ("prefill-dep8-groups", cr_of(mutate=lambda c: c["spec"]["prefill"].update(
            endpoints=1, topology={"dataParallel": 8, "tensorParallel": 1, "expertParallel": True}))),
        ("decode-dep4-statefulset", cr_of(mutate=lambda c: (
            c["spec"]["decode"].update(topology={"dataParallel": 4, "tensorParallel": 1, "expertParallel": True}),
            c["spec"]["workload"].update(concurrency=1024)))),
        ("no-router", cr_of(mutate=lambda c: c["spec"].update(router={"replicas": 0}))),
        ("no-compute-domain", cr_of(mutate=lambda c: c["spec"]["cluster"].update(computeDomain=False))),
        ("preflight-off", cr_of(mutate=lambda c: c["spec"]["kvTransfer"].update(preflight={"enabled": False}))),
    ]
    return out


VARIANTS = _variants()


def _names(items: list) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) if isinstance(o, dict) else (o[1], o[2]) for o in items]


# --- what the reconcile applies can be listed back ---------------------------------------------------

@pytest.mark.parametrize(("label", "cr"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_every_desired_child_is_listed_back(label, cr):
    """list_children lists MANAGED_KINDS by the deployment label in the CR's namespace: a desired
    object outside that net would never be observed, so it would be re-applied on every pass."""
    desired = desired_of(cr)
    keys = [key(o) for o in desired]
    assert len(keys) == len(set(keys)), "two desired objects share kind and name"
    listed = dict((k, v) for v, k in MANAGED_KINDS)
    for o in desired:
        assert listed.get(o["kind"]) == o["apiVersion"], f"{o['kind']} is not listed by the reconcile"
        assert o["metadata"]["namespace"] == cr["metadata"]["namespace"]
        assert o["metadata"]["labels"][labels.DEPLOYMENT] == cr["metadata"]["name"]
        if o["kind"] not in ("ComputeDomain", "Workload", "PodGroup", "ResourceClaim"):  # the children without a role
            assert o["metadata"]["labels"][labels.ROLE] in (*labels.ROLES, "preflight")
        if o["kind"] == "StatefulSet":  # its pods are listed too (status counts them)
            t = o["spec"]["template"]["metadata"]["labels"]
            assert t[labels.DEPLOYMENT] == cr["metadata"]["name"] and t[labels.ROLE] in ("prefill", "decode")
    # engine objects are applied in MANAGED_KINDS order (ServiceAccount before the Deployment using it ...)
    order = [k for _, k in MANAGED_KINDS]
    engine = [o["kind"] for o in desired if o["metadata"]["labels"].get(labels.ROLE) != "preflight"]
    assert engine == sorted(engine, key=order.index)


def test_with_owner_sets_one_controller_reference_and_the_hash_of_the_manifest():
    cr = cr_of()
    obj = render(plan_of(cr))[0]
    before = copy.deepcopy(obj)
    out = with_owner(obj, cr)
    assert obj == before, "with_owner must not change the rendered object"
    assert out["metadata"]["ownerReferences"] == [{
        "apiVersion": "qdd.dev/v1alpha1", "kind": "QwenDisaggDeployment", "name": NAME, "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert out["metadata"]["annotations"][APPLIED_HASH] == manifest_hash(obj)
    assert owned(UID, out) and not owned(OTHER_UID, out)
    # no kopf bookkeeping ever reaches a child
    assert not any(k.startswith("kopf.") for o in desired_of(cr) for k in o["metadata"].get("annotations", {}))


def test_hashes_are_stable_across_renders_and_owners():
    """Two independent renders of the same spec give the same hashes: no write on a resync."""
    a, b = desired_of(cr_of()), desired_of(cr_of(generation=7))
    assert [o["metadata"]["annotations"][APPLIED_HASH] for o in a] == \
        [o["metadata"]["annotations"][APPLIED_HASH] for o in b]


@pytest.mark.parametrize(("owner_refs", "expected"), [
    ([{"uid": UID, "controller": True}], True),
    ([{"uid": UID, "controller": False}], False),
    ([{"uid": UID}], False),
    ([{"uid": OTHER_UID, "controller": True}], False),
    ([{"uid": OTHER_UID, "controller": True}, {"uid": UID}], False),
    ([{"uid": OTHER_UID}, {"uid": UID, "controller": True}], True),
    ([], False),
    (None, False),
])
def test_owned_means_controlled_by_this_uid(owner_refs, expected):
    obj = {"kind": "Service", "metadata": {"name": "x", "ownerReferences": owner_refs}}
    assert owned(UID, obj) is expected


# --- first reconcile and steady state ----------------------------------------------------------------

@pytest.mark.parametrize(("label", "cr"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_first_reconcile_applies_everything(label, cr):
    desired = desired_of(cr)
    d = diff(desired, [], UID)
    assert d.apply == desired and d.prune == [] and d.replace == []


@pytest.mark.parametrize(("label", "cr"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_steady_state_writes_nothing(label, cr):
    """Everything observed as applied (with server-defaulted fields and status, plus StatefulSet,
    ReplicaSet and Job pods that carry our labels but are not ours): no apply, no prune."""
    d = diff(desired_of(cr), world(cr), UID)
    assert (d.apply, d.prune, d.replace) == ([], [], [])


def test_server_side_changes_to_a_child_do_not_trigger_an_apply():
    """Drift in fields the API server or other controllers own (replicas set by someone, a label added
    by a GitOps tool) is not compared: only our applied-hash annotation is."""
    cr = cr_of()
    obs = world(cr)

    def drift(o):
        o["spec"]["replicas"] = 99
        o["metadata"]["labels"]["argocd.argoproj.io/instance"] = "x"

    obs = replace(obs, "StatefulSet", f"{NAME}-prefill", drift)
    assert diff(desired_of(cr), obs, UID).apply == []


# --- spec changes ------------------------------------------------------------------------------------

CHANGES = [
    # (what changed, spec mutation, applied, replaced)
    ("concurrency 4096 -> 5120 (decode pods only)", lambda s: s["workload"].update(concurrency=5120), [], []),
    # The Workload's template says the new gang size (its spec is immutable: replaced); the
    # PodGroup in use is kept (on-change: keep), so no running pod changes its group.
    # Two more DEP2 prefill pods: one more tray, so one more tray claim (qdd.render.trayclaims).
    ("kubectl scale --replicas=6", lambda s: s["prefill"].update(endpoints=6),
     [("ResourceClaim", f"{NAME}-prefill-tray-2"), ("StatefulSet", f"{NAME}-prefill")], [("Workload", NAME)]),
    ("router replicas", lambda s: s.setdefault("router", {}).update(replicas=2),
     [("Deployment", f"{NAME}-router")], []),
    # A change of generation (the engine image) is a new slot, not a re-apply: test_rollout.py.
    ("prefill env (StatefulSet, preflight Jobs: they run with the engine env)",
     lambda s: s["prefill"].update(extraEnv=[{"name": "VLLM_LOG_STATS_INTERVAL", "value": "5"}]),
     [("StatefulSet", f"{NAME}-prefill")],
     [("Job", f"{NAME}-preflight-serve-0"), ("Job", f"{NAME}-preflight-fetch-0")]),
    ("preflight thresholds (read by the verdict, not rendered)",
     lambda s: s["kvTransfer"].update(preflight={"minBulkGbps": 100}), [], []),
]


@pytest.mark.parametrize(("label", "mutate", "applied", "replaced"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_changed_spec_reapplies_only_changed_objects(label, mutate, applied, replaced):
    cr = cr_of()
    obs = world(cr)
    new = with_spec(cr, mutate)
    d = diff(desired_of(new), obs, UID)
    assert _names(d.apply) == applied
    assert sorted(_names(d.replace)) == sorted(replaced)
    assert d.prune == []
    assert all(o["kind"] != "Pod" for o in d.apply), "a bare pod is never re-applied (its spec is immutable)"
    assert all(k in ("Job", "Workload") for k, _ in _names(d.replace))
    # the re-applied objects carry the new hash, and applying them converges
    after = [live(o) if (o["kind"], o["metadata"]["name"]) in applied else o for o in
             (next((a for a in d.apply if key(a) == key(x)), x) for x in obs)]
    after += [live(a) for a in d.apply if key(a) not in {key(x) for x in obs}]  # created (a new tray claim)
    assert diff(desired_of(new), after, UID).apply == []


def test_changed_pods_are_left_to_the_group_rollout():
    cr = cr_of()
    new = with_spec(cr, lambda s: s["workload"].update(concurrency=5120))
    leader = find(desired_of(new), "Pod", f"{NAME}-decode-0-leader")
    old_leader = find(world(cr), "Pod", f"{NAME}-decode-0-leader")
    assert leader["metadata"]["annotations"][APPLIED_HASH] != old_leader["metadata"]["annotations"][APPLIED_HASH]
    assert leader["metadata"]["labels"][labels.REVISION] != old_leader["metadata"]["labels"][labels.REVISION]
    assert diff(desired_of(new), world(cr), UID).apply == []


def test_a_changed_job_already_terminating_is_not_deleted_again_and_is_created_once_gone():
    cr = cr_of()
    new = with_spec(cr, lambda s: s["engine"].update(image="qdd/vllm:other"))
    fetch = f"{NAME}-preflight-fetch-0"
    obs = replace(world(cr), "Job", fetch, terminating)
    d = diff(desired_of(new), obs, UID)
    assert ("Job", fetch) not in _names(d.replace) and ("Job", fetch) not in _names(d.apply)
    d = diff(desired_of(new), replace(obs, "Job", fetch, gone), UID)
    assert ("Job", fetch) in _names(d.apply) and ("Job", fetch) not in _names(d.replace)


def test_an_unchanged_terminating_child_is_recreated_only_once_gone():
    cr = cr_of()
    svc = f"{NAME}-decode"
    obs = replace(world(cr), "Service", svc, terminating)
    assert diff(desired_of(cr), obs, UID).apply == []
    assert _names(diff(desired_of(cr), replace(obs, "Service", svc, gone), UID).apply) == [("Service", svc)]


def test_missing_children_are_applied_alone():
    cr = cr_of()
    obs = replace(world(cr), "Service", f"{NAME}-router", gone)
    obs = replace(obs, "Pod", f"{NAME}-decode-0-worker-1", gone)
    d = diff(desired_of(cr), obs, UID)
    # the pod is in apply; whether it may be created is the group rule's call (groups.pods_to_create)
    assert _names(d.apply) == [("Service", f"{NAME}-router"), ("Pod", f"{NAME}-decode-0-worker-1")]


@pytest.mark.parametrize(("kind", "name", "field"), [
    ("StatefulSet", f"{NAME}-prefill", "apply"),
    ("ComputeDomain", f"{NAME}-compute-domain", "apply"),
    ("Job", f"{NAME}-preflight-fetch-0", "replace"),
    ("Pod", f"{NAME}-decode-0-leader", None),
])
def test_a_child_without_our_hash_is_taken_over(kind, name, field):
    """E.g. objects created by `qdd render | kubectl apply`: applied (Jobs replaced), pods left alone."""
    cr = cr_of()
    obs = replace(world(cr), kind, name, lambda o: o["metadata"]["annotations"].pop(APPLIED_HASH))
    d = diff(desired_of(cr), obs, UID)
    got = {"apply": _names(d.apply), "replace": _names(d.replace)}
    for f, items in got.items():
        assert ((kind, name) in items) is (f == field)


# --- pruning -----------------------------------------------------------------------------------------

def _extra(kind: str, name: str, owner_refs: list | None, api_version: str = "v1", **meta) -> dict:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "default", "labels": {labels.DEPLOYMENT: NAME},
                         "ownerReferences": owner_refs, **meta}}


def _ref(uid: str, kind: str = "QwenDisaggDeployment", controller: bool | None = True) -> dict:
    r = {"apiVersion": "qdd.dev/v1alpha1", "kind": kind, "name": NAME, "uid": uid}
    if controller is not None:
        r["controller"] = controller
    return r


PRUNE = [
    ("ours, no longer desired", _extra("Service", f"{NAME}-old", [_ref(UID)]), True),
    ("ours, a Pod of a removed endpoint", _extra("Pod", f"{NAME}-decode-3-leader", [_ref(UID)]), True),
    ("ours, a Deployment", _extra("Deployment", f"{NAME}-router-old", [_ref(UID)], "apps/v1"), True),
    ("a previous CR of the same name", _extra("Service", f"{NAME}-old", [_ref(OTHER_UID)]), False),
    ("owner but not controller", _extra("Service", f"{NAME}-old", [_ref(UID, controller=False)]), False),
    ("owner, controller unset", _extra("Service", f"{NAME}-old", [_ref(UID, controller=None)]), False),
    ("no owner references", _extra("Service", f"{NAME}-old", None), False),
    ("StatefulSet pod", _extra("Pod", f"{NAME}-prefill-5", [_ref("sts-uid", "StatefulSet")]), False),
    ("Job pod", _extra("Pod", f"{NAME}-preflight-fetch-0-abcde", [_ref("job-uid", "Job")]), False),
    ("router ReplicaSet pod", _extra("Pod", f"{NAME}-router-5d8f7-x0", [_ref("rs-uid", "ReplicaSet")]), False),
    ("ours, already terminating", _extra("Pod", f"{NAME}-decode-3-leader", [_ref(UID)],
                                         deletionTimestamp="2030-01-01T00:05:00Z"), False),
]


@pytest.mark.parametrize(("label", "extra", "pruned"), PRUNE, ids=[p[0] for p in PRUNE])
def test_prune_only_what_this_resource_controls(label, extra, pruned):
    cr = cr_of()
    d = diff(desired_of(cr), [*world(cr), extra], UID)
    want = [(extra["apiVersion"], extra["kind"], extra["metadata"]["name"])] if pruned else []
    assert d.prune == want and d.apply == [] and d.replace == []


def test_terminating_children_are_not_deleted_on_every_pass():
    """Regression: a pruned child keeps being listed while it terminates (a decode pod's grace
    period, a Job's pods); deleting it again on every pass is an API write per pass for nothing."""
    cr = cr_of(mutate=lambda c: c["spec"]["decode"].update(endpoints=2))
    smaller = with_spec(cr, lambda s: s["decode"].update(endpoints=1))
    obs = world(cr)
    first = diff(desired_of(smaller), obs, UID)
    gone = {(k, n) for _, k, n in first.prune}
    # Two decode endpoints had a PodDisruptionBudget; one has none (it would wedge drains).
    assert gone == {("Pod", f"{NAME}-decode-1-leader"), ("Pod", f"{NAME}-decode-1-worker-1"),
                    ("Job", f"{NAME}-preflight-serve-1"), ("Job", f"{NAME}-preflight-fetch-1"),
                    ("PodDisruptionBudget", f"{NAME}-decode")}
    for kind, n in gone:
        obs = replace(obs, kind, n, terminating)
    assert diff(desired_of(smaller), obs, UID).prune == []


@pytest.mark.parametrize(("what", "mutate", "pruned"), [
    ("router removed", lambda s: s.setdefault("router", {}).update(replicas=0),
     {("ServiceAccount", f"{NAME}-router"), ("Role", f"{NAME}-router"), ("RoleBinding", f"{NAME}-router"),
      ("Service", f"{NAME}-router"), ("Deployment", f"{NAME}-router")}),
    ("preflight disabled", lambda s: s["kvTransfer"].update(preflight={"enabled": False}),
     {("Service", f"{NAME}-preflight"), ("Job", f"{NAME}-preflight-serve-0"), ("Job", f"{NAME}-preflight-fetch-0")}),
    ("ComputeDomain turned off", lambda s: s["cluster"].update(computeDomain=False),
     {("ComputeDomain", f"{NAME}-compute-domain"), ("ResourceClaim", f"{NAME}-prefill-tray-0"),
      ("ResourceClaim", f"{NAME}-prefill-tray-1")}),
])
def test_objects_a_spec_change_drops_are_pruned(what, mutate, pruned):
    cr = cr_of()
    d = diff(desired_of(with_spec(cr, mutate)), world(cr), UID)
    assert {(k, n) for _, k, n in d.prune} == pruned
    assert all(a == next(v for v, k in MANAGED_KINDS if k == kind) for a, kind, _ in d.prune)


def test_prune_never_touches_statefulset_pods_after_a_scale_down():
    """Scale 6 → 4: the StatefulSet (re-applied) removes prefill-4/5; qdd never deletes them. Their
    tray claim goes (deletion waits until no pod holds it: the claim's delete protection)."""
    cr = cr_of(mutate=lambda c: c["spec"]["prefill"].update(endpoints=6))
    obs = world(cr)
    assert len(names_of([o for o in obs if o["metadata"]["name"].startswith(f"{NAME}-prefill-")], "Pod")) == 6
    d = diff(desired_of(with_spec(cr, lambda s: s["prefill"].update(endpoints=4))), obs, UID)
    assert _names(d.apply) == [("StatefulSet", f"{NAME}-prefill")]
    assert d.prune == [("resource.k8s.io/v1", "ResourceClaim", f"{NAME}-prefill-tray-2")]


def test_children_of_a_previous_incarnation_are_left_to_the_garbage_collector():
    """A CR deleted and created again under the same name: the old children (controlled by the old
    uid) are neither pruned nor adopted; the garbage collector removes them and the next passes
    create them again (pods only once their whole group is gone)."""
    old = cr_of(uid=OTHER_UID)
    new = cr_of()
    d = diff(desired_of(new), world(old), UID)
    assert (d.apply, d.prune, d.replace) == ([], [], [])
