"""The accuracy gate (spec.validation.accuracy; qdd.canary.accuracy): Ready waits, after a change of
generation, for a GSM8K result of that generation; the benchmark runs while the router already
serves it (Ready False, AccuracyPending); results are bound to the generation they measured."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest
import yaml

from qdd import cli, labels
from qdd.api import parse_resource
from qdd.api.benchmark import parse_benchmark_spec
from qdd.api.validation import AccuracyGateSpec
from qdd.bench.observe import progress
from qdd.canary.accuracy import accuracy_events, accuracy_state
from qdd.controller.bench_status import BenchFacts, compute_bench_status
from qdd.controller.benchmark import serves_for_gate
from qdd.controller.reconcile import Reconciler
from qdd.errors import SpecError
from qdd.render import benchmark as rb

from ..conftest import EXAMPLES, load
from .controller_world import plan_of
from .test_controller_status import NAME, SEED, FakeKube, cond, router_canary

GATE = AccuracyGateSpec.model_validate({"benchmarkName": "gsm8k", "minScore": 0.85})
GEN, OLD = "aaaa0001", "bbbb0002"
NOW = "2026-12-01T12:00:00Z"


def bench(generation: str | None = GEN, mean: float | None = 0.9, deployment: str = NAME, accuracy: bool = True,
          **conds: tuple[str, str]) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": "Complete" if mean is not None else "Running",
                          "conditions": [{"type": t, "status": s, "reason": r, "message": f"{t} {r}"}
                                         for t, (s, r) in conds.items()]}
    if mean is not None:
        st["accuracy"] = {"repeats": [mean], "mean": mean, "questions": 1319, "invalid": 0} | (
            {"generation": generation} if generation else {})
    return {"metadata": {"name": "gsm8k"}, "spec": {"deploymentName": deployment} | (
        {"accuracy": {"passThreshold": 0.8}} if accuracy else {}), "status": st}


# --- the pure judge ----------------------------------------------------------------------------------

def test_a_result_of_this_generation_is_judged_against_min_score():
    ok = accuracy_state(GATE, NAME, GEN, bench(mean=0.9), None, True, NOW)
    assert (ok.passed, ok.reason) == (True, "AccuracyAboveThreshold")
    assert ok.record == {"generation": GEN, "benchmark": "gsm8k", "score": 0.9, "minScore": 0.85, "passed": True,
                         "questions": 1319, "measuredTime": NOW}
    assert ok.message == f"GSM8K 0.900 >= minScore 0.850 on generation {GEN} (QwenDisaggBenchmark gsm8k)"
    low = accuracy_state(GATE, NAME, GEN, bench(mean=0.35), None, True, NOW)  # vllm#36094's score
    assert (low.passed, low.reason, low.record["score"]) == (False, "AccuracyBelowThreshold", 0.35)
    assert low.message.startswith(f"GSM8K 0.350 < minScore 0.850 on generation {GEN}")


def test_a_result_of_another_generation_never_counts():
    old = accuracy_state(GATE, NAME, GEN, bench(generation=OLD, mean=0.95), None, True, NOW)
    assert (old.passed, old.reason, old.record) == (None, "AccuracyPending", None)
    assert old.message \
        == "waiting for a GSM8K result of generation aaaa0001 (minScore 0.850); QwenDisaggBenchmark gsm8k: Complete"
    # an ungated run (no generation on it) does not count either
    assert accuracy_state(GATE, NAME, GEN, bench(generation=None), None, True, NOW).passed is None
    # the previous generation's record is kept, with its generation, until this one is measured
    kept = {"generation": OLD, "benchmark": "gsm8k", "score": 0.91, "minScore": 0.85, "passed": True}
    pending = accuracy_state(GATE, NAME, GEN, bench(mean=None), kept, False, NOW)
    assert (pending.passed, pending.record) == (None, kept)
    assert pending.message.endswith("it runs once the router serves it, every endpoint is registered and the canary "
                                    "passed")


def test_a_judged_generation_keeps_its_result_whatever_the_benchmark_does_next():
    record = accuracy_state(GATE, NAME, GEN, bench(mean=0.9), None, True, NOW).record
    assert accuracy_state(GATE, NAME, GEN, None, record, True, "later").record == record  # benchmark deleted
    # a changed minScore judges again (from the benchmark's result)
    stricter = GATE.model_copy(update={"min_score": 0.95})
    again = accuracy_state(stricter, NAME, GEN, bench(mean=0.9), record, True, "later")
    assert (again.passed, again.record["minScore"]) == (False, 0.95)


@pytest.mark.parametrize(("b", "says"), [
    (None, "QwenDisaggBenchmark gsm8k (spec.validation.accuracy.benchmarkName) does not exist"),
    (bench(deployment="other"), "must have spec.deploymentName " + NAME + " (it has 'other')"),
    (bench(accuracy=False), "and spec.accuracy (it has none)"),
])
def test_a_benchmark_that_cannot_gate_says_why(b, says):
    s = accuracy_state(GATE, NAME, GEN, b, None, True, NOW)
    assert (s.passed, s.reason) == (False, "AccuracyBenchmarkInvalid") and says in s.message


def test_a_failed_run_is_not_a_score():
    unanswered = bench(mean=0.6, AccuracyPassed=("False", "RequestsFailed"))
    s = accuracy_state(GATE, NAME, GEN, unanswered, None, True, NOW)
    assert (s.passed, s.reason) == (False, "AccuracyRunFailed") and "got no answer" in s.message
    failed = bench(mean=None, Failed=("True", "JobFailed"))
    assert accuracy_state(GATE, NAME, GEN, failed, None, True, NOW).reason == "AccuracyRunFailed"
    # before the generation serves, an old failure is the old generation's: still pending
    assert accuracy_state(GATE, NAME, GEN, failed, None, False, NOW).reason == "AccuracyPending"


def test_events_on_transitions_only():
    def st(status: str, reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "AccuracyGatePassed", "status": status, "reason": reason, "message": "m"}]}
    assert accuracy_events({}, st("Unknown", "AccuracyPending")) == []
    assert accuracy_events(st("Unknown", "AccuracyPending"), st("False", "AccuracyBelowThreshold")) == [
        ("Warning", "AccuracyBelowThreshold", "m")]
    assert accuracy_events(st("False", "AccuracyBelowThreshold"), st("False", "AccuracyBelowThreshold")) == []
    assert accuracy_events(st("Unknown", "AccuracyPending"), st("True", "AccuracyAboveThreshold")) == [
        ("Normal", "AccuracyAboveThreshold", "m")]


# --- the API -----------------------------------------------------------------------------------------

def _gated(**gate: Any) -> dict[str, Any]:
    cr = copy.deepcopy(SEED)
    cr["spec"]["validation"] = {"accuracy": {"benchmarkName": "gsm8k", "minScore": 0.85} | gate}
    return cr


def test_the_gate_needs_a_router_and_a_score_above_zero():
    cr = _gated()
    cr["spec"]["router"] = {"replicas": 0}
    with pytest.raises(SpecError) as e:
        parse_resource(cr)
    assert "spec.validation.accuracy: validation.accuracy needs a router" in str(e.value)
    for bad in ({"minScore": 0}, {"minScore": 1.2}, {"benchmarkName": "Not_A_Label"}):
        with pytest.raises(SpecError):
            parse_resource(_gated(**bad))


def test_off_by_default_and_the_gate_renders_nothing(tmp_path, capsys):
    """Unset: no gate; set: the same objects, byte for byte (the gate is the operator's and the
    benchmark's business, never a child's), so the goldens hold either way."""
    seed = EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"
    gated = load(seed)
    gated["spec"]["validation"] = {"accuracy": {"benchmarkName": "gsm8k", "minScore": 0.85}}
    (tmp_path / "gated.yaml").write_text(yaml.safe_dump(gated))
    cli.main(["render", "-f", str(seed)])
    plain = capsys.readouterr().out
    cli.main(["render", "-f", str(tmp_path / "gated.yaml")])
    assert capsys.readouterr().out == plain and "request-timeout-secs" in plain
    assert parse_resource(load(seed)).spec.validation.accuracy is None


# --- in the reconcile --------------------------------------------------------------------------------

class GatedKube(FakeKube):
    """The hand-made cluster plus the gate's QwenDisaggBenchmark (None: missing)."""

    def __init__(self, cr: dict[str, Any]) -> None:
        super().__init__(cr)
        self.bench: dict[str, Any] | None = None
        self.bench_reads = 0

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.bench_reads += 1
        assert name == "gsm8k"
        return copy.deepcopy(self.bench)


def _passes(kube: FakeKube, n: int = 3) -> dict[str, Any]:
    r = Reconciler(kube, gang=True, canary=router_canary())  # type: ignore[arg-type]
    for _ in range(n):
        r.once("default", NAME)
        kube.settle()
    r.once("default", NAME)
    return kube.cr["status"]


def test_serving_but_accuracy_pending_then_ready_with_the_score_of_its_generation():
    kube = GatedKube(_gated())
    st = _passes(kube)
    gen = st["rollout"]["generation"]
    assert st["rollout"]["serving"].startswith(gen + "/")  # the router already serves this generation
    ready, gate = cond(st, "Ready"), cond(st, "AccuracyGatePassed")
    assert (ready["status"], ready["reason"]) == ("False", "AccuracyBenchmarkInvalid")  # no benchmark yet
    assert (cond(st, "Degraded")["status"], cond(st, "CanaryPassed")["status"]) == ("True", "True")
    kube.bench = bench(mean=None)
    st = _passes(kube, 0)
    ready, gate = cond(st, "Ready"), cond(st, "AccuracyGatePassed")
    assert (ready["status"], ready["reason"], gate["status"]) == ("False", "AccuracyPending", "Unknown")
    assert "the router serves this generation; waiting for a GSM8K result of generation " + gen in ready["message"]
    assert cond(st, "Degraded")["status"] == "False" and cond(st, "Progressing")["status"] == "True"
    assert cond(st, "Stalled")["status"] == "False" and "accuracy" not in st
    # the benchmark's deployment reader sees it may run now
    dep = {"metadata": {"generation": 1}, "status": st | {"observedGeneration": 1}}
    assert serves_for_gate(dep, gen) and not serves_for_gate(dep, "ffffffff")
    kube.bench = bench(generation="ffffffff", mean=0.99)  # another generation's score: still pending
    assert cond(_passes(kube, 0), "Ready")["reason"] == "AccuracyPending"
    kube.bench = bench(generation=gen, mean=0.91)
    st = _passes(kube, 0)
    assert (cond(st, "Ready")["status"], cond(st, "AccuracyGatePassed")["reason"]) == ("True", "AccuracyAboveThreshold")
    assert st["accuracy"]["generation"] == gen and st["accuracy"]["score"] == 0.91 and st["accuracy"]["passed"] is True
    assert ("event", "Normal", "AccuracyAboveThreshold") in kube.writes
    assert cond(st, "Progressing")["status"] == "False"


def test_below_min_score_is_degraded_and_not_ready():
    kube = GatedKube(_gated())
    kube.bench = bench(mean=None)
    gen = _passes(kube)["rollout"]["generation"]
    kube.bench = bench(generation=gen, mean=0.35)
    st = _passes(kube, 0)
    assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "AccuracyBelowThreshold")
    assert (cond(st, "Degraded")["status"], cond(st, "Degraded")["reason"]) == ("True", "AccuracyBelowThreshold")
    assert st["accuracy"] == {"generation": gen, "benchmark": "gsm8k", "score": 0.35, "minScore": 0.85, "passed": False,
                              "questions": 1319, "measuredTime": st["accuracy"]["measuredTime"]}
    assert ("event", "Warning", "AccuracyBelowThreshold") in kube.writes


def test_no_gate_no_condition_no_read():
    kube = GatedKube(copy.deepcopy(SEED))
    st = _passes(kube)
    assert cond(st, "Ready")["status"] == "True"
    assert "AccuracyGatePassed" not in {c["type"] for c in st["conditions"]}
    assert "accuracy" not in st and kube.bench_reads == 0


# --- the benchmark side ------------------------------------------------------------------------------

def test_the_gates_jobs_carry_the_generation_and_their_result_names_it():
    plan = plan_of(SEED)
    spec = parse_benchmark_spec({"deploymentName": NAME, "accuracy": {"passThreshold": 0.8}})
    plain, gated = rb.benchmark_job("b", spec, plan, "accuracy"), rb.benchmark_job("b", spec, plan, "accuracy", GEN)
    assert labels.GENERATION not in plain["metadata"]["labels"]
    assert gated["metadata"]["labels"][labels.GENERATION] == GEN  # a new generation: a new manifest, a new run
    assert {k: v for k, v in gated["metadata"]["labels"].items() if k != labels.GENERATION} == plain["metadata"]["labels"]
    gated["status"] = {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": NOW}]}
    pod = {"status": {"containerStatuses": [{"name": "bench", "state": {"terminated": {
        "message": '{"repeats":[0.9],"questions":1319,"invalid":0,"errors":0}'}}}]}}
    p = progress(["accuracy"], [], 0.8, {"accuracy": (gated, [pod])}, 16,
                 dt.datetime(2026, 12, 1, 12, 0, 5, tzinfo=dt.timezone.utc))
    assert p.complete and p.accuracy is not None and p.accuracy["generation"] == GEN
    st = compute_bench_status({}, BenchFacts(1, p, accuracy_requested=True), NOW)
    assert st["accuracy"] == {"repeats": [0.9], "mean": 0.9, "questions": 1319, "invalid": 0, "generation": GEN}


def test_the_gate_waits_for_its_generation_not_for_ready():
    def dep(ready: str, reason: str, gen: str = GEN, observed: int = 2) -> dict[str, Any]:
        return {"metadata": {"generation": 2}, "status": {"observedGeneration": observed, "rollout": {"generation": gen},
                                                          "conditions": [{"type": "Ready", "status": ready,
                                                                          "reason": reason}]}}
    assert serves_for_gate(dep("False", "AccuracyPending"), GEN)
    assert serves_for_gate(dep("True", "AllEndpointsReady"), GEN)
    assert not serves_for_gate(dep("False", "CanaryPending"), GEN)
    assert not serves_for_gate(dep("False", "AccuracyPending", gen=OLD), GEN)
    assert not serves_for_gate(dep("False", "AccuracyPending", observed=1), GEN)  # a status of the old spec


def test_the_gate_example_is_accuracy_only():
    ex = load(EXAMPLES / "benchmarks" / "qwen35-397b-4xdep2-1xdep8-gsm8k-gate.yaml")
    spec = parse_benchmark_spec(ex["spec"])
    assert spec.sweep is None and spec.accuracy is not None and rb.step_names(spec) == ["accuracy"]
    gated = _gated(benchmarkName=ex["metadata"]["name"])
    assert parse_resource(gated).spec.validation.accuracy.benchmark_name == ex["metadata"]["name"]
