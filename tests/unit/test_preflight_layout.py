"""The preflight's transfer layout against the planner, for all five catalog architectures.

Expected numbers are recomputed here from docs/facts/memory-model.md (config.json fields and vLLM 0.33 formulas),
not from qdd.plan.memory, then compared with what the planner's Plan gives the preflight."""

from __future__ import annotations

import copy
import math

import pytest
from qdd.catalog import engine_profile, resolve_checkpoint
from qdd.preflight import layout as L
from qdd.preflight.layout import TransferLayout, coalesce, descriptor_count
from qdd.preflight.planned import for_checkpoint, for_plan

from ..conftest import EXAMPLES, load
from .helpers import plan_of

# docs/facts/memory-model.md: layers (full-attn / GDN), KV heads, GDN key heads / value heads; head dims 256 / 128.
ARCH = {
    "nvidia/Qwen3.5-397B-A17B-NVFP4": (15, 45, 2, 16, 64),
    "Qwen/Qwen3.5-122B-A10B": (12, 36, 2, 16, 64),
    "Qwen/Qwen3.5-35B-A3B": (10, 30, 2, 16, 32),
    "Qwen/Qwen3.5-27B": (16, 48, 4, 16, 48),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (12, 36, 2, 16, 32),
}
TOKENS = 8192 + 1024


def _by_hand(n_fa: int, n_gdn: int, kv_heads: int, k_heads: int, v_heads: int, kv_bytes: int = 2,
             tokens: int = TOKENS) -> dict[str, int]:
    """bf16 SSM, bf16 conv state, TP 1, alignment 16 (docs/facts/memory-model.md)."""
    attn = 2 * kv_heads * 256 * kv_bytes
    conv = (2 * k_heads * 128 + v_heads * 128) * 3 * 2
    ssm = v_heads * 128 * 128 * 2
    block = 16 * math.ceil((conv + ssm) / (16 * attn))
    page = block * attn
    tensors = min(n_fa, n_gdn)
    pages = math.ceil(n_fa / tensors) * math.ceil(tokens / block) + math.ceil(n_gdn / tensors)
    return {"block_size": block, "page_bytes": page, "tensors": tensors, "pages": pages,
            "bytes": pages * tensors * page, "per_page": pages * tensors, "coalesced": tensors}


# The same numbers written out (bf16 KV): a change in the formulas shows up as a diff here.
EXPECTED = {
    "nvidia/Qwen3.5-397B-A17B-NVFP4": (1072, 2_195_456, 15, 12, 395_182_080, 180, 15),
    "Qwen/Qwen3.5-122B-A10B": (1072, 2_195_456, 12, 12, 316_145_664, 144, 12),
    "Qwen/Qwen3.5-35B-A3B": (544, 1_114_112, 10, 20, 222_822_400, 200, 10),
    "Qwen/Qwen3.5-27B": (400, 1_638_400, 16, 27, 707_788_800, 432, 16),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (544, 1_114_112, 12, 20, 267_386_880, 240, 12),
}


def _cr(model: str, kv: str = "bfloat16") -> dict:
    cr = copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"))
    cr["spec"]["model"] = {"name": model}
    cr["spec"]["workload"]["concurrency"] = 256
    for role in ("prefill", "decode"):
        cr["spec"][role].setdefault("tuning", {})["kvCacheDtype"] = kv
    return cr


@pytest.mark.parametrize("model", sorted(ARCH), ids=lambda m: m.split("/")[-1])
def test_layout_matches_planner_and_facts(model):
    plan = plan_of(_cr(model))
    tl = for_plan(plan)
    hand = _by_hand(*ARCH[model])
    block, page, tensors, pages, nbytes, per_page, coalesced = EXPECTED[model]
    assert (tl.block_size, tl.page_bytes, tl.tensors, tl.pages_per_request, tl.bytes_per_request,
            tl.descriptors_per_request_per_page, tl.descriptors_per_request_coalesced) == EXPECTED[model]
    assert (hand["block_size"], hand["page_bytes"], hand["tensors"], hand["pages"], hand["bytes"],
            hand["per_page"], hand["coalesced"]) == EXPECTED[model]
    # ... and it is the planner's cache, not a second model of it.
    cache = plan.capacity.layout
    assert (tl.block_size, tl.page_bytes, tl.tensors) == (cache.block_size, cache.page_bytes, cache.layers_per_group)
    assert tl.pages_per_request == cache.blocks_per_request(TOKENS)
    assert tl.bytes_per_request == cache.request_bytes(TOKENS)
    assert tl.tokens == TOKENS and tl.kv_cache_dtype == "bfloat16" and tl.tensor_parallel == 1


def test_seed_request_is_the_issue_example():
    """397B, bf16 KV, bf16 SSM, 9,216 tokens: 12 block ids × 15 tensors × 2,195,456 B."""
    tl = for_checkpoint(resolve_checkpoint("nvidia/Qwen3.5-397B-A17B-NVFP4"), engine_profile("0.33.0"), 1,
                        "bfloat16", "bfloat16", TOKENS)
    assert (tl.pages_per_request, tl.tensors, tl.page_bytes) == (12, 15, 2_195_456)
    assert tl.attn_blocks_per_group == 9 and tl.gdn_groups == 3
    assert tl.descriptors_per_request_per_page == 180
    assert tl.descriptors_per_request_coalesced == 15
    assert tl.bytes_per_request == 12 * 15 * 2_195_456 == 395_182_080


def test_seed_plan_uses_fp8_kv_of_the_nvfp4_checkpoint():
    """The seed CR leaves kvCacheDtype auto: the NVFP4 checkpoint's FP8 KV (block 2,128 tokens)."""
    tl = for_plan(plan_of(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")))
    hand = _by_hand(*ARCH["nvidia/Qwen3.5-397B-A17B-NVFP4"], kv_bytes=1)
    assert tl.kv_cache_dtype == "fp8"
    assert (tl.block_size, tl.page_bytes, tl.pages_per_request) == (2128, 2_179_072, 8)
    assert (tl.descriptors_per_request_per_page, tl.descriptors_per_request_coalesced) == (120, 15)
    assert tl.bytes_per_request == hand["bytes"] == 261_488_640


def test_coalesce_and_descriptor_counts():
    assert coalesce([3, 4, 5, 9]) == [(3, 3), (9, 1)]
    assert coalesce([]) == []
    assert coalesce([7, 6]) == [(7, 1), (6, 1)]
    # Block ids from a free list: two runs in each of 15 tensors.
    assert descriptor_count([10, 11, 12, 40, 41], 15, coalesced=True) == 30
    assert descriptor_count([10, 11, 12, 40, 41], 15, coalesced=False) == 75


def test_requests_lie_out_contiguously_and_apart():
    tl = for_plan(plan_of(_cr("nvidia/Qwen3.5-397B-A17B-NVFP4")))
    ids = [list(L.request_block_ids(tl, r)) for r in range(4)]
    assert ids[0] == list(range(12)) and ids[3] == list(range(36, 48))
    assert tl.num_blocks(4) == 48 and tl.tensor_bytes(4) == 48 * tl.page_bytes
    pages = L.page_descriptors(tl, ids[1])
    runs = L.coalesced_descriptors(tl, ids[1])
    assert len(pages) == 180 and len(runs) == 15
    assert sum(n for _, _, n in pages) == sum(n for _, _, n in runs) == tl.bytes_per_request
    assert runs[2] == (2, 12 * tl.page_bytes, 12 * tl.page_bytes)


def test_json_round_trip_ignores_derived_fields():
    tl = for_plan(plan_of(_cr("Qwen/Qwen3.5-27B")))
    data = tl.to_json()
    assert data["descriptors_per_request"] == {"per_page": 432, "coalesced": 16}
    assert TransferLayout.from_json(data) == tl
