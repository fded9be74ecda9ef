"""Day-2 scenarios with engines that start like engines (issue 22, items 4 and 5).

Every engine pod created here plays the seed checkpoint's slowest modelled start (qdd.catalog.startup:
237 GB from remote storage, cold compile cache, the worst KV profiling reported: 504 s, about
8.4 min), compressed 60 times: about 8.4 s in weights, compile and CUDA graphs before /health
answers (hack/cluster/engine_stages.py). Checked at every poll (engine_startup.Timeline): a Ready
status of the current spec only when every engine pod of the generation it serves is Ready. Checked
from the objects' own times: no engine pod was Ready before its start-up had run, no rollout
deleted a pod of the serving generation before the new one was Ready. Each test prints what it
measured (docs/reliability.md#engines-that-start-like-engines has the table).
"""

from __future__ import annotations

import json

import pytest

from qdd.catalog.startup import worst_case

from .conftest import Kube
from .engine_startup import Timeline, cond, pod_ready, startup_configmap, ts
from .test_operator import SEED, cr_of

SCALE = 60
PHASES = worst_case(237e9).compressed(SCALE)
START = PHASES.total
TIMEOUT = 120


@pytest.fixture
def deploy(kube: Kube, namespace: str):
    """deploy(**changes) -> Timeline of the seed in ``namespace``, its engines on the start-up model."""
    made: list[Timeline] = []

    def make(**changes) -> Timeline:
        kube.apply(startup_configmap(namespace, PHASES, SCALE))
        cr = cr_of(SEED, namespace, **changes)
        t = Timeline(kube, cr["metadata"]["name"], namespace)  # watching before the first pod exists
        made.append(t)
        kube.apply(cr)
        return t
    yield make
    for t in made:
        t.stop()


def _ready(t: Timeline, timeout: float = TIMEOUT) -> dict:
    return t.until(lambda o, p: p.ready, timeout, "Ready=True of the current spec")


def _patch(kube: Kube, t: Timeline, spec: dict) -> None:
    kube.kubectl("patch", "qdd", t.name, "-n", t.ns, "--type=merge", "-p", json.dumps({"spec": spec}))


def _generation(obj: dict) -> str:
    return obj["status"]["rollout"]["generation"]


def _started(p: dict) -> float:
    [c] = p["status"]["containerStatuses"]
    return ts(c["state"]["running"]["startedAt"])


def test_ready_follows_every_engine_s_start_up(kube, operator, namespace, deploy):
    """Fresh deployment: each probed engine (prefill, decode leader) is Ready only after its modelled
    start; the headless decode worker, which has no probe, is Ready as soon as it runs (as the
    kubelet does it); the deployment's Ready comes after the last engine's."""
    t = deploy()
    obj = _ready(t)
    took = t.polls[-1].t - t.polls[0].t
    pods = t.engines()
    assert len(pods) == 6 and all(pod_ready(p) for p in pods)
    # no probe killed an engine still starting (the default budget, 3600 s, outlasts 504 s)
    assert [p["status"]["containerStatuses"][0]["restartCount"] for p in pods] == [0] * 6
    assert not any("engine.sim.qdd.dev/probe-kill" in p["metadata"]["annotations"] for p in pods)
    probed = [p for p in pods if "readinessProbe" in p["spec"]["containers"][0]]
    workers = [p for p in pods if p not in probed]
    assert len(probed) == 5 and [p["metadata"]["labels"]["qdd.dev/group-role"] for p in workers] == ["worker"]
    for p in probed:
        assert p["metadata"]["annotations"]["engine.sim.qdd.dev/phase"] == "serving"
        # conditions have a resolution of one second
        assert ts(cond(p, "Ready")["lastTransitionTime"]) >= _started(p) + START - 1, p["metadata"]["name"]
    [w] = workers
    assert ts(cond(w, "Ready")["lastTransitionTime"]) <= _started(w) + 1
    last_engine = max(ts(cond(p, "Ready")["lastTransitionTime"]) for p in probed)
    assert ts(cond(obj, "Ready")["lastTransitionTime"]) >= last_engine
    print(f"\nstart-up model: {START:.1f} s per engine (504 s / {SCALE}); seed Ready after {took:.1f} s")


def test_surge_keeps_the_serving_generation_until_the_new_one_is_ready(kube, operator, namespace, deploy):
    t = deploy()
    old = _generation(_ready(t))
    before = {p["metadata"]["uid"] for p in t.engines()}
    since = t.polls[-1].t
    _patch(kube, t, {"engine": {"image": "qdd/vllm:0.33.0-cu13-arm64-rebuilt"}})
    obj = t.until(lambda o, p: p.ready and _generation(o) != old and "previous" not in o["status"]["rollout"],
                  TIMEOUT, "the new generation Ready and the old one gone")
    took = t.polls[-1].t - since
    new_pods = [p for p in t.engines() if p["metadata"]["uid"] not in before]
    assert len(new_pods) == 6 and all(pod_ready(p) for p in new_pods)
    new_ready = max(ts(cond(p, "Ready")["lastTransitionTime"]) for p in new_pods)
    old_deleted = [d for uid, (_, d) in t.deleted.items() if uid in before]
    assert len(old_deleted) == 6, t.deleted  # the watch saw each old engine's deletion
    assert min(ts(d) for d in old_deleted) >= new_ready, "an old engine was deleted before the new ones served"
    assert t.gap(since) == 0, "a poll found the serving generation unable to answer"
    assert took >= START
    print(f"\nsurge with the start-up model: Ready on {_generation(obj)} after {took:.1f} s, no poll without a "
          f"serving generation ({len(t.polls)} polls)")


def test_recreate_serves_nothing_for_one_start_up(kube, operator, namespace, deploy):
    t = deploy(**{"spec.rollout.strategy": "Recreate"})
    old = _generation(_ready(t))
    before = {p["metadata"]["uid"] for p in t.engines()}
    since = t.polls[-1].t
    _patch(kube, t, {"engine": {"image": "qdd/vllm:recreated"}})
    obj = t.until(lambda o, p: p.ready and _generation(o) != old, TIMEOUT, "the new generation Ready")
    took = t.polls[-1].t - since
    gap = t.gap(since)
    # the old engines go first, then the new ones start: nothing serves for at least one start-up
    old_deleted = max(ts(d) for uid, (_, d) in t.deleted.items() if uid in before)
    new_pods = [p for p in t.engines() if p["metadata"]["uid"] not in before]
    new_ready = max(ts(cond(p, "Ready")["lastTransitionTime"]) for p in new_pods)
    assert min(_started(p) for p in new_pods) >= old_deleted - 1  # (one-second timestamps)
    assert new_ready - old_deleted >= START - 1, (new_ready, old_deleted, START)
    assert not [p for p in t.polls if p.t > since and p.ready and not p.serving_ok]
    print(f"\nrecreate with the start-up model: Ready on {_generation(obj)} after {took:.1f} s, nothing served for "
          f"{gap:.1f} s")


def test_a_superseding_edit_mid_start_keeps_the_old_generation_serving(kube, operator, namespace, deploy):
    t = deploy()
    old = _generation(_ready(t))
    since = t.polls[-1].t
    _patch(kube, t, {"engine": {"image": "qdd/vllm:first"}})

    def mid_start(o, p):
        return any(v in ("weights", "compile") for v in p.phases.values())
    t.until(mid_start, 60, "the first edit's engines loading")
    mid = _generation(t.cr())
    _patch(kube, t, {"engine": {"image": "qdd/vllm:second"}})
    t.until(lambda o, p: p.ready and _generation(o) not in (old, mid) and "previous" not in o["status"]["rollout"],
                  TIMEOUT, "the second edit's generation Ready")
    took = t.polls[-1].t - since
    assert t.gap(since) == 0, "the old generation stopped serving before the last one was Ready"
    assert mid not in {p.serving.split("/")[0] for p in t.polls}, "the superseded generation was served"
    print(f"\nsuperseding edit mid-start: Ready on the last generation after {took:.1f} s, the first generation "
          "never served, no poll without a serving generation")


def test_a_replaced_prefill_engine_restarts_the_decode_group_and_serving_waits_for_it(kube, operator, namespace, deploy):
    t = deploy()
    _ready(t)
    decode_before = {p["metadata"]["uid"] for p in t.engines() if p["metadata"]["labels"]["qdd.dev/role"] == "decode"}
    since = t.polls[-1].t
    # The status learns of the deletion only on the operator's next pass, while the StatefulSet
    # recreates the pod at once: Ready=True is checked against the pods from the operator's first
    # Ready=False on (PeerRestartPending), not in the moment before it.
    t.check_ready = False
    kube.kubectl("delete", "pod", f"{t.name}-prefill-1", "-n", namespace, "--wait=false")
    t.until(lambda o, p: cond(o, "Ready").get("status") == "False", 60, "the operator's first pass after the deletion")
    t.check_ready = True

    def back(o, p):
        decode = [x for x in t.engines() if x["metadata"]["labels"]["qdd.dev/role"] == "decode"]
        return p.ready and len(decode) == 2 and not {x["metadata"]["uid"] for x in decode} & decode_before
    t.until(back, TIMEOUT, "decode group recreated and the deployment Ready")
    took = t.polls[-1].t - since
    gap = t.gap(since)
    # one decode endpoint: while its new group starts, no request can be decoded
    gone = max(ts(d) for uid, (_, d) in t.deleted.items() if uid in decode_before)
    decode = [x for x in t.engines() if x["metadata"]["labels"]["qdd.dev/role"] == "decode"]
    back_at = max(ts(cond(x, "Ready")["lastTransitionTime"]) for x in decode)
    assert back_at - gone >= START - 1, (back_at, gone, START)
    print(f"\nprefill pod replaced: decode group restarted, Ready again after {took:.1f} s, nothing served for {gap:.1f} s")


def test_a_start_up_crash_of_a_new_generation_never_replaces_the_serving_one(kube, operator, namespace, deploy):
    """A new generation whose engines exit 2 at start (a flag vLLM refuses): CrashLoopBackOff with
    the kubelet's growing back-off; the old generation serves throughout and the status never says
    Ready for the new spec."""
    t = deploy()
    old = _generation(_ready(t))
    since = t.polls[-1].t
    kube.apply(startup_configmap(namespace, PHASES, SCALE, crash="startup"))
    _patch(kube, t, {"engine": {"image": "qdd/vllm:broken"}})

    def crash_looping(o, p):
        new = [x for x in t.engines() if x["metadata"]["labels"].get("qdd.dev/generation") not in (old, None)]
        loops = [x for x in new if (x["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 2]
        return len(loops) >= 1 and o
    obj = t.until(crash_looping, 60, "an engine of the new generation restarted twice")
    looping = [x for x in t.engines() if (x["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 2]
    c = looping[0]["status"]["containerStatuses"][0]
    assert c["lastState"]["terminated"]["exitCode"] == 2 and not c["ready"]
    assert cond(obj, "Ready").get("status") != "True" and _generation(obj) != old
    assert obj["status"]["rollout"]["serving"].startswith(old)
    assert t.gap(since) == 0
    print(f"\nstart-up crash of a new generation: {looping[0]['metadata']['name']} restarted "
          f"{c['restartCount']} times; old generation served throughout; Ready: {cond(obj, 'Ready').get('reason')}")


def test_a_crash_after_serving_restarts_the_engine_in_place(kube, operator, namespace, deploy):
    t = deploy()
    _ready(t)
    victim = f"{t.name}-prefill-0"
    uid = kube.get("pod", victim, namespace)["metadata"]["uid"]
    since = t.polls[-1].t
    t.check_ready = False  # the status learns of the crash only after the pod says so
    kube.kubectl("annotate", "pod", victim, "-n", namespace, "engine.sim.qdd.dev/crash=serving")

    def restarted(o, p):
        v = kube.get("pod", victim, namespace)
        return v["status"]["containerStatuses"][0]["restartCount"] == 1 and pod_ready(v) and p.ready and v
    t.until(restarted, TIMEOUT, "the crashed engine back and the deployment Ready")
    took = t.polls[-1].t - since
    v = kube.get("pod", victim, namespace)
    assert v["metadata"]["uid"] == uid  # the kubelet restarted the container, the pod stays
    assert v["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    # back only after a whole start-up (and the kubelet's first back-off, 10 s / SCALE)
    assert ts(cond(v, "Ready")["lastTransitionTime"]) >= ts(
        v["status"]["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"]) + START - 1
    print(f"\ncrash after serving: {victim} restarted in place, Ready again after {took:.1f} s")



def test_a_startup_probe_budget_shorter_than_the_start_kills_the_engines_over_and_over(kube, operator, namespace, deploy):
    """The control for the check above: startupTimeoutSeconds 300 (what the plan warns about) against
    the 504 s start: the simulated kubelet kills each probed engine at its budget (300 s / 60 = 5 s),
    status 137, and again after every restart; the deployment never becomes Ready."""
    t = deploy(**{"spec.cluster.startupTimeoutSeconds": 300})

    def killed_twice(o, p):
        pods = t.engines()
        return o if pods and [x for x in pods if (x["status"].get("containerStatuses") or [{}])[0].get(
            "restartCount", 0) >= 2] else None
    obj = t.until(killed_twice, 60, "a probed engine killed twice at its startup budget")
    assert cond(obj, "Ready").get("status") != "True"
    assert any("startupTimeoutSeconds 300 is shorter" in w for w in obj["status"]["warnings"]), obj["status"]["warnings"]
    killed = [x for x in t.engines() if (x["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 2]
    for x in killed:
        assert x["metadata"]["annotations"]["engine.sim.qdd.dev/probe-kill"] == "5000ms"
        assert x["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137
        assert "startupProbe" in x["spec"]["containers"][0]
    print(f"\nstartup budget 300 s against a 504 s start: {len(killed)} engines killed at 5 s (compressed), again "
          "after each restart; never Ready")
