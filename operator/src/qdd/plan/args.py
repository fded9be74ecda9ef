"""vLLM argv and env of each engine pod (FACTS.md §1–2; flags checked against vLLM 0.33.0's parser
by tests/contract)."""

from __future__ import annotations

import json

from ..api.spec import EnvVar, RoleSpec
from ..errors import FieldError
from .types import EnvEntry

# Flags qdd sets itself, and the spec field a user changes instead of passing them in extraArgs.
OWNED_FLAGS: dict[str, str] = {
    "served-model-name": "spec.model.servedModelName",
    "port": "spec.ports.http",
    "host": "(owned: engines listen on all pod addresses)",
    "tensor-parallel-size": "topology.tensorParallel",
    "data-parallel-size": "topology.dataParallel",
    "data-parallel-size-local": "topology.dataParallel",
    "data-parallel-address": "(owned: the endpoint leader's DNS name)",
    "data-parallel-rpc-port": "spec.ports.dataParallelRpc",
    "data-parallel-start-rank": "(owned: derived from the pod's place in its endpoint)",
    "data-parallel-rank": "(never valid for a headless pod; qdd sets start ranks)",
    "data-parallel-hybrid-lb": "(owned: qdd uses internal load balancing per endpoint)",
    "data-parallel-external-lb": "(owned: qdd uses internal load balancing per endpoint)",
    "headless": "(owned: set on worker pods)",
    "enable-expert-parallel": "topology.expertParallel",
    "enable-prefix-caching": "tuning.prefixCaching",
    "async-scheduling": "tuning.asyncScheduling",
    "stream-interval": "tuning.streamInterval",
    "mamba-ssm-cache-dtype": "tuning.mambaSsmCacheDtype",
    "kv-cache-dtype": "tuning.kvCacheDtype",
    "language-model-only": "tuning.languageModelOnly",
    "max-num-batched-tokens": "tuning.maxNumBatchedTokens",
    "max-num-seqs": "tuning.maxNumSeqs",
    "max-cudagraph-capture-size": "tuning.maxCudagraphCaptureSize",
    "gpu-memory-utilization": "tuning.gpuMemoryUtilization",
    "gdn-prefill-backend": "tuning.gdnPrefillBackend",
    "api-server-count": "tuning.apiServerCount",
    "all2all-backend": "tuning.all2allBackend",
    "kv-transfer-config": "spec.kvTransfer",
    "generation-config": "(owned: 'vllm', the seed's sampling defaults)",
}
OWNED_ENV: dict[str, str] = {
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "spec.kvTransfer.sideChannelHost",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "spec.kvTransfer.sideChannelPort",
    "VLLM_SSM_CONV_STATE_LAYOUT": "(owned: DS is required for NIXL P/D of GDN models)",
    "UCX_TLS": "spec.kvTransfer.ucx.tls",
    "UCX_CUDA_IPC_ENABLE_MNNVL": "spec.kvTransfer.ucx.mnnvl",
    "UCX_MEMTYPE_CACHE": "spec.kvTransfer.ucx.memtypeCache",
    "HF_TOKEN": "spec.model.source.huggingFace.tokenSecretRef",
}


def _flag_name(arg: str) -> str | None:
    if not arg.startswith("--"):
        return None
    name = arg[2:].split("=", 1)[0].replace("_", "-")
    return name[3:] if name.startswith("no-") else name


def check_extra(role: str, spec: RoleSpec) -> list[FieldError]:
    """extraArgs/extraEnv may add to what qdd renders, never contradict it."""
    errors = []
    for i, arg in enumerate(spec.extra_args):
        flag = _flag_name(arg)
        if flag in OWNED_FLAGS:
            where = OWNED_FLAGS[flag]
            fix = f"set spec.{role}.{where} instead" if where.startswith(("tuning", "topology")) else (
                f"set {where} instead" if where.startswith("spec") else f"remove it {where}")
            errors.append(FieldError(f"spec.{role}.extraArgs[{i}]", f"--{flag} is owned by qdd; {fix}"))
    for i, env in enumerate(spec.extra_env):
        if env.name in OWNED_ENV:
            where = OWNED_ENV[env.name]
            fix = f"set {where} instead" if where.startswith("spec") else f"remove it {where}"
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}].name", f"{env.name} is owned by qdd; {fix}"))
    return errors


def kv_transfer_config(kv_role: str, load_failure_policy: str, backends: list[str]) -> str:
    """--kv-transfer-config JSON (vllm/config/kv_transfer.py, KVTransferConfig); compact, sorted keys."""
    cfg = {
        "kv_connector": "NixlConnector",
        "kv_role": kv_role,
        "kv_buffer_device": "cuda",
        "kv_load_failure_policy": load_failure_policy,
        "kv_connector_extra_config": {"backends": list(backends)},
    }
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def extra_env(spec: RoleSpec) -> list[EnvEntry]:
    out = []
    for e in spec.extra_env:
        out.append(_user_env(e))
    return out


def _user_env(e: EnvVar) -> EnvEntry:
    return EnvEntry(e.name, value=e.value, value_from=e.value_from)
