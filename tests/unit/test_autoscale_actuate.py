"""The autoscaler's actuation (qdd.controller.autoscaling.actuate, .drain, .endpoints): the counts laid
out from the counts wanted, within the GPU budget, with scale-down by draining."""

from __future__ import annotations

import pytest

from qdd import labels
from qdd.controller.autoscaling.actuate import RoleInput, actuate
from qdd.controller.autoscaling.drain import DRAIN_TIMEOUT_S, ROUTER_GRACE_S, drain_progress
from qdd.controller.autoscaling.endpoints import Endpoint, endpoints, held_gpus, started_seconds
from qdd.observe import EngineRead, PodRead

GEN = "g1"


def ep(role: str, i: int, ready: bool = True, draining: bool = False, pods: int = 1) -> Endpoint:
    names = tuple(f"{role}-{i}-{k}" for k in range(pods))
    return Endpoint(role, i, names, names[0], ready, draining, 100.0 if draining else None)


def role(wanted: int, previous: int, gpe: int, eps: list[Endpoint], drained: frozenset[int] = frozenset()) -> RoleInput:
    return RoleInput(wanted, previous, gpe, {e.index: e for e in eps}, drained)


def test_a_ready_endpoint_above_the_count_is_drained_not_dropped():
    acts = actuate({"prefill": role(1, 2, 2, [ep("prefill", 0), ep("prefill", 1)]),
                    "decode": role(1, 1, 8, [ep("decode", 0, pods=2)])}, held_now=12, cap=12, may_drain=True)
    p = acts["prefill"]
    assert (p.effective, p.start_drain, p.dropped, p.ready, p.draining, p.pending) == (2, ("prefill-1-0",), (), 1, 1, 0)


def test_a_drained_endpoint_goes_and_a_decode_group_goes_whole():
    acts = actuate({"prefill": role(1, 1, 2, [ep("prefill", 0)]),
                    "decode": role(1, 2, 8, [ep("decode", 0, pods=2), ep("decode", 1, draining=True, pods=2)],
                                   frozenset({1}))}, held_now=18, cap=24, may_drain=True)
    d = acts["decode"]
    # The count laid out drops to 1: render no longer wants group 1, so all its pods are pruned together.
    assert (d.effective, d.dropped, d.draining, d.start_drain) == (1, (1,), 0, ())


def test_a_draining_endpoint_stays_until_drained_and_is_put_back_when_wanted_again():
    eps = [ep("prefill", 0), ep("prefill", 1, draining=True)]
    held = {"decode": role(1, 1, 8, [ep("decode", 0, pods=2)])}
    assert actuate({"prefill": role(1, 2, 2, eps), **held}, 12, 12, True)["prefill"].effective == 2
    back = actuate({"prefill": role(2, 2, 2, eps), **held}, 12, 12, True)["prefill"]
    assert (back.effective, back.cancel_drain, back.ready, back.draining) == (2, ("prefill-1-0",), 2, 0)


def test_a_starting_endpoint_above_the_count_is_dropped_at_once():
    acts = actuate({"prefill": role(1, 3, 2, [ep("prefill", 0), ep("prefill", 1, ready=False)]),
                    "decode": role(1, 1, 8, [ep("decode", 0, pods=2)])}, held_now=12, cap=16, may_drain=True)
    p = acts["prefill"]  # index 2 was laid out but never created; index 1 is starting: both go now
    assert (p.effective, p.start_drain, p.dropped) == (1, (), (1,))


def test_the_starting_endpoints_a_lower_count_drops_are_those_above_every_serving_one():
    """What the policy may cancel without a hold (RoleCounts.cancellable): a not-Ready endpoint on
    top, and one laid out whose pod does not exist yet; not one restarting below a Ready one (a
    lower count would drain the Ready one above it), nor one below a draining one (kept until the
    drain ends)."""
    dec = {"decode": role(1, 1, 8, [ep("decode", 0, pods=2)])}
    top = actuate({"prefill": role(4, 4, 2, [ep("prefill", 0), ep("prefill", 1), ep("prefill", 2, ready=False)]),
                   **dec}, held_now=14, cap=20, may_drain=True)["prefill"]
    assert (top.effective, top.ready, top.pending, top.cancellable) == (4, 2, 2, 2)  # index 3: laid out, no pod yet
    middle = actuate({"prefill": role(3, 3, 2, [ep("prefill", 0), ep("prefill", 1, ready=False), ep("prefill", 2)]),
                      **dec}, held_now=14, cap=20, may_drain=True)["prefill"]
    assert (middle.pending, middle.cancellable) == (1, 0)
    under_drain = actuate({"prefill": role(2, 3, 2, [ep("prefill", 0), ep("prefill", 1, ready=False),
                                                     ep("prefill", 2, draining=True)]), **dec},
                          held_now=14, cap=20, may_drain=True)["prefill"]
    assert (under_drain.effective, under_drain.pending, under_drain.draining, under_drain.cancellable) == (3, 1, 1, 0)


def test_additions_only_into_gpus_free_now_terminating_and_draining_pods_counted():
    # A rebalance at full budget (dynamo#12428): prefill drains one, decode wants one more. The
    # draining prefill endpoint still holds its GPUs, so decode waits: the budget holds.
    acts = actuate({"prefill": role(1, 2, 2, [ep("prefill", 0), ep("prefill", 1)]),
                    "decode": role(2, 1, 8, [ep("decode", 0, pods=2)])}, held_now=12, cap=12, may_drain=True)
    assert (acts["prefill"].effective, acts["decode"].effective) == (2, 1)
    assert "wait for GPUs" in acts["decode"].note
    # With the prefill endpoint gone (10 held) and room for a DEP8 group (budget 18), decode grows.
    later = actuate({"prefill": role(1, 1, 2, [ep("prefill", 0)]), "decode": role(2, 1, 8, [ep("decode", 0, pods=2)])},
                    held_now=10, cap=18, may_drain=True)
    assert later["decode"].effective == 2 and later["decode"].pending == 1


def test_laid_out_endpoints_without_pods_count_against_the_budget():
    # prefill laid out 3 (its StatefulSet will create the third pod): decode may not take those GPUs.
    acts = actuate({"prefill": role(3, 3, 2, [ep("prefill", 0), ep("prefill", 1)]),
                    "decode": role(2, 1, 8, [ep("decode", 0, pods=2)])}, held_now=12, cap=20, may_drain=True)
    assert (acts["prefill"].effective, acts["decode"].effective) == (3, 1)


@pytest.mark.parametrize("may_drain", [True, False])
def test_no_drain_begins_during_a_rollout(may_drain):
    acts = actuate({"prefill": role(1, 2, 2, [ep("prefill", 0), ep("prefill", 1)]),
                    "decode": role(1, 1, 8, [ep("decode", 0, pods=2)])}, 12, 12, may_drain)
    assert acts["prefill"].effective == 2
    assert acts["prefill"].start_drain == (("prefill-1-0",) if may_drain else ())


def read(t: float, running: float = 0, waiting: float = 0, kv: float = 0.0, error: str | None = None) -> PodRead:
    return PodRead("p", "prefill", 1, t, () if error else (EngineRead("0", running, waiting, kv),
                                                           EngineRead("1", 0, 0, 0.0)), error)


def test_drain_waits_for_a_read_after_the_router_dropped_it_then_for_requests_and_leases():
    since = 1000.0
    before = [read(since + 1, running=0)]  # inside the router's grace: a request may still arrive
    assert not drain_progress("prefill", since, since + 2, before, 120).done
    busy = before + [read(since + ROUTER_GRACE_S + 1, running=3)]
    assert "3 requests" in drain_progress("prefill", since, since + 4, busy, 120).why
    held = busy + [read(since + 8, kv=0.2)]
    p = drain_progress("prefill", since, since + 9, held, 120)
    assert not p.done and "lease" in p.why
    assert drain_progress("prefill", since, since + 8 + 120, held, 120).done  # the lease ran out
    assert drain_progress("prefill", since, since + 10, held + [read(since + 10)], 120).done
    assert drain_progress("decode", since, since + 9, held, 120).done  # decode owes no KV to anyone


def test_drain_without_metrics_waits_for_the_routers_request_timeout():
    since = 0.0
    failing = [read(t, error="HTTP 503") for t in (5.0, 10.0)]
    assert not drain_progress("decode", since, 600.0, failing, 120).done
    assert drain_progress("decode", since, DRAIN_TIMEOUT_S, failing, 120).done


def pod(name: str, role: str, index: str | None, ready: bool = True, gpus: int = 2, group_role: str = "leader",
        deleting: bool = False, gen: str = GEN, drain_since: str | None = None, size: int = 1) -> dict:
    lab = {labels.ROLE: role, labels.GROUP_ROLE: group_role, labels.GENERATION: gen, labels.GROUP_SIZE: str(size)}
    if index is not None:
        lab[labels.ENDPOINT] = index
    meta = {"name": name, "labels": lab, "creationTimestamp": "2026-12-02T10:00:00Z",
            "annotations": {labels.DRAIN_SINCE: drain_since} if drain_since else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:05:00Z"
    return {"kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "2026-12-02T10:00:42Z"}]}}


def test_endpoints_from_pods_prefill_by_ordinal_decode_by_label_whole_groups_only():
    pods = [pod("x-prefill-0", "prefill", None), pod("x-prefill-1", "prefill", None, group_role=labels.DRAINING,
                                                     drain_since="123.5"),
            pod("x-decode-0-leader", "decode", "0", gpus=4, size=2),
            pod("x-decode-0-worker-1", "decode", "0", gpus=4, group_role="worker", size=2),
            pod("x-decode-1-leader", "decode", "1", gpus=4, size=2),  # its worker is missing: not Ready
            pod("x-decode-b-0-leader", "decode", "0", gpus=4, gen="g0"),  # another generation
            pod("x-prefill-2", "prefill", None, deleting=True)]
    eps = endpoints(pods, GEN)
    assert sorted(eps["prefill"]) == [0, 1, 2] and eps["prefill"][1].draining and eps["prefill"][1].drain_since == 123.5
    assert eps["prefill"][2].pods == () and not eps["prefill"][2].ready
    assert eps["decode"][0].ready and eps["decode"][0].leader == "x-decode-0-leader"
    assert not eps["decode"][1].ready
    assert held_gpus(pods) == 2 * 3 + 4 * 4  # every engine pod, terminating and other generations included
    assert started_seconds(pods[:1]) == [42.0]


def test_a_role_never_takes_the_gpus_the_other_needs_for_its_minimum():
    # A new deployment whose spec asks 4 prefill endpoints under a 10-GPU budget: decode's one DEP8
    # group is its minimum, so prefill gets what is left (1), not all of it (5).
    acts = actuate({"prefill": RoleInput(4, 0, 2, {}, minimum=1), "decode": RoleInput(1, 0, 8, {}, minimum=1)},
                   held_now=0, cap=10, may_drain=True)
    assert (acts["prefill"].effective, acts["decode"].effective) == (1, 1)
    assert "3 endpoint(s) wait for GPUs" in acts["prefill"].note
