"""qdd's performance model against the real aiconfigurator 0.12.0 (the perf venv, ensured by
`bash hack/perf-venv.sh`, never skipped): the committed numbers are what the library gives today —
the profile fixture the library-free tests use, the seed's predicted table, the SLO deployment
examples — and a model or GPU the database lacks is a clear error. One subprocess
(tests/contract/perf_check.py): ≈ 40 s on the 2-core development machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT
from ..unit.test_perf_offline import _results as slower_results

VENV = ROOT / ".qdd" / "perf-venv" / "bin" / "python"


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[dict, Path]:
    subprocess.run(["bash", str(ROOT / "hack" / "perf-venv.sh")], check=True, capture_output=True)
    tmp = tmp_path_factory.mktemp("perf")
    slo, results = tmp / "slo.yaml", tmp / "results.json"
    results.write_text(json.dumps(slower_results()))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator" / "src")}
    out = subprocess.run([str(VENV), str(ROOT / "tests" / "contract" / "perf_check.py"), str(slo), str(results)], env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1]), slo


def test_the_profile_fixture_is_what_the_library_gives(checked):
    got, _ = checked
    want = json.loads((ROOT / "tests" / "unit" / "data" / "perf-profile-qwen35-397b-4xdep2-1xdep8.json").read_text())
    assert got["profile"] == want, "regenerate: bash hack/qdd-perf.sh perf profile -f examples/qwen35-397b-4xdep2-1xdep8.yaml"


def test_predict_matches_the_committed_seed_table(checked):
    got, _ = checked
    table = json.loads((ROOT / "bench" / "results" / "perf-seed-table.json").read_text())
    row = next(r for r in table["seed"] if r["topology"] == "4xDEP2-1xDEP8" and r["concurrency"] == 3072)
    p = got["predict"]
    assert p["totalTokensPerSecondPerGpu"] == row["totalTokensPerSecondPerGpu"] and p["ttftMs"] == row["ttftMs"]
    assert p["tpotMs"] == row["tpotMs"] and p["bottleneck"] == "prefill" and p["gpus"] == 16
    assert 15_000 < p["totalTokensPerSecondPerGpu"] < 25_000   # below the published 25K: docs/performance-model.md
    assert "vllm 0.24.0" in p["database"] and any("NIXL" in n for n in p["notCaptured"])


def test_the_slo_example_is_what_qdd_plan_slo_writes(checked):
    _, slo = checked
    want = yaml.safe_load((ROOT / "examples" / "qwen35-397b-slo-balanced.yaml").read_text())
    assert yaml.safe_load(slo.read_text()) == want


def test_a_model_or_gpu_the_database_lacks_is_a_clear_error(checked):
    errors = checked[0]["errors"]
    assert errors["Qwen/Qwen3.5-9B@GB200"].startswith("model Qwen/Qwen3.5-9B: not among aiconfigurator 0.12.0's models")
    assert "nvidia/Qwen3.5-397B-A17B-NVFP4" in errors["Qwen/Qwen3.5-9B@GB200"]
    assert errors["nvidia/Qwen3.5-397B-A17B-NVFP4@L4"].startswith("GPU kind L4: aiconfigurator has no system for it")
    h200 = errors["nvidia/Qwen3.5-397B-A17B-NVFP4@H200"]
    assert h200.startswith("aiconfigurator 0.12.0: h200_sxm / vllm 0.24.0") and "nvfp4" in h200


def test_qdd_perf_profile_calibrate_takes_the_benchmark_in(checked):
    """The benchmark decodes 25% slower than predicted at 512 and 1,024 requests: the profile the
    CLI writes keeps them as measurements and answers from them."""
    cal = checked[0]["calibrated"]
    assert [m["concurrency"] for m in cal["measured"]] == [512, 1024]
    dec = {p["load"]: p for p in cal["decode"]["points"]}
    pred = {p["load"]: p for p in cal["decode"]["predicted"]}
    assert dec[512.0]["source"] == "measured" and dec[512.0]["latencyMs"] == pytest.approx(1.25 * pred[512.0]["latencyMs"])
    assert dec[4344.0]["source"] == "calibrated" and dec[4344.0]["latencyMs"] == pytest.approx(1.25 * pred[4344.0]["latencyMs"])
