"""MTP speculative decoding and Qwen3.8 as qdd renders them, through vLLM 0.33.0's own config
code on stand-in configs (no weights): the rendered --speculative-config builds vLLM's
SpeculativeConfig on a Qwen3.5-397B-shaped config, and the Qwen3.8-2.4T argv builds an engine
config on a Qwen3.8-2.4T-shaped flat text config (numbers: docs/facts/qwen38.md)."""

from __future__ import annotations

import pytest

from ..conftest import EXAMPLES, load
from ..unit.helpers import plan_of
from .vllm_check import STAND_IN_CONFIG
from .vllm_harness import check

QWEN38_TEXT_CONFIG = {
    "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "vocab_size": 248320,
    "hidden_size": 8192, "num_hidden_layers": 92, "full_attention_interval": 4, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 128,
    "moe_intermediate_size": 2048, "shared_expert_intermediate_size": 2048, "num_experts": 512,
    "num_experts_per_tok": 10, "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
    "dtype": "bfloat16", "mamba_ssm_dtype": "float32",
}


def _argvs(example: str) -> dict[str, list[str]]:
    plan = plan_of(load(EXAMPLES / f"{example}.yaml"))
    return {f"{r.role}-{p.group_role}": list(p.argv) for r in (plan.prefill, plan.decode) for p in r.pods[:2]}


@pytest.fixture(scope="module")
def mtp():
    return check(_argvs("qwen35-397b-4xdep2-1xdep8-mtp1-cc2048"), engine_config=True)["engine_config"]


@pytest.fixture(scope="module")
def qwen38():
    argvs = _argvs("qwen38-a95b-nvfp4-1xdep16-1xdep16-mtp1")
    return check(argvs, engine_config={"config_json": QWEN38_TEXT_CONFIG})["engine_config"]


def test_stand_in_declares_the_mtp_layer():
    assert STAND_IN_CONFIG["text_config"]["mtp_num_hidden_layers"] == 1


def test_rendered_speculative_config_builds_on_both_roles(mtp):
    assert set(mtp) == {"prefill-leader", "decode-leader", "decode-worker"}
    for pod, res in mtp.items():
        assert res["ok"], (pod, res)
        spec = res["speculative"]
        assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 1, pod
        assert spec["draft_architectures"] == ["Qwen3_5MoeMTP"], pod
        assert spec["uniform_decode_query_len"] == 2, pod
        assert res["model"]["max_model_len"] == 9216


def test_qwen38_argv_builds_an_engine_config_with_mtp(qwen38):
    for pod, res in qwen38.items():
        assert res["ok"], (pod, res)
        assert res["model"]["architectures"] == ["Qwen3_5MoeForCausalLM"]
        assert res["parallel"]["data_parallel_size"] == 16 and res["parallel"]["enable_expert_parallel"] is True
        assert res["speculative"]["draft_architectures"] == ["Qwen3_5MoeMTP"]
        assert res["cache"]["cache_dtype"] == "fp8" and res["cache"]["mamba_ssm_cache_dtype"] == "bfloat16"
    assert qwen38["decode-leader"]["scheduler"]["max_num_seqs"] == 202  # lowered to the cache blocks, less 20%


def _with_spec(argv: list[str], k: int, kv_dtype: str) -> list[str]:
    out = list(argv)
    out[out.index("--speculative-config") + 1] = f'{{"method":"mtp","num_speculative_tokens":{k}}}'
    out[out.index("--kv-cache-dtype") + 1] = kv_dtype
    return out


def test_hybrid_mtp_state_widens_with_k_for_every_kv_dtype():
    """vllm#57721: hybrid models whose class plans the Mamba state without num_speculative_tokens fail at
    start-up for k ≥ 2. vLLM 0.33.0's Qwen3.5 classes widen the GDN conv state by k (3 + k columns for the
    kernel of 4), whatever the KV cache dtype: the case does not apply to the models qdd plans."""
    argvs = _argvs("qwen35-397b-4xdep2-1xdep8-mtp1-cc2048")
    leader = argvs["decode-leader"]
    cases = {f"k{k}-{d}": _with_spec(leader, k, d) for k in (1, 2, 4) for d in ("fp8", "bfloat16")}
    res = check(cases, engine_config={"mamba_state": True})["engine_config"]
    for name, r in res.items():
        assert r["ok"], (name, r)
        k = int(name.split("-")[0][1:])
        conv, temporal = r["model"]["mamba_state_shape"]
        assert sorted(conv) == sorted([12288, 3 + k]), (name, conv)  # conv_dim 12,288 at TP 1 (docs/facts/memory-model.md)
        assert temporal == [64, 128, 128], (name, temporal)
        assert r["speculative"]["num_speculative_tokens"] == k
        assert r["cache"]["cache_dtype"] == name.split("-", 1)[1]
