"""The parts of the performance model that run without aiconfigurator: results → measured points,
``qdd bench report --profile`` (measured against predicted), the SLO arithmetic on a committed
profile, the CLI's error when the library is absent, and the profile ConfigMap example.

The profile fixture tests/unit/data/perf-profile-qwen35-397b-4xdep2-1xdep8.json is
``qdd perf profile -f examples/qwen35-397b-4xdep2-1xdep8.yaml`` (aiconfigurator 0.12.0);
tests/contract/test_perf_model.py regenerates it and fails on a difference."""

from __future__ import annotations

import importlib.metadata
import json
import math

import pytest
import yaml

from qdd import cli
from qdd.perf import aic, report, sizing
from qdd.perf.measured import MeasuredError, measured_points
from qdd.perf.profile import CONFIGMAP_KEY, calibrate, latency_at, load_profile, max_decode_concurrency

from ..conftest import EXAMPLES, ROOT

PROFILE = ROOT / "tests" / "unit" / "data" / "perf-profile-qwen35-397b-4xdep2-1xdep8.json"


def _results(tpot_scale: float = 1.25, ttft_scale: float = 1.0) -> dict:
    """A 4xDEP2-1xDEP8 benchmark that decodes 25% slower than the committed prediction."""
    prof = load_profile(PROFILE.read_text())
    sweep = []
    for conc in (512, 1024):
        tpot = latency_at(prof.decode, conc) * tpot_scale
        rate = 0.92 * conc * 1000 / (tpot * prof.osl)
        ttft = latency_at(prof.prefill, rate / 4) * ttft_scale
        sweep.append({"concurrency": conc, "completed": round(rate * 600), "durationSeconds": 600.0,
                      "ttftMs": {"p50": ttft}, "tpotMs": {"p50": tpot}, "totalTokensPerSecondPerGpu": 1.0,
                      "outputTokensPerSecondPerUser": 1000 / tpot})
    return {"benchmark": "sweep", "deployment": "qwen35-397b-4xdep2-1xdep8", "topology": "4xDEP2-1xDEP8",
            "gpus": 16, "sweep": sweep}


def test_measured_points_read_a_results_document():
    dep, pts = measured_points(json.dumps(_results()), "r.json")
    assert dep == "qwen35-397b-4xdep2-1xdep8" and [p.concurrency for p in pts] == [512, 1024]
    assert (pts[0].prefill_endpoints, pts[0].decode_endpoints) == (4, 1)
    assert pts[0].request_rate == pytest.approx(_results()["sweep"][0]["completed"] / 600.0)


@pytest.mark.parametrize(("doc", "message"), [
    ({"topology": "4xDEP2", "sweep": []}, "topology: '4xDEP2' is not of the form 4xDEP2-1xDEP8"),
    ({"topology": "4xDEP2-1xDEP8", "sweep": [{"concurrency": 64}]}, "sweep[0]: 'completed' is missing"),
    ({"topology": "4xDEP2-1xDEP8", "sweep": []}, "no sweep points"),
])
def test_measured_points_name_the_bad_key(doc, message):
    with pytest.raises(MeasuredError, match=message.replace("[", r"\[").replace("]", r"\]")):
        measured_points(json.dumps(doc), "r.json")


def test_comparison_reports_the_error_per_role():
    prof = calibrate(load_profile(PROFILE.read_text()), measured_points(json.dumps(_results()), "r.json")[1])
    rows = report.comparison(prof)
    dec = [r for r in rows if r["role"] == "decode"]
    assert [r["error"] for r in dec] == [0.25, 0.25]
    pre = [r for r in rows if r["role"] == "prefill"]
    assert all(abs(r["error"]) < 0.01 for r in pre)
    assert "| sweep | 512 | decode (TPOT) | 512.0 requests |" in report.table(prof)


def test_bench_report_plots_measured_against_predicted(tmp_path, capsys):
    res = tmp_path / "results.json"
    res.write_text(json.dumps(_results()))
    out = tmp_path / "pareto.png"
    cli.main(["bench", "report", "-f", str(res), "--profile", str(EXAMPLES / "perf" / "qwen35-397b-4xdep2-1xdep8-perf-profile.yaml"),
              "-o", str(out)])
    text = capsys.readouterr()
    assert (tmp_path / "pareto-vs-predicted.png").stat().st_size > 10_000
    assert "Measured against predicted (aiconfigurator 0.12.0" in text.out and "+25%" in text.out


def test_calibration_by_a_benchmark_moves_the_autoscalers_answer():
    """The committed prediction of the seed's DEP8: a benchmark 25% slower lowers the requests one
    decode endpoint holds under a 40 ms TPOT."""
    prof = load_profile(PROFILE.read_text())
    cal = calibrate(prof, measured_points(json.dumps(_results()), "r.json")[1])
    before, after = max_decode_concurrency(prof, 40.0), max_decode_concurrency(cal, 40.0)
    assert 1500 < before < 2048 and after < before * 0.85


def test_slo_arithmetic_on_the_committed_profile():
    """P:D and GPUs from per-endpoint limits, as qdd plan --slo computes them (library-free part)."""
    prof = load_profile(PROFILE.read_text())
    o = sizing.Option("DEP2", "DEP8", 2, 8, profile=prof)
    o.prefill_rate = 8.0
    o.decode_concurrency = max_decode_concurrency(prof, 50.0)
    o.decode_rate = sizing.decode_rate(prof, o.decode_concurrency, 0.92)
    assert o.decode_rate == pytest.approx(0.92 * o.decode_concurrency * 1000 / (50.0 * prof.osl), rel=0.01)
    sizing._fit_rate(o, 30.0, 0.92, 64)
    assert (o.prefill_endpoints, o.decode_endpoints, o.gpus) == (4, 1, 16)
    assert o.tpot_ms <= 50.0 and o.ttft_ms <= 750.3 and o.concurrency <= o.decode_concurrency
    # the operating concurrency serves the rate, one request less does not
    assert sizing.decode_rate(prof, o.concurrency, 0.92) >= 30.0 > sizing.decode_rate(prof, o.concurrency - 1, 0.92)
    b = sizing.Option("DEP2", "DEP8", 2, 8, profile=prof, prefill_rate=8.0, decode_concurrency=o.decode_concurrency,
                      decode_rate=o.decode_rate)
    sizing._fit_budget(b, 24, 0.92)
    assert b.gpus <= 24 and b.served == pytest.approx(min(b.prefill_endpoints * 8.0, b.decode_endpoints * b.decode_rate))


def test_runners_up_say_why_they_lost():
    def opt(pre: int, dec: int, pg: int, dg: int, served: float) -> sizing.Option:
        return sizing.Option("A", "B", pg, dg, prefill_endpoints=pre, decode_endpoints=dec, served=served)
    ok = [opt(3, 1, 4, 8, 49.0), opt(5, 1, 2, 8, 44.4), opt(5, 2, 2, 4, 44.4)]
    sizing._explain(ok, by_rate=True)
    assert [o.gpus for o in ok] == [18, 18, 20] and ok[0].served == 44.4
    assert ok[1].lost == "same GPUs and rate, 7 endpoints vs 6" and ok[2].lost == "2 more GPUs"
    budget = [opt(6, 3, 2, 4, 51.8), opt(6, 1, 2, 8, 44.2), opt(4, 1, 4, 8, 44.2)]
    sizing._explain(budget, by_rate=False)
    assert [o.gpus for o in budget] == [24, 20, 24]
    assert budget[1].lost == "serves 44.2 vs 51.8 req/s" and budget[2].lost == "serves 44.2 vs 51.8 req/s"


@pytest.mark.parametrize(("text", "message"), [
    ("ttft=500", "give both"), ("ttft=0,tpot=5", "not ttft=MS or tpot=MS"), ("latency=5,tpot=4", "not ttft=MS"),
])
def test_slo_parse_errors(text, message):
    with pytest.raises(ValueError, match=message):
        sizing.parse_slo(text)
    assert sizing.parse_slo("tpot=40, ttft=1500ms") == sizing.Slo(1500.0, 40.0)


@pytest.mark.parametrize("args", [["--predict"], ["--slo", "ttft=1000,tpot=50", "--rate", "10"]])
def test_without_the_extra_the_cli_says_how_to_install_it(args, capsys, monkeypatch):
    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", absent)  # as in a venv without the extra
    aic._sdk.cache_clear()
    with pytest.raises(SystemExit) as e:
        cli.main(["plan", "-f", str(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        "error: the performance model needs NVIDIA's aiconfigurator, which is not installed: pip install 'qdd[perf]' "
        "(aiconfigurator==0.12.0), or in a qdd checkout: make perf-venv, then hack/qdd-perf.sh"]


def test_the_profile_configmap_example_is_the_committed_profile():
    cm = yaml.safe_load((EXAMPLES / "perf" / "qwen35-397b-4xdep2-1xdep8-perf-profile.yaml").read_text())
    assert cm["metadata"]["name"] == "qwen35-397b-4xdep2-1xdep8-perf-profile"
    assert load_profile(cm["data"][CONFIGMAP_KEY]) == load_profile(PROFILE.read_text())
    assert not math.isinf(latency_at(load_profile(PROFILE.read_text()).decode, 4344))


def test_the_operator_calibrates_the_profile_configmap_once():
    """What the benchmark reconciler applies when a benchmark of the deployment completes
    (qdd.controller.benchmark._calibrate_profile): the measured points taken in, then nothing
    more on the next pass."""
    from qdd.perf.measured import calibrated_configmap

    cm = yaml.safe_load((EXAMPLES / "perf" / "qwen35-397b-4xdep2-1xdep8-perf-profile.yaml").read_text())
    new = calibrated_configmap(cm, json.dumps(_results()), "benchmark sweep")
    assert new is not None and new["metadata"]["name"] == cm["metadata"]["name"]
    assert new["metadata"]["labels"] == cm["metadata"]["labels"]
    prof = load_profile(new["data"][CONFIGMAP_KEY])
    assert [m.concurrency for m in prof.measured] == [512, 1024]
    assert max_decode_concurrency(prof, 40.0) < max_decode_concurrency(load_profile(cm["data"][CONFIGMAP_KEY]), 40.0)
    assert calibrated_configmap(new, json.dumps(_results()), "benchmark sweep") is None
    other = {**_results(), "deployment": "qwen35-397b-5xdep2-1xdep8"}
    with pytest.raises(MeasuredError, match="measured on qwen35-397b-5xdep2-1xdep8"):
        calibrated_configmap(cm, json.dumps(other), "benchmark sweep")


def test_the_benchmark_reconciler_applies_the_calibrated_profile():
    """qdd.controller.benchmark: on a completed sweep it reads <deployment>-perf-profile and applies
    the calibrated ConfigMap; without a profile ConfigMap, or with nothing new, it writes nothing."""
    from qdd.controller.benchmark import BenchmarkReconciler

    cm = yaml.safe_load((EXAMPLES / "perf" / "qwen35-397b-4xdep2-1xdep8-perf-profile.yaml").read_text())

    class Double:  # the reconciler's two calls: _get (a ConfigMap by name) and kube.apply
        def __init__(self, have):
            self.have, self.applied = have, []
            self.kube = self

        def _get(self, api_version, kind, namespace, name):
            assert (api_version, kind, namespace) == ("v1", "ConfigMap", "default")
            return self.have if self.have and name == self.have["metadata"]["name"] else None

        def apply(self, obj):
            self.applied.append(obj)

    bench = {"metadata": {"name": "sweep", "namespace": "default"}}
    text = json.dumps(_results())
    d = Double(cm)
    BenchmarkReconciler._calibrate_profile(d, bench, "qwen35-397b-4xdep2-1xdep8", text)  # type: ignore[arg-type]
    assert len(d.applied) == 1 and len(load_profile(d.applied[0]["data"][CONFIGMAP_KEY]).measured) == 2
    again = Double(d.applied[0])
    BenchmarkReconciler._calibrate_profile(again, bench, "qwen35-397b-4xdep2-1xdep8", text)  # type: ignore[arg-type]
    none = Double(None)
    BenchmarkReconciler._calibrate_profile(none, bench, "qwen35-397b-4xdep2-1xdep8", text)  # type: ignore[arg-type]
    assert again.applied == [] and none.applied == []
