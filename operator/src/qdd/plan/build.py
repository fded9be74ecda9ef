"""Spec → Plan. Pure: no I/O, no Kubernetes client. Every rule that can make a deployment fail in
the field is checked here; all problems are returned at once as a :class:`SpecError`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import names
from ..api import Resource
from ..api.spec import DecodeSpec, PrefillSpec, QwenDisaggDeploymentSpec, RoleSpec
from ..catalog import (Architecture, Checkpoint, EngineProfile, GPUKind, UnknownEngineError, UnknownGPUError,
                       UnknownModelError, engine_profile, gpu_kind, resolve_checkpoint)
from ..catalog.engines import round_down_to_grid
from ..catalog.vllm_options import serve_options
from ..errors import FieldError, SpecError
from . import sizing
from .compile_cache import cache_env, compile_cache_key
from .args import check_extra, check_roles_match, extra_env, kv_transfer_config
from .flags import RoleContext, max_model_len, role_flags
from .all2all import all2all_problems
from .capacity import RankMemory, decode_capacity_check, gdn_block_limit, weights_fit_errors
from .engine_config import config_errors, role_options
from .engine_facts import fix_problems, workaround_args
from .generation import generation_id
from .router import router_plan, router_problems, router_warnings
from .sizing import RoleSizing
from .startup import startup_warnings
from .types import EnvEntry, Plan, PodPlan, RolePlan
from .weight_cache import MODEL_LINK

MODEL_MOUNT = "/models"


def _inline_architecture(spec: QwenDisaggDeploymentSpec) -> Architecture | None:
    """spec.model.architecture as an :class:`Architecture`: a catalog name with any numbers given next
    to it overriding the catalog's, or a new architecture whose required numbers must all be given."""
    a = spec.model.architecture
    if a is None:
        return None
    from ..catalog import ARCHITECTURES

    given = {k: v for k, v in a.model_dump(exclude={"name"}).items() if k in a.model_fields_set}
    base = ARCHITECTURES.get(a.name) or {k.lower(): v for k, v in ARCHITECTURES.items()}.get(a.name.lower())
    if base is not None:
        return dataclasses.replace(base, **given)
    missing = [f.alias or k for k, f in type(a).model_fields.items() if k != "name" and getattr(a, k) is None]
    required = [f.alias or k for k, f in type(a).model_fields.items() if k != "name" and f.default is None]
    if missing == required:
        raise SpecError.one("spec.model.architecture.name",
                            f"{a.name!r} is not a catalog architecture (catalog: {', '.join(sorted(ARCHITECTURES))}): "
                            f"use one of those, or give the model's config.json numbers ({', '.join(missing)})")
    if missing:
        raise SpecError([FieldError(f"spec.model.architecture.{m}",
                                    f"required: {a.name!r} is not a catalog architecture "
                                    f"(catalog: {', '.join(sorted(ARCHITECTURES))})") for m in missing])
    return Architecture(**a.model_dump(exclude={"name"}), name=a.name)


MAX_ENGINE_PODS = 288
"""Engine pods of one deployment: 16 NVL72 racks of 18 trays. Bounds the work of one plan and
render (about 1 ms per pod) and the objects one custom resource makes."""


def _architecture_errors(arch: Architecture, tp: int) -> list[FieldError]:
    """What vLLM's hybrid Qwen3.5 classes need of config.json numbers, checked before any
    formula divides by them: at least one full-attention and one Gated DeltaNet layer, and head
    counts that split evenly over the TP ranks (vLLM asserts divisibility when it shards)."""
    where = "spec.model.architecture"
    errors = []
    if arch.num_full_attention_layers < 1 or arch.num_gdn_layers < 1:
        errors.append(FieldError(f"{where}.fullAttentionInterval",
                                 f"{arch.num_hidden_layers} layers with fullAttentionInterval {arch.full_attention_interval} "
                                 f"give {arch.num_full_attention_layers} full-attention and {arch.num_gdn_layers} GDN layers; "
                                 "qdd plans hybrid models, which need at least one of each"))
    for field, heads in (("numAttentionHeads", arch.num_attention_heads), ("linearNumKeyHeads", arch.linear_num_key_heads),
                         ("linearNumValueHeads", arch.linear_num_value_heads)):
        if heads % tp:
            errors.append(FieldError(f"{where}.{field}", f"{heads} heads do not split over tensorParallel {tp}: "
                                                         "use a TP size that divides it"))
    kv = arch.num_key_value_heads
    if kv > arch.num_attention_heads or arch.num_attention_heads % kv:
        errors.append(FieldError(f"{where}.numKeyValueHeads", f"{kv} KV heads for {arch.num_attention_heads} attention "
                                                              "heads: grouped-query attention needs a divisor of them"))
    elif kv % tp and tp % kv:
        errors.append(FieldError(f"{where}.numKeyValueHeads", f"{kv} KV heads and tensorParallel {tp}: vLLM shards or "
                                                              "replicates KV heads only when one divides the other"))
    if arch.linear_num_value_heads % arch.linear_num_key_heads:
        errors.append(FieldError(f"{where}.linearNumValueHeads",
                                 f"{arch.linear_num_value_heads} GDN value heads for {arch.linear_num_key_heads} key heads: "
                                 "Gated DeltaNet needs a whole number of value heads per key head"))
    return errors


def _layout(role: str, rs: RoleSpec, gpus_per_node: int) -> tuple[int, int, list[FieldError]]:
    """(pods per endpoint, GPUs per pod). An endpoint fits one node, or fills whole nodes."""
    t = rs.topology
    gpus = t.data_parallel * t.tensor_parallel
    if gpus <= gpus_per_node:
        return 1, gpus, []
    if gpus_per_node % t.tensor_parallel:
        return 1, gpus, [FieldError(
            f"spec.{role}.topology.tensorParallel",
            f"an endpoint of {gpus} GPUs spans nodes of {gpus_per_node} GPUs, and tensorParallel {t.tensor_parallel} "
            f"does not divide {gpus_per_node}: a TP group cannot span nodes; use a divisor of {gpus_per_node}")]
    if gpus % gpus_per_node:
        return 1, gpus, [FieldError(
            f"spec.{role}.topology.dataParallel",
            f"an endpoint of {gpus} GPUs (dataParallel {t.data_parallel} × tensorParallel {t.tensor_parallel}) spans "
            f"nodes of {gpus_per_node} GPUs, so it must fill whole nodes with whole TP groups: use a multiple of "
            f"{gpus_per_node // max(1, t.tensor_parallel) or 1} data-parallel ranks")]
    return gpus // gpus_per_node, gpus_per_node, []


def _common_env(spec: QwenDisaggDeploymentSpec, gpu: GPUKind) -> list[EnvEntry]:
    kv = spec.kv_transfer
    env = [
        EnvEntry("VLLM_SSM_CONV_STATE_LAYOUT", "DS"),
        EnvEntry("VLLM_LOGGING_COLOR", "0"),
        EnvEntry("VLLM_NIXL_SIDE_CHANNEL_HOST", value=kv.side_channel_host)
        if kv.side_channel_host else EnvEntry("VLLM_NIXL_SIDE_CHANNEL_HOST", field_path="status.podIP"),
        EnvEntry("VLLM_NIXL_SIDE_CHANNEL_PORT", str(kv.side_channel_port)),
    ]
    mnnvl = gpu.multi_node_nvlink if kv.ucx.mnnvl is None else kv.ucx.mnnvl
    if mnnvl:
        env.append(EnvEntry("UCX_CUDA_IPC_ENABLE_MNNVL", "y"))
    if kv.ucx.tls:
        env.append(EnvEntry("UCX_TLS", kv.ucx.tls))
    env.append(EnvEntry("UCX_MEMTYPE_CACHE", "y" if kv.ucx.memtype_cache else "n"))
    src = spec.model.source
    if src and src.hugging_face:
        hf = src.hugging_face
        if hf.token_secret_ref:
            env.append(EnvEntry("HF_TOKEN", value_from={"secretKeyRef": {"name": hf.token_secret_ref.name,
                                                                          "key": hf.token_secret_ref.key}}))
        if hf.cache_pvc:
            env.append(EnvEntry("HF_HOME", "/hf-cache"))
    return env


def _cache_errors(spec: QwenDisaggDeploymentSpec, arch: str, product: str) -> list[FieldError]:
    """The compile cache on the model's own claim (mounted read-write: the engines could rewrite the
    checkpoint, docs/security.md); ``spec.model.cache.nodeSelector`` narrows the engines' trays
    (their architecture, GPU product and ``cluster.nodeSelector`` labels): a key of those with
    another value would prefetch to trays no engine can use."""
    out = []
    src, cc = spec.model.source, spec.engine.compile_cache
    if cc is not None and src is not None and src.pvc is not None and cc.claim_name == src.pvc.claim_name:
        out.append(FieldError("spec.engine.compileCache.claimName",
                              f"{cc.claim_name!r} is the model's claim (spec.model.source.pvc.claimName), which the "
                              "engines would then mount read-write: give the compile cache a claim of its own"))
    cache = spec.model.cache
    if cache is None:
        return out
    engines = {"kubernetes.io/arch": arch, "nvidia.com/gpu.product": product, **spec.cluster.node_selector}
    return out + [FieldError(f"spec.model.cache.nodeSelector.{k}",
                       f"{v!r} differs from the engines' {k}={engines[k]!r}: the prefetch would fill trays no engine "
                       "runs on; remove the key or give it the engines' value (the cache's selector only narrows theirs)")
            for k, v in cache.node_selector.items() if k in engines and engines[k] != v]


def _model_arg(spec: QwenDisaggDeploymentSpec) -> str:
    """The engine's model argument: with the node-local weight cache, the link its init container
    points at the tray's verified copy or at the claim (qdd.plan.weight_cache); with a claim, its mount."""
    src = spec.model.source
    if spec.model.cache is not None:
        return MODEL_LINK
    return MODEL_MOUNT if src and src.pvc else spec.model.name


def _role_errors(role: str, rs: RoleSpec, profile: EngineProfile, spec: QwenDisaggDeploymentSpec) -> list[FieldError]:
    """What one role's spec gets wrong for this engine: extra args and env, backends the engine
    lacks, ports that collide with the role's NIXL side-channel ports."""
    tu = rs.tuning
    errors = check_extra(role, rs, profile.version)
    if tu.gdn_prefill_backend and not profile.has_gdn_prefill_backend:
        errors.append(FieldError(f"spec.{role}.tuning.gdnPrefillBackend",
                                 f"vLLM {profile.version} has no --gdn-prefill-backend; remove it"))
    side_base, dp = spec.kv_transfer.side_channel_port, rs.topology.data_parallel
    for port, field in ((spec.ports.http, "spec.ports.http"), (spec.ports.data_parallel_rpc, "spec.ports.dataParallelRpc")):
        if side_base <= port < side_base + dp:
            errors.append(FieldError(field, f"port {port} collides with the NIXL side-channel ports "
                                            f"{side_base}..{side_base + dp - 1} of {role} (base + DP rank); "
                                            "move spec.kvTransfer.sideChannelPort or this port"))
    return errors


@dataclass(frozen=True)
class _Resolved:
    """What the spec's names resolve to in the catalog."""

    checkpoint: Checkpoint
    gpu: GPUKind
    profile: EngineProfile
    gpus_per_node: int
    served: str
    kv_cache_dtype: str
    """What every engine pod renders as --kv-cache-dtype: the spec's, or what the checkpoint declares."""
    kv_cache_dtype_source: str


def _resolve(spec: QwenDisaggDeploymentSpec) -> _Resolved:
    """Checkpoint, GPU kind and engine profile of the spec. Raises :class:`SpecError`."""
    try:
        ckpt = resolve_checkpoint(spec.model.name, _inline_architecture(spec), spec.model.quantization)
    except UnknownModelError as e:
        raise SpecError.one("spec.model.name", str(e)) from None
    try:
        gpu = gpu_kind(spec.cluster.gpu_type)
    except UnknownGPUError as e:
        raise SpecError.one("spec.cluster.gpuType", str(e)) from None
    try:
        profile = engine_profile(spec.engine.vllm_version)
    except UnknownEngineError as e:
        raise SpecError.one("spec.engine.vllmVersion", str(e)) from None
    errors = _architecture_errors(ckpt.architecture, spec.decode.topology.tensor_parallel)
    if errors:
        raise SpecError(errors)
    served = spec.model.served_model_name or spec.model.name.rstrip("/").split("/")[-1]
    asked = spec.decode.tuning.kv_cache_dtype  # equal on both roles (a rule of the API)
    kv_dtype, kv_source = ((ckpt.kv_cache_dtype_auto, ckpt.kv_cache_dtype_source) if asked == "auto" else
                           (asked, "spec.{prefill,decode}.tuning.kvCacheDtype"))
    if kv_dtype == "nvfp4":
        raise SpecError.one("spec.decode.tuning.kvCacheDtype",
                            "the checkpoint declares an nvfp4 KV cache, which gives wrong output for Qwen3.5 on vLLM 0.33 "
                            "(vllm#55673): set kvCacheDtype fp8 or bfloat16 on both roles")
    return _Resolved(ckpt, gpu, profile, spec.cluster.gpus_per_node or gpu.gpus_per_node, served, kv_dtype, kv_source)


def _decode_sizing_errors(spec: QwenDisaggDeploymentSpec, s: RoleSizing, k: int) -> list[FieldError]:
    """Decode sizing vLLM or the workload refuses: too few sequences per rank, batched tokens
    below the sequences, a capture size above the batched tokens, or (with k speculative tokens)
    not a multiple of the 1 + k tokens of a decode step."""
    d, w = spec.decode, spec.workload
    per_rank = sizing.per_rank_concurrency(w.concurrency, d.endpoints, d.topology.data_parallel)
    seqs, mnbt, capture = s.max_num_seqs or 0, s.max_num_batched_tokens, s.max_cudagraph_capture_size or 0
    q = sizing.decode_query_len(k)
    errors = []
    if k and capture and round_down_to_grid(capture) % q:
        errors.append(FieldError("spec.decode.tuning.maxCudagraphCaptureSize",
                                 f"{capture} is not a size on vLLM's capture grid that is a multiple of 1 + "
                                 f"numSpeculativeTokens = {q}: vLLM truncates it to the grid ({round_down_to_grid(capture)}), "
                                 f"rounds capture sizes up to multiples of {q} and drops those above it, so decode steps "
                                 f"lose their largest graphs; use {sizing.grid_multiple_near(capture, q, mnbt)} or remove it"))
    if seqs < per_rank:
        errors.append(FieldError("spec.decode.tuning.maxNumSeqs",
                                 f"{seqs} per DP rank is below the {per_rank} requests each of the "
                                 f"{d.endpoints * d.topology.data_parallel} decode DP ranks holds at concurrency "
                                 f"{w.concurrency}; raise it to at least {per_rank} or remove it"))
    if mnbt < seqs:
        errors.append(FieldError("spec.decode.tuning.maxNumBatchedTokens",
                                 f"{mnbt} is below maxNumSeqs {seqs}; vLLM requires max-num-batched-tokens ≥ max-num-seqs"))
    if capture > mnbt:
        errors.append(FieldError("spec.decode.tuning.maxCudagraphCaptureSize",
                                 f"{capture} exceeds max-num-batched-tokens {mnbt}; vLLM clamps it, so set at most {mnbt}"))
    return errors


def _pod_flags(names_of: tuple[str, str, str, str], role: str, ep: int, idx: int, pods_per: int, dp_local: int,
               spec: QwenDisaggDeploymentSpec, rs: RoleSpec) -> list[str]:
    """The flags that differ between the pods of one endpoint (ENGINE_FLAGS rows without a render):
    the DP layout over the endpoint's pods, the HTTP port and API servers of the leader."""
    plan_name, namespace, _, slot = names_of
    argv: list[str] = []
    if pods_per > 1:
        leader_dns = names.pod_dns(names.group_pod(plan_name, role, ep, 0, slot), plan_name, role, namespace)
        argv += ["--data-parallel-size-local", str(dp_local), "--data-parallel-address", leader_dns,
                 "--data-parallel-rpc-port", str(spec.ports.data_parallel_rpc)]
        if idx > 0:
            argv += ["--headless", "--data-parallel-start-rank", str(idx * dp_local)]
    if idx == 0:
        # Explicit, so the engine version does not decide it: vLLM 0.33's default with internal load
        # balancing is one API server per DP rank (vllm/entrypoints/cli/serve.py).
        argv += ["--port", str(spec.ports.http),
                 "--api-server-count", str(rs.tuning.api_server_count or rs.topology.data_parallel)]
    return argv


def _role(plan_name: str, namespace: str, role: str, spec: QwenDisaggDeploymentSpec, r: _Resolved,
          role_sizing: RoleSizing, slot: str = "a", count: int | None = None) -> tuple[RolePlan, list[FieldError]]:
    """One role's pods (argv from the ENGINE_FLAGS table, env, ranks, ports) and its errors.
    ``count``: endpoints to lay out (None: spec.<role>.endpoints); the sizing stays the spec's."""
    rs: PrefillSpec | DecodeSpec = spec.prefill if role == "prefill" else spec.decode
    count = rs.endpoints if count is None else count
    t, tu, profile = rs.topology, rs.tuning, r.profile
    pods_per, gpus_per_pod, errors = _layout(role, rs, r.gpus_per_node)
    async_on = profile.async_scheduling_race_fixes if tu.async_scheduling is None else tu.async_scheduling
    kv_role = profile.kv_role_prefill if role == "prefill" else profile.kv_role_decode
    kv = spec.kv_transfer
    ctx = RoleContext(spec, rs, profile, role_sizing, kv_role, async_on,
                      kv_transfer_config(kv_role, kv.load_failure_policy, list(kv.backends), kv.lease_seconds), r.served,
                      r.kv_cache_dtype)
    first = [_model_arg(spec), *role_flags(ctx, first=True)]
    after = [*role_flags(ctx, first=False), *workaround_args(spec, profile.version), *rs.extra_args]
    env_list = _common_env(spec, r.gpu) + extra_env(rs)
    cache_key = None
    if spec.engine.compile_cache is not None:
        cache_key = compile_cache_key(spec, rs, r.gpu.name, first + after, env_list)
        env_list += cache_env(cache_key)
    env = tuple(env_list)
    dp_local = t.data_parallel // pods_per
    pods = []
    for ep in range(count):
        for idx in range(pods_per):
            start = idx * dp_local
            pod_name = (names.group_pod(plan_name, role, ep, idx, slot) if pods_per > 1
                        else names.statefulset_pod(plan_name, role, ep, slot))
            argv = first + _pod_flags((plan_name, namespace, role, slot), role, ep, idx, pods_per, dp_local, spec, rs) + after
            pods.append(PodPlan(
                name=pod_name, role=role, endpoint=ep, group_role="leader" if idx == 0 else "worker",
                argv=tuple(argv), env=env, gpus=gpus_per_pod, dp_size_local=dp_local, dp_start_rank=start,
                side_channel_ports=tuple(kv.side_channel_port + x for x in range(start, start + dp_local)),
                serves_http=idx == 0))
    plan = RolePlan(
        role=role, endpoints=count, dp=t.data_parallel, tp=t.tensor_parallel, expert_parallel=t.expert_parallel,
        pods_per_endpoint=pods_per, gpus_per_pod=gpus_per_pod, max_num_batched_tokens=role_sizing.max_num_batched_tokens,
        max_num_seqs=role_sizing.max_num_seqs, max_cudagraph_capture_size=role_sizing.max_cudagraph_capture_size,
        gpu_memory_utilization=tu.gpu_memory_utilization or profile.gpu_memory_utilization_default,
        async_scheduling=async_on, kv_role=kv_role, pods=tuple(pods), compile_cache_key=cache_key)
    a2a_errors, a2a_warnings = all2all_problems(role, tu, profile.version, r.gpu, pods_per)
    errors += _role_errors(role, rs, profile, spec) + a2a_errors
    # The argv parses (checked above): now what vLLM's engine configuration refuses at start-up. The rules
    # are vLLM 0.33.0's (qdd.plan.engine_config); other versions are not judged by them.
    if pods and not errors and profile.version == serve_options().vllm_version:
        errors += config_errors(role_options(role, list(pods[0].argv), list(rs.extra_args)))
    return dataclasses.replace(plan, warnings=tuple(a2a_warnings)), errors


def _placement_errors(spec: QwenDisaggDeploymentSpec, r: _Resolved, prefill: RolePlan,
                      decode: RolePlan) -> list[FieldError]:
    """A deployment too large for one resource, or for the NVLink domain it must stay in."""
    errors = []
    pods = len(prefill.pods) + len(decode.pods)
    if pods > MAX_ENGINE_PODS:
        big = "decode" if len(decode.pods) > len(prefill.pods) else "prefill"
        errors.append(FieldError(f"spec.{big}.endpoints",
                                 f"{pods} engine pods ({len(prefill.pods)} prefill + {len(decode.pods)} decode) are more than "
                                 f"one deployment may have ({MAX_ENGINE_PODS}: 16 NVL72 racks); split it into several "
                                 "deployments"))
    gpu, gpn = r.gpu, r.gpus_per_node
    total_gpus, domain_gpus = prefill.gpus + decode.gpus, gpu.nvlink_domain_nodes * gpn
    if spec.cluster.same_nvlink_domain and gpu.multi_node_nvlink and total_gpus > domain_gpus:
        more = prefill.endpoints > 1 or decode.endpoints > 1
        # Name the role that holds most of the GPUs: lowering the other one cannot make it fit.
        role = "prefill" if prefill.gpus >= decode.gpus else "decode"
        fix = ("use fewer endpoints, split the endpoints over two deployments, or set cluster.sameNVLinkDomain: "
               "false (each DP/EP group stays in one domain, P→D KV transfer between domains leaves NVLink)" if more else
               f"use endpoints of fewer GPUs ({prefill.topology_name} + {decode.topology_name} now; a larger "
               "tensorParallel shards the dense weights, so fewer ranks hold the model), or set "
               "cluster.sameNVLinkDomain: false (P→D KV transfer then leaves NVLink)")
        errors.append(FieldError(
            f"spec.{role}.endpoints" if more else "spec.cluster.sameNVLinkDomain",
            f"{total_gpus} GPUs ({prefill.gpus} prefill + {decode.gpus} decode) do not fit one NVLink domain of "
            f"{gpu.nvlink_domain_nodes} × {gpn} = {domain_gpus} {gpu.name} GPUs, and cluster.sameNVLinkDomain keeps "
            f"every pod in one: {fix}"))
    return errors


def _spec_warnings(spec: QwenDisaggDeploymentSpec) -> list[str]:
    """Warnings the spec alone gives (no plan numbers)."""
    warnings = []
    pvc = spec.model.source is not None and spec.model.source.pvc is not None
    if spec.model.revision is None and not pvc:
        warnings.append("spec.model.revision is unset: prefill and decode may load different weights after an upstream "
                        "update, and the NIXL handshake does not check revisions (vllm#55776); pin a commit")
    elif spec.model.revision is not None and pvc:
        warnings.append("spec.model.revision has no effect with a PVC source: the engines load the files on the volume "
                        "(both roles mount the same one)")
    for role, rs in (("prefill", spec.prefill), ("decode", spec.decode)):
        if rs.endpoints == 1:
            warnings.append(f"{role} has one endpoint: no PodDisruptionBudget protects it (one that did would block "
                            f"every drain of its nodes), so a drain stops {role} until the endpoint is back elsewhere; "
                            "run two endpoints to keep serving through drains")
    if spec.kv_transfer.side_channel_host:
        warnings.append("kvTransfer.sideChannelHost is fixed: every engine pod advertises "
                        f"{spec.kv_transfer.side_channel_host}; only correct when that address reaches each pod "
                        "(e.g. one pod per host with hostNetwork)")
    if spec.router.service_type != "ClusterIP":
        warnings.append(f"spec.router.serviceType is {spec.router.service_type}: the router (an OpenAI API without "
                        "authentication) is reachable from outside the cluster "
                        f"({'through every node' if spec.router.service_type == 'NodePort' else 'through a cloud load balancer'}"
                        "); use ClusterIP and an Ingress or gateway with authentication (docs/security.md)")
    return warnings + router_warnings(spec)


def _capture_warnings(spec: QwenDisaggDeploymentSpec, k: int) -> list[str]:
    """A decode capture size the user set that vLLM changes, or that leaves decode steps without graphs."""
    d, w = spec.decode, spec.workload
    capture = d.tuning.max_cudagraph_capture_size
    if capture is None:
        return []
    out = []
    on_grid = round_down_to_grid(capture)
    if on_grid != capture:
        out.append(f"decode maxCudagraphCaptureSize {capture} is off vLLM's capture grid (1, 2, 4, steps of 8 to 256, "
                   f"then of 16): vLLM captures up to {on_grid} and logs 'Truncating max_cudagraph_capture_size'")
    step = sizing.decode_query_len(k) * sizing.per_rank_concurrency(w.concurrency, d.endpoints, d.topology.data_parallel)
    if capture < step:
        out.append(f"decode maxCudagraphCaptureSize {capture} is below the {step} tokens of a full decode step per rank "
                   f"({w.concurrency} requests over {d.endpoints * d.topology.data_parallel} ranks"
                   + (f", 1 + {k} tokens each" if k else "") + "): larger steps run without CUDA graphs")
    return out


def speculative_tokens(spec: QwenDisaggDeploymentSpec) -> int:
    """k of spec.speculative (0 without speculative decoding)."""
    return spec.speculative.num_speculative_tokens if spec.speculative else 0


def _sizing(spec: QwenDisaggDeploymentSpec, r: _Resolved, m: RankMemory
            ) -> tuple[RoleSizing, RoleSizing, list[FieldError], list[str]]:
    """Both roles' sizing after the memory checks: weights that fit, max-num-seqs within the cache blocks."""
    w, d, k = spec.workload, spec.decode, m.speculative_tokens
    prefill_sizing = sizing.prefill_sizing(spec.prefill.tuning, w.isl, r.profile.default_max_num_seqs(r.gpu))
    decode_sizing = sizing.decode_sizing(d.tuning, r.profile, r.gpu, w.concurrency, d.endpoints, d.topology.data_parallel, k)
    errors = (_decode_sizing_errors(spec, decode_sizing, k)
              + _prefill_sizing_errors(spec, prefill_sizing, r.profile.default_max_num_seqs(r.gpu)))
    warnings = _capture_warnings(spec, k)
    fit = [e for role, rs, s in (("prefill", spec.prefill, prefill_sizing), ("decode", d, decode_sizing))
           for e in weights_fit_errors(role, m, rs, s)]
    if fit:
        return prefill_sizing, decode_sizing, errors + fit, warnings
    prefill_sizing, pe, pw = gdn_block_limit("prefill", m, spec.prefill, prefill_sizing)
    decode_sizing, de, dw = gdn_block_limit("decode", m, d, decode_sizing)
    return prefill_sizing, decode_sizing, errors + pe + de, warnings + pw + dw


def _speculative_errors(spec: QwenDisaggDeploymentSpec, ckpt: Checkpoint) -> list[FieldError]:
    """MTP needs MTP layers, and k above their count must be a multiple of it (vLLM 0.33,
    vllm/config/speculative.py: num_speculative_tokens divisible by n_predict)."""
    n = ckpt.architecture.mtp_num_hidden_layers
    if spec.speculative is None:
        return []
    if n < 1:
        return [FieldError("spec.speculative.method",
                           f"{ckpt.architecture.name} ships no MTP layers (mtpNumHiddenLayers 0): remove spec.speculative")]
    k = spec.speculative.num_speculative_tokens
    if k > n and k % n:
        return [FieldError("spec.speculative.numSpeculativeTokens",
                           f"{k} draft tokens over {n} MTP layers: vLLM needs a multiple of {n} above {n}; use "
                           f"{n * (k // n)} or {n * (k // n + 1)}")]
    return []


def _prefill_sizing_errors(spec: QwenDisaggDeploymentSpec, s: RoleSizing, default_seqs: int) -> list[FieldError]:
    seqs = s.max_num_seqs or default_seqs
    if s.max_num_batched_tokens < seqs:
        field = "maxNumBatchedTokens" if spec.prefill.tuning.max_num_batched_tokens else "maxNumSeqs"
        return [FieldError(f"spec.prefill.tuning.{field}",
                           f"max-num-batched-tokens {s.max_num_batched_tokens} is below max-num-seqs {seqs}; vLLM "
                           "requires max-num-batched-tokens ≥ max-num-seqs")]
    return []


def build_plan(resource: Resource, slot: str = "a", endpoints: tuple[int, int] | None = None) -> Plan:
    """Plan a parsed resource: resolve the catalog entries, size both roles, check their memory,
    assemble their pods, predict the decode capacity, check placement. ``slot``: which of the two
    slots (qdd.names) the engine pods are named for; the generation does not depend on it.
    ``endpoints``: (prefill, decode) endpoints to lay out instead of spec.<role>.endpoints — the
    autoscaler's counts (qdd.controller.autoscaling); every argv, the sizing included, stays the one
    the spec's counts give, so a change of count never changes a pod (DESIGN.md: a change of
    replicas never changes a pod template). Raises :class:`SpecError` with every problem found."""
    spec, w = resource.spec, resource.spec.workload
    r = _resolve(spec)
    fix_errors, fix_warnings = fix_problems(spec, r.profile.version)
    errors = (check_roles_match(spec.prefill, spec.decode) + _speculative_errors(spec, r.checkpoint) + fix_errors
              + router_problems(spec))
    max_len, want = r.checkpoint.architecture.max_position_embeddings, max_model_len(spec)
    if want > max_len:
        field, what = (("spec.workload.maxModelLen", f"maxModelLen {want} tokens") if w.max_model_len else
                       ("spec.workload.osl", f"isl + osl = {want} tokens"))
        errors.append(FieldError(field, f"{what} exceeds the model's context of {max_len} "
                                        "(config.json max_position_embeddings)"))
    m = RankMemory(r.checkpoint, r.gpu, r.profile, r.kv_cache_dtype, speculative_tokens(spec), r.gpus_per_node,
                   max_model_len(spec))
    prefill_sizing, decode_sizing, sizing_errors, warnings = _sizing(spec, r, m)
    n_prefill, n_decode = endpoints if endpoints is not None else (None, None)
    prefill, prefill_errors = _role(resource.name, resource.namespace, "prefill", spec, r, prefill_sizing, slot,
                                    n_prefill)
    decode, decode_errors = _role(resource.name, resource.namespace, "decode", spec, r, decode_sizing, slot, n_decode)
    cap, cap_errors, cap_warnings = decode_capacity_check(spec, m, decode_sizing, decode.gpus_per_endpoint)
    errors += sizing_errors + prefill_errors + decode_errors + cap_errors + _placement_errors(spec, r, prefill, decode)
    errors += _cache_errors(spec, r.gpu.node_arch, r.gpu.product_label)
    warnings += fix_warnings + cap_warnings + list(prefill.warnings) + list(decode.warnings) + _spec_warnings(spec)
    warnings += startup_warnings(spec, r.checkpoint)
    if spec.cluster.gpus_per_node is not None and spec.cluster.gpus_per_node != r.gpu.gpus_per_node:
        warnings.append(f"spec.cluster.gpusPerNode {spec.cluster.gpus_per_node} differs from a {r.gpu.name} node's "
                        f"{r.gpu.gpus_per_node} GPUs (qdd.catalog.gpus): the plan places endpoints on nodes of "
                        f"{spec.cluster.gpus_per_node}; check the nodes' allocatable nvidia.com/gpu")
    if errors:
        raise SpecError(errors)
    compute_domain = r.gpu.multi_node_nvlink if spec.cluster.compute_domain is None else spec.cluster.compute_domain
    gen = generation_id(spec, r.kv_cache_dtype, (prefill.pods or decode.pods)[0].argv)
    return Plan(name=resource.name, namespace=resource.namespace, spec=spec, checkpoint=r.checkpoint, gpu=r.gpu,
                profile=r.profile, served_model_name=r.served, kv_cache_dtype=r.kv_cache_dtype,
                kv_cache_dtype_source=r.kv_cache_dtype_source, prefill=prefill, decode=decode,
                router=router_plan(resource.name, resource.namespace, spec, gen), capacity=cap,
                compute_domain=compute_domain, gpus_per_node=r.gpus_per_node, warnings=tuple(warnings),
                generation=gen, slot=slot)
