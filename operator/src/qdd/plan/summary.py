"""A Plan as plain data (``qdd plan -o json``, the status summary) and as a table for people."""

from __future__ import annotations

from typing import Any

from .. import labels
from .compile_cache import MOUNT
from .flags import max_model_len
from .memory import CAPACITY_TOLERANCE
from .startup import expected_starts
from .trays import describe as describe_trays
from .trays import tray_uses, trays
from .types import Plan, RolePlan

GB = 1e9
MIB = 2**20


def _role(r: RolePlan) -> dict[str, Any]:
    cache = {} if r.compile_cache_key is None else {"compileCache": {"key": r.compile_cache_key,
                                                                     "path": f"{MOUNT}/{r.compile_cache_key}"}}
    return cache | {
        "endpoints": r.endpoints, "topology": r.topology_name, "dataParallel": r.dp, "tensorParallel": r.tp,
        "expertParallel": r.expert_parallel, "podsPerEndpoint": r.pods_per_endpoint, "gpusPerPod": r.gpus_per_pod,
        "gpus": r.gpus, "maxNumBatchedTokens": r.max_num_batched_tokens, "maxNumSeqs": r.max_num_seqs,
        "maxCudagraphCaptureSize": r.max_cudagraph_capture_size, "gpuMemoryUtilization": r.gpu_memory_utilization,
        "asyncScheduling": r.async_scheduling, "kvRole": r.kv_role,
        "pods": [{"name": p.name, "endpoint": p.endpoint, "groupRole": p.group_role, "gpus": p.gpus,
                  "dpRanks": [p.dp_ranks.start, p.dp_ranks.stop - 1], "sideChannelPorts": list(p.side_channel_ports),
                  "argv": ["vllm", "serve", *p.argv], "env": [e.to_k8s() for e in p.env]} for p in r.pods],
    }


def summary(plan: Plan) -> dict[str, Any]:
    c, sp = plan.capacity, plan.spec.speculative
    lay, b = c.layout, c.budget
    return {
        "name": plan.name, "namespace": plan.namespace, "generation": plan.generation, "model": plan.spec.model.name,
        "architecture": plan.checkpoint.architecture.name, "gpuType": plan.gpu.name, "vllmVersion": plan.profile.version,
        "gpus": plan.gpus, "minNodes": plan.min_nodes, "computeDomain": plan.compute_domain,
        "trays": {"peak": trays(plan), "steady": trays(plan, peak=False),
                  "parts": [{"part": u.part, "trays": u.trays, "gpusAsked": u.gpus, "gpusHeld": u.held,
                             "gpusUnusable": u.unusable, "claims": u.claims, "transient": u.transient}
                            for u in tray_uses(plan)]},
        "prefill": _role(plan.prefill), "decode": _role(plan.decode),
        "router": {"replicas": plan.router.replicas, "args": ["vllm-router", *plan.router.args]},
        "decodeCapacity": {
            "predicted": c.total, "perEndpoint": c.per_endpoint, "target": c.target,
            "endpointsNeeded": c.endpoints_needed, "tolerance": CAPACITY_TOLERANCE,
            "meanResidentTokens": round(c.mean_tokens, 1), "requestBytes": c.request_bytes,
            "rank": {"hbmBytes": b.hbm_bytes, "gpuMemoryUtilization": b.gpu_memory_utilization,
                     "usableBytes": b.usable_bytes, "weightBytes": b.weight_bytes, "activationBytes": b.activation_bytes,
                     "cudaGraphBytes": b.cuda_graph_bytes, "nonTorchBytes": b.non_torch_bytes,
                     "kvCacheBytes": b.cache_bytes},
            "cache": {"kvCacheDtype": lay.kv_dtype, "kvCacheDtypeSource": plan.kv_cache_dtype_source, "kvBytesPerToken": lay.kv_bytes_per_token,
                      "gdnStateBytesPerRequest": lay.gdn_bytes_per_layer * plan.checkpoint.architecture.num_gdn_layers,
                      "gdnBlocksPerRequestPerGroup": lay.gdn_blocks, "blocksPerRank": c.blocks_per_rank,
                      "blockSize": lay.block_size, "pageBytes": lay.page_bytes, "layersPerGroup": lay.layers_per_group,
                      "attentionGroups": lay.attn_groups, "gdnGroups": lay.gdn_groups},
        },
        "engine": {"kvCacheDtype": plan.kv_cache_dtype, "kvCacheDtypeSource": plan.kv_cache_dtype_source,
                   "maxModelLen": max_model_len(plan.spec), "kvLeaseSeconds": plan.spec.kv_transfer.lease_seconds,
                   "revision": plan.spec.model.revision,
                   "speculativeConfig": None if sp is None else {"method": sp.method,
                                                                 "numSpeculativeTokens": sp.num_speculative_tokens}},
        "startup": {state: {"seconds": round(p.total, 1), **p.as_dict()}
                    for state, p in expected_starts(plan.spec, plan.checkpoint).items()},
        "warnings": list(plan.warnings),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def table(plan: Plan) -> str:
    s = summary(plan)
    cols = ["ROLE", "ENDPOINTS", "TOPOLOGY", "PODS/EP", "GPUS/POD", "GPUS", "BATCHED-TOKENS", "MAX-SEQS", "CUDAGRAPH-MAX",
            "ASYNC", "KV-ROLE"]
    rows = [cols]
    for role in ("prefill", "decode"):
        r = s[role]
        rows.append([role, r["endpoints"], r["topology"], r["podsPerEndpoint"], r["gpusPerPod"], r["gpus"],
                     r["maxNumBatchedTokens"], r["maxNumSeqs"], r["maxCudagraphCaptureSize"], r["asyncScheduling"],
                     r["kvRole"]])
    widths = [max(len(_fmt(row[i])) for row in rows) for i in range(len(cols))]
    lines = [f"{plan.namespace}/{plan.name}: {s['model']} ({s['architecture']}) on {s['gpuType']}, vLLM {s['vllmVersion']}",
             f"Generation: {s['generation']} (label {labels.GENERATION} of every engine pod; a new value is rolled "
             "as a new generation: docs/rollouts.md)"]
    lines += ["  ".join(_fmt(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(f"GPUs: {s['gpus']} ({plan.prefill.gpus} prefill + {plan.decode.gpus} decode) on at least "
                 f"{s['minNodes']} nodes of {plan.gpus_per_node}; ComputeDomain: {_fmt(plan.compute_domain)}")
    lines += describe_trays(plan)
    e = s["engine"]
    lines.append(f"Both roles: --kv-cache-dtype {e['kvCacheDtype']} ({e['kvCacheDtypeSource']}); --max-model-len "
                 f"{e['maxModelLen']}; KV lease {e['kvLeaseSeconds']} s; revision {e['revision'] or 'not pinned'}; "
                 + ("no speculative decoding" if e["speculativeConfig"] is None else
                    f"speculative {e['speculativeConfig']['method']} k={e['speculativeConfig']['numSpeculativeTokens']}"))
    dc = s["decodeCapacity"]
    rk, ca = dc["rank"], dc["cache"]
    w = plan.spec.workload
    verdict = "fits" if dc["predicted"] >= dc["target"] else (
        "above capacity, within tolerance" if not plan.capacity.refused else "REFUSED")
    lines += [
        "",
        f"Decode capacity (predicted): {dc['predicted']:,} concurrent requests "
        f"({plan.decode.endpoints} x {plan.decode.topology_name}, {dc['perEndpoint']:,} per endpoint); "
        f"target {dc['target']:,}: {verdict}",
        f"  per rank: HBM {rk['hbmBytes'] / GB:.1f} GB x {rk['gpuMemoryUtilization']} = {rk['usableBytes'] / GB:.1f} GB"
        f" - weights {rk['weightBytes'] / GB:.1f} - activations {rk['activationBytes'] / GB:.1f}"
        f" - CUDA graphs {rk['cudaGraphBytes'] / GB:.1f} - non-torch {rk['nonTorchBytes'] / GB:.1f}"
        f" = {rk['kvCacheBytes'] / GB:.1f} GB of KV cache",
        f"  cache: KV {ca['kvCacheDtype']} {ca['kvBytesPerToken']:,} B/token; GDN state "
        f"{ca['gdnStateBytesPerRequest'] / MIB:.1f} MiB/request x {ca['gdnBlocksPerRequestPerGroup']} "
        f"(1 + speculative tokens; SSM {plan.spec.decode.tuning.mamba_ssm_cache_dtype}); "
        f"hybrid block {ca['blockSize']:,} tokens, page {ca['pageBytes']:,} B, "
        f"{ca['attentionGroups']} attention + {ca['gdnGroups']} GDN groups x {ca['layersPerGroup']} layers",
        f"  request: ~{dc['meanResidentTokens']:,.0f} resident tokens (ISL {w.isl}, OSL {w.osl}, range ratio "
        f"{w.random_range_ratio}) -> {dc['requestBytes'] / MIB:,.0f} MiB with block rounding",
        f"  assumptions: weights from config.json parameter counts ({plan.checkpoint.expert_dtype} experts, "
        + (f"{plan.checkpoint.projection_dtype} attention and GDN, " if plan.checkpoint.projection_dtype else "")
        + f"{plan.checkpoint.dense_dtype} rest; spec.model.quantization); activations, CUDA graphs",
        f"  and non-torch memory are estimates; every client request resident on decode; +/-{CAPACITY_TOLERANCE:.0%} tolerance.",
    ]
    for warning in s["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"
