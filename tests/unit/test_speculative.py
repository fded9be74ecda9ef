"""MTP speculative decoding (spec.speculative): one --speculative-config on every engine pod, and
decode sizing and memory for the 1 + k tokens a decode step then carries (qdd.plan.sizing,
qdd.plan.memory; vLLM 0.33: VllmConfig.uniform_decode_query_len,
CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, MambaSpec.num_speculative_blocks)."""

from __future__ import annotations

import copy

import pytest

from qdd.catalog import engine_profile, gpu_kind
from qdd.plan import sizing
from qdd.plan.memory import group_size

from ..conftest import EXAMPLES, load
from .helpers import flag, plan_of

MTP = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-mtp1-cc2048.yaml")


def _with(cr, **spec):
    out = copy.deepcopy(cr)
    out["spec"].update(spec)
    return out


def test_capture_with_mtp_k1_at_5120_on_one_dep8_covers_1280_tokens_per_rank():
    # 5120 / 8 ranks = 640 requests × (1 + 1) tokens = 1,280 tokens per decode step; headroom of
    # 128 requests × 2 tokens on top: 1,536, on vLLM's grid and a multiple of 2.
    capture = sizing.decode_capture_size(5120, 1, 8, num_speculative_tokens=1)
    assert capture == 1536 and capture >= 1280 and capture % 2 == 0
    assert sizing.decode_capture_size(5120, 1, 8) == 768  # the seed's, without MTP


@pytest.mark.parametrize(("k", "want"), [(1, 1536), (2, 2304), (3, 3072), (7, 6144)])
def test_capture_is_a_grid_size_and_a_multiple_of_the_query_len(k, want):
    capture = sizing.decode_capture_size(5120, 1, 8, num_speculative_tokens=k)
    assert capture == want and capture % (1 + k) == 0 and capture % 16 == 0


def test_round_up_to_grid_multiple():
    assert sizing.round_up_to_grid_multiple(1025, 3) == 1056  # 1040 is on the grid but not a multiple of 3
    assert sizing.round_up_to_grid_multiple(100, 3) == 120  # steps of 8 below 256: 104, 112 skipped
    assert sizing.round_up_to_grid_multiple(512, 2) == 512


def test_decode_sizing_with_mtp_k1_at_5120():
    p, gpu = engine_profile("0.33.0"), gpu_kind("GB200")
    s = sizing.decode_sizing(_tuning(), p, gpu, 5120, 1, 8, num_speculative_tokens=1)
    # 1536 tokens = 768 requests; the engine default 1024 is larger; batched tokens ≥ 2 × 1024.
    assert (s.max_cudagraph_capture_size, s.max_num_seqs, s.max_num_batched_tokens) == (1536, 1024, 16384)
    s = sizing.decode_sizing(_tuning(), p, gpu, 40960, 1, 8, num_speculative_tokens=3)
    assert s.max_cudagraph_capture_size == 4 * (5120 + 128) == 20992
    assert s.max_num_seqs == 20992 // 4 and s.max_num_batched_tokens == 20992


def _tuning():
    from qdd.api.spec import RoleTuning
    return RoleTuning()


def test_one_identical_speculative_config_on_every_engine_pod():
    plan = plan_of(MTP)
    values = {flag(list(p.argv), "--speculative-config") for r in (plan.prefill, plan.decode) for p in r.pods}
    assert values == {'{"method":"mtp","num_speculative_tokens":1}'}
    assert len(plan.prefill.pods) + len(plan.decode.pods) == 6


def test_no_speculative_config_without_spec_speculative(seed_cr):
    plan = plan_of(seed_cr)
    assert all("--speculative-config" not in p.argv for r in (plan.prefill, plan.decode) for p in r.pods)


def test_mtp_memory_model_of_the_seed_decode(seed_cr):
    base = plan_of(_with(seed_cr, workload={**seed_cr["spec"]["workload"], "concurrency": 2048}))
    mtp = plan_of(_with(seed_cr, workload={**seed_cr["spec"]["workload"], "concurrency": 2048},
                        speculative={"method": "mtp", "numSpeculativeTokens": 1}))
    b, m = base.capacity, mtp.capacity
    # The MTP layer: one full-attention layer joins the 15 (16 per group), its KV included.
    assert (b.layout.layers_per_group, m.layout.layers_per_group) == (15, 16)
    assert (b.layout.attn_groups, b.layout.gdn_groups) == (m.layout.attn_groups, m.layout.gdn_groups) == (1, 3)
    assert (b.layout.gdn_blocks, m.layout.gdn_blocks) == (1, 2)
    # A request holds 2 blocks in each GDN group instead of 1.
    assert m.layout.blocks_per_request(9216) - b.layout.blocks_per_request(9216) == 3
    # MTP weights per rank, bf16: 64 of the 512 experts (3 × 4096 × 1024 each) = 1,610,612,736 B, and
    # replicated: gated attention 104,857,600 + shared expert and router 14,680,064 + fc 2 × 4096 × 4096.
    mtp_bytes = m.budget.weight_bytes - b.budget.weight_bytes
    assert mtp_bytes == 64 * 3 * 4096 * 1024 * 2 + (104_857_600 + 14_680_064 + 33_554_432) * 2
    assert (b.total, m.total) == (4344, 2824)


def test_group_size_follows_vllm():
    assert group_size((15, 45)) == 15 and group_size((16, 45)) == 16
    assert group_size((12, 13)) == 13  # vllm/v1/core/kv_cache_planning.py: gpt-oss + eagle padded to 13 + 13


def test_a_model_without_mtp_layers_refuses_speculative(seed_cr):
    from qdd.errors import SpecError
    cr = _with(seed_cr, speculative={"method": "mtp"}, workload={**seed_cr["spec"]["workload"], "concurrency": 1024})
    cr["spec"]["model"]["architecture"] = {"name": "Qwen3.5-397B-A17B", "mtpNumHiddenLayers": 0}
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert [x.field for x in e.value.errors] == ["spec.speculative.method"]


def test_capture_suggestion_stays_within_the_batched_tokens(seed_cr):
    # k = 2; capture 1000 off the multiple, batched tokens 1000: 1008 would exceed them, so 960 is suggested.
    from qdd.errors import SpecError
    cr = _with(seed_cr, speculative={"numSpeculativeTokens": 2}, workload={**seed_cr["spec"]["workload"], "concurrency": 512})
    cr["spec"]["decode"]["tuning"] = {"maxCudagraphCaptureSize": 1000, "maxNumBatchedTokens": 1000, "maxNumSeqs": 512}
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    [err] = e.value.errors
    assert err.field == "spec.decode.tuning.maxCudagraphCaptureSize" and "use 960 or remove it" in err.message
    assert sizing.grid_multiple_near(1000, 3, 1000) == 960 and sizing.grid_multiple_near(1000, 3, 4096) == 1008


def test_capture_off_the_grid_with_mtp_is_refused_where_vllm_would_lose_the_decode_graphs(seed_cr):
    # k = 8, capture 9: vLLM truncates to 8 (its grid), then no decode size (a multiple of 9) fits.
    from qdd.errors import SpecError
    cr = _with(seed_cr, speculative={"numSpeculativeTokens": 8}, workload={**seed_cr["spec"]["workload"], "concurrency": 8})
    cr["spec"]["decode"]["tuning"] = {"maxCudagraphCaptureSize": 9}
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert "truncates it to the grid (8)" in e.value.errors[0].message


def test_user_capture_below_a_full_decode_step_warns(seed_cr):
    cr = _with(seed_cr, speculative={"numSpeculativeTokens": 1}, workload={**seed_cr["spec"]["workload"], "concurrency": 2048})
    cr["spec"]["decode"]["tuning"] = {"maxCudagraphCaptureSize": 256}
    [w] = [w for w in plan_of(cr).warnings if "below the" in w]
    assert "below the 512 tokens of a full decode step per rank" in w and "1 + 1 tokens each" in w


def test_k_above_the_mtp_layers_must_be_a_multiple_of_them(seed_cr):
    from qdd.errors import SpecError
    cr = _with(seed_cr, speculative={"numSpeculativeTokens": 3}, workload={**seed_cr["spec"]["workload"], "concurrency": 512})
    cr["spec"]["model"]["architecture"] = {"name": "Qwen3.5-397B-A17B", "mtpNumHiddenLayers": 2}
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    [err] = e.value.errors
    assert err.field == "spec.speculative.numSpeculativeTokens" and "use 2 or 4" in err.message
