"""Break-it round 3 (issue 21): one test per class of failing input found on the surfaces added
since round 2 — the model name as an argument, placement and source fields that override qdd,
offline checks weaker than the operator's, the recipe importer's and the bench report's readers,
the benchmark pod's termination message — and the "also seen" list. The canary's class is
tests/unit/test_canary_hostile.py; the fuzzers of the same surfaces are test_fuzz_readers.py."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import re
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd.api import parse_resource
from qdd.api.benchmark import parse_benchmark_spec
from qdd.api.crd import crd
from qdd.bench.observe import progress
from qdd.bench.report import Point, frontier
from qdd.bench.results import compact
from qdd.controller.bench_status import BenchFacts, compute_bench_status
from qdd.errors import SpecError
from qdd.plan import build_plan
from qdd.recipe import RecipeError
from qdd.recipe.objects import import_objects
from qdd.render import benchmark as rb

from ..conftest import EXAMPLES
from .srt_recipes import recipe

SEED = EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def _cr(mutate=None) -> dict[str, Any]:
    cr = yaml.safe_load(SEED.read_text())
    cr["metadata"]["namespace"] = "default"
    if mutate:
        mutate(cr["spec"])
    return cr


def _fields(mutate) -> list[str]:
    with pytest.raises(SpecError) as e:
        build_plan(parse_resource(_cr(mutate)))
    return [x.field for x in e.value.errors]


def _crd_spec() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


# --- 1. argument injection through the model name ----------------------------------------------------

@pytest.mark.parametrize("name", ["--headless", "-tp", "--api-key=x", "-"])
def test_a_model_name_that_reads_as_a_flag_is_refused_by_the_api_and_offline(name):
    assert _fields(lambda s: s["model"].update(name=name)) == ["spec.model.name"]
    pattern = _crd_spec()["properties"]["model"]["properties"]["name"]["pattern"]
    assert not re.search(pattern, name), "the CRD would let kubectl apply it"


def test_a_recipe_model_path_that_reads_as_a_flag_is_refused_naming_model_path():
    r = recipe(4, "")
    r["model"]["path"] = "hf:--headless/x"
    with pytest.raises(RecipeError) as e:
        import_objects(r, None, "qdd/vllm:0.33.0")
    assert "model.path" in [k for k, _ in e.value.errors], e.value.errors


# --- 2. placement and source fields that override qdd or contradict it --------------------------------

@pytest.mark.parametrize(("mutate", "field"), [
    (lambda s: s.setdefault("cluster", {}).update(nodeSelector={"kubernetes.io/arch": "amd64"}),
     "spec.cluster.nodeSelector"),
    (lambda s: s.setdefault("cluster", {}).update(nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}),
     "spec.cluster.nodeSelector"),
    (lambda s: s.setdefault("cluster", {}).update(nodeAffinity=[{"key": "nvidia.com/gpu.clique", "operator": "DoesNotExist"}]),
     "spec.cluster.nodeAffinity"),
    (lambda s: s.setdefault("cluster", {}).update(nodeAffinity=[{"key": "kubernetes.io/arch", "operator": "In",
                                                                  "values": ["amd64"]}]),
     "spec.cluster.nodeAffinity"),
    (lambda s: s["model"].update(source={"pvc": {"claimName": "weights"}, "huggingFace": {"cachePvc": "hf"}}),
     "spec.model.source"),
])
def test_placement_and_source_fields_that_override_qdd_are_refused(mutate, field):
    assert _fields(mutate) == [field]


def test_the_crd_carries_the_placement_source_and_architecture_rules():
    props = _crd_spec()["properties"]
    cluster = {v.get("fieldPath") for v in props["cluster"]["x-kubernetes-validations"]}
    source = props["model"]["properties"]["source"]["x-kubernetes-validations"]
    arch = {v["fieldPath"] for v in props["model"]["properties"]["architecture"]["x-kubernetes-validations"]}
    assert {".nodeSelector", ".nodeAffinity"} <= cluster
    assert [v["rule"] for v in source] == ["!(has(self.pvc) && has(self.huggingFace))"]
    assert arch == {".numKeyValueHeads", ".linearNumValueHeads", ".numExpertsPerTok"}


def test_a_clique_affinity_qdd_can_honour_is_still_accepted():
    build_plan(parse_resource(_cr(lambda s: s.setdefault("cluster", {}).update(
        nodeSelector={"nvidia.com/gpu.clique": "rack-7"},
        nodeAffinity=[{"key": "nvidia.com/gpu.clique", "operator": "NotIn", "values": ["rack-1"]}]))))


# --- 3, 4, 5. the CLI on hostile input: exit 0 or 2, one `error: FILE: field: fix` line -------------------

def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    from qdd.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def assert_refused(argv: list[str], path: Path, field: str) -> str:
    code, _, err, _ = run_cli(argv)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert lines and all(ln.startswith(f"error: {path}: ") for ln in lines), err
    assert any(field in ln for ln in lines), err
    return err


def test_render_refuses_an_invalid_benchmark_beside_the_deployment(tmp_path):
    bench = {"apiVersion": "qdd.dev/v1alpha1", "kind": "QwenDisaggBenchmark", "metadata": {"name": "b"},
             "spec": {"deploymentName": "qwen35-397b-4xdep2-1xdep8", "sweep": {"isl": 0, "osl": 1, "concurrencies": [1]}}}
    f = tmp_path / "both.yaml"
    f.write_text(SEED.read_text() + "---\n" + yaml.safe_dump(bench))
    for cmd in ("render", "plan"):
        assert_refused([cmd, "-f", str(f)], f"{f} (document 2)", "spec.sweep.isl")


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"metadata:\n  name: caf\xe9\n")
    assert_refused(["render", "-f", str(f)], f, "UTF-8")
    assert_refused(["import-recipe", str(f)], f, "UTF-8")


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize(("text", "what"), [
    ("name: " + "[" * 5000 + "]" * 5000 + "\n", "deeper"),
    ("name: &a [*a]\n", "alias"),
    (BILLION_LAUGHS, "values"),
    ("name: a\nname: b\n", "twice"),
    ("--- {}\n--- {}\n", "one document"),
])
def test_import_recipe_reads_yaml_with_the_cli_loaders_limits(tmp_path, text, what):
    f = tmp_path / "r.yaml"
    f.write_text(text)
    code, _, err, took = run_cli(["import-recipe", str(f)])
    assert code == 2 and "Traceback" not in err and err.startswith(f"error: {f}: "), err
    assert what in err and took < 2


@pytest.mark.parametrize(("doc", "field"), [
    ("[" * 100_000 + "]" * 100_000, "deeper"),
    ('{"sweep": [1]}', "sweep[0]"),
    ('{"sweep": [{"totalTokensPerSecondPerGpu": NaN, "outputTokensPerSecondPerUser": 1}]}', "NaN"),
    ('{"sweep": [{"totalTokensPerSecondPerGpu": 1, "outputTokensPerSecondPerUser": 1, "concurrency": "x"}]}',
     "sweep[0].concurrency"),
    ('{"sweep": [{"totalTokensPerSecondPerGpu": 1, "outputTokensPerSecondPerUser": 1, "ttftMs": 3}]}',
     "sweep[0].ttftMs"),
    ('{"accuracy": {"repeats": ["x"], "mean": 1}}', "accuracy.repeats"),
    ('{"accuracy": 7}', "accuracy"),
    ('{"topology": {"a": 1}, "sweep": [{"totalTokensPerSecondPerGpu": 1, "outputTokensPerSecondPerUser": 1}]}',
     "topology"),
])
def test_bench_report_names_the_file_and_field_of_a_malformed_results_file(tmp_path, doc, field):
    f = tmp_path / "results.json"
    f.write_text(doc)
    assert_refused(["bench", "report", "-f", str(f), "-o", str(tmp_path / "p.png")], f, field)


def test_bench_report_without_matplotlib_writes_the_table_and_says_what_to_install(tmp_path, monkeypatch):
    f = tmp_path / "results.json"
    f.write_text(json.dumps({"topology": "t", "sweep": [{"concurrency": 1, "totalTokensPerSecondPerGpu": 1.0,
                                                          "outputTokensPerSecondPerUser": 2.0}]}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err, _ = run_cli(["bench", "report", "-f", str(f), "-o", str(tmp_path / "p.png")])
    assert code == 2 and "Traceback" not in err and "| t | 1 |" in out
    assert err.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'p.png'}: ") and "matplotlib" in err


# --- 7. the benchmark pod's termination message -------------------------------------------------------------

def _job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"succeeded": 1, "completionTime": "2026-12-01T11:59:00Z",
                                                   "conditions": [{"type": "Complete", "status": "True"}]}}


def _pod(message: str) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"name": "bench", "state": {"terminated": {"message": message}}}]}}


RAW = {"completed": 8, "failed": 0, "total_input_tokens": 800, "total_output_tokens": 80, "duration": 10.0,
       "total_token_throughput": 88.0, "output_throughput": 8.0, "median_ttft_ms": 100.0, "median_tpot_ms": 20.0,
       "median_itl_ms": 20.0}


@pytest.mark.parametrize("message", ["[" * 3000, '{"a":' * 1500 + "1" + "}" * 1500,
                                     '{"repeats": [' + "[" * 2000 + "]" * 2000 + "]}"])
def test_a_deeply_nested_termination_message_fails_the_benchmark_instead_of_every_pass(message):
    for step in ("sweep-0", "accuracy"):
        p = progress([step], [8], 0.5, {step: (_job(f"b-{step}"), [_pod(message)])}, 4, NOW)
        assert p.failed and f"Job b-{step}: its result cannot be read" in p.failed


@pytest.mark.parametrize("key", ["median_tpot_ms", "duration", "median_ttft_ms"])
def test_a_denormal_or_absurd_number_never_reaches_the_status_as_infinity(key):
    raw = RAW | {key: 5e-324}
    p = progress(["sweep-0"], [8], None, {"sweep-0": (_job("b-sweep-0"), [_pod(json.dumps(raw))])}, 4, NOW)
    st = compute_bench_status({}, BenchFacts(1, p, topology="t", gpus=4), "2026-12-01T12:00:00Z")
    json.dumps(st, allow_nan=False)  # what the status patch must carry
    if p.failed is None:
        assert all(v is None or abs(v) < 1e15 for pt in st["sweep"] for v in pt.values() if isinstance(v, float))


def test_huge_counts_in_a_termination_message_are_refused():
    acc = '{"repeats":[0.9],"questions":' + "9" * 40 + ',"invalid":0,"errors":0}'
    p = progress(["accuracy"], [], 0.5, {"accuracy": (_job("b-accuracy"), [_pod(acc)])}, 4, NOW)
    assert p.failed and "questions" in p.failed


# --- also seen --------------------------------------------------------------------------------------------

def _frontier_reference(pts: list[Point]) -> list[Point]:
    def beaten(p: Point) -> bool:
        return any(q.tokens_per_user >= p.tokens_per_user and q.tokens_per_gpu >= p.tokens_per_gpu
                   and (q.tokens_per_user, q.tokens_per_gpu) != (p.tokens_per_user, p.tokens_per_gpu) for q in pts)
    return sorted((p for p in pts if not beaten(p)), key=lambda p: p.tokens_per_user)


def test_the_pareto_frontier_equals_the_definition_on_ties_and_duplicates():
    import random

    rng = random.Random(7)
    for _ in range(300):
        pts = [Point("t", i, float(rng.randint(0, 6)), float(rng.randint(0, 6)), None, None, None, 0)
               for i in range(rng.randint(0, 30))]
        assert frontier(pts) == _frontier_reference(pts)


def test_a_tiny_inline_architecture_is_refused():
    tiny = {"name": "Tiny", "numHiddenLayers": 1, "numAttentionHeads": 1, "numKeyValueHeads": 1, "headDim": 1,
            "linearNumKeyHeads": 1, "linearNumValueHeads": 1, "hiddenSize": 1, "vocabSize": 1}
    fields = _fields(lambda s: s["model"].update(name="acme/Tiny", architecture=tiny))
    assert "spec.model.architecture.hiddenSize" in fields and "spec.model.architecture.vocabSize" in fields
    odd = {**tiny, "numHiddenLayers": 8, "headDim": 128, "hiddenSize": 1024, "vocabSize": 32000, "numAttentionHeads": 6,
           "numKeyValueHeads": 4, "numExperts": 2, "numExpertsPerTok": 8, "intermediateSize": 4096}
    fields = _fields(lambda s: s["model"].update(name="acme/Odd", architecture=odd))
    assert fields == ["spec.model.architecture.numKeyValueHeads", "spec.model.architecture.numExpertsPerTok"], fields


def test_the_real_engine_tests_tiny_checkpoint_passes_the_floors():
    # The CPU-engine tests serve a real tiny checkpoint (hidden 128, vocabulary 512): the floors that refuse
    # a typo must still plan it, or every real-engine test fails before an engine starts.
    from tests.realengine.deployment import CR

    plan = build_plan(parse_resource(CR))
    assert plan.spec.model.architecture.hidden_size == 128 and plan.spec.model.architecture.vocab_size == 512


@pytest.mark.parametrize("where", ["value", "arg"])
def test_nul_bytes_in_an_env_value_or_an_argument_are_refused(where):
    def mutate(s: dict[str, Any]) -> None:
        if where == "value":
            s["prefill"]["extraEnv"] = [{"name": "FOO", "value": "a\x00b"}]
        else:
            s["prefill"]["extraArgs"] = ["--seed", "1\x002"]
    assert _fields(mutate) == [f"spec.prefill.{'extraEnv[0].value' if where == 'value' else 'extraArgs[1]'}"]


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
def test_a_router_exposed_outside_the_cluster_is_said_in_the_plan(service_type):
    plan = build_plan(parse_resource(_cr(lambda s: s.setdefault("router", {}).update(serviceType=service_type))))
    assert any("outside the cluster" in w and "spec.router.serviceType" in w for w in plan.warnings), plan.warnings


def test_the_benchmarks_tokenizer_is_the_pinned_revision():
    cr = _cr(lambda s: s["model"].update(revision="0123abcd"))
    plan = build_plan(parse_resource(cr))
    spec = parse_benchmark_spec({"deploymentName": "x", "sweep": {"isl": 8, "osl": 8, "concurrencies": [1]}})
    script = rb.benchmark_job("b", spec, plan, "sweep-0")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "0123abcd" in script, script
    unpinned = build_plan(parse_resource(_cr()))
    assert "revision" not in rb.benchmark_job("b", spec, unpinned, "sweep-0")["spec"]["template"]["spec"][
        "containers"][0]["command"][2]


def test_compact_of_the_seed_is_unchanged():
    """The termination message a real Job writes still reads back (the reader's new limits fit it)."""
    p = progress(["sweep-0"], [8], None, {"sweep-0": (_job("b-sweep-0"), [_pod(compact(copy.deepcopy(RAW)))])}, 4, NOW)
    assert p.failed is None and p.sweep[0]["outputTokensPerSecondPerUser"] == 50.0
