"""Spec → Plan. Pure: no I/O, no Kubernetes client. Every rule that can make a deployment fail in
the field is checked here; all problems are returned at once as a :class:`SpecError`."""

from __future__ import annotations

import dataclasses

from .. import names
from ..api import Resource
from ..api.spec import QwenDisaggDeploymentSpec, RoleSpec
from ..catalog import (Architecture, EngineProfile, GPUKind, UnknownEngineError, UnknownGPUError, UnknownModelError,
                       engine_profile, gpu_kind, resolve_checkpoint)
from ..catalog.vllm_options import serve_options
from ..errors import FieldError, SpecError
from . import sizing
from .args import check_extra, check_roles_match, extra_env, kv_transfer_config
from .memory import cache_layout, decode_capacity, rank_budget
from .router import router_plan
from .types import EnvEntry, Plan, PodPlan, RolePlan

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
    missing = [f.alias for k, f in type(a).model_fields.items() if k != "name" and getattr(a, k) is None]
    required = [f.alias for k, f in type(a).model_fields.items() if k != "name" and f.default is None]
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


def _model_arg(spec: QwenDisaggDeploymentSpec) -> str:
    src = spec.model.source
    return MODEL_MOUNT if src and src.pvc else spec.model.name


def _role(plan_name: str, namespace: str, role: str, spec: QwenDisaggDeploymentSpec, rs: RoleSpec, endpoints: int,
          profile: EngineProfile, gpu: GPUKind, gpus_per_node: int, served: str,
          sizing_flags: dict[str, int | None], errors: list[FieldError]) -> RolePlan:
    t, tu = rs.topology, rs.tuning
    pods_per, gpus_per_pod, errs = _layout(role, rs, gpus_per_node)
    errors.extend(errs)
    errors.extend(check_extra(role, rs, profile.version))
    if tu.gdn_prefill_backend and not profile.has_gdn_prefill_backend:
        errors.append(FieldError(f"spec.{role}.tuning.gdnPrefillBackend",
                                 f"vLLM {profile.version} has no --gdn-prefill-backend; remove it"))
    choices = serve_options().option("all2all-backend").choices or ()
    if tu.all2all_backend and profile.version == serve_options().vllm_version and tu.all2all_backend not in choices:
        errors.append(FieldError(f"spec.{role}.tuning.all2allBackend",
                                 f"{tu.all2all_backend!r} is not an --all2all-backend of vLLM {profile.version}: "
                                 f"use one of {', '.join(choices)}"))
    async_on = profile.async_scheduling_race_fixes if tu.async_scheduling is None else tu.async_scheduling
    kv_role = profile.kv_role_prefill if role == "prefill" else profile.kv_role_decode
    util = tu.gpu_memory_utilization or profile.gpu_memory_utilization_default
    dp_local = t.data_parallel // pods_per
    multi = pods_per > 1

    base: list[str] = [_model_arg(spec), "--served-model-name", served,
                       "--tensor-parallel-size", str(t.tensor_parallel),
                       "--data-parallel-size", str(t.data_parallel)]
    tail: list[str] = []
    if t.expert_parallel:
        tail.append("--enable-expert-parallel")
    tail += ["--generation-config", "vllm", "--no-enable-prefix-caching",
             "--async-scheduling" if async_on else "--no-async-scheduling",
             "--stream-interval", str(tu.stream_interval),
             "--mamba-ssm-cache-dtype", tu.mamba_ssm_cache_dtype]
    if tu.kv_cache_dtype != "auto":
        tail += ["--kv-cache-dtype", tu.kv_cache_dtype]
    if tu.language_model_only:
        tail.append("--language-model-only")
    for flag, value in sizing_flags.items():
        if value is not None:
            tail += [flag, str(value)]
    if tu.gpu_memory_utilization is not None:
        tail += ["--gpu-memory-utilization", str(tu.gpu_memory_utilization)]
    if tu.gdn_prefill_backend and tu.gdn_prefill_backend != "auto":
        # vLLM 0.33 has no 'auto' choice (docs/vllm-0.33-facts.md): auto is the flag left out.
        tail += ["--gdn-prefill-backend", tu.gdn_prefill_backend]
    if tu.all2all_backend:
        tail += ["--all2all-backend", tu.all2all_backend]
    tail += ["--kv-transfer-config", kv_transfer_config(kv_role, spec.kv_transfer.load_failure_policy,
                                                         list(spec.kv_transfer.backends))]
    tail += list(rs.extra_args)

    env = tuple(_common_env(spec, gpu) + extra_env(rs))
    side_base = spec.kv_transfer.side_channel_port
    pods: list[PodPlan] = []
    for ep in range(endpoints):
        for idx in range(pods_per):
            start = idx * dp_local
            leader = idx == 0
            pod_name = names.group_pod(plan_name, role, ep, idx) if multi else names.statefulset_pod(plan_name, role, ep)
            argv = list(base)
            if multi:
                leader_dns = names.pod_dns(names.group_pod(plan_name, role, ep, 0), plan_name, role, namespace)
                argv += ["--data-parallel-size-local", str(dp_local), "--data-parallel-address", leader_dns,
                         "--data-parallel-rpc-port", str(spec.ports.data_parallel_rpc)]
                if not leader:
                    argv += ["--headless", "--data-parallel-start-rank", str(start)]
            if leader:
                argv += ["--port", str(spec.ports.http)]
                if tu.api_server_count is not None:
                    argv += ["--api-server-count", str(tu.api_server_count)]
            argv += tail
            pods.append(PodPlan(
                name=pod_name, role=role, endpoint=ep, group_role="leader" if leader else "worker", argv=tuple(argv),
                env=env, gpus=gpus_per_pod, dp_size_local=dp_local, dp_start_rank=start,
                side_channel_ports=tuple(side_base + r for r in range(start, start + dp_local)), serves_http=leader))

    reserved = set(range(side_base, side_base + t.data_parallel))
    for port, field in ((spec.ports.http, "spec.ports.http"), (spec.ports.data_parallel_rpc, "spec.ports.dataParallelRpc")):
        if port in reserved:
            errors.append(FieldError(field, f"port {port} collides with the NIXL side-channel ports "
                                            f"{side_base}..{side_base + t.data_parallel - 1} of {role} (base + DP rank); "
                                            "move spec.kvTransfer.sideChannelPort or this port"))
    return RolePlan(
        role=role, endpoints=endpoints, dp=t.data_parallel, tp=t.tensor_parallel, expert_parallel=t.expert_parallel,
        pods_per_endpoint=pods_per, gpus_per_pod=gpus_per_pod,
        max_num_batched_tokens=sizing_flags["--max-num-batched-tokens"] or 0,
        max_num_seqs=sizing_flags.get("--max-num-seqs"),
        max_cudagraph_capture_size=sizing_flags.get("--max-cudagraph-capture-size"),
        gpu_memory_utilization=util, async_scheduling=async_on, kv_role=kv_role, pods=tuple(pods))


def build_plan(resource: Resource) -> Plan:
    """Plan a parsed resource. Raises :class:`SpecError` with every problem found."""
    spec = resource.spec
    errors: list[FieldError] = []
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
    gpn = spec.cluster.gpus_per_node or gpu.gpus_per_node
    errors.extend(_architecture_errors(ckpt.architecture, spec.decode.topology.tensor_parallel))
    if errors:
        raise SpecError(errors)
    errors.extend(check_roles_match(spec.prefill, spec.decode))
    max_len = ckpt.architecture.max_position_embeddings
    if spec.workload.isl + spec.workload.osl > max_len:
        errors.append(FieldError("spec.workload.osl", f"isl + osl = {spec.workload.isl + spec.workload.osl} tokens exceeds "
                                                      f"the model's context of {max_len} (config.json max_position_embeddings)"))
    served = spec.model.served_model_name or spec.model.name.rstrip("/").split("/")[-1]
    w = spec.workload

    # Prefill sizing.
    p_mnbt = spec.prefill.tuning.max_num_batched_tokens or sizing.prefill_max_num_batched_tokens(w.isl)
    prefill_flags: dict[str, int | None] = {
        "--max-num-batched-tokens": p_mnbt,
        "--max-num-seqs": spec.prefill.tuning.max_num_seqs,
        "--max-cudagraph-capture-size": spec.prefill.tuning.max_cudagraph_capture_size,
    }
    # Decode sizing.
    d = spec.decode
    dt = d.tuning
    per_rank = sizing.per_rank_concurrency(w.concurrency, d.endpoints, d.topology.data_parallel)
    capture = dt.max_cudagraph_capture_size or sizing.decode_capture_size(w.concurrency, d.endpoints, d.topology.data_parallel)
    seqs = dt.max_num_seqs or sizing.decode_max_num_seqs(profile, gpu, capture)
    d_mnbt = dt.max_num_batched_tokens or sizing.decode_max_num_batched_tokens(profile, gpu, seqs)
    if seqs < per_rank:
        errors.append(FieldError("spec.decode.tuning.maxNumSeqs",
                                 f"{seqs} per DP rank is below the {per_rank} requests each of the "
                                 f"{d.endpoints * d.topology.data_parallel} decode DP ranks holds at concurrency "
                                 f"{w.concurrency}; raise it to at least {per_rank} or remove it"))
    if d_mnbt < seqs:
        errors.append(FieldError("spec.decode.tuning.maxNumBatchedTokens",
                                  f"{d_mnbt} is below maxNumSeqs {seqs}; vLLM requires max-num-batched-tokens ≥ max-num-seqs"))
    if capture > d_mnbt:
        errors.append(FieldError("spec.decode.tuning.maxCudagraphCaptureSize",
                                  f"{capture} exceeds max-num-batched-tokens {d_mnbt}; vLLM clamps it, so set at most {d_mnbt}"))
    decode_flags: dict[str, int | None] = {
        "--max-num-batched-tokens": d_mnbt, "--max-num-seqs": seqs, "--max-cudagraph-capture-size": capture,
    }

    prefill = _role(resource.name, resource.namespace, "prefill", spec, spec.prefill, spec.prefill.endpoints, profile,
                    gpu, gpn, served, prefill_flags, errors)
    decode = _role(resource.name, resource.namespace, "decode", spec, d, d.endpoints, profile, gpu, gpn, served,
                   decode_flags, errors)

    layout = cache_layout(ckpt, d.topology.tensor_parallel, dt.kv_cache_dtype, dt.mamba_ssm_cache_dtype, profile)
    budget = rank_budget(ckpt, gpu, d.topology.data_parallel, d.topology.tensor_parallel, d.topology.expert_parallel,
                         decode.gpu_memory_utilization, d_mnbt, seqs)
    cap = decode_capacity(layout, budget, d.topology.data_parallel, d.endpoints, w.isl, w.osl, w.random_range_ratio,
                          w.concurrency)
    warnings: list[str] = []
    if budget.cache_bytes <= 0:
        errors.append(FieldError("spec.decode.topology.dataParallel",
                                 f"weights ({budget.weight_bytes / 1e9:.1f} GB per rank) and activations leave no KV cache "
                                 f"on {gpu.name} ({budget.usable_bytes / 1e9:.1f} GB usable): shard over more ranks"))
    elif cap.refused:
        errors.append(FieldError(
            "spec.workload.concurrency",
            f"{w.concurrency} concurrent requests exceed the predicted decode capacity of {cap.total} "
            f"({d.endpoints} × {decode.topology_name}: {cap.per_endpoint} per endpoint at {cap.request_bytes / 2**20:.0f} MiB "
            f"per request of ~{cap.mean_tokens:.0f} tokens, {budget.cache_bytes / 1e9:.1f} GB KV cache per rank); "
            f"it needs {cap.endpoints_needed} decode endpoints ({cap.endpoints_needed * decode.gpus_per_endpoint} decode GPUs): "
            f"raise spec.decode.endpoints to {cap.endpoints_needed} or lower the concurrency"))
    elif cap.tight:
        warnings.append(f"concurrency {w.concurrency} is above the predicted decode capacity {cap.total} but within the "
                        "model's ±20% tolerance: expect preemptions near the target")

    pods = len(prefill.pods) + len(decode.pods)
    if pods > MAX_ENGINE_PODS:
        big = "decode" if len(decode.pods) > len(prefill.pods) else "prefill"
        errors.append(FieldError(f"spec.{big}.endpoints",
                                 f"{pods} engine pods ({len(prefill.pods)} prefill + {len(decode.pods)} decode) are more than "
                                 f"one deployment may have ({MAX_ENGINE_PODS}: 16 NVL72 racks); split it into several "
                                 "deployments"))
    compute_domain = gpu.multi_node_nvlink if spec.cluster.compute_domain is None else spec.cluster.compute_domain
    total_gpus = prefill.gpus + decode.gpus
    domain_gpus = gpu.nvlink_domain_nodes * gpn
    if spec.cluster.same_nvlink_domain and gpu.multi_node_nvlink and total_gpus > domain_gpus:
        errors.append(FieldError(
            "spec.prefill.endpoints",
            f"{total_gpus} GPUs ({prefill.gpus} prefill + {decode.gpus} decode) do not fit one NVLink domain of "
            f"{gpu.nvlink_domain_nodes} × {gpn} = {domain_gpus} {gpu.name} GPUs, and cluster.sameNVLinkDomain keeps "
            "every pod in one: use fewer endpoints, or split into two deployments"))
    if spec.kv_transfer.side_channel_host:
        warnings.append("kvTransfer.sideChannelHost is fixed: every engine pod advertises "
                        f"{spec.kv_transfer.side_channel_host}; only correct when that address reaches each pod "
                        "(e.g. one pod per host with hostNetwork)")
    if errors:
        raise SpecError(errors)
    return Plan(name=resource.name, namespace=resource.namespace, spec=spec, checkpoint=ckpt, gpu=gpu, profile=profile,
                served_model_name=served, prefill=prefill, decode=decode,
                router=router_plan(resource.name, resource.namespace, spec), capacity=cap,
                compute_domain=compute_domain, gpus_per_node=gpn, warnings=tuple(warnings))
