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

from ..api.spec import DecodeSpec, QwenDisaggDeploymentSpec, RoleSpec
from ..catalog import Checkpoint, EngineProfile, GPUKind
from ..errors import FieldError
from .memory import CAPACITY_TOLERANCE, CacheLayout, DecodeCapacity, RankBudget, cache_layout, decode_capacity, rank_budget
from .sizing import RoleSizing
from .types import topology_name

MAX_DECODE_ENDPOINTS: int = next(m.le for m in DecodeSpec.model_fields["endpoints"].metadata if hasattr(m, "le"))
"""The API's bound on spec.decode.endpoints (qdd.api.spec.DecodeSpec): advice never goes past it."""

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
    max_len: int
    """--max-model-len: the request a rank must have room for besides its weights."""

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


def _with_topology(rs: RoleSpec, **kw: object) -> RoleSpec:
    return rs.model_copy(update={"topology": rs.topology.model_copy(update=kw)})


def _smallest_data_parallel(m: RankMemory, rs: RoleSpec, s: RoleSizing) -> int | None:
    """The smallest DP size (the role's TP kept) whose rank leaves room for one max-len request, or
    None up to 72. Only sizes that fill whole nodes and split the experts evenly over the DP × TP
    ranks are suggested (vLLM accepts an uneven split, but the fullest rank then carries more)."""
    tp, experts = rs.topology.tensor_parallel, m.checkpoint.architecture.num_experts
    need = m.layout(rs).request_bytes(m.max_len)
    for dp in range(1, MAX_DATA_PARALLEL + 1):
        even = experts == 0 or experts % (dp * tp) == 0
        if even and m.fits_layout(dp, tp) and m.budget(rs, s, dp).cache_bytes >= need:
            return dp
    return None


def _tensor_parallel_sizes(m: RankMemory) -> list[int]:
    """TP sizes a tray can host that split the model's heads (vLLM shards heads over TP)."""
    a = m.checkpoint.architecture
    return [tp for tp in (1, 2, 4, 8) if tp <= m.gpus_per_node and m.gpus_per_node % tp == 0
            and not (a.num_attention_heads % tp or a.linear_num_key_heads % tp or a.linear_num_value_heads % tp)]


def _layouts(m: RankMemory, rs: RoleSpec, s: RoleSizing) -> list[tuple[int, int]]:
    """(DP, TP) of the smallest endpoint that holds the weights at each TP size a tray can host,
    fewest GPUs first (the role's own TP first among equals)."""
    out = []
    for tp in _tensor_parallel_sizes(m):
        dp = _smallest_data_parallel(m, _with_topology(rs, tensor_parallel=tp), s)
        if dp is not None:
            out.append((dp, tp))
    return sorted(out, key=lambda x: (x[0] * x[1], x[1] != rs.topology.tensor_parallel, x[1]))


def _bytes(n: float) -> str:
    return f"{n / 1e12:.2f} TB" if n >= 1e12 else f"{n / 1e9:.0f} GB"


def _fix(role: str, m: RankMemory, rs: RoleSpec, s: RoleSizing, need: int) -> tuple[str, str]:
    """(field, what to change) so that one rank holds the weights: expert parallel where it is off
    and enough, else the smallest DP at the role's TP, and any smaller endpoint at another TP
    (which must then be set on both roles)."""
    t, where = rs.topology, f"spec.{role}.topology"
    if not t.expert_parallel:
        with_ep = _with_topology(rs, expert_parallel=True)
        if m.budget(with_ep, s).cache_bytes >= need:
            return f"{where}.expertParallel", (f"set expertParallel: true (experts are then sharded over the "
                                               f"{t.data_parallel * t.tensor_parallel} ranks instead of the TP group)")
        rs = with_ep
    layouts = _layouts(m, rs, s)
    ep = "" if t.expert_parallel else " with expertParallel: true"
    same = [(dp, tp) for dp, tp in layouts if tp == t.tensor_parallel]
    other = [(dp, tp) for dp, tp in layouts if tp != t.tensor_parallel and (not same or dp * tp <= same[0][0] * same[0][1])]
    alt = ("or, with that tensorParallel on both roles (TP shards the attention and GDN weights and state): "
           + ", ".join(f"{topology_name(dp, tp, True)} on {dp * tp} GPUs" for dp, tp in other[:2])) if other else ""
    if same:
        dp = same[0][0]
        weights = m.budget(_with_topology(rs, data_parallel=dp), s).weight_bytes
        return f"{where}.dataParallel", (f"it needs at least {topology_name(dp, t.tensor_parallel, True)} per endpoint on "
                                         f"{m.gpu.name} ({weights / 1e9:.1f} GB of weights per rank): set dataParallel "
                                         f"to {dp}{ep}" + (f"; {alt}" if alt else ""))
    if other:
        return f"{where}.tensorParallel", f"no data-parallel size at tensorParallel {t.tensor_parallel} holds it; " + alt[4:]
    return f"{where}.dataParallel", (f"no endpoint of up to {MAX_DATA_PARALLEL} DP ranks holds it at any TP size a "
                                     f"{m.gpu.name} node hosts: use a checkpoint with smaller weights (e.g. an NVFP4 export)")


def _activation_error(role: str, rs: RoleSpec, s: RoleSizing, budget: RankBudget, need: int) -> FieldError:
    """The weights fit, but the profiling peak of the role's batch sizes leaves no cache."""
    seqs, mnbt = s.max_num_seqs, s.max_num_batched_tokens
    field = (f"spec.{role}.tuning.maxNumSeqs" if rs.tuning.max_num_seqs else
             f"spec.{role}.tuning.maxNumBatchedTokens" if rs.tuning.max_num_batched_tokens else
             "spec.workload.concurrency" if role == "decode" else "spec.workload.isl")
    return FieldError(field, f"the activations of a {role} rank at max-num-seqs {seqs or 'default'} and "
                             f"max-num-batched-tokens {mnbt} ({budget.activation_bytes / 1e9:.1f} GB: the logits of "
                             "every sequence and the hidden states of every batched token) leave "
                             f"{max(0, budget.cache_bytes) / 1e9:.1f} GB for the cache, less than one request "
                             f"({need / 1e9:.2f} GB), although the weights ({budget.weight_bytes / 1e9:.1f} GB) fit: "
                             + ("lower the concurrency or add decode endpoints" if field == "spec.workload.concurrency"
                                else f"lower {field.rsplit('.', 1)[-1]}"))


def weights_fit_errors(role: str, m: RankMemory, rs: RoleSpec, s: RoleSizing) -> list[FieldError]:
    """An error when one rank of the role cannot hold the weights and one max-len request, naming the
    smallest layout that can."""
    budget, layout, max_len = m.budget(rs, s), m.layout(rs), m.max_len
    need = layout.request_bytes(max_len)
    if budget.cache_bytes >= need:
        return []
    if budget.cache_bytes + budget.activation_bytes >= need:
        return [_activation_error(role, rs, s, budget, need)]
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
    safe = int(blocks * (1 - CAPACITY_TOLERANCE))  # the block count is a prediction: keep the model's margin
    seqs = s.max_num_seqs or m.profile.default_max_num_seqs(m.gpu)
    if seqs <= safe or blocks == 0:  # blocks == 0: weights_fit_errors reports it
        return s, [], []
    why = (f"the cache of a {role} rank holds about {blocks} blocks (predicted, ±{CAPACITY_TOLERANCE:.0%}), and vLLM 0.33 "
           "refuses to start with more sequences than blocks (each sequence needs a GDN state block for full CUDA graphs)")
    if rs.tuning.max_num_seqs:
        if seqs <= blocks:
            return s, [], [f"{role} maxNumSeqs {seqs} is within {CAPACITY_TOLERANCE:.0%} of the limit: {why}"]
        return s, [FieldError(f"spec.{role}.tuning.maxNumSeqs", f"{seqs} sequences per rank: {why}; set at most {safe}")], []
    return (dataclasses.replace(s, max_num_seqs=max(1, safe)), [],
            [f"{role} max-num-seqs lowered from {seqs} to {max(1, safe)}: {why}"])


def decode_capacity_check(spec: QwenDisaggDeploymentSpec, m: RankMemory, s: RoleSizing, gpus_per_endpoint: int
                          ) -> tuple[DecodeCapacity, list[FieldError], list[str]]:
    """The predicted decode capacity, and the error or warning it gives against the concurrency."""
    d, w = spec.decode, spec.workload
    budget = m.budget(d, s)
    cap = decode_capacity(m.layout(d), budget, d.topology.data_parallel, d.endpoints, w.isl, w.osl,
                          w.random_range_ratio, w.concurrency)
    if budget.cache_bytes <= 0:
        return cap, [], []  # weights_fit_errors says it, with the layout that fits
    t, k = d.topology, m.speculative_tokens
    mtp = (f"; MTP k={k} keeps {1 + k} GDN state pages per request and adds the MTP layer's weights and KV"
           if k else "")
    if cap.refused:
        return cap, [FieldError(
            "spec.workload.concurrency",
            f"{w.concurrency} concurrent requests exceed the predicted decode capacity of {cap.total} "
            f"({d.endpoints} × {topology_name(t.data_parallel, t.tensor_parallel, t.expert_parallel)}: {cap.per_endpoint} "
            f"per endpoint at {cap.request_bytes / 2**20:.0f} MiB per request of ~{cap.mean_tokens:.0f} tokens, "
            f"{budget.cache_bytes / 1e9:.1f} GB KV cache per rank{mtp}); it needs {cap.endpoints_needed} decode endpoints "
            f"({cap.endpoints_needed * gpus_per_endpoint} decode GPUs): "
            + (f"raise spec.decode.endpoints to {cap.endpoints_needed} or lower the concurrency"
               if cap.endpoints_needed <= MAX_DECODE_ENDPOINTS else
               f"more than one deployment may have ({MAX_DECODE_ENDPOINTS} decode endpoints at most): lower the "
               "concurrency, or serve it from several deployments")
            + (" or numSpeculativeTokens" if k else ""))], []
    if cap.tight:
        return cap, [], [f"concurrency {w.concurrency} is above the predicted decode capacity {cap.total} but within the "
                         "model's ±20% tolerance: expect preemptions near the target"]
    return cap, [], []
