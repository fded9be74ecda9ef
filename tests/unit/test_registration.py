"""The start gate of the canary and of benchmarks: every planned endpoint registered with the router
(qdd.canary.registration, qdd.controller.registration; InferenceX#2549). The real router's answer
for rendered pods is compared with the same functions in tests/contract/test_router.py."""

from __future__ import annotations

import asyncio
from typing import Any

from qdd import labels
from qdd.canary.registration import (MISSING_SHOWN, Registration, base_url, endpoint_url, listed_urls, registration,
                                     router_instances, serving_pods)
from qdd.controller.reconcile import Reconciler
from qdd.controller.registration import POLL_S, ROUTER_CHANGED, RegistrationChecker

from .controller_world import running
from .test_controller_status import CANARY_SENT, NAME, SEED, FakeKube, cond, plan_of, router_canary

GEN = "0123abcd"


def _pod(name: str, role: str, ip: str | None, *, leader: bool = True, generation: str = GEN, ready: bool = True,
         deleting: bool = False, deployment: str = NAME) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {labels.DEPLOYMENT: deployment, labels.ROLE: role,
                                                     labels.GROUP_ROLE: "leader" if leader else "worker",
                                                     labels.GENERATION: generation}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": running(ready) | ({"podIP": ip} if ip else {})}


def test_urls_as_the_router_writes_them():
    assert endpoint_url("10.1.2.3", 8000) == "http://10.1.2.3:8000"
    assert endpoint_url("fd00::7", 8000) == "http://[fd00::7]:8000"  # Rust's SocketAddr display
    assert base_url("http://10.1.2.3:8000@3") == base_url("http://10.1.2.3:8000/") == "http://10.1.2.3:8000"
    assert listed_urls({"urls": ["http://a:1@0", "http://a:1@1", "http://b:1", 7]}) == {"http://a:1", "http://b:1"}
    assert listed_urls({"workers": []}) is None and listed_urls(["http://a:1"]) is None


def test_serving_pods_are_the_ones_the_selectors_and_discovery_pick():
    pods = [_pod("p-0", "prefill", "10.0.0.1"), _pod("p-1", "prefill", "10.0.0.2"),
            _pod("d-0-leader", "decode", "10.0.0.3"), _pod("d-0-worker", "decode", "10.0.0.4", leader=False),
            _pod("p-old", "prefill", "10.0.0.5", generation="ffffffff"), _pod("p-new", "prefill", None),
            _pod("p-loading", "prefill", "10.0.0.6", ready=False), _pod("p-gone", "prefill", "10.0.0.7", deleting=True),
            _pod("other-p-0", "prefill", "10.0.0.8", deployment="other"), _pod("r", "router", "10.0.0.9")]
    assert serving_pods(pods, NAME, GEN, 8000) == {"http://10.0.0.3:8000": "d-0-leader", "http://10.0.0.1:8000": "p-0",
                                                   "http://10.0.0.2:8000": "p-1"}


def test_registration_counts_and_names_what_the_router_lacks():
    pods = {"http://10.0.0.1:8000": "p-0", "http://10.0.0.2:8000": "p-1", "http://10.0.0.3:8000": "d-0"}
    got = registration(3, pods, frozenset({"http://10.0.0.1:8000", "http://10.9.9.9:8000"}))
    assert (got.registered, got.missing, got.complete) == (("p-0",), ("p-1", "d-0"), False)
    assert got.message == "waiting for 1 of 3 endpoints registered with the router (not listed: p-1, d-0)"
    full = registration(3, pods, frozenset(pods))
    assert full.complete and full.message == "all 3 endpoints registered with the router"
    # a planned endpoint without a Ready pod yet is counted, not named
    assert not registration(4, pods, frozenset(pods)).complete
    assert registration(4, pods, frozenset(pods)).message == "waiting for 3 of 4 endpoints registered with the router"
    many = {f"http://10.0.1.{i}:8000": f"p-{i}" for i in range(MISSING_SHOWN + 2)}
    assert registration(len(many), many, frozenset()).message.endswith(f"p-{MISSING_SHOWN - 1} and 2 more)")
    unread = registration(3, pods, None, "GET /list_workers: HTTP 404: nope")
    assert not unread.complete and unread.message == ("waiting for the router's list of registered endpoints "
                                                      "(GET /list_workers: HTTP 404: nope)")


class _Router:
    """The router's ``GET /list_workers``, answering ``urls`` (changeable), counting calls."""

    def __init__(self, urls: list[str]) -> None:
        self.urls, self.calls = urls, 0

    async def __call__(self, base: str, path: str, timeout_s: float) -> tuple[Any, str | None]:
        self.calls += 1
        assert (base, path) == ("http://router", "/list_workers") and timeout_s == 5.0
        return {"urls": list(self.urls)}, None


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_checker_reads_when_everything_else_is_ready_polls_while_missing_and_then_stops():
    plan = plan_of(SEED)  # 4 prefill + 1 decode endpoints
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    router, clock = _Router(list(pods)[:3]), _Clock()
    c = RegistrationChecker(lambda p: "http://router", router, workers=0, clock=clock)
    assert c.state(plan, pods, ready=False) is None and router.calls == 0  # something else holds Ready back
    first = c.state(plan, pods, ready=True)
    assert first is not None and (len(first.registered), first.complete, router.calls) == (3, False, 1)
    assert c.state(plan, pods, ready=True) == first and router.calls == 1  # not again within POLL_S
    router.urls = [f"{u}@{r}" for u in pods for r in range(2)]  # the router lists every DP rank
    clock.t += POLL_S
    assert c.state(plan, pods, ready=True) == Registration(5, tuple(pods.values()))
    clock.t += 3600
    assert c.state(plan, pods, ready=True).complete and router.calls == 2  # complete: nothing more to ask
    moved = dict(pods) | {"http://10.0.0.99:8000": "pod-4"}
    del moved["http://10.0.0.4:8000"]  # a pod came back with a new IP: asked again
    again = c.state(plan, moved, ready=True)
    assert router.calls == 3 and again is not None and again.missing == ("pod-4",)


def test_router_instances_are_its_ready_pods_with_their_restarts():
    def router(name: str, uid: str, restarts: int, ready: bool = True, deployment: str = NAME) -> dict[str, Any]:
        p = _pod(name, "router", "10.0.1.1", ready=ready, deployment=deployment)
        p["metadata"]["uid"] = uid
        p["status"]["containerStatuses"] = [{"name": "router", "restartCount": restarts}]
        return p
    pods = [router("r-a", "u1", 0), router("r-b", "u2", 3), router("r-c", "u3", 0, ready=False),
            router("x-r", "u4", 0, deployment="other"), _pod("p-0", "prefill", "10.0.0.1")]
    assert router_instances(pods, NAME) == frozenset({"u1/0", "u2/3"})


def test_a_router_that_restarts_is_read_again_and_ready_waits_for_its_discovery():
    """Field case: the router's discovery starts from nothing when its pod restarts; a complete list
    read before the restart said nothing about the new instance (issue 24's gap)."""
    plan = plan_of(SEED)
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    router, clock = _Router(list(pods)), _Clock()
    c = RegistrationChecker(lambda p: "http://router", router, workers=0, clock=clock)
    assert c.state(plan, pods, ready=True, routers=frozenset({"u1/0"})).complete and router.calls == 1
    clock.t += 3600
    assert c.state(plan, pods, ready=True, routers=frozenset({"u1/0"})).complete and router.calls == 1
    router.urls = list(pods)[:1]  # the restarted router has found one endpoint so far
    after = c.state(plan, pods, ready=True, routers=frozenset({"u1/1"}))  # restarted in place: read at once
    assert router.calls == 2 and after is not None and not after.complete and len(after.missing) == 4
    router.urls = list(pods)
    assert c.state(plan, pods, ready=True, routers=frozenset({"u1/1"})) == after and router.calls == 2  # POLL_S
    clock.t += POLL_S
    assert c.state(plan, pods, ready=True, routers=frozenset({"u1/1"})).complete and router.calls == 3
    # a second replica, in its event loop: until its answer is in, the old list is not taken for it
    slow = RegistrationChecker(lambda p: "http://router", router, clock=clock)
    assert slow._loop is not None
    slow._keep((plan.namespace, plan.name), frozenset(pods) | {"router:u1/1"}, {"urls": list(pods)}, None)
    pending = slow.state(plan, pods, ready=True, routers=frozenset({"u1/1", "u2/0"}))
    assert pending is not None and not pending.complete and pending.error == ROUTER_CHANGED


def test_checker_in_its_event_loop_answers_then_asks_for_a_pass():
    plan = plan_of(SEED)
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    notified: list[tuple[str, str]] = []
    c = RegistrationChecker(lambda p: "http://router", _Router(list(pods)), notify=lambda ns, n: notified.append((ns, n)))
    pending = c.state(plan, pods, ready=True)
    assert pending is not None and pending.error == "not read yet"
    for _ in range(200):
        if notified:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert notified == [(plan.namespace, plan.name)]
    assert c.state(plan, pods, ready=True).complete


def test_a_bad_answer_is_an_error_not_an_exception():
    async def html(base: str, path: str, timeout_s: float) -> tuple[Any, str | None]:
        return {"status": "ok"}, None
    c = RegistrationChecker(lambda p: "http://router", html, workers=0)
    got = c.state(plan_of(SEED), {"http://10.0.0.1:8000": "p"}, ready=True)
    assert got is not None and not got.complete and "not a router's list of workers" in (got.error or "")


# --- in the reconcile: Ready, the canary and the requeue wait for it ---------------------------------

def _with_ips(kube: FakeKube) -> dict[str, str]:
    """Pod IPs, as the kubelet reports them once the pods run; {url: name} of the serving ones."""
    out = {}
    for i, ((kind, name), o) in enumerate(sorted(kube.objs.items())):
        if kind == "Pod":
            o["status"]["podIP"] = f"10.0.0.{i}"
            lab = o["metadata"]["labels"]
            if lab.get(labels.ROLE) in ("prefill", "decode") and lab.get(labels.GROUP_ROLE) == "leader":
                out[f"http://10.0.0.{i}:8000"] = name
    return out


def test_ready_waits_for_every_endpoint_registered_and_the_canary_for_ready():
    kube = FakeKube(SEED)
    router, clock = _Router([]), _Clock()
    requeued: list[float] = []
    r = Reconciler(kube, gang=True, canary=router_canary(),  # type: ignore[arg-type]
                   registration=RegistrationChecker(lambda p: "http://router", router, workers=0, clock=clock))
    r.requeue = lambda key, after: requeued.append(after)
    r.once("default", NAME)
    kube.settle()
    r.once("default", NAME)
    kube.settle()
    serving = _with_ips(kube)
    assert len(serving) == 5
    router.urls = list(serving)[:4]
    CANARY_SENT.clear()
    clock.t += POLL_S
    r.once("default", NAME)
    st = kube.cr["status"]
    ready = cond(st, "Ready")
    missing = sorted(set(serving.values()) - {serving[u] for u in list(serving)[:4]})
    assert (ready["status"], ready["reason"]) == ("False", "EndpointsNotRegistered")
    assert ready["message"].endswith(f"waiting for 4 of 5 endpoints registered with the router (not listed: "
                                     f"{missing[0]})")
    canary = cond(st, "CanaryPassed")
    assert (canary["status"], canary["reason"]) == ("Unknown", "CanaryPending")
    assert canary["message"].startswith("waiting for 4 of 5 endpoints registered with the router")
    assert CANARY_SENT == [] and POLL_S in requeued  # nothing sent; looked at again in POLL_S
    router.urls = list(serving)
    r.once("default", NAME)
    assert cond(kube.cr["status"], "Ready")["reason"] == "EndpointsNotRegistered"  # not read again yet
    clock.t += POLL_S
    r.once("default", NAME)
    assert cond(kube.cr["status"], "Ready")["status"] == "True"
    assert len(CANARY_SENT) == 1


def test_without_a_checker_ready_does_not_wait_for_registration():
    """The default Reconciler (unit tests, the real-engine test): no registration read at all."""
    kube = FakeKube(SEED)
    r = Reconciler(kube, gang=True, canary=router_canary())  # type: ignore[arg-type]
    assert r.registration is None
    r.once("default", NAME)
    kube.settle()
    r.once("default", NAME)
    kube.settle()
    r.once("default", NAME)
    assert cond(kube.cr["status"], "Ready")["status"] == "True"
