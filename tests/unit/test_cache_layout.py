"""vLLM's hybrid KV cache of one rank (qdd.plan.memory.cache_layout) against docs/facts/memory-model.md.

Expected numbers are computed here by hand from config.json values, not with qdd's formulas:
KV/token = N_fa × 2 × kv_heads × head_dim × bytes; conv = (2·kh·kd + vh·vd) × 3 × 2;
ssm = vh × vd × kd × bytes; block = 16 × ceil(gdn_page / (16 × attn_bytes_per_token_layer)).
"""

from __future__ import annotations

import pytest

from qdd.catalog import ARCHITECTURES, engine_profile, resolve_checkpoint
from qdd.plan.memory import cache_layout

MIB = 2**20
P033 = engine_profile("0.33.0")


def layout(model: str, kv: str = "bfloat16", ssm: str = "bfloat16", tp: int = 1):
    return cache_layout(resolve_checkpoint(model), tp, kv, ssm, P033)


def test_397b_kv_bytes_per_token():
    assert layout("Qwen3.5-397B-A17B").kv_bytes_per_token == 30_720
    assert layout("Qwen3.5-397B-A17B", kv="fp8").kv_bytes_per_token == 15_360


def test_397b_gdn_state():
    bf16, fp32 = layout("Qwen3.5-397B-A17B"), layout("Qwen3.5-397B-A17B", ssm="float32")
    assert bf16.gdn_conv_bytes_per_layer == 73_728  # conv_dim 12,288 × 3 × 2
    assert bf16.gdn_ssm_bytes_per_layer == 2 * MIB
    assert fp32.gdn_ssm_bytes_per_layer == 4 * MIB
    assert bf16.gdn_bytes_per_layer * 45 == 97_689_600  # 93.2 MiB
    assert round(bf16.gdn_bytes_per_layer * 45 / MIB, 1) == 93.2
    assert round(fp32.gdn_bytes_per_layer * 45 / MIB) == 183
    # "auto" is the config's float32.
    assert layout("Qwen3.5-397B-A17B", ssm="auto").gdn_ssm_bytes_per_layer == 4 * MIB


def test_397b_hybrid_block_and_page():
    bf16, fp8 = layout("Qwen3.5-397B-A17B"), layout("Qwen3.5-397B-A17B", kv="fp8")
    assert bf16.block_size == 1_072 and fp8.block_size == 2_128
    assert bf16.page_bytes == 2_195_456 == 1_072 * 2_048
    assert fp8.page_bytes == 2_128 * 1_024
    # With float32 SSM state (vLLM's spec classes give the same: docs/vllm-0.33-facts.md).
    assert layout("Qwen3.5-397B-A17B", ssm="float32").block_size == 2_096
    assert layout("Qwen3.5-397B-A17B", kv="fp8", ssm="float32").block_size == 4_176
    # One attention page holds at least one GDN state, and the block is the smallest such multiple of 16.
    assert bf16.page_bytes >= bf16.gdn_bytes_per_layer > (1_072 - 16) * 2_048


def test_397b_groups_and_a_9216_token_request():
    lay = layout("Qwen3.5-397B-A17B")
    assert (lay.attn_groups, lay.gdn_groups, lay.layers_per_group) == (1, 3, 15)
    assert lay.blocks_per_request(9_216) == 12  # 9 attention + 3 GDN
    assert lay.request_bytes(9_216) == 12 * 15 * 2_195_456 == 395_182_080
    assert round(lay.request_bytes(9_216) / MIB) == 377
    assert lay.blocks_per_request(1_072) == 4 and lay.blocks_per_request(1_073) == 5


def test_nvfp4_checkpoint_kv_auto_is_fp8_and_bf16_otherwise():
    """ModelOpt NVFP4 exports carry kv_cache_quant_algo FP8 (qdd.catalog.models.Checkpoint)."""
    nvfp4 = cache_layout(resolve_checkpoint("nvidia/Qwen3.5-397B-A17B-NVFP4"), 1, "auto", "bfloat16", P033)
    assert nvfp4.kv_dtype == "fp8" and nvfp4.block_size == 2_128
    assert layout("Qwen/Qwen3.5-122B-A10B", kv="auto").kv_dtype == "bfloat16"


# name: (full-attention layers, GDN layers, KV B/token bf16, GDN B/request bf16 SSM, block bf16, block fp8)
ARCH = {
    "Qwen3.5-397B-A17B": (15, 45, 30_720, 45 * (73_728 + 2_097_152), 1_072, 2_128),
    "Qwen3.5-122B-A10B": (12, 36, 24_576, 36 * (73_728 + 2_097_152), 1_072, 2_128),
    "Qwen3.5-35B-A3B": (10, 30, 20_480, 30 * (49_152 + 1_048_576), 544, 1_072),
    "Qwen3.5-27B": (16, 48, 65_536, 48 * (61_440 + 1_572_864), 400, 800),
    "Qwen3-Next-80B-A3B": (12, 36, 24_576, 36 * (49_152 + 1_048_576), 544, 1_072),
}


@pytest.mark.parametrize("name", list(ARCH))
def test_every_architecture(name):
    n_fa, n_gdn, kv_tok, gdn_req, block, block_fp8 = ARCH[name]
    a = ARCHITECTURES[name]
    assert (a.num_full_attention_layers, a.num_gdn_layers) == (n_fa, n_gdn)
    lay = layout(name)
    assert lay.kv_bytes_per_token == kv_tok
    assert lay.gdn_bytes_per_layer * n_gdn == gdn_req
    assert lay.block_size == block
    assert layout(name, kv="fp8").block_size == block_fp8
    assert (lay.attn_groups, lay.gdn_groups, lay.layers_per_group) == (1, 3, n_fa)


def test_tensor_parallel_shards_heads():
    """TP 2: half the KV heads and GDN heads per rank; the block size stays (both halve)."""
    one, two = layout("Qwen3.5-397B-A17B"), layout("Qwen3.5-397B-A17B", tp=2)
    assert two.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert two.gdn_bytes_per_layer == one.gdn_bytes_per_layer // 2
    assert two.block_size == 1_072
