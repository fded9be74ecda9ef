"""qdd.bench.results (qdd's one parser of `vllm bench serve --save-result` files) reads a real one
(written by vLLM 0.32.0's client through vllm-router against the real CPU pair of
tests/realengine, with --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99;
generated texts dropped) and broken ones, each refused naming the key; its compact form (the
sweep Job's termination message) parses back to the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qdd.bench import ResultError, parse_serve_result
from qdd.bench.results import compact, parse_compact

REAL = Path(__file__).with_name("data") / "vllm-0.32.0-bench-serve.json"


def test_a_real_result_parses_to_its_numbers():
    r = parse_serve_result(REAL.read_text())
    assert (r.completed, r.failed, r.requests) == (8, 0, 8)
    assert (r.input_tokens, r.output_tokens) == (519, 249)
    assert r.duration_s == pytest.approx(2.664956181000889)
    assert r.request_throughput == pytest.approx(3.001925531471743)
    assert r.output_tokens_per_second == pytest.approx(93.434932167058)
    assert set(r.latency_ms) == {"ttft", "tpot", "itl", "e2el"}
    assert r.latency_ms["ttft"]["mean"] == pytest.approx(898.4110187500391)
    assert {k: v for k, v in r.latency_ms["ttft"].items() if k.startswith("p")} == {
        "p50": pytest.approx(630.2348225008245), "p99": pytest.approx(2010.3963014495641)}
    assert r.latency_ms["e2el"]["median"] == pytest.approx(754.03441150047)
    assert r.errors == ()
    assert parse_compact(compact(json.loads(REAL.read_text()))) == r


def test_errors_and_fractional_percentiles_are_kept():
    d = json.loads(REAL.read_text())
    d.update({"failed": 2, "errors": ["", "HTTP 503", "", "timeout"], "p99.9_e2el_ms": 3000.5})
    r = parse_serve_result(d)
    assert r.failed == 2 and r.errors == ("HTTP 503", "timeout")
    assert r.latency_ms["e2el"]["p99.9"] == 3000.5


def test_metrics_not_selected_are_absent():
    d = {k: v for k, v in json.loads(REAL.read_text()).items() if "tpot" not in k and "itl" not in k}
    assert set(parse_serve_result(d, require=("ttft",)).latency_ms) == {"ttft", "e2el"}
    with pytest.raises(ResultError, match="median_tpot_ms, median_itl_ms: missing"):
        parse_serve_result(d)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("completed"), "completed: missing"),
    (lambda d: d.update(duration="2s"), "duration: not a number: '2s'"),
    (lambda d: d.update(failed=True), "failed: not a number: True"),
    (lambda d: d.update(median_ttft_ms=None), "median_ttft_ms: missing"),
    (lambda d: d.update(completed=7.5), "completed: not an integer: 7.5"),
])
def test_broken_results_name_the_key(edit, message):
    d = json.loads(REAL.read_text())
    edit(d)
    with pytest.raises(ResultError, match=message):
        parse_serve_result(d)


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_not_a_result_object(text):
    with pytest.raises(ResultError, match="JSON"):
        parse_serve_result(text)
