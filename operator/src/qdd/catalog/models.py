"""Model architectures qdd knows, from each checkpoint's config.json (docs/facts/memory-model.md).

All byte formulas that use these numbers live in :mod:`qdd.plan.memory`; this module is data.
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

DTYPE_BYTES: dict[str, float] = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    # NVFP4: 4-bit values plus one FP8 scale per 16 values = 4.5 bits (NVIDIA ModelOpt format).
    "nvfp4": 4.5 / 8,
}


@dataclass(frozen=True)
class Architecture:
    """One hybrid Gated-DeltaNet / full-attention architecture.

    Field names follow the checkpoint's ``config.json`` (text_config for Qwen3.5):
    ``num_hidden_layers``, ``full_attention_interval``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``, ``linear_num_key_heads``, ``linear_num_value_heads``,
    ``linear_key_head_dim``, ``linear_value_head_dim``, ``linear_conv_kernel_dim``,
    ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
    ``shared_expert_intermediate_size``, ``intermediate_size`` (dense MLP), ``hidden_size``,
    ``vocab_size``, ``max_position_embeddings``.
    """

    name: str
    vllm_class: str
    num_hidden_layers: int
    full_attention_interval: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    hidden_size: int
    vocab_size: int
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    intermediate_size: int = 0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 262144
    mtp_num_hidden_layers: int = 1
    """Multi-token-prediction layers shipped with the checkpoint (config.json mtp_num_hidden_layers;
    Qwen3-Next: num_nextn_predict_layers): each is one full-attention decoder layer with its own MoE."""
    aliases: tuple[str, ...] = field(default=())

    @property
    def num_full_attention_layers(self) -> int:
        """Layer i is full attention iff (i+1) % full_attention_interval == 0 (config.json)."""
        return sum(1 for i in range(self.num_hidden_layers) if (i + 1) % self.full_attention_interval == 0)

    @property
    def num_gdn_layers(self) -> int:
        return self.num_hidden_layers - self.num_full_attention_layers

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_params(self) -> int:
        """Routed-expert parameters: layers × experts × 3 projections × hidden × moe_intermediate."""
        return self.num_hidden_layers * self.num_experts * 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def projection_params(self) -> int:
        """Attention and Gated DeltaNet projections of all layers: what mixed-precision exports
        quantize besides the experts (e.g. FP8 in NVIDIA's Qwen3.8 NVFP4 export)."""
        h = self.hidden_size
        qk = self.linear_num_key_heads * self.linear_key_head_dim
        v = self.linear_num_value_heads * self.linear_value_head_dim
        gdn = h * (2 * qk + 2 * v) + h * 2 * self.linear_num_value_heads + v * h
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attn = h * 2 * q + 2 * h * kv + q * h
        return self.num_gdn_layers * gdn + self.num_full_attention_layers * attn

    @property
    def non_expert_params(self) -> int:
        """Everything replicated on every DP rank: GDN and attention projections, shared expert,
        router, dense MLP (27B), embeddings and LM head. Small tensors (norms, conv1d, biases)
        are below 0.1% and left out."""
        h = self.hidden_size
        qk = self.linear_num_key_heads * self.linear_key_head_dim
        v = self.linear_num_value_heads * self.linear_value_head_dim
        # GDN: in_proj_qkvz (q, k, v, z), in_proj_ba (one beta and alpha per value head), out_proj.
        gdn = h * (2 * qk + 2 * v) + h * 2 * self.linear_num_value_heads + v * h
        # Gated full attention: q_proj doubled for the output gate, k/v, o_proj.
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        attn = h * 2 * q + 2 * h * kv + q * h
        mlp = 3 * h * (self.shared_expert_intermediate_size + self.intermediate_size) + h * self.num_experts
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_gdn_layers * gdn + self.num_full_attention_layers * attn + self.num_hidden_layers * mlp + embed

    @property
    def total_params(self) -> int:
        return self.expert_params + self.non_expert_params

    @property
    def mtp_expert_params(self) -> int:
        """Routed experts of the MTP layers (each layer a full MoE, like the model's)."""
        return self.mtp_num_hidden_layers * self.num_experts * 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def mtp_non_expert_params(self) -> int:
        """The rest of the MTP layers: gated full attention, shared expert and router, and the fc that
        joins the token embedding with the hidden state (2 × hidden → hidden). Embeddings and LM head
        are the model's own (vllm/model_executor/models/qwen3_5_mtp.py shares them)."""
        h = self.hidden_size
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attn = h * 2 * q + 2 * h * kv + q * h
        mlp = 3 * h * (self.shared_expert_intermediate_size + self.intermediate_size) + h * self.num_experts
        return self.mtp_num_hidden_layers * (attn + mlp + 2 * h * h)


def _qwen35(name: str, **kw: Any) -> Architecture:
    base: dict[str, Any] = dict(full_attention_interval=4, head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128,
                linear_conv_kernel_dim=4, linear_num_key_heads=16, vocab_size=248320)
    base.update(kw)
    return Architecture(name=name, **base)


# Numbers: docs/facts/memory-model.md table (config.json of each Qwen release); moe/shared intermediate sizes
# from the same configs (397B and 122B: 1024; 35B and Next-80B: 512).
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        _qwen35("Qwen3.5-397B-A17B", vllm_class="Qwen3_5MoeForConditionalGeneration", num_hidden_layers=60,
                num_attention_heads=32, num_key_value_heads=2, linear_num_value_heads=64, hidden_size=4096,
                num_experts=512, num_experts_per_tok=10, moe_intermediate_size=1024,
                shared_expert_intermediate_size=1024),
        _qwen35("Qwen3.5-122B-A10B", vllm_class="Qwen3_5MoeForConditionalGeneration", num_hidden_layers=48,
                num_attention_heads=32, num_key_value_heads=2, linear_num_value_heads=64, hidden_size=3072,
                num_experts=256, num_experts_per_tok=8, moe_intermediate_size=1024,
                shared_expert_intermediate_size=1024),
        _qwen35("Qwen3.5-35B-A3B", vllm_class="Qwen3_5MoeForConditionalGeneration", num_hidden_layers=40,
                num_attention_heads=16, num_key_value_heads=2, linear_num_value_heads=32, hidden_size=2048,
                num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                shared_expert_intermediate_size=512),
        _qwen35("Qwen3.5-27B", vllm_class="Qwen3_5ForConditionalGeneration", num_hidden_layers=64,
                num_attention_heads=24, num_key_value_heads=4, linear_num_value_heads=48, hidden_size=5120,
                intermediate_size=17408),
        # Qwen3.8 (released 2026-08): the Qwen3.5 model classes; docs/facts/qwen38.md gives the sources.
        _qwen35("Qwen3.8-2.4T-A95B", vllm_class="Qwen3_5MoeForCausalLM", num_hidden_layers=92,
                num_attention_heads=64, num_key_value_heads=4, linear_num_value_heads=128, hidden_size=8192,
                num_experts=512, num_experts_per_tok=10, moe_intermediate_size=2048,
                shared_expert_intermediate_size=2048),
        _qwen35("Qwen3.8-27B", vllm_class="Qwen3_5ForConditionalGeneration", num_hidden_layers=64,
                num_attention_heads=24, num_key_value_heads=4, linear_num_value_heads=48, hidden_size=5120,
                intermediate_size=17408),
        _qwen35("Qwen3-Next-80B-A3B", vllm_class="Qwen3NextForCausalLM", num_hidden_layers=48,
                num_attention_heads=16, num_key_value_heads=2, linear_num_value_heads=32, hidden_size=2048,
                vocab_size=151936, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                shared_expert_intermediate_size=512),
    )
}

