"""Property-based: the surfaces that read what comes from outside (issue 21) never raise anything
but their own field-named error, and what they hand to a status or an Event can be written.

Surfaces: the QwenDisaggBenchmark kind (parse + render of its Jobs), the recipe importer (the file
reader and the import of a mutated published recipe), ``qdd bench report``'s reader, the canary's
reader of a router's answer (through the judge and the status), and the benchmark reconcile's
reader of a pod's termination message (through the status), and the engine-metrics reader of a
pod's /metrics (through the judgement and status.serving). Same budget as test_fuzz_render.py:
``QDD_FUZZ_EXAMPLES`` per surface (150 in ``make test``, 3,000 in ``make fuzz``).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qdd.api.benchmark import parse_benchmark_spec
from qdd.api.observe import ObserveThresholds
from qdd.bench.observe import progress
from qdd.bench.report import ReportError, frontier, load, points, table
from qdd.canary.client import Answer, _text_of
from qdd.canary.judge import judge, state_of
from qdd.controller.bench_status import BenchFacts, compute_bench_status
from qdd.controller.engine_metrics import parse_text
from qdd.errors import SpecError
from qdd.observe import PodRead, engines_of
from qdd.observe import judge as judge_serving
from qdd.observe.metrics import EXPOSED
from qdd.observe.status import serving_status
from qdd.recipe import RecipeError
from qdd.recipe.objects import import_objects, read_recipe
from qdd.render import benchmark as rb
from qdd.safetext import safe_value

from ..conftest import EXAMPLES, load as load_yaml
from .helpers import plan_of
from .srt_recipes import recipe
from .test_fuzz_render import FUZZ

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
PLAN = plan_of(load_yaml(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"))

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20)
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                           max_size=4), max_leaves=16)


def _attempt(fn: Any, error: type[Exception]) -> tuple[Any, Any]:
    """(fn(), None), or (None, the ``error`` it raised): any other exception fails the test."""
    try:
        return fn(), None
    except error as e:
        return None, e


def writable(status: dict[str, Any]) -> None:
    """What a status patch or an Event may carry: JSON without NaN/inf, no control characters."""
    json.dumps(safe_value(status), allow_nan=False)

    def strings(x: Any) -> list[str]:
        if isinstance(x, dict):
            return [s for k, v in x.items() for s in [k, *strings(v)]]
        return [s for v in x for s in strings(v)] if isinstance(x, list) else [x] if isinstance(x, str) else []
    bad = [s for s in strings(safe_value(status)) if UNSAFE.search(s)]
    assert not bad, bad[:2]


# --- the benchmark kind -----------------------------------------------------------------------------------

def _mutated(draw: Any, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with a few values replaced by arbitrary JSON values or removed."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 3))):
        node, path = doc, []
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node, key=str)))
            path.append(key)
            if not isinstance(node[key], dict):
                break
            node = node[key]
        if not path:
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return doc


BENCH = {"deploymentName": "qwen35", "image": "qdd/vllm:0.33.0",
         "sweep": {"isl": 8192, "osl": 1024, "randomRangeRatio": 0.8, "concurrencies": [64, 128], "requestRate": 2.5},
         "accuracy": {"examples": 100, "shots": 5, "repeats": 2, "passThreshold": 0.88,
                      "source": {"claimName": "gsm8k", "path": "data/gsm8k"}}}


@st.composite
def bench_specs(draw: Any) -> dict[str, Any]:
    return _mutated(draw, BENCH)


@FUZZ
@given(bench_specs())
def test_benchmark_specs_are_refused_by_field_or_render_jobs_the_api_server_takes(spec):
    bench, refused = _attempt(lambda: parse_benchmark_spec(spec), SpecError)
    if refused is not None:
        assert refused.errors and all(x.field.startswith("spec") and x.message for x in refused.errors), refused.errors
        return
    for step in rb.step_names(bench):
        job = rb.benchmark_job("b", bench, PLAN, step)
        pod = job["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and "hostNetwork" not in pod
        cmd = pod["containers"][0]["command"]
        assert cmd[:2] == ["/bin/sh", "-c"] and "\x00" not in cmd[2]
        json.dumps(job, allow_nan=False)


# --- the recipe importer ------------------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_recipe_file_reads_or_is_refused_by_file(tmp_path_factory, data):
    f = tmp_path_factory.mktemp("r") / "r.yaml"
    f.write_bytes(data)
    doc, refused = _attempt(lambda: read_recipe(f), RecipeError)
    if refused is not None:
        assert refused.errors and all(k == "(file)" and m for k, m in refused.errors)
        return
    _, refused = _attempt(lambda: import_objects(doc, None, "qdd/vllm:0.33.0"), RecipeError)
    assert refused is None or refused.errors


@st.composite
def recipes(draw: Any) -> dict[str, Any]:
    return _mutated(draw, recipe(draw(st.sampled_from([4, 6, 8])), draw(st.sampled_from(["", "-acc", "-cc4096"]))))


@FUZZ
@given(recipes())
def test_mutated_recipes_import_or_name_the_recipe_key(r):
    imp, refused = _attempt(lambda: import_objects(r, None, "qdd/vllm:0.33.0"), RecipeError)
    if refused is not None:
        assert refused.errors and all(isinstance(k, str) and k and m for k, m in refused.errors), refused.errors
        return
    json.dumps(imp.objects(), allow_nan=False)


# --- qdd bench report ---------------------------------------------------------------------------------------

POINT = {"concurrency": 64, "totalTokensPerSecondPerGpu": 5000.0, "outputTokensPerSecondPerUser": 80.0,
         "ttftMs": {"p50": 400.0, "p99": 900.0}, "itlMs": {"p50": 12.0}, "failed": 0}
DOC = {"benchmark": "b", "deployment": "d", "topology": "4xDEP2-1xDEP8", "gpus": 16, "sweep": [POINT, POINT],
       "accuracy": {"repeats": [0.9], "mean": 0.9, "passThreshold": 0.88, "passed": True}}


@st.composite
def report_texts(draw: Any) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.text(max_size=200))
    if kind == 1:
        return json.dumps(draw(json_values))
    return json.dumps(_mutated(draw, DOC))


@FUZZ
@given(report_texts())
def test_results_documents_are_read_or_refused_naming_the_source(text):
    doc, refused = _attempt(lambda: load(text, "f.json"), ReportError)
    if refused is not None:
        assert all(line.startswith("f.json: ") for line in str(refused).splitlines()), str(refused)
        return
    pts = points(doc, "f.json")
    md = table([doc], pts)
    assert md.count("\n") >= 2 + len(pts) and not UNSAFE.search(md.replace("\n", ""))
    best = frontier(pts)
    assert all(not any(q.tokens_per_user >= p.tokens_per_user and q.tokens_per_gpu >= p.tokens_per_gpu and
                       (q.tokens_per_user, q.tokens_per_gpu) != (p.tokens_per_user, p.tokens_per_gpu) for q in pts)
               for p in best)


# --- the canary's reader -------------------------------------------------------------------------------------

@st.composite
def answers(draw: Any) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=300))
    if kind == 1:
        return json.dumps({"choices": [{"text": draw(st.text(max_size=300))}]}).encode()
    if kind == 2:
        return json.dumps(draw(json_values)).encode()
    return b"[" * draw(st.integers(1, 5000)) + b"]" * draw(st.integers(0, 5000))


@FUZZ
@given(answers(), st.none() | st.text(max_size=30))
def test_any_router_answer_becomes_a_check_result_the_status_can_carry(raw, expected):
    text = _text_of(raw)
    answer = Answer(text, None if text is not None else "HTTP 200 without choices[0].text", 200, 3.0)
    record = judge(None, "g", "r", answer, expected, "2026-12-01T12:00:00Z")
    state = state_of(judge(record, "g", "r", answer, expected, "2026-12-01T12:05:00Z"), "http://r:8000")
    writable({"canary": state.record, "conditions": [{"message": state.message}]})


# --- the benchmark reconcile's reader of a termination message ---------------------------------------------

RAW = {"completed": 8, "failed": 0, "total_input_tokens": 800, "total_output_tokens": 80, "duration": 10.0,
       "total_token_throughput": 88.0, "output_throughput": 8.0, "median_ttft_ms": 100.0, "median_tpot_ms": 20.0,
       "median_itl_ms": 20.0}
ACC = {"repeats": [0.9, 0.8], "questions": 10, "invalid": 0, "errors": 0}


@st.composite
def messages(draw: Any) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.text(max_size=300))
    if kind == 1:
        return json.dumps(draw(json_values))
    if kind == 2:
        return "[" * draw(st.integers(1, 3000))
    base = RAW if kind == 3 else ACC
    doc = {k: draw(st.sampled_from([v, 0, -1, 5e-324, 1e308, 2**64, True, "x", None])) if draw(st.booleans()) else v
           for k, v in base.items()}
    return json.dumps(doc)


def _job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"succeeded": 1, "completionTime": "2026-12-01T11:59:00Z",
                                                   "conditions": [{"type": "Complete", "status": "True"}]}}


@FUZZ
@given(messages(), st.sampled_from(["sweep-0", "accuracy"]))
def test_any_termination_message_becomes_a_status_the_patch_can_carry(message, step):
    pod = {"status": {"containerStatuses": [{"name": "bench", "state": {"terminated": {"message": message}}}]}}
    p = progress([step], [8], 0.5, {step: (_job(f"b-{step}"), [pod])}, 4, NOW)
    assert p.complete or p.failed or (not message and p.running)  # no message yet: within the grace
    st_ = compute_bench_status({}, BenchFacts(1, p, topology="t", gpus=4, accuracy_requested=step == "accuracy"),
                               "2026-12-01T12:00:00Z")
    writable(st_)
    assert json.dumps(st_, allow_nan=False)  # the reader alone already keeps it finite


# --- the engine-metrics reader of a pod's /metrics (round 4) ----------------------------------------------

_NAMES = sorted(EXPOSED) + ["vllm:other", "python_gc", ""]
_VALUES = ["0", "1", "3.5", "-1", "+Inf", "-Inf", "NaN", "1e308", "1e15", "5e-324", "x", ""]


@st.composite
def metrics_bodies(draw: Any) -> str:
    """A /metrics body: exposition lines of the series qdd reads (and others), with engine labels, bucket
    bounds and values of every kind, # lines and junk."""
    lines = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            lines.append(draw(st.text(max_size=60)))
            continue
        if kind == 1:
            lines.append(f"# {draw(st.sampled_from(['TYPE', 'HELP', 'x']))} {draw(st.sampled_from(_NAMES))} "
                         f"{draw(st.sampled_from(['counter', 'gauge', 'histogram', 'summary', '', 'x y']))}")
            continue
        labels = {}
        if draw(st.booleans()):
            labels["engine"] = draw(st.sampled_from(["0", "1", "7", "²", "a" * 20]) | st.text(max_size=5))
        if draw(st.booleans()):
            labels["le"] = draw(st.sampled_from(["0.1", "1", "+Inf", "NaN", "-Inf", "x"]))
        if draw(st.booleans()):
            labels[draw(st.sampled_from(["model_name", "finished_reason", "pod"]))] = draw(st.text(max_size=8))
        body = ",".join(f'{k}="{json.dumps(v)[1:-1]}"' for k, v in labels.items())
        lines.append(f"{draw(st.sampled_from(_NAMES))}{{{body}}} {draw(st.sampled_from(_VALUES))}")
    return "\n".join(lines) + "\n"


@FUZZ
@given(st.lists(metrics_bodies(), min_size=1, max_size=3))
def test_any_metrics_body_is_read_or_refused_and_its_judgement_can_be_written(bodies):
    reads = []
    for i, text in enumerate(bodies):
        try:
            samples, _ = parse_text(text, 1000)
            engines = engines_of(samples)
        except ValueError:  # prometheus-client's parser on a line it cannot read, or a bound (OverLimit)
            continue
        reads.append(PodRead("p", "decode", 0, 1000.0 + 15 * i, engines))
    j = judge_serving({"p": reads}, ObserveThresholds(), 300, 1030.0)
    status = {"serving": serving_status(j, "pods", 300, None), "conditions": j.conditions}
    writable(status)
    assert json.dumps(status, allow_nan=False)
    ints = [v for role in ("prefill", "decode") for v in status["serving"][role].values() if isinstance(v, int)]
    assert all(0 <= v <= 2**53 for v in ints)
