"""Every vLLM flag of each of the 20 published Qwen3.5 GB200 recipe shapes reaches the engine with the
recipe's value, as vLLM 0.33.0's own parser reads it: the recipe's flags parsed alone (what srtctl
would run) and qdd's rendered argv parsed give the same value for every flag the recipe sets; the one
deliberate difference is kv_role (kv_both → kv_producer/kv_consumer)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from qdd.recipe.objects import import_objects

from ..unit.helpers import plan_of
from ..unit.srt_recipes import shapes
from .vllm_harness import check, ensure_venv

IMAGE = "qdd/vllm:0.33.0-cu13-arm64"


def _recipe_argv(flags: dict) -> list[str]:
    """srtctl's spelling (docs/facts/recipes.md): ``true`` = bare flag, else ``--flag value``."""
    out = ["nvidia/Qwen3.5-397B-A17B-NVFP4"]
    for name, value in flags.items():
        out += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return out


def _dest(name: str) -> str:
    return (name[3:] if name.startswith("no-") else name).replace("-", "_")


@pytest.fixture(scope="module")
def parsed():
    argvs, flags = {}, {}
    for stem, recipe in shapes():
        plan = plan_of(import_objects(recipe, None, IMAGE).deployment)
        for role in (plan.prefill, plan.decode):
            key = f"{stem}/{role.role}"
            argvs[f"{key}/qdd"] = list(role.pods[0].argv)
            flags[key] = recipe["backend"]["vllm_config"][role.role]
            argvs[f"{key}/recipe"] = _recipe_argv(flags[key])
    return flags, check(argvs, [])


def test_all_forty_role_argvs_are_accepted(parsed):
    flags, res = parsed
    assert len(flags) == 40
    bad = {k: v.get("error") for k, v in res["argv"].items() if k.endswith("/qdd") and not v["ok"]}
    assert not bad


def test_every_recipe_flag_has_the_recipe_value_in_the_engine(parsed):
    flags, res = parsed
    for key, role_flags in flags.items():
        ours, theirs = res["argv"][f"{key}/qdd"]["args"], res["argv"][f"{key}/recipe"]["args"]
        for name in role_flags:
            dest = _dest(name)
            if dest == "kv_transfer_config":
                a, b = (json.loads(x) if isinstance(x, str) else x for x in (ours[dest], theirs[dest]))
                assert b["kv_role"] == "kv_both"
                assert a["kv_role"] == ("kv_producer" if key.endswith("prefill") else "kv_consumer")
                assert (a["kv_connector"], a["kv_load_failure_policy"]) == (b["kv_connector"], b["kv_load_failure_policy"])
            elif name == "no-disable-hybrid-kv-cache-manager":
                # qdd leaves vLLM to decide (None); see test_hma_stays_on_with_nixl for why that is the same.
                assert (theirs[dest], ours[dest]) == (False, None)
            else:
                assert ours[dest] == theirs[dest], (key, name, ours[dest], theirs[dest])
    decode = res["argv"]["7xdep2-1xdep8-cc5120/decode/qdd"]["args"]
    assert decode["max_cudagraph_capture_size"] == 768 and decode["data_parallel_size"] == 8
    assert decode["pipeline_parallel_size"] == 1 and decode["enable_prefix_caching"] is False
    prefill = res["argv"]["8xdep2-1xdep8-acc/prefill/qdd"]["args"]
    assert prefill["max_num_batched_tokens"] == 16384 and prefill["stream_interval"] == 100


def test_hma_stays_on_with_nixl():
    """The recipe's --no-disable-hybrid-kv-cache-manager (HMA explicitly on) is the one flag qdd does not
    pass. vLLM 0.33 (vllm/config/vllm.py, VllmConfig.__post_init__) with no preference turns HMA off
    only on a non-GPU platform, for chunked local attention, or for a KV connector without HMA support;
    Qwen3.5 has no chunked local attention, so on a GPU it stays on exactly when NixlConnector supports
    HMA, which vLLM's own factory says here; and a hybrid GDN model without HMA fails at startup either
    way (the explicit flag only turns that into an earlier error)."""
    code = ("from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory\n"
            "from vllm.config import KVTransferConfig\n"
            "print('HMA', KVConnectorFactory.supports_hma_config(KVTransferConfig(kv_connector='NixlConnector', "
            "kv_role='kv_consumer')))")
    out = subprocess.run([str(ensure_venv()), "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HMA True" in out.stdout.splitlines()
