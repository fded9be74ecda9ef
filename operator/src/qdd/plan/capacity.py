"""The memory checks of a plan, on :mod:`qdd.plan.memory`'s model of one rank:

- the weights fit: every role's rank keeps room for at least one request of max-model-len tokens
  after weights, activations and CUDA graphs; when not, the error names the smallest layout that
  does (a Qwen3.8-2.4T endpoint needs DEP16 on GB200);
- vLLM 0.33's startup check: max-num-seqs of a rank must not exceed the block ids its cache holds
  (vllm/config/compilation.py: "max_num_seqs exceeds available Mamba cache blocks", raised for
  hybrid models with full CUDA graphs); qdd lowers a size it chose, and refuses one the user set;
- the decode capacity against the concurrency.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..api.spec import QwenDisaggDeploymentSpec, RoleSpec
from ..catalog import Checkpoint, EngineProfile, GPUKind
from ..errors import FieldError
from .memory import CacheLayout, DecodeCapacity, RankBudget, cache_layout, decode_capacity, rank_budget
from .sizing import RoleSizing
from .types import topology_name

MAX_DATA_PARALLEL = 72
"""The largest DP size the API accepts (TopologySpec.data_parallel): one NVL72 rack of ranks."""


@dataclass(frozen=True)
class RankMemory:
    """What the memory model of one role reads: the resolved checkpoint, GPU and engine, the KV
    cache dtype every pod renders, k speculative tokens (0: none) and GPUs per node."""

    checkpoint: Checkpoint
    gpu: GPUKind
    profile: EngineProfile
    kv_cache_dtype: str
    speculative_tokens: int
    gpus_per_node: int

    def layout(self, rs: RoleSpec) -> CacheLayout:
        return cache_layout(self.checkpoint, rs.topology.tensor_parallel, self.kv_cache_dtype,
                            rs.tuning.mamba_ssm_cache_dtype, self.profile, self.speculative_tokens)

    def utilization(self, rs: RoleSpec) -> float:
        return rs.tuning.gpu_memory_utilization or self.profile.gpu_memory_utilization_default

    def budget(self, rs: RoleSpec, s: RoleSizing, dp: int | None = None) -> RankBudget:
        t = rs.topology
        seqs = s.max_num_seqs or self.profile.default_max_num_seqs(self.gpu)
        return rank_budget(self.checkpoint, self.gpu, dp or t.data_parallel, t.tensor_parallel, t.expert_parallel,
                           self.utilization(rs), s.max_num_batched_tokens, seqs, mtp=self.speculative_tokens > 0)

    def fits_layout(self, dp: int, tp: int) -> bool:
        """An endpoint of dp × tp GPUs fits one node or fills whole nodes (qdd.plan.build._layout)."""
        gpus, n = dp * tp, self.gpus_per_node
        return gpus <= n or (n % tp == 0 and gpus % n == 0)


def _smallest_data_parallel(m: RankMemory, rs: RoleSpec, s: RoleSizing, need: int) -> int | None:
    """The smallest DP size (TP kept) whose rank leaves ``need`` bytes of cache, or None up to 72.
    Only sizes that fill whole nodes and split the experts evenly over the DP × TP ranks are
    suggested (vLLM accepts an uneven split, but the fullest rank then carries more)."""
    tp, experts = rs.topology.tensor_parallel, m.checkpoint.architecture.num_experts
    for dp in range(1, MAX_DATA_PARALLEL + 1):
        even = experts == 0 or experts % (dp * tp) == 0
        if even and m.fits_layout(dp, tp) and m.budget(rs, s, dp).cache_bytes >= need:
            return dp
    return None


def _bytes(n: float) -> str:
    return f"{n / 1e12:.2f} TB" if n >= 1e12 else f"{n / 1e9:.0f} GB"


def _fix(role: str, m: RankMemory, rs: RoleSpec, s: RoleSizing, need: int) -> tuple[str, str]:
    """(field, what to change) so that one rank holds the weights: expert parallel where it is off
    and enough, else the smallest DP size (with expert parallel)."""
    t, where = rs.topology, f"spec.{role}.topology"
    if not t.expert_parallel:
        with_ep = rs.model_copy(update={"topology": t.model_copy(update={"expert_parallel": True})})
        if m.budget(with_ep, s).cache_bytes >= need:
            return f"{where}.expertParallel", (f"set expertParallel: true (experts are then sharded over the "
                                               f"{t.data_parallel * t.tensor_parallel} ranks instead of the TP group)")
        rs = with_ep
    dp = _smallest_data_parallel(m, rs, s, need)
    if dp is None:
        return f"{where}.dataParallel", (f"no data-parallel size up to {MAX_DATA_PARALLEL} at tensorParallel "
                                         f"{t.tensor_parallel} holds it: use a checkpoint with smaller weights "
                                         "(e.g. an NVFP4 export) or a larger tensorParallel")
    want = topology_name(dp, t.tensor_parallel, True)
    ep = "" if t.expert_parallel else " with expertParallel: true"
    return f"{where}.dataParallel", (f"it needs at least {want} per endpoint on {m.gpu.name} "
                                     f"({m.budget(rs, s, dp).weight_bytes / 1e9:.1f} GB of weights per rank): "
                                     f"set dataParallel to {dp}{ep}")


def weights_fit_errors(role: str, m: RankMemory, rs: RoleSpec, s: RoleSizing, max_len: int) -> list[FieldError]:
    """An error when one rank of the role cannot hold the weights and one max-len request, naming the
    smallest layout that can."""
    budget, layout = m.budget(rs, s), m.layout(rs)
    need = layout.request_bytes(max_len)
    if budget.cache_bytes >= need:
        return []
    t, ck = rs.topology, m.checkpoint
    total = ck.expert_weight_bytes() + ck.non_expert_weight_bytes()
    have = topology_name(t.data_parallel, t.tensor_parallel, t.expert_parallel)
    stored = f"{ck.expert_dtype} experts, " + (f"{ck.projection_dtype} attention and GDN, " if ck.projection_dtype else "")
    what = (f"{ck.architecture.name} ({_bytes(total)}: {stored}{ck.dense_dtype} rest) does not fit a "
            f"{role} endpoint of {have} on {m.gpu.name}: {budget.weight_bytes / 1e9:.1f} GB of weights per rank, with "
            f"activations and CUDA graphs, leave {max(0, budget.cache_bytes) / 1e9:.1f} GB of the "
            f"{budget.usable_bytes / 1e9:.1f} GB usable, less than one request of max-model-len {max_len} tokens "
            f"({need / 1e9:.2f} GB)")
    field, fix = _fix(role, m, rs, s, need)
    return [FieldError(field, f"{what}; {fix}")]


def gdn_block_limit(role: str, m: RankMemory, rs: RoleSpec, s: RoleSizing) -> tuple[RoleSizing, list[FieldError], list[str]]:
    """(sizing, errors, warnings) after vLLM 0.33's startup check max-num-seqs ≤ cache blocks per rank:
    a user's maxNumSeqs above it is refused; qdd's own (or the engine default) is lowered, and said."""
    blocks = max(0, m.budget(rs, s).cache_bytes) // m.layout(rs).block_bytes
    seqs = s.max_num_seqs or m.profile.default_max_num_seqs(m.gpu)
    if seqs <= blocks or blocks == 0:  # blocks == 0: weights_fit_errors reports it
        return s, [], []
    why = (f"the cache of a {role} rank holds {blocks} blocks, and vLLM 0.33 refuses to start with more sequences "
           "than blocks (each sequence needs a GDN state block for full CUDA graphs)")
    if rs.tuning.max_num_seqs:
        return s, [FieldError(f"spec.{role}.tuning.maxNumSeqs", f"{seqs} sequences per rank: {why}; set at most {blocks}")], []
    return (dataclasses.replace(s, max_num_seqs=blocks), [],
            [f"{role} max-num-seqs lowered from {seqs} to {blocks}: {why}"])


def decode_capacity_check(spec: QwenDisaggDeploymentSpec, m: RankMemory, s: RoleSizing, gpus_per_endpoint: int
                          ) -> tuple[DecodeCapacity, list[FieldError], list[str]]:
    """The predicted decode capacity, and the error or warning it gives against the concurrency."""
    d, w = spec.decode, spec.workload
    budget = m.budget(d, s)
    cap = decode_capacity(m.layout(d), budget, d.topology.data_parallel, d.endpoints, w.isl, w.osl,
                          w.random_range_ratio, w.concurrency)
    if budget.cache_bytes <= 0:
        return cap, [], []  # weights_fit_errors says it, with the layout that fits
    t = d.topology
    if cap.refused:
        return cap, [FieldError(
            "spec.workload.concurrency",
            f"{w.concurrency} concurrent requests exceed the predicted decode capacity of {cap.total} "
            f"({d.endpoints} × {topology_name(t.data_parallel, t.tensor_parallel, t.expert_parallel)}: {cap.per_endpoint} "
            f"per endpoint at {cap.request_bytes / 2**20:.0f} MiB per request of ~{cap.mean_tokens:.0f} tokens, "
            f"{budget.cache_bytes / 1e9:.1f} GB KV cache per rank); it needs {cap.endpoints_needed} decode endpoints "
            f"({cap.endpoints_needed * gpus_per_endpoint} decode GPUs): raise spec.decode.endpoints to "
            f"{cap.endpoints_needed} or lower the concurrency")], []
    if cap.tight:
        return cap, [], [f"concurrency {w.concurrency} is above the predicted decode capacity {cap.total} but within the "
                         "model's ±20% tolerance: expect preemptions near the target"]
    return cap, [], []
