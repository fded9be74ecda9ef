"""qdd's table of the environment variables vLLM 0.33.0 reads is vLLM's own registry (vllm/envs.py),
and qdd refuses in extraEnv exactly the names and values vLLM would ignore or refuse."""

from __future__ import annotations

import json
import subprocess

from qdd.catalog.vllm_envs import REPLACED, TABLE_FILE, vllm_envs

from .vllm_harness import ROOT, _child_env, check, ensure_venv

COMMITTED = ROOT / "operator" / "src" / "qdd" / "catalog" / "data" / TABLE_FILE


def test_committed_table_is_vllms_registry():
    python = ensure_venv()
    out = subprocess.run([str(python), str(ROOT / "hack" / "gen_vllm_envs.py")], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env=_child_env(), check=True).stdout
    assert json.loads(out) == json.loads(COMMITTED.read_text()), (
        "regenerate: .qdd/vllm-venv/bin/python hack/gen_vllm_envs.py > operator/src/qdd/catalog/data/" + TABLE_FILE)
    assert json.loads(out)["vllm_version"] == "0.33.0"


def test_names_and_values_qdd_refuses_are_the_ones_vllm_ignores_or_refuses():
    table = vllm_envs()
    values = {
        "VLLM_KV_CACHE_LAYOUT": "hnd",            # choices are case-sensitive: HND
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
        "VLLM_FLOAT32_MATMUL_PRECISION": "HIGH",  # compared case-insensitively
        "VLLM_WORKER_MULTIPROC_METHOD": "fork",
        "VLLM_LOG_STATS_INTERVAL": "5",
        **{name: "1" for name in REPLACED},
    }
    res = check({}, values)
    assert sorted(res["unknown_env"]) == sorted(REPLACED)
    assert all(not table.reads(n) for n in res["unknown_env"])
    for name, v in res["env_values"].items():
        qdd_refuses = table.value_problem(name, values[name]) is not None
        assert qdd_refuses == (not v["ok"]), (name, values[name], v)
    assert not res["env_values"]["VLLM_KV_CACHE_LAYOUT"]["ok"]
    assert res["env_values"]["VLLM_FLOAT32_MATMUL_PRECISION"]["ok"]
