"""Cross-field rules of the spec, written once and enforced twice: as CEL
``x-kubernetes-validations`` on the CRD (refused at ``kubectl apply``) and as Python checks in
``qdd plan``/``qdd render`` and the operator (for clusters that skip CEL). Each rule names the
field a user must change. Field failures they prevent: docs/facts/field-failures.md#design-against-these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..catalog import ENGINE_PROFILES
from ..catalog.all2all import ALL2ALL_BACKENDS

LOOPBACK_HOSTS = ("0.0.0.0", "localhost", "localhost.", "127.0.0.1", "::", "::1", "[::]", "[::1]",
                  "0:0:0:0:0:0:0:0", "0:0:0:0:0:0:0:1")
"""Compared lowercased (host names are case-insensitive), with anything in 127.0.0.0/8."""
ROUTER_METRICS_PORT = 29000
"""vllm-router's --prometheus-port in every router pod (qdd.plan.router); the router's HTTP port must differ."""
NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""The NoExecute taints the node lifecycle controller puts on a node whose kubelet reports NotReady or
stops reporting (k8s.io/api core/v1 well_known_taints.go): spec.cluster.nodeLossTolerationSeconds
renders the engine pods' tolerations of both."""
UNSAFE_ASYNC_VERSIONS = tuple(sorted(v for v, p in ENGINE_PROFILES.items() if not p.async_scheduling_race_fixes))
UNSAFE_ASYNC_SPELLINGS = UNSAFE_ASYNC_VERSIONS + tuple(f"v{v}" for v in UNSAFE_ASYNC_VERSIONS)
"""vllmVersion accepts an optional leading ``v`` (catalog.engine_profile); CEL and Python compare the same list."""


@dataclass(frozen=True)
class Rule:
    cel: str
    """CEL on the spec object (``self`` = spec)."""
    field: str
    """Path below ``spec`` of the field to change, CEL fieldPath syntax (``.prefill.topology.tensorParallel``)."""
    message: str
    check: Callable[[Any], bool]
    """Python twin of ``cel`` on a parsed spec: True when the rule holds."""
    given: Callable[[Any], str] | None = None
    """What the spec has, appended to the message where Python reports it (``prefill bfloat16,
    decode auto``); the API server's message stays the fixed ``message``."""


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _prefix_caching_off(s: Any, role: str) -> bool:
    return not getattr(s, role).tuning.prefix_caching


def _async_safe(s: Any, role: str) -> bool:
    return not (getattr(s, role).tuning.async_scheduling and s.engine.vllm_version in UNSAFE_ASYNC_SPELLINGS)


def _not_nvfp4(s: Any, role: str) -> bool:
    return getattr(s, role).tuning.kv_cache_dtype != "nvfp4"


REFUSED_ALL2ALL = tuple(n for n, b in ALL2ALL_BACKENDS.items() if b.status == "refused")
EXPERIMENTAL_ALL2ALL = tuple(n for n, b in ALL2ALL_BACKENDS.items() if b.status == "experimental")


def _all2all_not_refused(s: Any, role: str) -> bool:
    return getattr(s, role).tuning.all2all_backend not in REFUSED_ALL2ALL


def _all2all_experimental_allowed(s: Any, role: str) -> bool:
    t = getattr(s, role).tuning
    return t.all2all_backend not in EXPERIMENTAL_ALL2ALL or t.allow_experimental_all2all


def _all2all_given(s: Any, role: str) -> str:
    """The backend the role names and qdd's reason for it (qdd.catalog.all2all)."""
    name = getattr(s, role).tuning.all2all_backend
    b = ALL2ALL_BACKENDS.get(name)
    return f"{name}: {b.why}; use {b.instead}" if b else str(name)


def _all2all_rules(role: str) -> list[Rule]:
    """The backend facts that need no topology (qdd.catalog.all2all); across-tray checks are the planner's."""
    a = f"self.{role}.tuning.all2allBackend"
    return [
        Rule(cel=f"!has({a}) || !({a} in {_cel_list(REFUSED_ALL2ALL)})", field=f".{role}.tuning.all2allBackend",
             message=("this --all2all-backend is refused (pplx and naive: removed in vLLM 0.33 and silently replaced; "
                      "flashinfer_all2allv: an alias, write flashinfer_nvlink_two_sided; mori_*: AMD only; passthrough: "
                      "not a CLI choice): use allgather_reducescatter (the default)"),
             check=partial(_all2all_not_refused, role=role), given=partial(_all2all_given, role=role)),
        Rule(cel=f"!has({a}) || !({a} in {_cel_list(EXPERIMENTAL_ALL2ALL)}) || self.{role}.tuning.allowExperimentalAll2all",
             field=f".{role}.tuning.all2allBackend",
             message=("DeepEP and NIXL EP backends are experimental in qdd (no evidence on GB200; deepep_low_latency "
                      "is refused across GB200 trays even then): set allowExperimentalAll2all: true in the same tuning "
                      "to try one, or use allgather_reducescatter"),
             check=partial(_all2all_experimental_allowed, role=role), given=partial(_all2all_given, role=role)),
    ]


def _roles_rules() -> list[Rule]:
    out: list[Rule] = []
    for role in ("prefill", "decode"):
        out += _all2all_rules(role)
        out.append(Rule(
            cel=f"!self.{role}.tuning.prefixCaching",
            field=f".{role}.tuning.prefixCaching",
            message="prefix caching must be off for hybrid (GDN) models over NIXL: decode crashes with it; remove prefixCaching or set it false",
            check=partial(_prefix_caching_off, role=role),
        ))
        out.append(Rule(
            cel=(f"!(has(self.{role}.tuning.asyncScheduling) && self.{role}.tuning.asyncScheduling"
                 f" && self.engine.vllmVersion in {_cel_list(UNSAFE_ASYNC_SPELLINGS)})"),
            field=f".{role}.tuning.asyncScheduling",
            message=("async scheduling needs an engine with vLLM PRs #45357 and #48481 (P/D + hybrid KV races; "
                     f"without them accuracy collapses); engine versions {', '.join(UNSAFE_ASYNC_VERSIONS)} lack them: "
                     "remove asyncScheduling or use engine.vllmVersion 0.33.0"),
            check=partial(_async_safe, role=role),
        ))
    return out


SPEC_RULES: list[Rule] = [
    Rule(
        cel="self.prefill.topology.tensorParallel == self.decode.topology.tensorParallel",
        field=".decode.topology.tensorParallel",
        message="prefill and decode tensorParallel must be equal: NIXL transfer of hybrid (GDN) models supports homogeneous TP only",
        check=lambda s: s.prefill.topology.tensor_parallel == s.decode.topology.tensor_parallel,
        given=lambda s: f"prefill {s.prefill.topology.tensor_parallel}, decode {s.decode.topology.tensor_parallel}",
    ),
    Rule(
        cel="self.prefill.tuning.kvCacheDtype == self.decode.tuning.kvCacheDtype",
        field=".decode.tuning.kvCacheDtype",
        message="prefill and decode kvCacheDtype must be equal: a mismatch corrupts transferred KV silently "
                "(auto is the checkpoint's own: write the same value on both roles)",
        check=lambda s: s.prefill.tuning.kv_cache_dtype == s.decode.tuning.kv_cache_dtype,
        given=lambda s: f"prefill {s.prefill.tuning.kv_cache_dtype}, decode {s.decode.tuning.kv_cache_dtype}",
    ),
    Rule(
        cel="self.prefill.tuning.mambaSsmCacheDtype == self.decode.tuning.mambaSsmCacheDtype",
        field=".decode.tuning.mambaSsmCacheDtype",
        message="prefill and decode mambaSsmCacheDtype must be equal: a mismatch corrupts transferred GDN state silently",
        check=lambda s: s.prefill.tuning.mamba_ssm_cache_dtype == s.decode.tuning.mamba_ssm_cache_dtype,
        given=lambda s: f"prefill {s.prefill.tuning.mamba_ssm_cache_dtype}, decode {s.decode.tuning.mamba_ssm_cache_dtype}",
    ),
    Rule(
        cel=("!has(self.kvTransfer.sideChannelHost) || !(self.kvTransfer.sideChannelHost.lowerAscii() in "
             f"{_cel_list(LOOPBACK_HOSTS)} || self.kvTransfer.sideChannelHost.startsWith('127.'))"),
        field=".kvTransfer.sideChannelHost",
        message="sideChannelHost must be an address peers can reach, not 0.0.0.0 or a loopback name: decode would dial itself; remove it to use the pod IP",
        check=lambda s: s.kv_transfer.side_channel_host is None
        or not (s.kv_transfer.side_channel_host.lower() in LOOPBACK_HOSTS or s.kv_transfer.side_channel_host.startswith("127.")),
    ),
    Rule(
        cel="self.ports.dataParallelRpc != self.ports.http",
        field=".ports.dataParallelRpc",
        message="dataParallelRpc must differ from the HTTP port (the engine fails to start); the default is 29550",
        check=lambda s: s.ports.data_parallel_rpc != s.ports.http,
    ),
    Rule(
        cel=f"self.router.port != {ROUTER_METRICS_PORT}",
        field=".router.port",
        message=f"router.port must differ from {ROUTER_METRICS_PORT}, the router's metrics port (two container ports would "
                "collide); the default is 8000",
        check=lambda s: s.router.port != ROUTER_METRICS_PORT,
    ),
    Rule(
        cel="!has(self.workload.maxModelLen) || self.workload.maxModelLen >= self.workload.isl + self.workload.osl",
        field=".workload.maxModelLen",
        message="maxModelLen must hold a whole request of the workload: at least isl + osl (or remove it: that is the default)",
        check=lambda s: s.workload.max_model_len is None or s.workload.max_model_len >= s.workload.isl + s.workload.osl,
        given=lambda s: f"maxModelLen {s.workload.max_model_len}, isl + osl = {s.workload.isl + s.workload.osl}",
    ),
    Rule(
        cel="self.kvTransfer.loadFailurePolicy != 'recompute'",
        field=".kvTransfer.loadFailurePolicy",
        message=("loadFailurePolicy recompute is unsafe for hybrid (GDN) models: it gives deterministic wrong output "
                 "when blocks are shared (vllm#49250) and silently redoes the prefill on decode; use fail (the default)"),
        check=lambda s: s.kv_transfer.load_failure_policy != "recompute",
    ),
    *[Rule(
        cel=f"self.{role}.tuning.kvCacheDtype != 'nvfp4'",
        field=f".{role}.tuning.kvCacheDtype",
        message=("nvfp4 KV cache gives wrong output for Qwen3.5 on vLLM 0.33 (about 5% GSM8K with the FlashInfer TRT-LLM "
                 "backend, vllm#55673, HTTP 200 all the same): use fp8 or bfloat16"),
        check=partial(_not_nvfp4, role=role),
    ) for role in ("prefill", "decode")],
    *_roles_rules(),
]


OWNED_NODE_LABELS = ("kubernetes.io/arch", "nvidia.com/gpu.product")
"""Node labels qdd requires from spec.cluster.gpuType (qdd.render.placement.gpu_node_selector); a
user's nodeSelector would replace them (a dict update) and an affinity could contradict them."""
CLIQUE_LABEL = "nvidia.com/gpu.clique"
CLIQUE_OPERATORS = ("In", "NotIn", "Exists")
"""What a nodeAffinity on the clique key may say next to qdd's own ``Exists`` (one NVLink domain):
DoesNotExist contradicts it, and Gt/Lt compare integers, which clique ids (``<cluster uuid>.<n>``) are not."""


@dataclass(frozen=True)
class LocalRule:
    """A rule of one sub-object (``self`` is that object in CEL; ``check`` gets the parsed model):
    the CRD carries it on that object's schema, the model's validator checks it at ``field``."""

    cel: str
    field: str
    """fieldPath below the object (``.nodeSelector``), '' for the object itself."""
    message: str
    check: Callable[[Any], bool]


def _divides(a: Any, whole: str, part: str) -> bool:
    w, p = getattr(a, whole), getattr(a, part)
    return w is None or p is None or w % p == 0


_EXPERTS = "(has(self.numExperts) ? self.numExperts : 0)"
_PER_TOK = "(has(self.numExpertsPerTok) ? self.numExpertsPerTok : 0)"
_NOT_SPLIT = "(has(self.sameNVLinkDomain) && !self.sameNVLinkDomain)"

CLUSTER_PLACEMENT_RULES = (
    LocalRule(
        cel=f"!has(self.nodeSelector) || !self.nodeSelector.exists(k, k in {_cel_list(OWNED_NODE_LABELS)})",
        field=".nodeSelector",
        message=("nodeSelector may not set kubernetes.io/arch or nvidia.com/gpu.product: qdd requires them from "
                 "cluster.gpuType (a different value would replace qdd's and land engines on nodes of another kind); "
                 "set cluster.gpuType instead"),
        check=lambda c: not set(c.node_selector) & set(OWNED_NODE_LABELS)),
    LocalRule(
        cel=(f"!has(self.nodeAffinity) || self.nodeAffinity.all(r, !(r.key in {_cel_list(OWNED_NODE_LABELS)})"
             f" && (r.key != '{CLIQUE_LABEL}' || {_NOT_SPLIT} || r.operator in {_cel_list(CLIQUE_OPERATORS)}))"),
        field=".nodeAffinity",
        message=("nodeAffinity may not name kubernetes.io/arch or nvidia.com/gpu.product (qdd requires them from "
                 "cluster.gpuType: set gpuType), nor require nvidia.com/gpu.clique with DoesNotExist, Gt or Lt while "
                 "the deployment stays in one NVLink domain (qdd requires the clique label: no node would do); "
                 "use In, NotIn or Exists on the clique key"),
        check=lambda c: all(r.key not in OWNED_NODE_LABELS and (r.key != CLIQUE_LABEL or not c.same_nvlink_domain
                                                                 or r.operator in CLIQUE_OPERATORS)
                            for r in c.node_affinity)),
)
"""Placement fields that overrode qdd's own selectors or contradicted them silently (issue 21)."""

SOURCE_RULES = (
    LocalRule(
        cel="!(has(self.pvc) && has(self.huggingFace))", field="",
        message=("set one model source, pvc or huggingFace, not both: with pvc the engines load the volume and never "
                 "read the hub (its token and cache would be unused)"),
        check=lambda src: src.pvc is None or src.hugging_face is None),
)

MODEL_RULES = (
    LocalRule(
        cel="!has(self.cache) || (has(self.source) && has(self.source.pvc))", field=".cache",
        message=("cache needs source.pvc: the trays' caches are filled from that claim and the engines fall back to "
                 "it on a tray without a verified copy (docs/cold-start.md#node-local-weight-cache)"),
        check=lambda m: m.cache is None or (m.source is not None and m.source.pvc is not None)),
)
"""Rules of spec.model (the node-local weight cache needs a remote copy to fill from and fall back to)."""

ARCHITECTURE_RULES = (
    LocalRule(
        cel="!has(self.numAttentionHeads) || !has(self.numKeyValueHeads) || self.numAttentionHeads % self.numKeyValueHeads == 0",
        field=".numKeyValueHeads",
        message="numAttentionHeads must be a multiple of numKeyValueHeads (grouped-query attention shares each KV head)",
        check=lambda a: _divides(a, "num_attention_heads", "num_key_value_heads")),
    LocalRule(
        cel=("!has(self.linearNumValueHeads) || !has(self.linearNumKeyHeads) || "
             "self.linearNumValueHeads % self.linearNumKeyHeads == 0"),
        field=".linearNumValueHeads",
        message="linearNumValueHeads must be a multiple of linearNumKeyHeads (Gated DeltaNet groups value heads per key head)",
        check=lambda a: _divides(a, "linear_num_value_heads", "linear_num_key_heads")),
    LocalRule(
        cel=f"{_PER_TOK} <= {_EXPERTS} && ({_EXPERTS} == 0 || {_PER_TOK} >= 1)",
        field=".numExpertsPerTok",
        message="numExpertsPerTok must be between 1 and numExperts for a mixture-of-experts model, 0 for a dense one",
        check=lambda a: a.num_experts_per_tok <= a.num_experts and (a.num_experts == 0 or a.num_experts_per_tok >= 1)),
)
"""An inline architecture whose numbers contradict each other (issue 21: absurd predictions)."""


def _min_gpus_cel(role: str) -> str:
    # Defaulting runs before CEL: minEndpoints (1) and tensorParallel (1) are always present.
    return f"self.autoscaling.{role}.minEndpoints * self.{role}.topology.dataParallel * self.{role}.topology.tensorParallel"


def endpoint_gpus(s: Any, role: str) -> int:
    """GPUs one endpoint of ``role`` holds: DP ranks × TP size."""
    topo = getattr(s, role).topology
    return int(topo.data_parallel * topo.tensor_parallel)


def _budget_holds_minimum(s: Any) -> bool:
    a = s.autoscaling
    return a is None or a.gpu_budget >= sum(getattr(a, r).min_endpoints * endpoint_gpus(s, r) for r in ("prefill", "decode"))


def _budget_given(s: Any) -> str:
    a = s.autoscaling
    need = " + ".join(f"{getattr(a, r).min_endpoints} × {endpoint_gpus(s, r)}" for r in ("prefill", "decode"))
    return f"gpuBudget {a.gpu_budget}, minimum {need}"


AUTOSCALING_RULES: list[Rule] = [
    Rule(
        cel=(f"!has(self.autoscaling) || self.autoscaling.gpuBudget >= {_min_gpus_cel('prefill')} + {_min_gpus_cel('decode')}"),
        field=".autoscaling.gpuBudget",
        message=("gpuBudget must hold minEndpoints of both roles (each endpoint holds dataParallel × tensorParallel GPUs): "
                 "raise gpuBudget or lower autoscaling.prefill.minEndpoints / autoscaling.decode.minEndpoints"),
        check=_budget_holds_minimum,
        given=_budget_given,
    ),
]
"""Rules of spec.autoscaling that need the roles' topologies (the rest sit on the autoscaling models)."""
SPEC_RULES += AUTOSCALING_RULES

ACCURACY_GATE_RULES: list[Rule] = [
    Rule(
        # Defaulting runs before CEL: router and its replicas (1) are present unless set.
        cel="!has(self.validation.accuracy) || self.router.replicas > 0",
        field=".validation.accuracy",
        message=("validation.accuracy needs a router: the benchmark's GSM8K run goes through it, and with "
                 "router.replicas 0 no result ever comes, so Ready would wait for ever; raise router.replicas or "
                 "remove validation.accuracy"),
        check=lambda s: s.validation.accuracy is None or s.router.replicas > 0,
        given=lambda s: f"router.replicas {s.router.replicas}",
    ),
]
"""The accuracy gate (spec.validation.accuracy) against the rest of the spec."""
SPEC_RULES += ACCURACY_GATE_RULES


def cel_rules(rules: list[Rule]) -> dict[str, Any]:
    """``json_schema_extra`` carrying the rules as CRD ``x-kubernetes-validations``."""
    return {"x-kubernetes-validations": [{"rule": r.cel, "fieldPath": r.field, "message": r.message} for r in rules]}
