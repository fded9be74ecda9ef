"""The checkpoint's ``config.json`` as vLLM reads it, written from the catalog's numbers.

qdd never downloads a checkpoint; the contract tests (tests/contract/test_engine_config.py) give
this file to vLLM 0.33.0's own ``EngineArgs.create_engine_config`` on CPU, so the engine
configuration it validates is the one of the model the spec names, and they check that vLLM reads
back the catalog's numbers (layers, heads, head size, context).

Shapes follow the Hugging Face configs of each release (docs/facts/memory-model.md): the Qwen3.5
multimodal classes nest the text model under ``text_config`` beside a ``vision_config`` (shrunk to
one block here: ``--language-model-only`` never builds it, and only its shape is read); Qwen3.8's
``Qwen3_5MoeForCausalLM`` and Qwen3-Next are flat text configs. Left out on purpose: the
``quantization_config`` (vLLM's CPU platform refuses ModelOpt FP4, and qdd renders
``--kv-cache-dtype`` resolved, so the checkpoint's ``kv_cache_quant_algo`` is never read) and the
tokenizer files (the checks run with ``--skip-tokenizer-init``).
"""

from __future__ import annotations

from typing import Any

from .models import Architecture

_ROPE = {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
_MROPE = {**_ROPE, "mrope_section": [11, 11, 10], "mrope_interleaved": True}

_MODEL_TYPES: dict[str, tuple[str, str | None]] = {
    # vLLM class → (config.json model_type, text_config model_type or None for a flat config)
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5_moe", "qwen3_5_moe_text"),
    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "qwen3_5_text"),
    "Qwen3_5MoeForCausalLM": ("qwen3_5_moe_text", None),
    "Qwen3_5ForCausalLM": ("qwen3_5_text", None),
    "Qwen3NextForCausalLM": ("qwen3_next", None),
}


def _text(arch: Architecture, model_type: str, mrope: bool) -> dict[str, Any]:
    t: dict[str, Any] = {
        "model_type": model_type, "vocab_size": arch.vocab_size, "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_hidden_layers, "full_attention_interval": arch.full_attention_interval,
        "num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
        "head_dim": arch.head_dim, "linear_conv_kernel_dim": arch.linear_conv_kernel_dim,
        "linear_key_head_dim": arch.linear_key_head_dim, "linear_value_head_dim": arch.linear_value_head_dim,
        "linear_num_key_heads": arch.linear_num_key_heads, "linear_num_value_heads": arch.linear_num_value_heads,
        "max_position_embeddings": arch.max_position_embeddings, "tie_word_embeddings": arch.tie_word_embeddings,
        "rope_parameters": dict(_MROPE if mrope else _ROPE), "dtype": "bfloat16",
    }
    if arch.is_moe:
        t.update(num_experts=arch.num_experts, num_experts_per_tok=arch.num_experts_per_tok,
                 moe_intermediate_size=arch.moe_intermediate_size,
                 shared_expert_intermediate_size=arch.shared_expert_intermediate_size)
    else:
        t["intermediate_size"] = arch.intermediate_size
    if model_type == "qwen3_next":
        # Qwen3-Next names its MTP layers num_nextn_predict_layers and its layer kinds explicitly.
        t["num_nextn_predict_layers"] = arch.mtp_num_hidden_layers
        t["layer_types"] = ["full_attention" if (i + 1) % arch.full_attention_interval == 0 else "linear_attention"
                            for i in range(arch.num_hidden_layers)]
        t["rope_theta"], t["partial_rotary_factor"] = _ROPE["rope_theta"], _ROPE["partial_rotary_factor"]
        del t["rope_parameters"]
    else:
        t["mtp_num_hidden_layers"] = arch.mtp_num_hidden_layers
    return t


def config_json(arch: Architecture) -> dict[str, Any]:
    """The ``config.json`` of a checkpoint of ``arch`` (a JSON-able dict). Raises ``KeyError`` for a
    vLLM class qdd has no config shape for."""
    model_type, text_type = _MODEL_TYPES[arch.vllm_class]
    if text_type is None:
        return {"architectures": [arch.vllm_class], **_text(arch, model_type, mrope=False)}
    return {
        "architectures": [arch.vllm_class],
        "model_type": model_type,
        "text_config": _text(arch, text_type, mrope=True),
        "vision_config": {"model_type": f"{model_type}_vision", "depth": 1, "hidden_size": 64, "intermediate_size": 128,
                          "num_heads": 2, "out_hidden_size": arch.hidden_size},
        "tie_word_embeddings": arch.tie_word_embeddings,
        "dtype": "bfloat16",
    }
