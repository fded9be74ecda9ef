"""Weights per rank, the rank budget and the predicted decode capacity (qdd.plan.memory)."""

from __future__ import annotations

import math

import pytest

from qdd.catalog import gpu_kind, resolve_checkpoint
from qdd.errors import SpecError
from qdd.plan.memory import CAPACITY_TOLERANCE, mean_resident_tokens, rank_budget

from .helpers import plan_of

NVFP4 = "nvidia/Qwen3.5-397B-A17B-NVFP4"


def test_397b_nvfp4_weights():
    """docs/facts/memory-model.md: experts ≈ 217 GB (386.5 B params × 4.5 bits), non-expert ≈ 19.6 GB bf16."""
    ck = resolve_checkpoint(NVFP4)
    assert ck.architecture.expert_params == 60 * 512 * 3 * 4096 * 1024
    assert ck.expert_weight_bytes() == math.ceil(60 * 512 * 3 * 4096 * 1024 * 4.5 / 8)
    assert round(ck.expert_weight_bytes() / 1e9, 1) == 217.4
    assert round(ck.non_expert_weight_bytes() / 1e9, 1) == 19.6


@pytest.mark.parametrize(("dp", "ep", "gb"), [(8, True, 46.8), (2, True, 128.3), (8, False, 237.0)])
def test_weights_per_rank(dp, ep, gb):
    """Experts shard over DP×TP ranks with expert parallel; everything else is replicated."""
    b = rank_budget(resolve_checkpoint(NVFP4), gpu_kind("GB200"), dp, 1, ep, 0.92, 16384, 1024)
    assert round(b.weight_bytes / 1e9, 1) == gb


def test_rank_budget_of_the_seed_decode(seed_cr):
    b = plan_of(seed_cr).capacity.budget
    assert b.hbm_bytes == 189_471 * 2**20
    assert b.usable_bytes == int(189_471 * 2**20 * 0.92)
    # Activations: 16384 tokens × 4096 × 2 B × 16 live tensors + 1024 seqs × 248320 × 4 B × 2.
    assert b.activation_bytes == 16384 * 4096 * 2 * 16 + 1024 * 248320 * 8
    assert b.cache_bytes == b.usable_bytes - b.weight_bytes - b.activation_bytes - 2 * 2**30 - 2 * 2**30


def test_mean_resident_tokens():
    """Uniform lengths on [0.8 L, L]: E[isl] = 7372.8; E[o²]/(2E[o]) = 462.7 for OSL 1024."""
    assert mean_resident_tokens(8192, 1024, 0.8) == pytest.approx(7372.8 + 462.696, abs=0.01)
    assert mean_resident_tokens(8192, 1024, 1.0) == pytest.approx(8192 + 512)


def test_seed_capacity_prediction(seed_cr):
    """1 × DEP8 at 8192/1024, ratio 0.8: blocks/request = 7835.5/2128 + 0.5 + 3 GDN, × 15 pages."""
    c = plan_of(seed_cr).capacity
    lay = c.layout
    per_request = int((c.mean_tokens / lay.block_size + 0.5 + 3) * 15 * lay.page_bytes)
    assert c.request_bytes == per_request
    assert c.per_endpoint == 8 * (c.budget.cache_bytes // per_request)
    assert c.total == c.per_endpoint and c.target == 4096
    assert 4096 <= c.total < 5120 * (1 + CAPACITY_TOLERANCE)


def test_capacity_refusal_names_capacity_and_endpoints_needed(seed_cr):
    seed_cr["spec"]["workload"]["concurrency"] = 20000
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    [err] = e.value.errors
    assert err.field == "spec.workload.concurrency"
    predicted = int(err.message.split("predicted decode capacity of ")[1].split(" ")[0])
    needed = math.ceil(20000 / predicted)
    assert needed == 5
    assert f"it needs {needed} decode endpoints ({needed * 8} decode GPUs)" in err.message
    assert f"raise spec.decode.endpoints to {needed}" in err.message
    seed_cr["spec"]["workload"]["concurrency"] = 20000
    seed_cr["spec"]["decode"]["endpoints"] = needed
    plan = plan_of(seed_cr)
    assert plan.capacity.total >= 20000 and plan.decode.gpus == 40


def test_tight_target_plans_with_a_warning(seed_cr):
    seed_cr["spec"]["workload"]["concurrency"] = 5120
    plan = plan_of(seed_cr)
    assert plan.capacity.tight and not plan.capacity.refused
    [tight] = [w for w in plan.warnings if "predicted decode capacity" in w]
    assert "5120" in tight


def test_no_room_for_cache_names_the_decode_topology(seed_cr):
    seed_cr["spec"]["decode"]["topology"]["expertParallel"] = False
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert [x.field for x in e.value.errors] == ["spec.decode.topology.expertParallel"]
    assert "237.0 GB of weights per rank" in e.value.errors[0].message
    assert "set expertParallel: true" in e.value.errors[0].message
