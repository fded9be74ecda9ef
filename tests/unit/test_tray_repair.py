"""qdd.controller.tray_repair: the claims kube-scheduler v1.36.3 loops on and the pods the tray-claim
admission policy missed, from observed objects shaped as the API server returns them."""

from __future__ import annotations

import datetime as dt

from qdd.controller.tray_repair import (ALLOCATED_ELSEWHERE, LOOP_FOR_S, RESYNC, claims_to_resync, expected_claim,
                                        looping_claims, pods_missed_by_policy)

NOW = dt.datetime(2026, 12, 7, 12, 0, 0, tzinfo=dt.timezone.utc)
PREFIX = "seed-prefill-tray"
# kube-scheduler's PodScheduled message for the loop, as CI printed it (namespace shortened).
LOOP = ('running PreBind plugin "DynamicResources": claim t-1/seed-prefill-tray-2 ' + ALLOCATED_ELSEWHERE)


def _ts(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(i: int, claim: str | None = None, label: str | None = "same", node: str | None = None,
        said: str | None = None, age: float = 60) -> dict:
    want = f"{PREFIX}-{i // 2}"
    labels = {"apps.kubernetes.io/pod-index": str(i)}
    if label is not None:
        labels["qdd.dev/tray-claim"] = want if label == "same" else label
    p = {"kind": "Pod", "metadata": {
        "name": f"seed-prefill-{i}", "creationTimestamp": _ts(age), "labels": labels,
        "annotations": {"qdd.dev/tray-claim-prefix": PREFIX, "qdd.dev/pods-per-tray": "2"}},
        "spec": {"resourceClaims": [{"name": "imex-channel", "resourceClaimName": claim or want}]},
        "status": {"phase": "Pending"}}
    if node:
        p["spec"]["nodeName"] = node
    if said:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                                      "message": said}]
    return p


def claim(g: int, allocated: bool = True, resynced: float | None = None) -> dict:
    c = {"kind": "ResourceClaim", "metadata": {"name": f"{PREFIX}-{g}", "annotations": {}}, "status": {}}
    if allocated:
        c["status"]["allocation"] = {"devices": {"results": [{"driver": "compute-domain.nvidia.com",
                                                              "pool": "gb200-r1-n01", "device": "channel-0"}]}}
    if resynced is not None:
        c["metadata"]["annotations"][RESYNC] = _ts(resynced)
    return c


def test_the_loop_ci_saw_resyncs_the_allocated_claim_of_the_waiting_pod_only():
    observed = [pod(4, node="gb200-r1-n01"), pod(5, said=LOOP), pod(6, node="n02"), pod(7, node="n02"),
                claim(2), claim(3)]
    assert claims_to_resync(observed, NOW) == [f"{PREFIX}-2"]


def test_a_claim_is_resynced_only_once_seen_looping_for_10_s():
    observed = [pod(4, node="gb200-r1-n01"), pod(5, said=LOOP), claim(2)]
    assert looping_claims(observed) == [f"{PREFIX}-2"]
    first = {f"{PREFIX}-2": NOW}
    assert claims_to_resync(observed, NOW, first) == []  # the transient failed PreBind: left to the scheduler
    later = NOW + dt.timedelta(seconds=LOOP_FOR_S)
    assert claims_to_resync(observed, later, first) == [f"{PREFIX}-2"]


def test_a_resync_is_written_at_most_every_30_s_per_claim():
    waiting = [pod(4, node="n01"), pod(5, said=LOOP)]
    assert claims_to_resync([*waiting, claim(2, resynced=29)], NOW) == []
    assert claims_to_resync([*waiting, claim(2, resynced=30)], NOW) == [f"{PREFIX}-2"]


def test_no_resync_for_an_unallocated_claim_another_message_or_a_bound_pod():
    assert claims_to_resync([pod(5, said=LOOP), claim(2, allocated=False)], NOW) == []
    other = "0/18 nodes are available: 18 Insufficient nvidia.com/gpu."
    assert claims_to_resync([pod(5, said=other), claim(2)], NOW) == []
    assert claims_to_resync([pod(5, said=LOOP, node="n01"), claim(2)], NOW) == []


def test_expected_claim_is_the_ordinal_over_pods_per_tray():
    assert [expected_claim(pod(i)) for i in range(5)] == [f"{PREFIX}-{g}" for g in (0, 0, 1, 1, 2)]
    bare = {"kind": "Pod", "metadata": {"name": "router-0", "labels": {}}}
    assert expected_claim(bare) is None


def test_pods_the_policy_missed_are_named_once_past_the_grace_and_unbound():
    # Unmutated: the template's group-0 claim and no label (what CI's first-in-cluster run showed).
    missed = pod(5, claim=f"{PREFIX}-0", label=None)
    assert pods_missed_by_policy([missed], NOW) == ["seed-prefill-5"]
    assert pods_missed_by_policy([pod(5, claim=f"{PREFIX}-0", label=None, age=9)], NOW) == []
    assert pods_missed_by_policy([pod(5, claim=f"{PREFIX}-0", label=None, node="n01")], NOW) == []
    # Ordinal 1 keeps group 0 rightly but still lacks the label the gang's pod affinity needs.
    assert pods_missed_by_policy([pod(1, label=None)], NOW) == ["seed-prefill-1"]
    assert pods_missed_by_policy([pod(i) for i in range(8)], NOW) == []


class _Kube:
    """What Reconciler._repair_trays calls, recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    def annotate(self, *args):
        self.calls.append(("annotate", *args))

    def delete(self, *args):
        self.calls.append(("delete", *args))

    def event(self, cr, type_, reason, message):
        self.calls.append(("event", type_, reason, message))


def test_the_reconciler_annotates_the_looping_claim_and_deletes_the_missed_pod():
    from qdd.controller.reconcile import Reconciler
    kube = _Kube()
    r = Reconciler.__new__(Reconciler)  # only what _repair_trays reads
    requeued: list[float] = []
    r.kube, r.requeue, r._looping = kube, lambda key, after: requeued.append(after), {}
    cr = {"metadata": {"namespace": "t-1", "name": "seed"}}
    observed = [pod(4, node="n01"), pod(5, said=LOOP), claim(2), pod(3, claim=f"{PREFIX}-0", label=None)]
    assert r._repair_trays(cr, observed[:3]) is False  # first seen looping: wait, and look again then
    assert kube.calls == [] and requeued == [LOOP_FOR_S]
    r._looping[("t-1", "seed")][f"{PREFIX}-2"] -= dt.timedelta(seconds=LOOP_FOR_S)
    assert r._repair_trays(cr, observed) is True
    kinds = [c[0] for c in kube.calls]
    assert kinds == ["annotate", "event", "delete"]
    _, api, kind, ns, name, ann = kube.calls[0]
    assert (api, kind, ns, name, list(ann)) == ("resource.k8s.io/v1", "ResourceClaim", "t-1", f"{PREFIX}-2", [RESYNC])
    assert kube.calls[1][1:3] == ("Warning", "TrayClaimPolicyMissed")
    assert "seed-prefill-3" in kube.calls[1][3] and "qdd-tray-claims" in kube.calls[1][3]
    assert kube.calls[2][1:] == ("v1", "Pod", "t-1", "seed-prefill-3")
    kube.calls.clear()
    assert r._repair_trays(cr, [pod(i, node="n") for i in range(4)] + [claim(0), claim(1)]) is False
    assert kube.calls == [] and r._looping == {}  # nothing loops: forgotten
