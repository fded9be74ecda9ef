"""Qwen3.8 in the catalog (docs/facts/qwen38.md) and the memory checks it exercises: weights that
need DEP16 per endpoint on GB200, and vLLM 0.33's max-num-seqs ≤ cache blocks startup check."""

from __future__ import annotations

import copy

import pytest

from qdd.catalog import ARCHITECTURES, resolve_checkpoint
from qdd.errors import SpecError

from ..conftest import EXAMPLES, load
from .helpers import flag, plan_of

NVFP4 = load(EXAMPLES / "qwen38-a95b-nvfp4-2xdep16-1xdep16.yaml")


def test_architecture_numbers():
    a = ARCHITECTURES["Qwen3.8-2.4T-A95B"]
    assert (a.num_hidden_layers, a.num_full_attention_layers, a.num_gdn_layers) == (92, 23, 69)
    assert (a.num_experts, a.num_experts_per_tok, a.moe_intermediate_size) == (512, 10, 2048)
    assert a.vllm_class == "Qwen3_5MoeForCausalLM" and a.mtp_num_hidden_layers == 1
    # 2.37 T routed-expert parameters + 48.9 B of the rest: the "2.4T" of the name.
    assert a.expert_params == 92 * 512 * 3 * 8192 * 2048
    assert 2.41e12 < a.total_params < 2.43e12


@pytest.mark.parametrize(("model", "published"), [
    ("nvidia/Qwen3.8-2.4T-A95B-NVFP4", 1_444_420_107_432),  # 200 safetensors shards (docs/facts/qwen38.md)
    ("Qwen/Qwen3.8-2.4T-A95B-FP8", 2_495_773_699_840),
])
def test_checkpoint_bytes_within_4_percent_of_the_published_size(model, published):
    ck = resolve_checkpoint(model)
    ours = ck.expert_weight_bytes() + ck.non_expert_weight_bytes()
    assert ours < published and (published - ours) / published < 0.04  # scales, norms, MTP layer not counted


def test_checkpoint_records_say_how_each_export_is_stored():
    nv, fp8 = resolve_checkpoint("nvidia/Qwen3.8-2.4T-A95B-NVFP4"), resolve_checkpoint("Qwen/Qwen3.8-2.4T-A95B-FP8")
    assert (nv.expert_dtype, nv.projection_dtype, nv.dense_dtype, nv.kv_cache_dtype_auto) == ("nvfp4", "fp8", "bfloat16", "fp8")
    assert (fp8.expert_dtype, fp8.projection_dtype, fp8.dense_dtype, fp8.kv_cache_dtype_auto) == ("fp8", None, "bfloat16",
                                                                                                  "bfloat16")


def test_dep8_is_refused_naming_dep16():
    cr = copy.deepcopy(NVFP4)
    for role in ("prefill", "decode"):
        cr["spec"][role]["topology"]["dataParallel"] = 8
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert [x.field for x in e.value.errors] == ["spec.prefill.topology.dataParallel", "spec.decode.topology.dataParallel"]
    msg = e.value.errors[1].message
    assert "224.8 GB of weights per rank" in msg and "it needs at least DEP16 per endpoint on GB200" in msg
    assert "141.4 GB of weights per rank" in msg and "set dataParallel to 16" in msg


def test_dep12_holds_the_weights_but_dep16_is_named_for_an_even_expert_split():
    cr = copy.deepcopy(NVFP4)
    cr["spec"]["decode"]["topology"]["dataParallel"] = 4
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert "at least DEP16" in e.value.errors[0].message  # 512 experts do not split over 12 ranks


def test_max_num_seqs_lowered_to_the_cache_blocks_and_said():
    plan = plan_of(NVFP4)
    # ~309 blocks per rank with the engine default's activations (1024 sequences' logits); qdd keeps the
    # capacity model's 20% margin below the prediction: 247, where vLLM would find ≥ 309 blocks unless
    # the model is off by more than 20%.
    assert plan.decode.max_num_seqs == 247 == int(309 * 0.8) and plan.capacity.blocks_per_rank >= 309
    assert flag(list(plan.decode.pods[0].argv), "--max-num-seqs") == "247"
    assert any(w.startswith("decode max-num-seqs lowered from 1024 to 247") for w in plan.warnings)
    assert any(w.startswith("prefill max-num-seqs lowered from 1024 to") for w in plan.warnings)


def test_a_users_max_num_seqs_above_the_blocks_is_refused():
    cr = copy.deepcopy(NVFP4)
    cr["spec"]["decode"]["tuning"] = {"maxNumSeqs": 1024}
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    [err] = e.value.errors
    assert err.field == "spec.decode.tuning.maxNumSeqs" and "set at most 247" in err.message
    assert "holds about 309 blocks" in err.message


def test_examples_plan(seed_cr):
    for name in ("qwen38-a95b-nvfp4-2xdep16-1xdep16", "qwen38-a95b-nvfp4-1xdep16-1xdep16-mtp1",
                 "qwen38-a95b-fp8-1xdp8tp4-1xdp8tp4"):
        plan = plan_of(load(EXAMPLES / f"{name}.yaml"))
        assert plan.checkpoint.architecture.name == "Qwen3.8-2.4T-A95B"
        assert plan.gpus <= 72  # one NVL72 rack (sameNVLinkDomain)


def test_an_inline_copy_of_the_catalog_architecture_keeps_the_export_record():
    cr = copy.deepcopy(load(EXAMPLES / "qwen38-a95b-fp8-1xdp8tp4-1xdp8tp4.yaml"))
    base = plan_of(cr)
    cr["spec"]["model"]["architecture"] = {"name": "Qwen3.8-2.4T-A95B"}
    inline = plan_of(cr)
    assert inline.checkpoint == base.checkpoint and inline.capacity.total == base.capacity.total == 2160


def test_short_prompts_keep_prefill_batched_tokens_above_its_sequences(seed_cr):
    seed_cr["spec"]["workload"].update(isl=256, osl=256, concurrency=512)
    plan = plan_of(seed_cr)
    # 2 × ISL = 512 < vLLM's 1024 default sequences, which it refuses: qdd renders 1024.
    assert plan.prefill.max_num_batched_tokens == 1024
    assert flag(list(plan.prefill.pods[0].argv), "--max-num-batched-tokens") == "1024"


@pytest.mark.parametrize(("arch", "field"), [
    ({"numKeyValueHeads": 3}, "numKeyValueHeads"), ({"numKeyValueHeads": 64}, "numKeyValueHeads"),
    ({"linearNumValueHeads": 17, "linearNumKeyHeads": 16}, "linearNumValueHeads"),
])
def test_inline_head_counts_vllm_refuses(seed_cr, arch, field):
    seed_cr["spec"]["model"]["architecture"] = {"name": "Qwen3.5-397B-A17B", **arch}
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert f"spec.model.architecture.{field}" in [x.field for x in e.value.errors]
