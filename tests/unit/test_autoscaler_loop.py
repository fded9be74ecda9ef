"""The autoscaler in the reconcile pass (qdd.controller.autoscaling.autoscaler): the counts laid out
from the adapters, the drain it begins and ends, and the decision it writes, against a hand-made
cluster (controller_world) with the API writes recorded instead of sent."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qdd import labels
from qdd.controller.autoscaling import autoscaler as A
from qdd.observe import EngineRead, Judgement, PodRead, RoleServing
from qdd.observe.model import Percentiles

from .controller_world import cr_of, plan_of, replace, running, world
from .test_autoscale_inputs import profile

NAME = "qwen35-397b-4xdep2-1xdep8-cc4096"
AUTO = {"mode": "On", "targets": {"ttftMs": 1000, "tpotMs": 50, "percentile": 90},
        "prefill": {"minEndpoints": 1, "maxEndpoints": 8}, "decode": {"minEndpoints": 1, "maxEndpoints": 2},
        "gpuBudget": 20, "periodSeconds": 5, "scaleUpCooldownSeconds": 0, "scaleDownCooldownSeconds": 0,
        "startupSeconds": 60}


class Kube:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, cr: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


class Observer:
    def __init__(self) -> None:
        self.reads: dict[str, list[PodRead]] = {}
        self.judged: Judgement | None = None

    def reads_of(self, namespace: str, name: str, pod: str) -> list[PodRead]:
        return self.reads.get(pod, [])

    def judgement(self, namespace: str, name: str) -> tuple[Judgement, float | None] | None:
        return (self.judged, 0.0) if self.judged is not None else None


class Profiles:
    def __init__(self, p: Any) -> None:
        self.p = p

    def get(self, namespace: str, deployment: str) -> tuple[Any, str]:
        return (self.p, "ConfigMap x-perf-profile") if self.p else (None, "ConfigMap x-perf-profile not found")

    def forget(self, namespace: str, deployment: str) -> None:
        pass


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    out: dict[str, list] = {"drain": [], "scale": [], "status": []}
    monkeypatch.setattr(A, "mark_draining", lambda kube, ns, pod, draining, now: out["drain"].append((pod, draining)))
    monkeypatch.setattr(A, "scale", lambda kube, ns, name, n: out["scale"].append((name, n)))
    monkeypatch.setattr(A, "role_scale_status", lambda kube, obj, st: out["status"].append((obj["metadata"]["name"], st)))
    return out


def cluster(prefill_wanted: int, auto: dict | None = None) -> tuple[dict, list[dict]]:
    cr = cr_of(mutate=lambda c: c["spec"].__setitem__("autoscaling", copy.deepcopy(auto or AUTO)))
    objs = world(cr)
    if (auto or AUTO)["mode"] == "On":
        objs = replace(objs, "QwenDisaggRoleScale", f"{NAME}-prefill",
                       lambda o: o["spec"].__setitem__("replicas", prefill_wanted))
    return cr, objs


def scaler(now: float = 1000.0, prof: Any = "default") -> tuple[A.Autoscaler, Observer, Kube]:
    obs, kube = Observer(), Kube()
    a = A.Autoscaler(kube, obs, clock=lambda: now, profiles=Profiles(profile() if prof == "default" else prof))  # type: ignore[arg-type]
    return a, obs, kube


def test_counts_follow_the_adapter_within_the_budget(writes):
    cr, objs = cluster(5)
    a, _, _ = scaler()
    # 4 DEP2 + 1 DEP8 = 16 GPUs held; one more DEP2 fits the 20-GPU budget, a sixth would not.
    assert a.layout(cr, plan_of(cr), objs, "a", True) == (5, 1)
    cr6, objs6 = cluster(7)
    assert a.layout(cr6, plan_of(cr6), objs6, "a", True) == (6, 1)
    name, st = writes["status"][-2]
    assert name == f"{NAME}-prefill" and st["effective"] == 6 and "wait for GPUs" in st["message"]
    assert st["selector"].startswith(f"qdd.dev/deployment={NAME},qdd.dev/role=prefill,qdd.dev/group-role=leader")
    assert writes["drain"] == []


def test_advise_and_off_lay_out_the_spec(writes):
    for mode in ("Advise", "Off"):
        cr, objs = cluster(1, {**AUTO, "mode": mode})
        a, _, _ = scaler()
        assert a.layout(cr, plan_of(cr), objs, "a", True) is None
    assert writes == {"drain": [], "scale": [], "status": []}


def test_scale_down_drains_the_top_endpoint_then_removes_it_once_idle(writes):
    cr, objs = cluster(3)
    a, obs, kube = scaler()
    assert a.layout(cr, plan_of(cr), objs, "a", True) == (4, 1)
    assert writes["drain"] == [(f"{NAME}-prefill-3", True)] and kube.events[-1][1] == "EndpointDraining"

    def draining(o: dict) -> None:
        o["metadata"]["labels"][labels.GROUP_ROLE] = labels.DRAINING
        o["metadata"].setdefault("annotations", {})[labels.DRAIN_SINCE] = "1000.0"
    objs = replace(objs, "Pod", f"{NAME}-prefill-3", draining)
    pod = f"{NAME}-prefill-3"
    obs.reads[pod] = [PodRead(pod, "prefill", 3, 1003.0, (EngineRead("0", running=2),))]
    later, _, _ = scaler(1004.0)
    later.observer = obs
    assert later.layout(cr, plan_of(cr), objs, "a", True) == (4, 1)  # still 2 requests running
    obs.reads[pod].append(PodRead(pod, "prefill", 3, 1006.0, (EngineRead("0"), EngineRead("1"))))
    done, _, kube2 = scaler(1007.0)
    done.observer = obs
    assert done.layout(cr, plan_of(cr), objs, "a", True) == (3, 1)
    assert ("Normal", "EndpointRemoved") in [(t, r) for t, r, _ in kube2.events]


def _judged(rate: float) -> Judgement:
    pre = RoleServing("prefill", requests_per_second=rate, prompt_tokens_per_second=rate * 1000,
                      ttft=Percentiles(0.2, 0.25, 0.3))
    dec = RoleServing("decode", requests_per_second=rate, generation_tokens_per_second=rate * 100, running=8,
                      ttft=Percentiles(0.05, 0.05, 0.05), itl=Percentiles(0.02, 0.02, 0.02))
    return Judgement({"prefill": pre, "decode": dec}, [], [])


def test_the_decision_is_written_through_scale_and_shown(writes):
    cr, objs = cluster(4)
    a, obs, _ = scaler()
    plan = plan_of(cr)
    obs.judged = _judged(12.0)  # 12 req/s over 2.5 req/s per endpoint: 5.6 endpoints' worth
    a.layout(cr, plan, objs, "a", True)
    st = a.status({"conditions": []}, cr, plan, objs)
    au = st["autoscaling"]
    assert au["prefill"]["target"] == 6 and au["prefill"]["needed"] == 6 and au["decode"]["target"] == 1
    assert writes["scale"] == [(f"{NAME}-prefill", 6)]
    assert au["inputs"]["requestRate"] == 12.0 and au["inputs"]["startupSource"] == "spec"
    assert au["prefill"]["observedLatencyMs"] == pytest.approx(300.0) and au["prefill"]["predictedLatencyMs"] == 1500.0  # 3 req/s per Ready endpoint
    assert [c["type"] for c in st["conditions"]] == ["SLOAttainable"] and st["conditions"][0]["status"] == "True"
    assert A.load(au["policyState"]) is not None
    # Until the period has passed the same decision is shown and nothing is written again.
    again = a.status({"conditions": []}, cr, plan, objs)
    assert again["autoscaling"]["lastDecisionTime"] == au["lastDecisionTime"] and len(writes["scale"]) == 1


def test_no_profile_no_decision_and_the_condition_says_how_to_make_one(writes):
    cr, objs = cluster(4)
    a, obs, _ = scaler(prof=None)
    obs.judged = _judged(12.0)
    a.layout(cr, plan_of(cr), objs, "a", True)
    st = a.status({"conditions": []}, cr, plan_of(cr), objs)
    c = st["conditions"][0]
    assert (c["status"], c["reason"]) == ("Unknown", "NoPerformanceProfile") and "not found" in c["message"]
    assert writes["scale"] == [] and "target" in st["autoscaling"]["prefill"]


def test_an_external_role_is_never_written(writes):
    cr, objs = cluster(4, {**AUTO, "prefill": {"maxEndpoints": 8, "driver": "External"}})
    a, obs, _ = scaler()
    obs.judged = _judged(12.0)
    a.layout(cr, plan_of(cr), objs, "a", True)
    st = a.status({"conditions": []}, cr, plan_of(cr), objs)
    assert st["autoscaling"]["prefill"]["driver"] == "External" and writes["scale"] == []


def test_advise_decides_and_shows_but_writes_no_count(writes):
    cr, objs = cluster(4, {**AUTO, "mode": "Advise"})
    a, obs, _ = scaler()
    obs.judged = _judged(12.0)
    assert a.layout(cr, plan_of(cr), objs, "a", True) is None
    st = a.status({"conditions": []}, cr, plan_of(cr), objs)
    assert st["autoscaling"]["mode"] == "Advise" and st["autoscaling"]["prefill"]["target"] == 6
    assert st["autoscaling"]["prefill"]["effective"] == 4 and writes == {"drain": [], "scale": [], "status": []}


def test_a_starting_endpoint_no_longer_needed_is_cancelled_at_once_a_serving_one_is_held(writes):
    """The live path of the policy's cancel: prefill-3 (the newest, on top) still starting, the load
    gone (2 req/s: 0.8 endpoints' worth over 2.5 req/s each, TTFT p90 300 ms under half the 1 s
    target). The decision writes 3 through /scale and the next pass drops prefill-3 at once: no
    drain, no hold. The same load with all four Ready writes nothing: the hold window (start-up
    60 s + a period) has not passed."""
    cr, objs = cluster(4)
    objs = replace(objs, "Pod", f"{NAME}-prefill-3", lambda o: o.__setitem__("status", running(ready=False)))
    a, obs, kube = scaler()
    plan = plan_of(cr)
    obs.judged = _judged(2.0)
    assert a.layout(cr, plan, objs, "a", True) == (4, 1)
    st = a.status({"conditions": []}, cr, plan, objs)
    assert (st["autoscaling"]["prefill"]["pending"], st["autoscaling"]["prefill"]["target"]) == (1, 3)
    assert "1 starting endpoint(s) not needed" in st["autoscaling"]["prefill"]["reason"]
    assert writes["scale"] == [(f"{NAME}-prefill", 3)]
    _, objs3 = cluster(3)
    objs3 = replace(objs3, "Pod", f"{NAME}-prefill-3", lambda o: o.__setitem__("status", running(ready=False)))
    assert a.layout(cr, plan, objs3, "a", True) == (3, 1)
    assert writes["drain"] == [] and not [e for e in kube.events if e[1] == "EndpointDraining"]

    served, obs2, _ = scaler()
    obs2.judged = _judged(2.0)
    _, all_ready = cluster(4)
    served.layout(cr, plan, all_ready, "a", True)
    st = served.status({"conditions": []}, cr, plan, all_ready)
    assert st["autoscaling"]["prefill"]["target"] == 4 and len(writes["scale"]) == 1
