"""What spec.engine.compileCache and spec.model.loadFormat render holds against vLLM 0.33.0 itself:
the argv parses, every VLLM_ variable is in vLLM's registry, every offered load format is a loader
vLLM knows, and the cache variables are the ones vLLM, FlashInfer and DeepGEMM read
(docs/facts/compile-cache.md)."""

from __future__ import annotations

import ast
import copy
import subprocess
import typing
from pathlib import Path

from qdd.api.spec import LoadFormat

from ..conftest import EXAMPLES, load
from ..unit.helpers import plan_of
from .vllm_harness import _child_env, check, ensure_venv


def _vllm_dir() -> Path:
    out = subprocess.run([str(ensure_venv()), "-c", "import importlib.util as u; "
                          "print(u.find_spec('vllm').submodule_search_locations[0])"],
                         capture_output=True, text=True, env=_child_env(), timeout=120, check=True)
    return Path(out.stdout.strip())


def _loader_keys(vllm: Path) -> set[str]:
    tree = ast.parse((vllm / "model_executor" / "model_loader" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_LOAD_FORMAT_TO_MODEL_LOADER":
            assert isinstance(node.value, ast.Dict)
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("_LOAD_FORMAT_TO_MODEL_LOADER not found")


def test_offered_load_formats_are_vllms_loaders():
    keys = _loader_keys(_vllm_dir())
    assert {"runai_streamer", "fastsafetensors", "instanttensor", "modelexpress"} <= keys
    assert set(typing.get_args(LoadFormat)) <= keys


def test_the_cache_variables_are_read_where_the_facts_say():
    vllm = _vllm_dir()
    envs = (vllm / "envs.py").read_text()
    assert '"VLLM_CACHE_ROOT": lambda' in envs and '"VLLM_ENABLE_STARTUP_PLAN": lambda' in envs
    assert 'DEEP_GEMM_JIT_CACHE_ENV_NAME = "DG_JIT_CACHE_DIR"' in (vllm / "utils" / "deep_gemm.py").read_text()
    assert 'os.environ.get("TRITON_CACHE_DIR")' in (vllm / "compilation" / "compiler_interface.py").read_text()


def test_rendered_argv_and_env_are_accepted():
    cr = copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"))
    cr["spec"]["engine"]["compileCache"] = {"claimName": "cc"}
    cr["spec"]["model"]["loadFormat"] = "fastsafetensors"
    plan = plan_of(cr)
    argvs = {f"{r.role}-{p.group_role}": list(p.argv) for r in (plan.prefill, plan.decode) for p in r.pods}
    env = sorted({e.name for r in (plan.prefill, plan.decode) for p in r.pods for e in p.env if e.name.startswith("VLLM_")})
    assert "VLLM_CACHE_ROOT" in env and "VLLM_ENABLE_STARTUP_PLAN" in env
    res = check(argvs, env)
    assert {k: v.get("error") for k, v in res["argv"].items() if not v["ok"]} == {}
    assert {v["args"]["load_format"] for v in res["argv"].values()} == {"fastsafetensors"}
    assert res["unknown_env"] == []
