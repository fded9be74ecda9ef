"""Memory model of one engine rank and the decode capacity it predicts.

Formulas follow vLLM 0.33 (docs/facts/memory-model.md):
- attention KV per token per layer = 2 × kv_heads_per_rank × head_dim × bytes(kv dtype)
  (vllm/v1/kv_cache_interface.py, FullAttentionSpec.page_size_bytes / block_size);
- GDN state per layer = conv + ssm, conv = conv_dim_per_rank × (kernel − 1) × bytes(model dtype),
  ssm = value_heads_per_rank × value_dim × key_dim × bytes(mamba ssm dtype)
  (vllm/model_executor/layers/mamba/mamba_utils.py, gated_delta_net_state_shape);
- hybrid block size: attention block raised until one attention page ≥ one GDN page, on the
  kernel alignment (vllm/model_executor/models/config.py,
  HybridAttentionMambaModelConfig.verify_and_update_config);
- KV-cache groups of equal layer count sharing one page size: the group size is the smallest
  layer count of a kind, or the largest when that is below 1.5 × the smallest
  (vllm/v1/core/kv_cache_planning.py); a request holds ceil(tokens / block) blocks in each
  attention group and 1 + k blocks in each GDN group with k speculative tokens
  (MambaSpec.num_speculative_blocks; vllm/v1/core/single_type_kv_cache_manager.py);
- MTP speculative decoding adds the checkpoint's MTP layers: one full-attention layer each (its KV
  joins the attention layers) with its own MoE; embeddings and LM head are the model's
  (vllm/model_executor/models/qwen3_5_mtp.py).
Numbers marked (est.) are estimates, not measurements; the capacity is a prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog import DTYPE_BYTES, Checkpoint, EngineProfile, GPUKind

GIB = 1024**3
MODEL_DTYPE = "bfloat16"
"""Qwen3.5 activations and GDN conv state run in the checkpoint's torch_dtype (config.json: bfloat16)."""
CUDA_GRAPH_POOL_BYTES = 2 * GIB
"""(est.) Memory held by captured CUDA graphs at a few hundred capture sizes."""
NON_TORCH_BYTES = 2 * GIB
"""(est.) NCCL/all2all buffers, cuBLAS workspaces and the CUDA context outside PyTorch's pool."""
ACTIVATION_LIVE_TENSORS = 16
"""(est.) Hidden-size activation tensors live at the profiling peak, per batched token."""
CAPACITY_TOLERANCE = 0.2
"""(est.) Relative error the capacity prediction carries (weights, activations and the share of
client requests resident on decode are estimates). A target above capacity × (1 + this) is refused;
one between capacity and that bound is accepted with a warning."""


@dataclass(frozen=True)
class CacheLayout:
    """vLLM's hybrid KV cache of one rank.

    ``attn_bytes_per_token_layer``: bytes per token per attention layer.
    ``gdn_bytes_per_layer``: conv + ssm state bytes per request per GDN layer.
    ``block_size``: tokens per attention block. ``page_bytes``: bytes of one block of one layer
    (the uniform page size all groups share). ``layers_per_group``: layers (= cache tensors) per
    group. ``attn_groups``/``gdn_groups``: number of groups of each kind. ``gdn_blocks``: blocks a
    request holds in each GDN group (1 + k with k speculative tokens).
    """

    kv_dtype: str
    attn_bytes_per_token_layer: int
    gdn_conv_bytes_per_layer: int
    gdn_ssm_bytes_per_layer: int
    block_size: int
    page_bytes: int
    layers_per_group: int
    attn_groups: int
    gdn_groups: int
    gdn_blocks: int = 1

    @property
    def gdn_bytes_per_layer(self) -> int:
        return self.gdn_conv_bytes_per_layer + self.gdn_ssm_bytes_per_layer

    @property
    def kv_bytes_per_token(self) -> int:
        """Attention KV bytes per token over all attention layers of the rank."""
        return self.attn_bytes_per_token_layer * self.attn_groups * self.layers_per_group

    @property
    def block_bytes(self) -> int:
        """One block id: one page in every tensor of the group (layers_per_group tensors)."""
        return self.page_bytes * self.layers_per_group

    def blocks_per_request(self, tokens: int) -> int:
        return self.attn_groups * math.ceil(tokens / self.block_size) + self.gdn_groups * self.gdn_blocks

    def request_bytes(self, tokens: int) -> int:
        """Bytes one request of ``tokens`` tokens holds, with block rounding."""
        return self.blocks_per_request(tokens) * self.block_bytes


def group_size(layer_counts: tuple[int, ...]) -> int:
    """Layers per KV-cache group: the smallest count of a kind, or the largest when it is below 1.5 ×
    the smallest (vllm/v1/core/kv_cache_planning.py: pads 12 + 13 layers to 13 + 13, not 12 + 24)."""
    lo, hi = min(layer_counts), max(layer_counts)
    return hi if hi < lo * 1.5 else lo


def cache_layout(ckpt: Checkpoint, tp: int, kv_cache_dtype: str, ssm_dtype: str, profile: EngineProfile,
                 num_speculative_tokens: int = 0) -> CacheLayout:
    """One rank's hybrid cache; ``num_speculative_tokens`` > 0 means MTP speculative decoding (the
    MTP layers' KV and 1 + k GDN blocks per request)."""
    a = ckpt.architecture
    kv_dtype = ckpt.kv_cache_dtype_auto if kv_cache_dtype == "auto" else kv_cache_dtype
    ssm = "float32" if ssm_dtype == "auto" else ssm_dtype  # Qwen3.5 configs: mamba_ssm_dtype float32
    kv_heads = max(1, a.num_key_value_heads // tp)
    attn = 2 * kv_heads * a.head_dim * int(DTYPE_BYTES[kv_dtype])
    conv_dim = (2 * a.linear_num_key_heads * a.linear_key_head_dim + a.linear_num_value_heads * a.linear_value_head_dim) // tp
    conv = conv_dim * (a.linear_conv_kernel_dim - 1) * int(DTYPE_BYTES[MODEL_DTYPE])
    ssm_b = (a.linear_num_value_heads // tp) * a.linear_value_head_dim * a.linear_key_head_dim * int(DTYPE_BYTES[ssm])
    align = profile.hybrid_block_alignment
    block = align * math.ceil((conv + ssm_b) / (align * attn))
    n_fa = a.num_full_attention_layers + (a.mtp_num_hidden_layers if num_speculative_tokens else 0)
    n_gdn = a.num_gdn_layers
    group = group_size((n_fa, n_gdn))
    return CacheLayout(
        kv_dtype=kv_dtype, attn_bytes_per_token_layer=attn, gdn_conv_bytes_per_layer=conv, gdn_ssm_bytes_per_layer=ssm_b,
        block_size=block, page_bytes=block * attn, layers_per_group=group,
        attn_groups=math.ceil(n_fa / group), gdn_groups=math.ceil(n_gdn / group), gdn_blocks=1 + num_speculative_tokens,
    )


@dataclass(frozen=True)
class RankBudget:
    """Bytes of one rank: what vLLM may use, what weights and activations take, what is left for cache."""

    hbm_bytes: int
    gpu_memory_utilization: float
    weight_bytes: int
    activation_bytes: int
    cuda_graph_bytes: int
    non_torch_bytes: int

    @property
    def usable_bytes(self) -> int:
        return int(self.hbm_bytes * self.gpu_memory_utilization)

    @property
    def cache_bytes(self) -> int:
        return self.usable_bytes - self.weight_bytes - self.activation_bytes - self.cuda_graph_bytes - self.non_torch_bytes


MTP_DTYPE = "bfloat16"
"""(est.) Storage of the MTP layers: quantized exports commonly leave them unquantized, so qdd
plans with bf16, the larger case (unverified for each checkpoint)."""


def rank_budget(ckpt: Checkpoint, gpu: GPUKind, dp: int, tp: int, expert_parallel: bool, utilization: float,
                max_num_batched_tokens: int, max_num_seqs: int, mtp: bool = False) -> RankBudget:
    """Memory of one rank. Experts are sharded over DP×TP ranks with expert parallel (else over TP);
    everything else is sharded over TP only (replicated across DP). ``mtp``: the MTP layers are
    loaded too (speculative decoding), sharded the same way."""
    a = ckpt.architecture
    ep = dp * tp if expert_parallel else tp
    # vLLM spreads experts unevenly when they do not divide (FusedMoE determine_expert_map): the
    # fullest rank holds ceil(experts / EP) of them.
    experts_here = math.ceil(a.num_experts / ep) if a.num_experts else 0
    expert_share = experts_here / a.num_experts if a.num_experts else 1 / ep
    weights = math.ceil(ckpt.expert_weight_bytes() * expert_share) + ckpt.non_expert_weight_bytes() // tp
    if mtp:
        b = DTYPE_BYTES[MTP_DTYPE]
        weights += math.ceil(a.mtp_expert_params * b * expert_share) + math.ceil(a.mtp_non_expert_params * b) // tp
    bytes_model = int(DTYPE_BYTES[MODEL_DTYPE])
    # Profiling peak: hidden activations of a full batch plus float32 logits and probabilities
    # of every sampled sequence (vllm/v1/worker/gpu_model_runner.py, profile_run).
    activations = (max_num_batched_tokens * a.hidden_size * bytes_model * ACTIVATION_LIVE_TENSORS
                   + max_num_seqs * a.vocab_size * 4 * 2)
    return RankBudget(gpu.memory_bytes, utilization, weights, activations, CUDA_GRAPH_POOL_BYTES, NON_TORCH_BYTES)


def mean_resident_tokens(isl: int, osl: int, ratio: float) -> float:
    """Mean context of a request resident on decode. Lengths are uniform on [ratio×L, L]
    (sa-bench's random dataset); a request of output length o is resident for o steps with
    context isl + t, t ∈ [0, o), so the time-weighted mean is E[isl] + E[o²] / (2·E[o])."""
    lo_i, lo_o = ratio * isl, ratio * osl
    e_isl = (lo_i + isl) / 2
    e_o = (lo_o + osl) / 2
    e_o2 = (lo_o**2 + lo_o * osl + osl**2) / 3
    return e_isl + e_o2 / (2 * e_o)


@dataclass(frozen=True)
class DecodeCapacity:
    """Predicted decode capacity.

    ``request_bytes``: mean bytes per resident request (attention blocks rounded, GDN blocks).
    ``per_endpoint``: requests one endpoint holds; ``total``: over all decode endpoints.
    ``endpoints_needed``: decode endpoints that hold the target concurrency.
    """

    layout: CacheLayout
    budget: RankBudget
    ranks_per_endpoint: int
    mean_tokens: float
    request_bytes: int
    per_endpoint: int
    endpoints: int
    target: int

    @property
    def total(self) -> int:
        return self.per_endpoint * self.endpoints

    @property
    def blocks_per_rank(self) -> int:
        """Block ids the rank's cache holds (vLLM's kv_cache_config.num_blocks): one block id is a page
        in every cache tensor of a group."""
        return max(0, self.budget.cache_bytes) // self.layout.block_bytes

    @property
    def endpoints_needed(self) -> int:
        return max(1, math.ceil(self.target / max(1, self.per_endpoint)))

    @property
    def refused(self) -> bool:
        return self.target > self.total * (1 + CAPACITY_TOLERANCE)

    @property
    def tight(self) -> bool:
        return self.total < self.target and not self.refused


def decode_capacity(layout: CacheLayout, budget: RankBudget, ranks_per_endpoint: int, endpoints: int,
                    isl: int, osl: int, ratio: float, target: int) -> DecodeCapacity:
    mean = mean_resident_tokens(isl, osl, ratio)
    # Attention blocks: ceil(T / block) averages T / block + 1/2 over a spread of lengths.
    blocks = layout.attn_groups * (mean / layout.block_size + 0.5) + layout.gdn_groups * layout.gdn_blocks
    per_request = int(blocks * layout.block_bytes)
    per_rank = max(0, budget.cache_bytes) // per_request
    return DecodeCapacity(layout, budget, ranks_per_endpoint, mean, per_request, per_rank * ranks_per_endpoint,
                          endpoints, target)
