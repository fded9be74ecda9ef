"""``QwenDisaggDeployment.spec``: what the user asks for.

Every field's description becomes ``kubectl explain`` text through the generated CRD
(:mod:`qdd.api.crd`). Defaults reproduce the seed recipes (docs/facts/seed-recipe.md); fields left empty
(``None``) are computed by the planner from the workload (:mod:`qdd.plan.sizing`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .autoscaling import AutoscalingSpec
from .base import ApiModel, cel
from .rules import (ARCHITECTURE_RULES, CLUSTER_PLACEMENT_RULES, MODEL_RULES, NODE_LOSS_TAINTS, SOURCE_RULES, SPEC_RULES,
                    LocalRule, cel_rules)
from .types import (ALL2ALL, ARCH_NAME, ENV_NAME, FIELD_PATH, HOST, IDENTIFIER, MAX_CONCURRENCY, MAX_TOKENS,
                    MODEL_PATH, REVISION, SECRET_KEY, SERVED_NAME, SUB_PATH, UCX_TLS, VERSION, WEIGHT_DIGEST, EnvValue, ExtraArg, Image,
                    LabelKey, LabelValue, ObjectName, Quantity)
from .observe import ObserveSpec
from .validation import ValidationSpec

NixlBackend = Literal["UCX", "LIBFABRIC", "GDS", "MOONCAKE"]
KVCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"]
MambaDtype = Literal["auto", "bfloat16", "float16", "float32"]


def _local_cel(rules: tuple[LocalRule, ...]) -> dict[str, Any]:
    return cel(*[(r.cel, r.field, r.message) for r in rules])


def _check_local(model: ApiModel, rules: tuple[LocalRule, ...]) -> None:
    """The Python twin of a sub-object's CEL rules: one error per broken rule, at its fieldPath."""
    broken = [r for r in rules if not r.check(model)]
    if broken:
        raise ValidationError.from_exception_data(type(model).__name__, [InitErrorDetails(
            type=PydanticCustomError("rule", r.message), loc=(r.field[1:],) if r.field else (), input=None)
            for r in broken])


class PVCSource(ApiModel):
    claim_name: ObjectName = Field(description="PersistentVolumeClaim holding the checkpoint.")
    sub_path: str | None = Field(None, max_length=1024, pattern=SUB_PATH, description="Folder of the checkpoint inside the volume (relative, no '..').")


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="Secret name.")
    key: str = Field("token", min_length=1, max_length=253, pattern=SECRET_KEY, description="Key in the Secret.")


class HuggingFaceSource(ApiModel):
    token_secret_ref: SecretKeyRef | None = Field(None, description="Secret with an HF token, exported as HF_TOKEN.")
    cache_pvc: ObjectName | None = Field(None, description="PVC mounted at the HF cache (HF_HOME) so restarts do not re-download.")


class ModelSourceSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": _local_cel(SOURCE_RULES)}

    pvc: PVCSource | None = Field(None, description="Load the checkpoint from a PersistentVolumeClaim (mounted read-only at /models).")
    hugging_face: HuggingFaceSource | None = Field(None, description="Download from the Hugging Face hub at start.")

    @model_validator(mode="after")
    def _rules(self) -> "ModelSourceSpec":
        _check_local(self, SOURCE_RULES)
        return self


class ArchitectureSpec(ApiModel):
    """config.json numbers of a model the catalog lacks (names as in config.json, camelCased). With a
    catalog name alone, the catalog's numbers; numbers given next to a catalog name override them.
    Floors (hidden size 64, vocabulary 256, head dims 16) sit far below any released Qwen model
    (the smallest, Qwen3-0.6B: hidden 1,024, vocabulary 151,936, head 128) and refuse a typo such
    as 1 for 1024, whose memory and capacity predictions would be absurd (issue 21); they admit the
    tiny real checkpoint the CPU-engine tests serve (hidden 128, vocabulary 512:
    tests/realengine/checkpoint.py)."""

    model_config = ApiModel.model_config | {"json_schema_extra": _local_cel(ARCHITECTURE_RULES)}

    name: str = Field(min_length=1, max_length=128, pattern=ARCH_NAME, description="Architecture name; a catalog name uses the catalog's numbers (any number given here overrides).")
    vllm_class: str = Field("Qwen3_5MoeForConditionalGeneration", max_length=128, pattern=IDENTIFIER, description="vLLM model class (config.json architectures[0]).")
    num_hidden_layers: int | None = Field(None, ge=1, le=1024, description="config.json num_hidden_layers. Required unless name is a catalog architecture.")
    full_attention_interval: int = Field(4, ge=1, le=1024, description="config.json full_attention_interval: layer i is full attention iff (i+1) % interval == 0.")
    num_attention_heads: int | None = Field(None, ge=1, le=1024, description="config.json num_attention_heads. Required unless name is a catalog architecture.")
    num_key_value_heads: int | None = Field(None, ge=1, le=1024, description="config.json num_key_value_heads. Required unless name is a catalog architecture.")
    head_dim: int = Field(256, ge=16, le=4096, description="config.json head_dim.")
    linear_num_key_heads: int | None = Field(None, ge=1, le=1024, description="config.json linear_num_key_heads (Gated DeltaNet). Required unless name is a catalog architecture.")
    linear_num_value_heads: int | None = Field(None, ge=1, le=1024, description="config.json linear_num_value_heads. Required unless name is a catalog architecture.")
    linear_key_head_dim: int = Field(128, ge=16, le=4096, description="config.json linear_key_head_dim.")
    linear_value_head_dim: int = Field(128, ge=16, le=4096, description="config.json linear_value_head_dim.")
    linear_conv_kernel_dim: int = Field(4, ge=2, le=64, description="config.json linear_conv_kernel_dim.")
    hidden_size: int | None = Field(None, ge=64, le=65536, description="config.json hidden_size. Required unless name is a catalog architecture.")
    vocab_size: int | None = Field(None, ge=256, le=4194304, description="config.json vocab_size. Required unless name is a catalog architecture.")
    num_experts: int = Field(0, ge=0, le=4096, description="config.json num_experts (0 for dense).")
    num_experts_per_tok: int = Field(0, ge=0, le=256, description="config.json num_experts_per_tok.")
    moe_intermediate_size: int = Field(0, ge=0, le=1048576, description="config.json moe_intermediate_size.")
    shared_expert_intermediate_size: int = Field(0, ge=0, le=1048576, description="config.json shared_expert_intermediate_size.")
    intermediate_size: int = Field(0, ge=0, le=1048576, description="config.json intermediate_size (dense MLP).")
    mtp_num_hidden_layers: int = Field(1, ge=0, le=16, description="config.json mtp_num_hidden_layers: multi-token-prediction layers the checkpoint ships (0: speculative mtp is refused).")

    @model_validator(mode="after")
    def _rules(self) -> "ArchitectureSpec":
        _check_local(self, ARCHITECTURE_RULES)
        return self


LoadFormat = Literal["auto", "safetensors", "fastsafetensors", "instanttensor", "runai_streamer"]
"""The `--load-format` values qdd offers (vLLM 0.33.0, vllm/config/load.py; docs/facts/load-format.md): the
loaders that read a safetensors checkpoint such as the ModelOpt NVFP4 exports. Not offered: formats that need
another checkpoint layout (pt, npcache, sharded_state, runai_streamer_sharded, tensorizer, mistral), a side
daemon or service (ipc_cache, modelexpress) or that load no weights (dummy)."""




class WeightCacheSpec(ApiModel):
    """A verified copy of the checkpoint on the trays' own disks (docs/cold-start.md#node-local-weight-cache)."""

    digest: str = Field(pattern=WEIGHT_DIGEST, description="The checkpoint's digest: sha256 of its manifest (each file's sha256 and path; `qdd weights digest DIR` prints it, or with coreutils: docs/cold-start.md). A prefetch pod per tray copies spec.model.source.pvc into the tray's cache folder of this digest (a hostPath below the operator's weight-cache root) and installs it only when every byte hashes to it; a cache already there that does not is refused and fetched again. Each engine pod reads the cache read-only when its tray holds a verified copy, else the claim, and says which in status.weightCache.")
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16, description="Trays to prefetch to, among those the engines may use (their node selector and affinity apply too). Empty: all of them. Engine pods prefer trays holding a verified copy (a preferred pod affinity: never a requirement, inside the NVLink domain the gang is placed in); a tray without one still serves, from the claim.")


class ModelSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": _local_cel(MODEL_RULES)}

    name: str = Field(min_length=1, max_length=256, pattern=MODEL_PATH, description="HF model id or path, passed to `vllm serve` (e.g. nvidia/Qwen3.5-397B-A17B-NVFP4). Must be identical on prefill and decode.")
    served_model_name: str | None = Field(None, max_length=256, pattern=SERVED_NAME, description="Name clients send in requests (--served-model-name). Default: the last part of name.")
    architecture: ArchitectureSpec | None = Field(None, description="Inline architecture numbers for a model the catalog lacks.")
    revision: str | None = Field(None, max_length=128, pattern=REVISION, description="Model repository revision (a commit, tag or branch), rendered as --revision and --tokenizer-revision on every engine pod. Unset: a status warning (prefill and decode may load different weights after an upstream update; the NIXL handshake does not check revisions).")
    quantization: Literal["auto", "nvfp4", "fp8", "bfloat16"] = Field("auto", description="How the checkpoint stores its weights (sizes the memory model). auto: from the name's suffix (-NVFP4, -FP8), else bfloat16.")
    source: ModelSourceSpec | None = Field(None, description="Where the weights come from. Default: the engine image or its own download.")
    load_format: LoadFormat | None = Field(None, description="--load-format of every engine pod (docs/cold-start.md#load-format). fastsafetensors reads the safetensors files into GPU memory (GPUDirect Storage where the node has it); instanttensor loads them distributed over the ranks with pipelined prefetch and direct I/O (NVIDIA GPUs only); both ship with vLLM 0.33's CUDA wheel. runai_streamer streams the files with concurrent reads (needs vllm[runai] in the image). Unset: the flag is left out (vLLM's auto: memory-mapped safetensors).")
    cache: WeightCacheSpec | None = Field(None, description="Node-local weight cache: prefetch the checkpoint of source.pvc to the trays, verified by content hash, read-only in the engines, trays holding it preferred (docs/cold-start.md#node-local-weight-cache). Needs source.pvc. Unset: every engine reads the claim.")

    @model_validator(mode="after")
    def _rules(self) -> "ModelSpec":
        _check_local(self, MODEL_RULES)
        return self


class CompileCacheSpec(ApiModel):
    """A volume that keeps the engines' compilation and JIT caches across restarts and endpoints
    (qdd.plan.compile_cache; docs/cold-start.md#compile-cache)."""

    claim_name: ObjectName = Field(description="PersistentVolumeClaim mounted read-write at /compile-cache in every engine pod. ReadWriteMany to share one cache across nodes and endpoints; a claim of a node-local StorageClass keeps it on one node. Security: every engine imports and runs what it finds there (Inductor's Python modules, Triton, DeepGEMM and FlashInfer binaries), so whoever can write the volume runs code in the engines: give the claim to this deployment alone.")
    sub_path: str | None = Field(None, max_length=1024, pattern=SUB_PATH, description="Folder inside the volume (relative, no '..'). Below it each role's caches live in a folder named by its cache key (status.plan.prefillCompileCacheKey, decodeCompileCacheKey).")


class EngineSpec(ApiModel):
    image: Image = Field(description="vLLM engine image (see images/vllm). Its vLLM version must be vllmVersion.")
    vllm_version: str = Field("0.33.0", max_length=64, pattern=VERSION, description="vLLM version inside image; selects the engine profile (flags, defaults, fixes).")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="Pull policy of engine containers.")
    image_pull_secrets: list[ObjectName] = Field(default_factory=list, max_length=8, description="Names of image pull Secrets.")
    compile_cache: CompileCacheSpec | None = Field(None, description="Keep torch.compile, Triton, FlashInfer and DeepGEMM caches on a volume, in a folder keyed by a hash of everything that invalidates them (engine image and version, model, revision, quantization, the checkpoint's claim, subPath and digest, topology, the role's flags and environment, GPU kind): a later start with the same key reads them (a warm start), any change of key compiles cold into a new folder, never into a wrong one. Unset: every start compiles cold.")


class WorkloadSpec(ApiModel):
    isl: int = Field(ge=1, le=MAX_TOKENS, description="Input sequence length, tokens (upper bound of the random range).")
    osl: int = Field(ge=1, le=MAX_TOKENS, description="Output sequence length, tokens (upper bound of the random range).")
    random_range_ratio: float = Field(1.0, gt=0, le=1, description="Lengths are uniform in [ratio×L, L] (sa-bench random dataset); 1 = fixed lengths.")
    max_model_len: int | None = Field(None, ge=1, le=MAX_TOKENS * 2, description="--max-model-len of both roles, tokens (one context length: prefill must not accept what decode refuses, or the reverse). Default: isl + osl. At least isl + osl.")
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY, description="Concurrent requests the deployment must hold (sizes decode max-num-seqs, CUDA graphs and capacity).")


class TopologySpec(ApiModel):
    data_parallel: int = Field(ge=1, le=72, description="DP ranks of one endpoint (DEP2: 2, DEP8: 8).")
    tensor_parallel: int = Field(1, ge=1, le=8, description="TP size per DP rank. Must be equal on prefill and decode (hybrid models: homogeneous TP only).")
    expert_parallel: bool = Field(True, description="--enable-expert-parallel: experts sharded over DP×TP ranks.")


class KeyRef(ApiModel):
    name: ObjectName = Field(description="Secret or ConfigMap name, in the deployment's namespace.")
    key: str = Field(min_length=1, max_length=253, pattern=SECRET_KEY, description="Key in it.")
    optional: bool | None = Field(None, description="The pod starts without it when true.")


class FieldRef(ApiModel):
    field_path: str = Field(max_length=317, pattern=FIELD_PATH, description="Downward-API field, e.g. status.podIP or metadata.name.")
    api_version: Literal["v1"] | None = Field(None, description="v1 (the default).")


class ResourceFieldRef(ApiModel):
    resource: Literal["limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory",
                      "requests.ephemeral-storage"] = Field(description="Container resource to expose.")
    container_name: Literal["vllm"] | None = Field(None, description="Only the engine container (vllm).")
    divisor: Quantity | None = Field(None, description="Unit of the exposed value (e.g. 1Mi).")


_ONE_SOURCE = " + ".join(f"(has(self.{k}) ? 1 : 0)" for k in ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef"))


class EnvVarSource(ApiModel):
    """core/v1 EnvVarSource: exactly one of its references."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel((f"{_ONE_SOURCE} == 1", "",
                                                                      "set exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef"))}

    secret_key_ref: KeyRef | None = Field(None, description="A key of a Secret.")
    config_map_key_ref: KeyRef | None = Field(None, description="A key of a ConfigMap.")
    field_ref: FieldRef | None = Field(None, description="A field of the pod.")
    resource_field_ref: ResourceFieldRef | None = Field(None, description="A resource of the engine container.")

    @model_validator(mode="after")
    def _one(self) -> "EnvVarSource":
        if sum(v is not None for v in (self.secret_key_ref, self.config_map_key_ref, self.field_ref,
                                       self.resource_field_ref)) != 1:
            raise ValueError("set exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
        return self

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class EnvVar(ApiModel):
    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME, description="Variable name.")
    value: EnvValue | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(None, description="A Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef).")


class RoleTuning(ApiModel):
    async_scheduling: bool | None = Field(None, description="--async-scheduling. Default: on where the engine profile has the P/D async-scheduling race fixes (vLLM #45357, #48481), off otherwise.")
    kv_cache_dtype: KVCacheDtype = Field("auto", description="--kv-cache-dtype, rendered explicitly on every engine pod. auto: what the checkpoint declares (qdd resolves it at plan time and shows it in status.plan). Must match between roles. nvfp4 is refused on vLLM 0.33 (wrong output, vllm#55673).")
    mamba_ssm_cache_dtype: MambaDtype = Field("bfloat16", description="--mamba-ssm-cache-dtype (GDN state). bfloat16 halves GDN state vs the config's float32. Must match between roles.")
    prefix_caching: bool = Field(False, description="--enable-prefix-caching. Must stay false: hybrid models over NIXL crash decode with it.")
    language_model_only: bool = Field(True, description="--language-model-only: text only; enables the fused QK-norm+RoPE+gate path.")
    stream_interval: int = Field(100, ge=1, le=65536, description="--stream-interval, tokens per streamed chunk (seed: 100; use 1 for latency).")
    gdn_prefill_backend: Literal["auto", "flashinfer", "triton", "cutedsl"] | None = Field(None, description="--gdn-prefill-backend. Default: engine's auto (FlashInfer on Blackwell with CUDA ≥ 13).")
    api_server_count: int | None = Field(None, ge=1, le=64, description="--api-server-count of HTTP-serving pods (1 brings periodic stats logs back while tuning).")
    max_num_batched_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="--max-num-batched-tokens. Default: prefill 2×ISL; decode the engine default for the GPU.")
    max_num_seqs: int | None = Field(None, ge=1, le=65536, description="--max-num-seqs per DP rank. Default: decode max(engine default, capture size).")
    max_cudagraph_capture_size: int | None = Field(None, ge=1, le=65536, description="--max-cudagraph-capture-size. Default (decode): ceil(concurrency / decode DP ranks) + 128 on vLLM's capture grid, at least 512.")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="--gpu-memory-utilization. Default: the engine's (0.92 on 0.33).")
    all2all_backend: str | None = Field(None, alias="all2allBackend", max_length=64, pattern=ALL2ALL, description="--all2all-backend for expert parallel (engine default allgather_reducescatter). Checked per engine version and topology: removed or aliased backends are refused, and an endpoint that spans GB200 trays takes only backends that work across them (docs/all2all.md).")
    allow_experimental_all2all: bool = Field(False, alias="allowExperimentalAll2all", description="Allow an --all2all-backend qdd has no evidence for on this topology (DeepEP, NIXL EP): off by default, and a status warning when on.")


def _role_tuning_default() -> RoleTuning:
    return RoleTuning()


class RoleSpec(ApiModel):
    topology: TopologySpec = Field(description="DP/TP/EP layout of one endpoint.")
    tuning: RoleTuning = Field(default_factory=_role_tuning_default, json_schema_extra={"default": {}}, description="Engine knobs of this role.")
    extra_args: list[ExtraArg] = Field(default_factory=list, max_length=64, description="Extra `vllm serve` arguments. Flags the operator owns are refused.")
    extra_env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment. Variables the operator owns are refused.")
    cpu: Quantity | None = Field(None, description="CPU request per pod (e.g. '32').")
    memory: Quantity | None = Field(None, description="Memory request per pod (e.g. '256Gi').")


class PrefillSpec(RoleSpec):
    endpoints: int = Field(1, ge=1, le=64, description="Prefill endpoints (one DP/EP group each). Scaled by `kubectl scale qdd/NAME --replicas=N`.")


class DecodeSpec(RoleSpec):
    endpoints: int = Field(1, ge=1, le=16, description="Decode endpoints (one DP/EP group each, possibly over several nodes).")


_TOLERATION_RULES = (
    ("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''", ".value",
     "a toleration with operator Exists has no value: remove value or use operator Equal"),
    ("has(self.key) || (has(self.operator) && self.operator == 'Exists')", ".operator",
     "a toleration without a key must use operator Exists (it matches every taint)"),
    ("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')", ".tolerationSeconds",
     "tolerationSeconds applies only to effect NoExecute: set effect NoExecute or remove tolerationSeconds"),
)
"""The rules the API server applies to a pod's tolerations (k8s.io/kubernetes/pkg/apis/core/validation,
validateTolerations), checked on the resource so a pod is never refused after the fact."""


_REQUIREMENT_RULES = (
    ("!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)", ".values",
     "operator In and NotIn need at least one value"),
    ("!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0", ".values",
     "operator Exists and DoesNotExist take no values"),
    ("!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^-?[0-9]+$'))",
     ".values", "operator Gt and Lt take exactly one integer value"),
)
"""The API server's rules for a node selector requirement (core/v1 validation)."""


class NodeSelectorRequirement(ApiModel):
    """core/v1 NodeSelectorRequirement: one label condition on the node."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel(*_REQUIREMENT_RULES)}

    key: LabelKey = Field(description="Node label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="How the label is compared.")
    values: list[LabelValue] | None = Field(None, max_length=64, description="Values for In/NotIn (one or more) and Gt/Lt (one integer).")

    @model_validator(mode="after")
    def _rules(self) -> "NodeSelectorRequirement":
        n = len(self.values or [])
        if self.operator in ("In", "NotIn") and n == 0:
            raise ValueError(_REQUIREMENT_RULES[0][2])
        if self.operator in ("Exists", "DoesNotExist") and n:
            raise ValueError(_REQUIREMENT_RULES[1][2])
        if self.operator in ("Gt", "Lt") and (n != 1 or not (self.values or [""])[0].lstrip("-").isdigit()):
            raise ValueError(_REQUIREMENT_RULES[2][2])
        return self

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Toleration(ApiModel):
    """core/v1 Toleration."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel(*_TOLERATION_RULES)}

    key: LabelKey | None = Field(None, description="Taint key; empty with operator Exists matches every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (the default).")
    value: LabelValue | None = Field(None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(None, description="Taint effect; empty matches all.")
    toleration_seconds: int | None = Field(None, ge=0, le=31536000, description="NoExecute: seconds the pod stays bound after the taint appears.")

    @model_validator(mode="after")
    def _rules(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise ValueError(_TOLERATION_RULES[0][2])
        if self.key is None and self.operator != "Exists":
            raise ValueError(_TOLERATION_RULES[1][2])
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(_TOLERATION_RULES[2][2])
        return self

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


_CLUSTER_RULES = (
    ("!has(self.nodeLossTolerationSeconds) || !has(self.tolerations) || "
     f"!self.tolerations.exists(t, has(t.key) && t.key in [{', '.join(repr(k) for k in NODE_LOSS_TAINTS)}])",
     ".nodeLossTolerationSeconds",
     "nodeLossTolerationSeconds sets the tolerations of node.kubernetes.io/not-ready and unreachable, which "
     "tolerations also names: keep one (of two tolerations of one taint, Kubernetes takes the shorter)"),
)


class ClusterSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel(
        *_CLUSTER_RULES, *[(r.cel, r.field, r.message) for r in CLUSTER_PLACEMENT_RULES])}

    gpu_type: Literal["GB200", "B200", "H200", "H100"] = Field("GB200", description="GPU kind (the catalog's): GB200, B200, H200 or H100.")
    gpus_per_node: int | None = Field(None, ge=1, le=8, description="GPUs per node. Default: the GPU kind's (GB200: 4).")
    same_nvlink_domain: bool = Field(True, alias="sameNVLinkDomain", description="true: the whole deployment (every prefill endpoint and decode group) all-or-nothing in one NVLink domain (nvidia.com/gpu.clique); false: each multi-pod group all-or-nothing in its own domain. Placed by the scheduler's gang and topology-aware scheduling (Workload API) where the cluster serves it, else by pod affinity on the clique.")
    compute_domain: bool | None = Field(None, description="Create a ComputeDomain and claim its IMEX channel in every GPU pod. Default: on for multi-node NVLink GPUs (GB200).")
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32, description="Extra node labels every P/D pod requires.")
    node_affinity: list[NodeSelectorRequirement] = Field(default_factory=list, max_length=16, description="Node label conditions every GPU pod (engines and preflight) requires, ANDed with qdd's own (the NVLink clique) in one nodeSelectorTerm: never a separate, OR-ed term.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=16, description="Tolerations of every P/D pod.")
    node_loss_toleration_seconds: int | None = Field(None, ge=0, le=86400, description="Seconds an engine pod stays bound to a node that is NotReady or unreachable (the tolerationSeconds of its node.kubernetes.io/not-ready and unreachable NoExecute tolerations) before Kubernetes evicts it; qdd recreates its endpoint (the whole DP/EP group) once the evicted pod is gone. Unset: the cluster's default (kube-apiserver --default-not-ready-toleration-seconds and --default-unreachable-toleration-seconds, 300 unless changed) and no pod spec change. Not with a toleration of those keys in tolerations. docs/reliability.md#node-loss")
    shm_size: Quantity = Field("32Gi", description="Size of the /dev/shm emptyDir of engine pods.")
    startup_timeout_seconds: int = Field(3600, ge=60, le=86400, description="Startup probe budget (model load, compile, CUDA-graph capture).")

    @model_validator(mode="after")
    def _rules(self) -> "ClusterSpec":
        if self.node_loss_toleration_seconds is not None and any(t.key in NODE_LOSS_TAINTS for t in self.tolerations):
            # At nodeLossTolerationSeconds, the CEL rule's fieldPath (as qdd.api.validation's canary rule).
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("node_loss_toleration_twice", _CLUSTER_RULES[0][2]),
                loc=("nodeLossTolerationSeconds",), input=self.node_loss_toleration_seconds)])
        _check_local(self, CLUSTER_PLACEMENT_RULES)
        return self


class UCXSpec(ApiModel):
    tls: str | None = Field(None, max_length=256, pattern=UCX_TLS, description="UCX_TLS. Default: unset (UCX picks; cuda_ipc over NVLink).")
    mnnvl: bool | None = Field(None, description="UCX_CUDA_IPC_ENABLE_MNNVL=y for multi-node NVLink. Default: on for GB200.")
    memtype_cache: bool = Field(False, description="UCX_MEMTYPE_CACHE.")


class PreflightSpec(ApiModel):
    enabled: bool = Field(True, description="Move real cache-shaped bytes prefill→decode through NIXL before Ready (KVTransferReady). False skips it.")
    min_bulk_gbps: float = Field(50.0, gt=0, le=10000, description="Floor of the bulk NIXL read, GB/s; below it KVTransferReady is False (TCP fallback reads at ~0.5).")
    max_request_ms: float = Field(10.0, gt=0, le=3600000, description="Ceiling for moving one workload request's cache (ISL+OSL tokens), ms.")


def _ucx_only() -> list[NixlBackend]:
    return ["UCX"]


class KVTransferSpec(ApiModel):
    connector: Literal["NixlConnector"] = Field("NixlConnector", description="KV connector (kv_connector).")
    side_channel_port: int = Field(5600, ge=1024, le=65000, description="VLLM_NIXL_SIDE_CHANNEL_PORT base; each engine core listens on base + its global DP rank.")
    side_channel_host: str | None = Field(None, max_length=253, pattern=HOST, description="Override of VLLM_NIXL_SIDE_CHANNEL_HOST. Default: the pod IP (downward API). Never 0.0.0.0 or localhost.")
    load_failure_policy: Literal["fail", "recompute"] = Field("fail", description="kv_load_failure_policy, rendered explicitly. recompute is refused: unsafe for hybrid models (vllm#49250) and silently slow.")
    lease_seconds: int = Field(120, ge=30, le=3600, description="NIXL KV lease (kv_connector_extra_config.kv_lease_duration), seconds prefill holds a request's blocks for decode to read. vLLM's default is 30; a late read returns HTTP 200 with garbage.")
    backends: list[NixlBackend] = Field(default_factory=_ucx_only, max_length=4, json_schema_extra={"default": ["UCX"]}, description="NIXL backends (kv_connector_extra_config.backends).")
    ucx: UCXSpec = Field(default_factory=UCXSpec, json_schema_extra={"default": {}}, description="UCX transport settings of every P/D pod.")
    preflight: PreflightSpec = Field(default_factory=PreflightSpec, json_schema_extra={"default": {}}, description="KV-transfer preflight Jobs (one serve/fetch pair per decode endpoint).")


class SpeculativeSpec(ApiModel):
    """Speculative decoding, one setting for both roles: vLLM's NIXL handshake compares the speculative
    method, so MTP on one role only starts and then fails every transfer."""

    method: Literal["mtp"] = Field("mtp", description="Draft method. mtp: the checkpoint's own multi-token-prediction layers (Qwen3.5/3.8 ship one; vLLM 0.33 maps qwen3_5_mtp to mtp).")
    num_speculative_tokens: int = Field(1, ge=1, le=8, description="Draft tokens per decode step (k). Decode then carries 1 + k tokens per sequence: qdd sizes CUDA-graph capture, batched tokens and the GDN state ((1 + k) pages per request) for it.")


class PortsSpec(ApiModel):
    http: int = Field(8000, ge=1, le=65535, description="HTTP port of the OpenAI server.")
    data_parallel_rpc: int = Field(29550, ge=1, le=65535, description="--data-parallel-rpc-port. Not 0, not the HTTP port.")


class RouterSpec(ApiModel):
    replicas: int = Field(1, ge=0, le=16, description="vllm-router replicas.")
    image: Image = Field("qdd/vllm-router:0.1.17", description="vllm-router image (see images/router).")
    port: int = Field(8000, ge=1, le=65535, description="Router HTTP port (Service port).")
    prefill_policy: Literal["random", "round_robin", "cache_aware", "power_of_two"] = Field("round_robin", description="--prefill-policy.")
    decode_policy: Literal["random", "round_robin", "cache_aware", "power_of_two"] = Field("round_robin", description="--decode-policy.")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field("ClusterIP", description="Type of the router Service. NodePort and LoadBalancer expose the router (an OpenAI API without authentication) outside the cluster: a status warning says so (docs/security.md).")
    request_timeout_seconds: int | None = Field(None, ge=5, le=86400, description="--request-timeout-secs: how long vllm-router 0.1.17 waits for each leg of a request, prefill and decode, the decode's streamed answer included (one total timeout per upstream request). A prefill that hangs reaches the client after this; a prefill's HTTP error reaches it at once and decode is never contacted (docs/facts/router-pd.md). Unset: 60 + 0.2 × workload.osl (265 for OSL 1024), not the router's 1800; raise it when clients ask for more output tokens than workload.osl: a longer answer is cut.")


class RolloutSpec(ApiModel):
    """How a new generation replaces the serving one (qdd.plan.generation: a change of the engine
    image or version, the model or its revision, cache dtypes, speculative settings, TP, the
    connector). Changes that keep the generation (endpoint counts, per-role sizing) roll per role,
    one endpoint at a time, whatever the strategy."""

    progress_deadline_seconds: int = Field(600, ge=10, le=604800, description="Seconds the deployment may go without progress (a pod bound or Ready, a step of the rollout, the preflight's verdict) while it does not serve its current generation, before Stalled=True (reason ProgressDeadlineExceeded) with the age and the cause: the scheduler's own reason for pods it cannot place (node selector or affinity, pod affinity, taint, DRA claim, GPUs), a container in back-off, or a failed KV-transfer preflight; without such a cause, not before cluster.startupTimeoutSeconds (a model may load that long). One Warning event per stall; nothing is deleted or retried by it and a serving generation keeps serving. Like a Deployment's progressDeadlineSeconds (default 600 there too); a plain bound for now, not derived from the engine start-up model. docs/rollouts.md#stalled")
    strategy: Literal["Surge", "Recreate"] = Field("Surge", description="Surge: bring up the whole new generation (prefill and decode) next to the serving one when GPUs allow, pass its KV-transfer preflight, switch the router to it, then delete the old one: no moment without a serving generation, and a prefill never pairs with a decode of the other generation. It needs the deployment's GPUs twice; until they are free the new generation waits (Pending, nothing bound under gang scheduling) and the old one serves. Recreate: delete the serving generation, then start the new one: no extra GPUs, Ready=False (Recreating) until it is up.")


class QwenDisaggDeploymentSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel_rules(SPEC_RULES)}

    model: ModelSpec = Field(description="The model served by both roles.")
    engine: EngineSpec = Field(description="The vLLM engine image and version.")
    workload: WorkloadSpec = Field(description="Traffic the deployment is sized for.")
    prefill: PrefillSpec = Field(description="Prefill role.")
    decode: DecodeSpec = Field(description="Decode role.")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, json_schema_extra={"default": {}}, description="Hardware and placement.")
    speculative: SpeculativeSpec | None = Field(None, description="Speculative decoding (MTP), rendered as one identical --speculative-config on every engine pod. Unset: none.")
    kv_transfer: KVTransferSpec = Field(default_factory=KVTransferSpec, json_schema_extra={"default": {}}, description="NIXL KV transfer between roles.")
    ports: PortsSpec = Field(default_factory=PortsSpec, json_schema_extra={"default": {}}, description="Engine ports.")
    router: RouterSpec = Field(default_factory=RouterSpec, json_schema_extra={"default": {}}, description="The P/D router in front.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, json_schema_extra={"default": {}}, description="How a change of generation is rolled out.")
    validation: ValidationSpec = Field(default_factory=ValidationSpec, json_schema_extra={"default": {}}, description="Checks of the serving path the operator runs (the canary).")
    observe: ObserveSpec = Field(default_factory=ObserveSpec, json_schema_extra={"default": {}}, description="How the operator reads the engines' own metrics into status.serving and the serving conditions (docs/observability.md).")
    autoscaling: AutoscalingSpec | None = Field(None, description="SLO-driven endpoint counts of both roles under a GPU budget (docs/autoscaling.md). Unset: off, the counts are prefill.endpoints and decode.endpoints.")
