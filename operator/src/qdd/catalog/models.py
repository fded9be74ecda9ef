"""Model architectures qdd knows, from each checkpoint's config.json (docs/facts/memory-model.md).

All byte formulas that use these numbers live in :mod:`qdd.plan.memory`; this module is data.
"""

from __future__ import annotations

from typing import Any

import math
import re
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
        _qwen35("Qwen3-Next-80B-A3B", vllm_class="Qwen3NextForCausalLM", num_hidden_layers=48,
                num_attention_heads=16, num_key_value_heads=2, linear_num_value_heads=32, hidden_size=2048,
                vocab_size=151936, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                shared_expert_intermediate_size=512),
    )
}

_SUFFIX = re.compile(r"-(NVFP4|FP8|BF16|FP4|Instruct|Thinking|Base)(-V\d+)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Checkpoint:
    """What a model string resolves to: its architecture and how its weights are stored.

    ``expert_dtype``/``dense_dtype``: storage of routed experts vs everything else. NVIDIA's
    ModelOpt NVFP4 exports quantize the routed experts and keep GDN, attention, embeddings and
    LM head in bf16 (this reproduces the ≈217 GB experts + ≈20 GB of docs/facts/memory-model.md).
    ``kv_cache_dtype_auto``: what vLLM's ``--kv-cache-dtype auto`` resolves to: the checkpoint's
    ``kv_cache_quant_algo`` when it has one (ModelOpt NVFP4 exports: FP8), else the model dtype
    (vllm/utils/torch_utils.py, resolve_kv_cache_dtype_string). ``kv_cache_dtype_source`` says
    where that record comes from, and whether it is verified against the checkpoint itself.
    """

    architecture: Architecture
    expert_dtype: str
    dense_dtype: str
    kv_cache_dtype_auto: str
    kv_cache_dtype_source: str = ""

    def expert_weight_bytes(self) -> int:
        return math.ceil(self.architecture.expert_params * DTYPE_BYTES[self.expert_dtype])

    def non_expert_weight_bytes(self) -> int:
        return math.ceil(self.architecture.non_expert_params * DTYPE_BYTES[self.dense_dtype])


KV_FROM_MODELOPT_NVFP4 = ("checkpoint: ModelOpt NVFP4 exports of Qwen3.x declare kv_cache_quant_algo FP8, which vLLM "
                          "0.33 resolves 'auto' to (unverified for this checkpoint: set tuning.kvCacheDtype to be sure)")
KV_FROM_MODEL_DTYPE = "checkpoint: no KV cache quantization declared, so the model dtype (config.json torch_dtype)"


class UnknownModelError(LookupError):
    pass


def supported_models() -> list[str]:
    return sorted(ARCHITECTURES)


def resolve_checkpoint(model: str, architecture: Architecture | None = None, quantization: str = "auto") -> Checkpoint:
    """Map an HF id or path (``nvidia/Qwen3.5-397B-A17B-NVFP4``, ``/models/Qwen3.5-27B``) to a
    :class:`Checkpoint`. ``architecture`` given inline wins over the catalog; ``quantization``
    (nvfp4, fp8, bfloat16) wins over the name's suffix.

    Raises :class:`UnknownModelError` naming the supported architectures.
    """
    base = model.rstrip("/").split("/")[-1]
    precision = "bf16"
    m = _SUFFIX.search(base)
    while m:
        if m.group(1).upper() in ("NVFP4", "FP4"):
            precision = "nvfp4"
        elif m.group(1).upper() == "FP8":
            precision = "fp8"
        base = base[: m.start()]
        m = _SUFFIX.search(base)
    arch = architecture or ARCHITECTURES.get(base)
    if arch is None:
        lowered = {k.lower(): v for k, v in ARCHITECTURES.items()}
        arch = lowered.get(base.lower())
    if arch is None:
        raise UnknownModelError(
            f"model {model!r} is not in the catalog (supported: {', '.join(supported_models())}); "
            "name one of them in spec.model.architecture.name, or give its config.json numbers inline "
            "under spec.model.architecture"
        )
    if quantization != "auto":
        precision = {"bfloat16": "bf16"}.get(quantization, quantization)
    if precision == "nvfp4":
        return Checkpoint(arch, expert_dtype="nvfp4", dense_dtype="bfloat16", kv_cache_dtype_auto="fp8",
                          kv_cache_dtype_source=KV_FROM_MODELOPT_NVFP4)
    if precision == "fp8":
        return Checkpoint(arch, expert_dtype="fp8", dense_dtype="fp8", kv_cache_dtype_auto="bfloat16",
                          kv_cache_dtype_source=KV_FROM_MODEL_DTYPE)
    return Checkpoint(arch, expert_dtype="bfloat16", dense_dtype="bfloat16", kv_cache_dtype_auto="bfloat16",
                      kv_cache_dtype_source=KV_FROM_MODEL_DTYPE)
