"""The table of the `vllm serve` flags qdd owns: one row per flag, from which the engine argv, the
owned-flag check of ``extraArgs``, the must-match list and the docs page (docs/engine-flags.md)
are all derived.

A row says which spec field sets the flag (``field``: a path under ``spec``, under
``spec.<role>`` when it starts with ``tuning.``/``topology.``, or a parenthesised reason when no
field does), why qdd owns it, whether it must be equal on prefill and decode (the NIXL handshake or
the layout of the transferred bytes depends on it), and how it is rendered: ``render`` returns the
argv items for one role (empty when the flag is left out). Flags vLLM lays over pods of one
endpoint (DP address, local size, start rank, ``--headless``, ``--port``) are rendered per pod by
:mod:`qdd.plan.build` and listed here with ``render=None``. Sources: vLLM 0.33.0's own parser
(the option table in ``qdd/catalog/data``) and docs/vllm-0.33-facts.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .sizing import RoleSizing

if TYPE_CHECKING:
    from ..api.spec import QwenDisaggDeploymentSpec, RoleSpec
    from ..catalog import EngineProfile


@dataclass(frozen=True)
class RoleContext:
    """What rendering one role's flags reads: the spec, the role's spec, the engine profile, the
    role's sizing, its kv_role and whether async scheduling is on."""

    spec: QwenDisaggDeploymentSpec
    role_spec: RoleSpec
    profile: EngineProfile
    sizing: RoleSizing
    kv_role: str
    async_scheduling: bool
    kv_transfer_config: str
    served_model_name: str
    kv_cache_dtype: str


@dataclass(frozen=True)
class Flag:
    """One owned `vllm serve` flag (long name without dashes)."""

    name: str
    field: str
    why: str
    must_match: bool = False
    render: Callable[[RoleContext], list[str]] | None = None
    """argv items of this flag for a role; None: rendered per pod by the planner, or never."""
    first: bool = False
    """Rendered before the per-pod flags (right after the model), not after them."""
    value: type | None = None
    """The type of the field's value where a user sets the flag through that field (``bool``: a
    switch, ``--no-<flag>`` is false). An srt-slurm recipe's flag is imported into the field
    (qdd.recipe.keys derives its tables from these rows)."""


def _value(name: str, get: Callable[[RoleContext], object]) -> Callable[[RoleContext], list[str]]:
    def render(c: RoleContext) -> list[str]:
        v = get(c)
        return [] if v is None else [f"--{name}", str(v)]
    return render


def _bare(name: str, on: Callable[[RoleContext], bool]) -> Callable[[RoleContext], list[str]]:
    return lambda c: [f"--{name}"] if on(c) else []


def max_model_len(spec: QwenDisaggDeploymentSpec) -> int:
    """Tokens of context both roles accept: spec.workload.maxModelLen, else isl + osl."""
    w = spec.workload
    return w.max_model_len or w.isl + w.osl


def speculative_config(method: str, num_speculative_tokens: int) -> str:
    """--speculative-config JSON (vllm/config/speculative.py, SpeculativeConfig); compact, sorted keys.
    ``mtp`` uses the checkpoint's own MTP layers as the draft (vLLM 0.33 maps the older
    ``qwen3_5_mtp`` name to it with a deprecation warning)."""
    return json.dumps({"method": method, "num_speculative_tokens": num_speculative_tokens}, sort_keys=True,
                      separators=(",", ":"))


def _tuning(c: RoleContext):  # noqa: ANN202 — RoleTuning, imported for type checking only
    return c.role_spec.tuning


ENGINE_FLAGS: tuple[Flag, ...] = (
    Flag("served-model-name", "spec.model.servedModelName", "clients and the router address the model by it",
         must_match=True, first=True, render=lambda c: ["--served-model-name", c.served_model_name]),
    Flag("tensor-parallel-size", "topology.tensorParallel", "hybrid models transfer KV between equal TP only",
         must_match=True, first=True, render=_value("tensor-parallel-size", lambda c: c.role_spec.topology.tensor_parallel), value=int),
    Flag("data-parallel-size", "topology.dataParallel", "the endpoint's DP/EP group", first=True,
         render=_value("data-parallel-size", lambda c: c.role_spec.topology.data_parallel), value=int),
    Flag("data-parallel-size-local", "topology.dataParallel", "DP ranks of one pod, from the endpoint's layout"),
    Flag("data-parallel-address", "(owned: the endpoint leader's DNS name)", "ranks of one endpoint meet at its leader"),
    Flag("data-parallel-rpc-port", "spec.ports.dataParallelRpc", "equal on every pod of an endpoint"),
    Flag("headless", "(owned: set on worker pods)", "worker pods serve no HTTP"),
    Flag("data-parallel-start-rank", "(owned: derived from the pod's place in its endpoint)",
         "global DP ranks decide the NIXL side-channel ports"),
    Flag("port", "spec.ports.http", "probes, Services and the router use it"),
    Flag("api-server-count", "tuning.apiServerCount", "HTTP processes of a leader, explicit (default: one per DP rank, "
         "vLLM 0.33's own default); unset on headless pods", value=int),
    Flag("enable-expert-parallel", "topology.expertParallel", "experts sharded over the DP×TP ranks",
         render=_bare("enable-expert-parallel", lambda c: c.role_spec.topology.expert_parallel), value=bool),
    Flag("generation-config", "(owned: 'vllm', the seed's sampling defaults)", "sampling defaults from vLLM, not the checkpoint",
         must_match=True, render=lambda c: ["--generation-config", "vllm"]),
    Flag("enable-prefix-caching", "tuning.prefixCaching", "hybrid models over NIXL crash decode with it on",
         must_match=True, render=lambda c: ["--no-enable-prefix-caching"], value=bool),
    Flag("async-scheduling", "tuning.asyncScheduling", "safe with P/D only with vLLM #45357 and #48481",
         render=lambda c: ["--async-scheduling" if c.async_scheduling else "--no-async-scheduling"], value=bool),
    Flag("stream-interval", "tuning.streamInterval", "tokens per streamed chunk (seed: 100)",
         render=_value("stream-interval", lambda c: _tuning(c).stream_interval), value=int),
    Flag("mamba-ssm-cache-dtype", "tuning.mambaSsmCacheDtype", "GDN state bytes must be laid out alike on both roles",
         must_match=True, render=_value("mamba-ssm-cache-dtype", lambda c: _tuning(c).mamba_ssm_cache_dtype), value=str),
    Flag("kv-cache-dtype", "tuning.kvCacheDtype", "KV bytes must be laid out alike on both roles; rendered resolved, never as auto (which "
         "silently takes the checkpoint's: FP8 for ModelOpt NVFP4 exports)", must_match=True,
         render=lambda c: ["--kv-cache-dtype", c.kv_cache_dtype], value=str),
    Flag("language-model-only", "tuning.languageModelOnly", "text only; the fused QK-norm+RoPE+gate path",
         render=_bare("language-model-only", lambda c: _tuning(c).language_model_only), value=bool),
    Flag("max-model-len", "spec.workload.maxModelLen", "one context length on both roles: decode would accept requests "
         "prefill refuses (hung requests)", must_match=True,
         render=lambda c: ["--max-model-len", str(max_model_len(c.spec))]),
    Flag("max-num-batched-tokens", "tuning.maxNumBatchedTokens", "sized from the workload (qdd.plan.sizing)",
         render=_value("max-num-batched-tokens", lambda c: c.sizing.max_num_batched_tokens), value=int),
    Flag("max-num-seqs", "tuning.maxNumSeqs", "sized from the workload (qdd.plan.sizing)",
         render=_value("max-num-seqs", lambda c: c.sizing.max_num_seqs), value=int),
    Flag("max-cudagraph-capture-size", "tuning.maxCudagraphCaptureSize", "sized from the workload (qdd.plan.sizing)",
         render=_value("max-cudagraph-capture-size", lambda c: c.sizing.max_cudagraph_capture_size), value=int),
    Flag("cudagraph-capture-sizes", "tuning.maxCudagraphCaptureSize", "qdd renders the largest capture size; vLLM "
         "refuses to start when a list's largest differs from it"),
    Flag("gpu-memory-utilization", "tuning.gpuMemoryUtilization", "the memory model plans with it",
         render=_value("gpu-memory-utilization", lambda c: _tuning(c).gpu_memory_utilization), value=float),
    Flag("gdn-prefill-backend", "tuning.gdnPrefillBackend", "vLLM has no 'auto' value: auto is the flag left out",
         render=_value("gdn-prefill-backend", lambda c: None if _tuning(c).gdn_prefill_backend in (None, "auto")
                       else _tuning(c).gdn_prefill_backend), value=str),
    Flag("all2all-backend", "tuning.all2allBackend", "one of vLLM's backends, checked per engine version",
         render=_value("all2all-backend", lambda c: _tuning(c).all2all_backend), value=str),
    Flag("revision", "spec.model.revision", "the handshake does not compare revisions: both roles must load one",
         must_match=True, render=lambda c: ["--revision", c.spec.model.revision] if c.spec.model.revision else []),
    Flag("tokenizer-revision", "spec.model.revision", "the tokenizer of the same revision as the weights", must_match=True,
         render=lambda c: ["--tokenizer-revision", c.spec.model.revision] if c.spec.model.revision else []),
    Flag("load-format", "spec.model.loadFormat", "how weights are read decides start-up time; one of the loaders of a "
         "safetensors checkpoint (docs/cold-start.md#load-format)",
         render=lambda c: [] if c.spec.model.load_format is None else ["--load-format", c.spec.model.load_format]),
    Flag("speculative-config", "spec.speculative", "the NIXL handshake compares the speculative method: MTP on one role "
         "only starts, then fails every transfer; decode sizing depends on k", must_match=True,
         render=lambda c: [] if c.spec.speculative is None else
         ["--speculative-config", speculative_config(c.spec.speculative.method, c.spec.speculative.num_speculative_tokens)]),
    Flag("kv-transfer-config", "spec.kvTransfer", "connector, kv_role, load-failure policy and lease of the NIXL transfer",
         render=lambda c: ["--kv-transfer-config", c.kv_transfer_config]),
    Flag("host", "(owned: engines listen on all pod addresses)", "Services reach the pod IP"),
    Flag("model", "spec.model.name", "the positional model, identical on both roles"),
    Flag("config", "(a config file could set any flag qdd owns, unchecked; pass its flags in extraArgs)",
         "its flags would bypass every check"),
    Flag("data-parallel-rank", "(never valid for a headless pod; qdd sets start ranks)", "ranks would collide"),
    Flag("data-parallel-hybrid-lb", "(owned: qdd uses internal load balancing per endpoint)", "one HTTP port per endpoint"),
    Flag("data-parallel-external-lb", "(owned: qdd uses internal load balancing per endpoint)", "one HTTP port per endpoint"),
    Flag("data-parallel-multi-port-external-lb", "(owned: qdd uses internal load balancing per endpoint)",
         "one HTTP port per endpoint"),
    Flag("pipeline-parallel-size", "(qdd plans tensorParallel × dataParallel GPUs per endpoint; pipeline stages would "
         "need more GPUs than its pods hold)", "every GPU of an endpoint is counted by qdd"),
    Flag("prefill-context-parallel-size", "(qdd plans tensorParallel × dataParallel GPUs per endpoint; prefill context "
         "parallelism multiplies the ranks beyond its pods' GPUs)", "every GPU of an endpoint is counted by qdd"),
    Flag("data-parallel-backend", "(owned: qdd runs DP ranks as processes of the engine pods)", "no Ray in the pods"),
    Flag("nnodes", "topology.dataParallel (qdd lays an endpoint over nodes itself)", "the endpoint layout is qdd's"),
    Flag("node-rank", "(owned: derived from the pod's place in its endpoint)", "the endpoint layout is qdd's"),
    Flag("disable-hybrid-kv-cache-manager", "(NIXL P/D of hybrid models needs the hybrid KV cache manager on)",
         "NIXL P/D of hybrid models needs it on"),
)
"""Every owned flag, rendered ones in argv order."""

OWNED_FLAGS: dict[str, str] = {f.name: f.field for f in ENGINE_FLAGS}
"""Owned flag → the spec field a user sets instead (extraArgs may not set these)."""


def role_flags(c: RoleContext, first: bool) -> list[str]:
    """The argv items every pod of a role shares, in table order: those before the per-pod flags
    (``first``) or those after them."""
    return [item for f in ENGINE_FLAGS if f.render is not None and f.first == first for item in f.render(c)]


def docs_table() -> str:
    """The Markdown table of docs/engine-flags.md (tests/unit/test_engine_flags.py keeps the page equal)."""
    rows = ["| flag | set by | must match P and D | why qdd owns it |", "|---|---|---|---|"]
    for f in ENGINE_FLAGS:
        where = f.field if f.field.startswith(("(", "spec.")) else f"spec.{{prefill,decode}}.{f.field}"
        rows.append(f"| `--{f.name}` | {where} | {'yes' if f.must_match else ''} | {f.why} |")
    return "\n".join(rows) + "\n"
