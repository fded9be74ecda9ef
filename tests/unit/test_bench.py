"""QwenDisaggBenchmark's pure parts: the API, the Jobs rendered for it, reading their results
(qdd.bench.results, qdd.bench.gsm8k, qdd.bench.observe), the status, and `qdd bench report`."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import subprocess
import sys

import pytest

from qdd.api.benchmark import parse_benchmark_spec
from qdd.bench import gsm8k
from qdd.bench.observe import NO_RESULT_GRACE_S, progress, topology
from qdd.bench.report import ReportError, frontier, load, points, table
from qdd.bench.results import ResultError, compact, parse_compact, parse_serve_result, sweep_point
from qdd.controller.bench_status import BenchFacts, compute_bench_status
from qdd.errors import SpecError
from qdd.render import benchmark as rb

from ..conftest import EXAMPLES, load as load_yaml
from .helpers import plan_of

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
RAW = {"completed": 512, "failed": 0, "total_input_tokens": 512 * 7373, "total_output_tokens": 512 * 922,
       "duration": 100.0, "total_token_throughput": 512 * (7373 + 922) / 100.0, "output_throughput": 512 * 922 / 100.0,
       "max_concurrency": 64, "num_prompts": 512, "latencies": [1.0] * 512,
       **{f"{s}_{m}_ms": v for m, v in (("ttft", 400.0), ("tpot", 20.0), ("itl", 19.0))
          for s in ("mean", "median", "p50", "p90", "p99")}}


def spec(**kw):
    return parse_benchmark_spec({"deploymentName": "qwen35", **kw})


SWEEP = {"isl": 8192, "osl": 1024, "randomRangeRatio": 0.8, "concurrencies": [64, 128]}


def test_api_refuses_a_benchmark_without_runs_and_bad_fields():
    with pytest.raises(SpecError) as e:
        spec()
    assert e.value.errors[0].field == "spec"
    with pytest.raises(SpecError) as e:
        spec(sweep={**SWEEP, "concurrencies": []}, accuracy={"passThreshold": 1.5})
    assert {x.field for x in e.value.errors} == {"spec.sweep.concurrencies", "spec.accuracy.passThreshold"}


def test_sweep_argv_maps_sa_bench_range_onto_vllm():
    s = spec(sweep=SWEEP).sweep
    argv = rb.sweep_argv(s, 64, "http://r:8000", "Served", "org/model")
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    # [0.8 L, L] = [6553.6, 8192] = 7373 × (1 ± 0.1111) (vLLM's random dataset), same for OSL.
    assert flags["--random-input-len"] == "7373" and flags["--random-output-len"] == "922"
    assert flags["--random-range-ratio"] == "0.111111"
    assert (flags["--num-prompts"], flags["--num-warmups"], flags["--max-concurrency"]) == ("512", "64", "64")
    assert flags["--request-rate"] == "inf" and argv[-1] == "--ignore-eos"
    assert flags["--model"] == "Served" and flags["--tokenizer"] == "org/model"


def test_jobs_of_the_seed():
    plan = plan_of(load_yaml(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"))
    s = spec(sweep=SWEEP, accuracy={"passThreshold": 0.88, "repeats": 5,
                                     "source": {"claimName": "gsm8k-data", "path": "openai/gsm8k"}})
    assert rb.step_names(s) == ["sweep-0", "sweep-1", "accuracy"]
    job = rb.benchmark_job("b", s, plan, "accuracy")
    pod = job["spec"]["template"]["spec"]
    cmd = shlex.split(pod["containers"][0]["command"][-1])
    assert cmd[:2] == ["python3", "/qdd-bench/gsm8k.py"] and cmd[cmd.index("--data") + 1] == "/gsm8k"
    assert cmd[cmd.index("--repeats") + 1] == "5" and cmd[-2:] == [">", "/dev/termination-log"]
    assert {"name": "gsm8k", "mountPath": "/gsm8k", "subPath": "openai/gsm8k", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"} and "resources" in pod["containers"][0]
    assert "nvidia.com/gpu" not in json.dumps(pod["containers"][0]["resources"])
    lab = job["metadata"]["labels"]
    assert lab["qdd.dev/role"] == "benchmark" and "qdd.dev/deployment" not in lab and lab["qdd.dev/step"] == "accuracy"
    # the sweep pods do not mount the GSM8K claim: they would not start where it is missing
    sweep = rb.benchmark_job("b", s, plan, "sweep-0")["spec"]["template"]["spec"]
    assert [v["name"] for v in sweep["volumes"]] == ["scripts"]
    assert [m["name"] for m in sweep["containers"][0]["volumeMounts"]] == ["scripts"]
    scripts = rb.scripts_configmap("b", plan)
    assert set(scripts["data"]) == {"results.py", "gsm8k.py"} and "def compact" in scripts["data"]["results.py"]


def test_results_parse_compact_and_point():
    r = parse_serve_result(RAW)
    text = compact(RAW)
    assert parse_compact(text) == r and "latencies" not in text and len(text) < 1024
    p = sweep_point(r, 64, gpus=16)
    assert p["totalTokensPerSecondPerGpu"] == round(512 * 8295 / 100 / 16, 3) == 2654.4
    assert p["outputTokensPerSecondPerUser"] == 50.0 and p["ttftMs"] == {"mean": 400.0, "p50": 400.0, "p90": 400.0,
                                                                           "p99": 400.0}
    with pytest.raises(ResultError, match="median_tpot_ms"):
        parse_serve_result({k: v for k, v in RAW.items() if k != "median_tpot_ms"})
    with pytest.raises(ResultError, match="completed: not a number"):
        parse_serve_result(RAW | {"completed": "512"})
    with pytest.raises(ResultError, match="empty"):
        parse_compact("")


def test_results_file_runs_alone_as_the_job_runs_it(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(RAW))
    out = subprocess.run([sys.executable, str(rb._BENCH_SRC / "results.py"), "compact", str(tmp_path / "r.json")],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["completed"] == 512


def _job(name, state=None, when="2026-12-01T11:59:00Z"):
    st = {} if state is None else {"conditions": [{"type": state, "status": "True", "lastTransitionTime": when}]}
    return {"metadata": {"name": name}, "status": st}


def _pod(message):
    return {"status": {"containerStatuses": [{"name": "bench", "state": {"terminated": {"message": message}}}]}}


def test_progress_runs_steps_in_order_and_reads_results():
    steps, cs = ["sweep-0", "sweep-1", "accuracy"], [64, 128]
    assert progress(steps, cs, 0.88, {}, 16, NOW).start == "sweep-0"
    one = {"sweep-0": (_job("b-sweep-0", "Complete"), [_pod(compact(RAW))])}
    p = progress(steps, cs, 0.88, one, 16, NOW)
    assert p.start == "sweep-1" and p.sweep[0]["concurrency"] == 64 and not p.complete
    two = one | {"sweep-1": (_job("b-sweep-1"), [])}
    assert progress(steps, cs, 0.88, two, 16, NOW).running == "sweep-1"
    acc = '{"repeats":[0.9,0.86],"questions":1319,"invalid":3,"errors":0}'
    done = one | {"sweep-1": (_job("b-sweep-1", "Complete"), [_pod(compact(RAW))]),
                  "accuracy": (_job("b-accuracy", "Complete"), [_pod(acc)])}
    p = progress(steps, cs, 0.88, done, 16, NOW)
    assert p.complete and p.accuracy["mean"] == 0.88 and p.accuracy["passed"] is True and len(p.sweep) == 2


def test_progress_failures_name_the_job():
    steps = ["sweep-0", "accuracy"]
    bad = {"sweep-0": (_job("b-sweep-0", "Complete"), [_pod("{}")])}
    assert "Job b-sweep-0: its result cannot be read: median_ttft_ms" in progress(steps, [64], 1, bad, 16, NOW).failed
    late = {"sweep-0": (_job("b-sweep-0", "Complete", "2026-12-01T11:00:00Z"), [_pod(None)])}
    assert "succeeded without a result" in progress(steps, [64], 1, late, 16, NOW).failed
    fresh = {"sweep-0": (_job("b-sweep-0", "Complete", "2026-12-01T11:59:30Z"), [_pod(None)])}
    assert NO_RESULT_GRACE_S > 30 and progress(steps, [64], 1, fresh, 16, NOW).running == "sweep-0"
    errors = {"sweep-0": (_job("b-sweep-0", "Complete"), [_pod(compact(RAW))]),
              "accuracy": (_job("b-accuracy", "Failed"), [_pod('{"repeats":[0.5],"questions":4,"invalid":0,"errors":2}')])}
    p = progress(steps, [64], 0.5, errors, 16, NOW)
    assert p.failed == "Job b-accuracy failed: 2 GSM8K requests got no answer" and p.accuracy["passed"] is False


def test_status_conditions():
    ok = progress(["accuracy"], [], 0.88, {"accuracy": (_job("b-accuracy", "Complete"),
                                                        [_pod('{"repeats":[0.8],"questions":5,"invalid":0,"errors":0}')])},
                  16, NOW)
    st = compute_bench_status({}, BenchFacts(3, ok, topology="4xDEP2-1xDEP8", gpus=16, accuracy_requested=True),
                              "2026-12-01T12:00:00Z")
    conds = {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}
    assert conds == {"Complete": ("True", "Completed"), "Failed": ("False", "Completed"),
                     "AccuracyPassed": ("False", "BelowThreshold")}
    assert st["phase"] == "Complete" and st["accuracy"] == {"repeats": [0.8], "mean": 0.8, "questions": 5, "invalid": 0}
    wait = compute_bench_status(st, BenchFacts(3, None, waiting="QwenDisaggDeployment x is not Ready"), "later")
    assert wait["phase"] == "WaitingForDeployment" and wait["accuracy"] == st["accuracy"]  # results kept
    assert {c["type"]: c["status"] for c in wait["conditions"]}["AccuracyPassed"] == "Unknown"
    assert topology(4, 2, 1, 8, 1, True) == "4xDEP2-1xDEP8" and topology(2, 1, 1, 2, 4, False) == "2xDP1TP4-1xDP2TP4"


def _doc(topo, pts, accuracy=None):
    return {"topology": topo, "sweep": [{"concurrency": c, "totalTokensPerSecondPerGpu": g,
                                         "outputTokensPerSecondPerUser": u} for c, g, u in pts], "accuracy": accuracy}


def test_report_frontier_table_and_png(tmp_path):
    a = _doc("4xDEP2-1xDEP8", [(64, 5000.0, 80.0), (1024, 20000.0, 30.0), (3072, 25000.0, 12.0)],
             {"repeats": [0.88], "mean": 0.88, "passThreshold": 0.88, "passed": True})
    b = _doc("8xDEP2-1xDEP8", [(64, 4000.0, 90.0), (1024, 19000.0, 29.0)])
    pts = points(a) + points(b)
    assert [(p.topology, p.concurrency) for p in frontier(pts)] == [
        ("4xDEP2-1xDEP8", 3072), ("4xDEP2-1xDEP8", 1024), ("4xDEP2-1xDEP8", 64), ("8xDEP2-1xDEP8", 64)]
    md = table([a, b], pts)
    assert "| 8xDEP2-1xDEP8 | 1024 | 19,000.0 | 29.0 |" in md and md.count("★") == 4
    assert "| 4xDEP2-1xDEP8 | — | 0.880 | 0.880 | 0.88 | yes |" in md
    files = []
    for i, d in enumerate((a, b)):
        files += ["-f", str(tmp_path / f"{i}.json")]
        (tmp_path / f"{i}.json").write_text(json.dumps(d))
    run = subprocess.run([sys.executable, "-m", "qdd.cli", "bench", "report", *files, "-o", str(tmp_path / "p.png")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG" and run.stdout == md
    assert "5 points, 2 topologies" in run.stderr
    with pytest.raises(ReportError, match="neither sweep results nor accuracy"):
        load('{"sweep": []}', "x.json")
    bad = subprocess.run([sys.executable, "-m", "qdd.cli", "bench", "report", "-f", str(tmp_path / "nope.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_gsm8k_result_parse_and_gate():
    o = gsm8k.parse_accuracy('{"repeats":[0.9,0.8],"questions":10,"invalid":0,"errors":0}')
    assert o.mean == pytest.approx(0.85) and gsm8k.passes(o, 0.85) and not gsm8k.passes(o, 0.86)
    with pytest.raises(ValueError, match="repeats"):
        gsm8k.parse_accuracy('{"repeats":[1.5],"questions":1,"invalid":0,"errors":0}')
