"""The start gate of the canary and of benchmarks: every planned endpoint registered with the router
(qdd.canary.registration, qdd.controller.registration; InferenceX#2549). The real router's answer
for rendered pods is compared with the same functions in tests/contract/test_router.py."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from typing import Any

from qdd import labels
from qdd.canary.registration import (MISSING_SHOWN, Registration, RouterPod, base_url, endpoint_url, listed_urls,
                                     registration, router_pods, serving_pods)
from qdd.controller.reconcile import Reconciler
from qdd.controller.registration import POLL_S, ROUTER_CHANGED, RegistrationChecker, pod_url

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
    if role == "router":  # made by the router Deployment's ReplicaSet
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-router-5d8f7",
                                    "uid": "rs", "controller": True}]
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


R1, R2 = "qwen35-router-7c9f6d-abcde", "qwen35-router-7c9f6d-fghij"
"""Two replicas of the router Deployment, as the ReplicaSet names them."""


def test_registration_counts_and_names_what_the_router_lacks():
    pods = {"http://10.0.0.1:8000": "p-0", "http://10.0.0.2:8000": "p-1", "http://10.0.0.3:8000": "d-0"}
    got = registration(3, pods, {R1: frozenset({"http://10.0.0.1:8000", "http://10.9.9.9:8000"})})
    assert (got.registered, got.missing, got.complete) == (("p-0",), ("p-1", "d-0"), False)
    assert got.message == f"waiting for 1 of 3 endpoints registered with every router pod (not listed by {R1}: p-1, d-0)"
    full = registration(3, pods, {R1: frozenset(pods)})
    assert full.complete and full.message == f"all 3 endpoints registered with every router pod ({R1})"
    # a planned endpoint without a Ready pod yet is counted, not named
    assert not registration(4, pods, {R1: frozenset(pods)}).complete
    assert registration(4, pods, {R1: frozenset(pods)}).message == ("waiting for 3 of 4 endpoints registered with every "
                                                                     "router pod")
    many = {f"http://10.0.1.{i}:8000": f"p-{i}" for i in range(MISSING_SHOWN + 2)}
    assert registration(len(many), many, {R1: frozenset()}).message.endswith(f"p-{MISSING_SHOWN - 1} and 2 more)")
    unread = registration(3, pods, {R1: "GET /list_workers: HTTP 404: nope"})
    assert not unread.complete and unread.error == f"{R1}: GET /list_workers: HTTP 404: nope"
    assert unread.message == ("waiting for the list of registered endpoints of router pod "
                              f"{R1} (GET /list_workers: HTTP 404: nope)")
    nobody = registration(3, pods, {})
    assert not nobody.complete and nobody.message == "waiting for a Ready router pod to read its list of registered endpoints"


def test_every_router_pod_must_list_every_endpoint():
    """Issue 24: two router replicas, one lost its discovery of one endpoint (it restarted, or its
    watch never saw the pod): a third of the requests it gets still go to the other endpoints only.
    Not registered, and the message names that router pod and the endpoint it lacks."""
    pods = {"http://10.0.0.1:8000": "qwen35-prefill-0", "http://10.0.0.2:8000": "qwen35-prefill-1",
            "http://10.0.0.3:8000": "qwen35-decode-0-leader"}
    got = registration(3, pods, {R1: frozenset(pods), R2: frozenset(pods) - {"http://10.0.0.2:8000"}})
    assert not got.complete and got.error is None
    assert (got.registered, got.missing, got.lacking) == (("qwen35-prefill-0", "qwen35-decode-0-leader"),
                                                          ("qwen35-prefill-1",), ((R2, ("qwen35-prefill-1",)),))
    assert got.message == ("waiting for 2 of 3 endpoints registered with every router pod "
                           f"(not listed by {R2}: qwen35-prefill-1)")
    # each router pod's lack is named; one still unread is said too
    split = registration(3, pods, {R1: frozenset(pods) - {"http://10.0.0.3:8000"},
                                   R2: frozenset(pods) - {"http://10.0.0.2:8000"}, "qwen35-router-7c9f6d-klmno": "not read yet"})
    assert split.message == ("waiting for 1 of 3 endpoints registered with every router pod "
                             f"(not listed by {R1}: qwen35-decode-0-leader; by {R2}: qwen35-prefill-1; "
                             "no list yet from qwen35-router-7c9f6d-klmno (not read yet))")
    ranks = listed_urls({"urls": [f"{u}@{r}" for u in pods for r in range(2)]})  # DP-aware: once per rank
    assert ranks is not None
    both = registration(3, pods, {R1: frozenset(pods), R2: ranks})
    assert both.complete and both.message == f"all 3 endpoints registered with every router pod ({R1}, {R2})"


class _Router:
    """The routers' ``GET /list_workers``: ``urls[router URL]`` (changeable; a router URL not in it
    answers ``default``), counting calls per router URL."""

    def __init__(self, default: list[str], **by_url: list[str]) -> None:
        self.default, self.urls, self.calls = default, dict(by_url), Counter[str]()

    async def __call__(self, base: str, path: str, timeout_s: float) -> tuple[Any, str | None]:
        self.calls[base] += 1
        assert path == "/list_workers" and timeout_s == 5.0
        return {"urls": list(self.urls.get(base, self.default))}, None

    @property
    def total(self) -> int:
        return sum(self.calls.values())


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


ROUTER_PORT = plan_of(SEED).router.port
A = RouterPod(R1, "10.0.1.1", "uid-a/0")
B = RouterPod(R2, "10.0.1.2", "uid-b/0")
URL_A, URL_B = f"http://10.0.1.1:{ROUTER_PORT}", f"http://10.0.1.2:{ROUTER_PORT}"


def test_checker_reads_when_everything_else_is_ready_polls_while_missing_and_then_stops():
    plan = plan_of(SEED)  # 4 prefill + 1 decode endpoints
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    router, clock = _Router(list(pods)[:3]), _Clock()
    c = RegistrationChecker(get=router, workers=0, clock=clock)
    assert c.state(plan, pods, ready=False, routers=[A]) is None and router.total == 0  # something else holds Ready back
    first = c.state(plan, pods, ready=True, routers=[A])
    assert first is not None and (len(first.registered), first.complete) == (3, False)
    assert router.calls == {URL_A: 1}  # the router pod's IP and the router port
    assert c.state(plan, pods, ready=True, routers=[A]) == first and router.total == 1  # not again within POLL_S
    router.default = [f"{u}@{r}" for u in pods for r in range(2)]  # the router lists every DP rank
    clock.t += POLL_S
    assert c.state(plan, pods, ready=True, routers=[A]) == Registration(5, tuple(pods.values()), routers=(R1,))
    clock.t += 3600
    assert c.state(plan, pods, ready=True, routers=[A]).complete and router.total == 2  # complete: nothing more to ask
    moved = dict(pods) | {"http://10.0.0.99:8000": "pod-4"}
    del moved["http://10.0.0.4:8000"]  # a pod came back with a new IP: asked again
    again = c.state(plan, moved, ready=True, routers=[A])
    assert router.total == 3 and again is not None and again.missing == ("pod-4",)


def test_checker_reads_each_router_pod_and_asks_again_only_the_one_that_lacks():
    plan = plan_of(SEED)
    pods = {f"http://10.0.0.{i}:8000": f"{NAME}-prefill-{i}" for i in range(4)} | {
        "http://10.0.0.9:8000": f"{NAME}-decode-0-leader"}
    router, clock = _Router(list(pods), **{URL_B: [u for u in pods if u != "http://10.0.0.2:8000"]}), _Clock()
    c = RegistrationChecker(get=router, workers=0, clock=clock)
    got = c.state(plan, pods, ready=True, routers=[A, B])
    assert router.calls == {URL_A: 1, URL_B: 1}
    assert got is not None and not got.complete and got.lacking == ((R2, (f"{NAME}-prefill-2",)),)
    assert got.message == (f"waiting for 4 of 5 endpoints registered with every router pod (not listed by {R2}: "
                           f"{NAME}-prefill-2)")
    clock.t += POLL_S
    assert not c.state(plan, pods, ready=True, routers=[A, B]).complete
    assert router.calls == {URL_A: 1, URL_B: 2}  # the complete one is not asked again
    router.urls[URL_B] = list(pods)  # its discovery caught up
    clock.t += POLL_S
    assert c.state(plan, pods, ready=True, routers=[A, B]).complete and router.calls == {URL_A: 1, URL_B: 3}
    clock.t += 3600
    assert c.state(plan, pods, ready=True, routers=[A, B]).complete and router.total == 4
    # a router pod scaled away is forgotten; the one left still lists everything
    assert c.state(plan, pods, ready=True, routers=[A]).complete and router.total == 4


def test_router_pods_are_its_ready_pods_with_their_restarts():
    def router(name: str, uid: str, restarts: int, ready: bool = True, deployment: str = NAME,
               ip: str | None = "10.0.1.1") -> dict[str, Any]:
        p = _pod(name, "router", ip, ready=ready, deployment=deployment)
        p["metadata"]["uid"] = uid
        p["status"]["containerStatuses"] = [{"name": "router", "restartCount": restarts}]
        return p
    pods = [router(R2, "u2", 3, ip="10.0.1.2"), router(R1, "u1", 0), router("r-c", "u3", 0, ready=False),
            router("r-d", "u5", 0, ip=None), router("x-r", "u4", 0, deployment="other"),
            _pod("p-0", "prefill", "10.0.0.1")]
    assert router_pods(pods, NAME) == (RouterPod(R1, "10.0.1.1", "u1/0"), RouterPod(R2, "10.0.1.2", "u2/3"))
    # a pod labelled as a router by hand (no ReplicaSet of the router Deployment owns it) is not one
    forged = router("r-forged", "u6", 0, ip="10.0.1.6")
    forged["metadata"].pop("ownerReferences")
    other_rs = router("r-other", "u7", 0, ip="10.0.1.7")
    other_rs["metadata"]["ownerReferences"][0]["name"] = "someone-else-5d8f7"
    assert router_pods(pods + [forged, other_rs], NAME) == router_pods(pods, NAME)


def test_a_router_that_restarts_is_read_again_and_ready_waits_for_its_discovery():
    """Field case: the router's discovery starts from nothing when its pod restarts; a complete list
    read before the restart said nothing about the new instance (issue 24's gap)."""
    plan = plan_of(SEED)
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    router, clock = _Router(list(pods)), _Clock()
    c = RegistrationChecker(get=router, workers=0, clock=clock)
    assert c.state(plan, pods, ready=True, routers=[A, B]).complete and router.total == 2
    clock.t += 3600
    assert c.state(plan, pods, ready=True, routers=[A, B]).complete and router.total == 2
    router.urls[URL_B] = list(pods)[:1]  # the restarted router pod has found one endpoint so far
    restarted = RouterPod(R2, "10.0.1.2", "uid-b/1")  # its container restarted in place: read at once
    after = c.state(plan, pods, ready=True, routers=[A, restarted])
    assert router.calls == {URL_A: 1, URL_B: 2} and after is not None and not after.complete
    assert after.lacking == ((R2, ("pod-1", "pod-2", "pod-3", "pod-4")),)
    router.urls[URL_B] = list(pods)
    assert c.state(plan, pods, ready=True, routers=[A, restarted]) == after and router.total == 3  # POLL_S
    clock.t += POLL_S
    assert c.state(plan, pods, ready=True, routers=[A, restarted]).complete and router.total == 4
    # in its event loop: until the restarted pod's answer is in, its old list is not taken for it
    slow = RegistrationChecker(get=router, clock=clock)
    assert slow._loop is not None
    slow._keep((plan.namespace, plan.name), B, {"urls": list(pods)}, None)
    slow._keep((plan.namespace, plan.name), A, {"urls": list(pods)}, None)
    pending = slow.state(plan, pods, ready=True, routers=[A, restarted])
    assert pending is not None and not pending.complete and pending.error == f"{R2}: {ROUTER_CHANGED}"
    assert pending.message == (f"waiting for 5 of 5 endpoints registered with every router pod (no list yet from "
                               f"{R2} ({ROUTER_CHANGED}))")


def test_checker_in_its_event_loop_answers_then_asks_for_a_pass():
    plan = plan_of(SEED)
    pods = {f"http://10.0.0.{i}:8000": f"pod-{i}" for i in range(5)}
    notified: list[tuple[str, str]] = []
    c = RegistrationChecker(get=_Router(list(pods)), notify=lambda ns, n: notified.append((ns, n)))
    pending = c.state(plan, pods, ready=True, routers=[A, B])
    assert pending is not None and pending.error == f"{R1}: not read yet"
    for _ in range(200):
        if len(notified) == 2:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert notified == [(plan.namespace, plan.name)] * 2  # one pass per answer
    assert c.state(plan, pods, ready=True, routers=[A, B]).complete


def test_a_bad_answer_is_an_error_not_an_exception():
    async def html(base: str, path: str, timeout_s: float) -> tuple[Any, str | None]:
        return {"status": "ok"}, None
    c = RegistrationChecker(get=html, workers=0)
    got = c.state(plan_of(SEED), {"http://10.0.0.1:8000": "p"}, ready=True, routers=[A])
    assert got is not None and not got.complete and "not a router's list of workers" in (got.error or "")


def test_the_test_override_reads_every_router_pod_at_the_router_double():
    plan = plan_of(SEED)
    url = pod_url("http://127.0.0.1:9999/{namespace}/{name}")
    assert url(plan, A) == url(plan, B) == f"http://127.0.0.1:9999/{plan.namespace}/{plan.name}"
    assert pod_url(None)(plan, RouterPod("r", "fd00::7", "u/0")) == f"http://[fd00::7]:{ROUTER_PORT}"


# --- in the reconcile: Ready, the canary and the requeue wait for it ---------------------------------

def _with_ips(kube: FakeKube) -> tuple[dict[str, str], dict[str, str]]:
    """Pod IPs, as the kubelet reports them once the pods run: ({url: name} of the serving pods,
    {router pod name: its URL at the router port})."""
    serving, routers = {}, {}
    for i, ((kind, name), o) in enumerate(sorted(kube.objs.items())):
        if kind == "Pod":
            o["status"]["podIP"] = f"10.0.0.{i}"
            lab = o["metadata"]["labels"]
            if lab.get(labels.ROLE) in ("prefill", "decode") and lab.get(labels.GROUP_ROLE) == "leader":
                serving[f"http://10.0.0.{i}:8000"] = name
            if lab.get(labels.ROLE) == "router":
                routers[name] = f"http://10.0.0.{i}:{ROUTER_PORT}"
    return serving, routers


def test_ready_waits_for_every_router_pod_to_list_every_endpoint_and_the_canary_for_ready():
    cr = copy.deepcopy(SEED)
    cr["spec"].setdefault("router", {})["replicas"] = 2
    kube = FakeKube(cr)
    router, clock = _Router([]), _Clock()
    requeued: list[float] = []
    r = Reconciler(kube, gang=True, canary=router_canary(),  # type: ignore[arg-type]
                   registration=RegistrationChecker(get=router, workers=0, clock=clock))
    r.requeue = lambda key, after: requeued.append(after)
    r.once("default", NAME)
    kube.settle()
    r.once("default", NAME)
    kube.settle()
    serving, routers = _with_ips(kube)
    assert len(serving) == 5 and len(routers) == 2
    (first, first_url), (second, second_url) = sorted(routers.items())
    held = list(serving)[2]
    router.default = list(serving)
    router.urls[second_url] = [u for u in serving if u != held]  # one replica's discovery lacks one endpoint
    CANARY_SENT.clear()
    clock.t += POLL_S
    r.once("default", NAME)
    assert set(router.calls) == {first_url, second_url}  # each router pod, at its own IP
    st = kube.cr["status"]
    ready = cond(st, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "EndpointsNotRegistered")
    assert ready["message"].endswith(f"waiting for 4 of 5 endpoints registered with every router pod (not listed by "
                                     f"{second}: {serving[held]})")
    canary = cond(st, "CanaryPassed")
    assert (canary["status"], canary["reason"]) == ("Unknown", "CanaryPending")
    assert canary["message"].startswith("waiting for 4 of 5 endpoints registered with every router pod")
    assert CANARY_SENT == [] and POLL_S in requeued  # nothing sent; looked at again in POLL_S
    router.urls[second_url] = list(serving)
    r.once("default", NAME)
    assert cond(kube.cr["status"], "Ready")["reason"] == "EndpointsNotRegistered"  # not read again yet
    clock.t += POLL_S
    r.once("default", NAME)
    assert cond(kube.cr["status"], "Ready")["status"] == "True"
    assert len(CANARY_SENT) == 1
    assert router.calls[first_url] == 1  # the complete router pod was read once


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
