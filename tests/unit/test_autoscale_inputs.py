"""The autoscaler's adapters (qdd.controller.autoscaling.inputs, .state, .status) and the plan and
render of its counts (qdd.plan.build_plan(endpoints=...), qdd.render.rolescale)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from qdd.api import parse_resource
from qdd.api.autoscaling import AutoscalingSpec
from qdd.autoscale import Decision, Observation, PolicyState, RoleDecision
from qdd.autoscale.types import Sample
from qdd.controller.autoscaling.inputs import observation, percentile_of, predicted_ms, profile_problem, startup_seconds
from qdd.controller.autoscaling.state import dump, load
from qdd.controller.autoscaling.status import RoleView, Snapshot, autoscaling_events, autoscaling_status, slo_condition
from qdd.observe import RoleServing
from qdd.observe.model import Percentiles
from qdd.perf.profile import PerfProfile, Point, RoleProfile
from qdd.plan import build_plan
from qdd.render import render_all

from ..conftest import ROOT

SEED = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
AUTOSCALING = {"mode": "On", "targets": {"ttftMs": 1000, "tpotMs": 50, "percentile": 95},
               "prefill": {"minEndpoints": 1, "maxEndpoints": 8}, "decode": {"minEndpoints": 1, "maxEndpoints": 2},
               "gpuBudget": 40}


def profile() -> PerfProfile:
    pre = [Point(load=x, latency_ms=y, tokens_per_second=x * 1000) for x, y in ((1.0, 200.0), (2.0, 400.0), (3.0, 1500.0))]
    dec = [Point(load=x, latency_ms=y, tokens_per_second=x * 1000 / y) for x, y in ((16.0, 20.0), (64.0, 30.0), (128.0, 60.0))]
    return PerfProfile(deployment="x", model="m", gpu="GB200", backend="vllm", backend_version="0.33.0", database="t",
                       isl=1000, osl=100, prefill=RoleProfile(role="prefill", topology="DEP2", gpus_per_endpoint=2, points=pre),
                       decode=RoleProfile(role="decode", topology="DEP8", gpus_per_endpoint=8, points=dec))


def test_observation_from_the_roles_engines():
    pre = RoleServing("prefill", requests_per_second=4.0, prompt_tokens_per_second=8000.0, waiting=20,
                      ttft=Percentiles(0.2, 0.4, 0.9))
    dec = RoleServing("decode", requests_per_second=3.5, generation_tokens_per_second=350.0,
                      ttft=Percentiles(0.02, 0.05, 0.1), itl=Percentiles(0.01, 0.03, 0.07))
    o = observation(100.0, pre, dec, 95, 10.0, 8192, 1024)
    # 4 req/s finished + 20 waiting over the 10 s window; ISL 8000/4; OSL 350/3.5; p95 reads p99.
    assert o == Observation(now_s=100.0, request_rate_rps=6.0, mean_isl=2000.0, mean_osl=100.0,
                            ttft_ms=pytest.approx(1000.0), tpot_ms=pytest.approx(70.0))
    idle = observation(1.0, RoleServing("prefill", requests_per_second=0.0), RoleServing("decode"), 90, 10, 8192, 1024)
    assert idle is not None and (idle.request_rate_rps, idle.mean_isl, idle.mean_osl, idle.ttft_ms) == (0.0, 8192, 1024, None)
    assert observation(1.0, RoleServing("prefill"), RoleServing("decode"), 90, 10, 8192, 1024) is None  # one read yet
    assert percentile_of(Percentiles(1.0, 2.0, 3.0), 50) == 1.0 and percentile_of(Percentiles(1.0, 2.0, 3.0), 91) == 3.0


def test_profile_checked_and_read_for_predictions():
    p = profile()
    assert profile_problem(p, 1000, 50, 1000, 100) is None
    assert "TTFT 100 ms" in (profile_problem(p, 100, 50, 1000, 100) or "")
    assert "TPOT 10 ms" in (profile_problem(p, 1000, 10, 1000, 100) or "")
    assert predicted_ms(p, "prefill", 1.5) == 300.0 and predicted_ms(p, "prefill", 9.0) is None
    assert predicted_ms(p, "decode", 32.0) == pytest.approx(23.3, abs=0.1)


def test_startup_seconds_spec_then_measured_then_model():
    assert startup_seconds(30, [5.0, 7.0], 600.0) == (30.0, "spec")
    assert startup_seconds(None, [5.0, 9.0, 7.0], 600.0) == (7.0, "measured")
    assert startup_seconds(None, [], 412.5) == (412.5, "model")


def test_policy_state_round_trips_through_its_json():
    s = PolicyState(history=(Sample(1.0, 2.5, 1000.0, 100.0), Sample(16.0, 3.0, 1100.0, 90.0)),
                    last_scale_up_s={"prefill": 16.0}, lower_since_s={"decode": 1.0}, correction={"prefill": 0.5})
    assert load(dump(s)) == s
    assert load(None) is None and load("{not json") is None and load('{"history": [[1, 2]]}') is None


def _snap(attainable: bool, needed: int = 3, target: int = 2, time: str = "t1") -> Snapshot:
    d = Decision(RoleDecision(target, needed=needed, reason="demand 2.36 endpoints"), RoleDecision(1, needed=1),
                 slo_attainable=attainable, gpus_held_after=12, forecast_rate_rps=6.0, state=PolicyState())
    return Snapshot("On", time, d, Observation(1.0, 6.0, 1000.0, 100.0, 300.0, 25.0),
                    {"prefill": RoleView(2, 1, 1, 0, 300.0, 400.0), "decode": RoleView(1, 1, 0, 0, 25.0, 22.0)},
                    profile="ConfigMap x-perf-profile", startup_seconds=4.2, startup_source="measured", gpus_held=12)


def test_status_and_condition_say_the_decision_and_why():
    a = AutoscalingSpec.model_validate({**AUTOSCALING, "gpuBudget": 12})
    st = autoscaling_status(a, _snap(False))
    assert st["prefill"] == {"driver": "Planner", "target": 2, "effective": 2, "ready": 1, "pending": 1, "draining": 0,
                             "needed": 3, "targetLatencyMs": 1000.0, "observedLatencyMs": 300.0,
                             "predictedLatencyMs": 400.0, "reason": "demand 2.36 endpoints"}
    assert st["inputs"]["requestRate"] == 6.0 and st["inputs"]["startupSource"] == "measured"
    assert st["sloAttainable"] is False and st["gpusHeld"] == 12
    c = slo_condition(a, _snap(False), 3)
    assert (c["status"], c["reason"]) == ("False", "GPUBudgetReached") and "gpuBudget 12" in c["message"]
    over = slo_condition(AutoscalingSpec.model_validate({**AUTOSCALING, "prefill": {"maxEndpoints": 2}}), _snap(False), 3)
    assert over["reason"] == "MaxEndpointsReached"
    # needed 3 > max 2, but the budget holds prefill at 1 < 2: the budget is what binds
    held = slo_condition(AutoscalingSpec.model_validate({**AUTOSCALING, "gpuBudget": 12, "prefill": {"maxEndpoints": 2}}),
                         _snap(False, target=1), 3)
    assert held["reason"] == "GPUBudgetReached" and "max 2" in held["message"]
    assert slo_condition(a, _snap(True, needed=2), 3)["status"] == "True"
    none = slo_condition(a, Snapshot("On", message="ConfigMap x-perf-profile not found", no_profile=True), 3)
    assert (none["status"], none["reason"]) == ("Unknown", "NoPerformanceProfile")


def test_events_on_transitions_only():
    a = AutoscalingSpec.model_validate({**AUTOSCALING, "gpuBudget": 12})

    def status(snap: Snapshot) -> dict:
        return {"conditions": [slo_condition(a, snap, 1)], "autoscaling": autoscaling_status(a, snap)}
    before, after = status(_snap(True, needed=1, target=1, time="t0")), status(_snap(False, time="t1"))
    assert [(t, r) for t, r, _ in autoscaling_events(before, after)] == [("Warning", "SLONotAttainable"),
                                                                         ("Normal", "ScalingUp")]
    assert autoscaling_events(after, copy.deepcopy(after)) == []  # the same decision seen again: nothing
    advised = copy.deepcopy(after)
    advised["autoscaling"] |= {"mode": "Advise", "lastDecisionTime": "t2"}
    advised["autoscaling"]["prefill"]["target"] = 3
    assert [r for _, r, _ in autoscaling_events(after, advised)] == ["ScalingAdvised"]


def _cr(autoscaling: dict | None) -> dict:
    cr = yaml.safe_load(SEED.read_text())
    cr["metadata"]["namespace"] = "llm"
    if autoscaling is not None:
        cr["spec"]["autoscaling"] = autoscaling
    return cr


def test_counts_change_the_endpoints_laid_out_never_a_pod():
    res = parse_resource(_cr(AUTOSCALING))
    spec_plan, more = build_plan(res), build_plan(res, endpoints=(6, 2))
    assert (more.prefill.endpoints, more.decode.endpoints) == (6, 2)
    same = {p.name: p.argv for p in spec_plan.prefill.pods + spec_plan.decode.pods}
    for p in more.prefill.pods + more.decode.pods:  # the decode sizing stays the spec's: no argv moves
        if p.name in same:
            assert p.argv == same[p.name]
    def without_address(argv: tuple[str, ...]) -> list[str]:
        i = argv.index("--data-parallel-address")
        return [*argv[:i], *argv[i + 2:]]
    # A new decode group is the spec's group 0 but for its own leader's address.
    assert more.decode.pods[2].name.endswith("decode-1-leader")
    assert without_address(more.decode.pods[2].argv) == without_address(spec_plan.decode.pods[0].argv)
    assert more.generation == spec_plan.generation


def test_adapters_rendered_for_mode_on_only():
    def adapters(auto: dict | None) -> list[dict]:
        return [o for o in render_all(build_plan(parse_resource(_cr(auto)))) if o["kind"] == "QwenDisaggRoleScale"]
    on = adapters(AUTOSCALING)
    assert [(o["metadata"]["name"], o["spec"]["replicas"]) for o in on] == [
        ("qwen35-397b-4xdep2-1xdep8-cc4096-decode", 1), ("qwen35-397b-4xdep2-1xdep8-cc4096-prefill", 4)]
    assert on[0]["metadata"]["annotations"] == {"qdd.dev/on-change": "keep"}
    assert adapters({**AUTOSCALING, "mode": "Advise"}) == [] and adapters(None) == []
    off = render_all(build_plan(parse_resource(_cr({**AUTOSCALING, "mode": "Off"}))))
    assert json.dumps(off) == json.dumps(render_all(build_plan(parse_resource(_cr(None)))))
