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
    "model": "spec.model.name",
    "config": "(a config file could set any flag qdd owns, unchecked; pass its flags in extraArgs)",
}
SHORT_FLAGS: dict[str, str] = {
    "-tp": "tensor-parallel-size", "-dp": "data-parallel-size", "-dpn": "data-parallel-rank",
    "-dpr": "data-parallel-start-rank", "-dpl": "data-parallel-size-local", "-dpa": "data-parallel-address",
    "-dpp": "data-parallel-rpc-port", "-dph": "data-parallel-hybrid-lb", "-dpe": "data-parallel-external-lb",
    "-ep": "enable-expert-parallel", "-asc": "api-server-count",
}
"""vLLM's short aliases of owned flags (vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py)."""
OWNED_ENV: dict[str, str] = {
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "spec.kvTransfer.sideChannelHost",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "spec.kvTransfer.sideChannelPort",
    "VLLM_SSM_CONV_STATE_LAYOUT": "(owned: DS is required for NIXL P/D of GDN models)",
    "UCX_TLS": "spec.kvTransfer.ucx.tls",
    "UCX_CUDA_IPC_ENABLE_MNNVL": "spec.kvTransfer.ucx.mnnvl",
    "UCX_MEMTYPE_CACHE": "spec.kvTransfer.ucx.memtypeCache",
    "HF_TOKEN": "spec.model.source.huggingFace.tokenSecretRef",
    "HF_HOME": "spec.model.source.huggingFace.cachePvc",
    "VLLM_LOGGING_COLOR": "(owned: qdd renders 0)",
}
OWNED_FLAGS["disable-hybrid-kv-cache-manager"] = "(NIXL P/D of hybrid models needs the hybrid KV cache manager on)"


def owned_flag(arg: str) -> str | None:
    """The flag qdd owns that one argv element would set in vLLM's parser, or None.

    Sees through ``--no-X``, ``--x_y`` spellings, ``--flag=value``, a flag and its value joined by
    a space, vLLM's short aliases (``-tp``), dotted sub-keys (``--kv-transfer-config.kv_role``)
    and argparse's prefix abbreviations (``--max-num-seq``; vLLM's parser allows them)."""
    token = arg.strip().split(None, 1)[0].split("=", 1)[0] if arg.strip() else ""
    if token in SHORT_FLAGS:
        return SHORT_FLAGS[token]
    if not token.startswith("--"):
        return None
    root = token[2:].replace("_", "-").split(".", 1)[0]
    for name in (root, root[3:] if root.startswith("no-") else ""):
        if name in OWNED_FLAGS:
            return name
        if len(name) >= 4:
            prefixed = sorted(f for f in OWNED_FLAGS if f.startswith(name))
            if prefixed:
                return prefixed[0]
    return None


def check_extra(role: str, spec: RoleSpec) -> list[FieldError]:
    """extraArgs/extraEnv may add to what qdd renders, never contradict it."""
    errors = []
    for i, arg in enumerate(spec.extra_args):
        flag = owned_flag(arg)
        if flag is not None:
            where = OWNED_FLAGS[flag]
            fix = f"set spec.{role}.{where} instead" if where.startswith(("tuning", "topology")) else (
                f"set {where} instead" if where.startswith("spec") else f"remove it {where}")
            given = arg.split()[0].split("=", 1)[0]
            what = f"--{flag} is" if given.lstrip("-").replace("_", "-").removeprefix("no-") == flag else (
                f"{given} sets --{flag}, which is")
            errors.append(FieldError(f"spec.{role}.extraArgs[{i}]", f"{what} owned by qdd; {fix}"))
        elif arg.startswith("-") and len(arg.split("=", 1)[0].split()) > 1:
            errors.append(FieldError(f"spec.{role}.extraArgs[{i}]", f"{arg!r} is one argv element: give the flag and "
                                                                     "its value as two list items"))
    seen: set[str] = set()
    for i, env in enumerate(spec.extra_env):
        if env.name in OWNED_ENV:
            where = OWNED_ENV[env.name]
            fix = f"set {where} instead" if where.startswith("spec") else f"remove it {where}"
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}].name", f"{env.name} is owned by qdd; {fix}"))
        elif env.name in seen:
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}].name", f"{env.name} is given twice"))
        if env.value is not None and env.value_from is not None:
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}]", "set value or valueFrom, not both"))
        seen.add(env.name)
    return errors


# Flags qdd does not own but whose values must be equal on prefill and decode: the NIXL handshake
# of hybrid models compares them, or the transferred bytes are laid out differently (FACTS.md §2).
MUST_MATCH_FLAGS = ("block-size", "dtype", "mamba-cache-dtype", "quantization", "revision", "attention-backend",
                    "hf-overrides", "tokenizer")


def _flag_values(args: list[str]) -> dict[str, str]:
    """``{flag: value}`` of the must-match flags in an extraArgs list (``--x v`` or ``--x=v``; bare → "true")."""
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, _, value = arg[2:].replace("_", "-").partition("=")
        if name in MUST_MATCH_FLAGS:
            if not value:
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "true"
            out[name] = value
    return out


def check_roles_match(prefill: RoleSpec, decode: RoleSpec) -> list[FieldError]:
    """Must-match flags given in one role's extraArgs must be given, equal, in the other's."""
    p, d = _flag_values(list(prefill.extra_args)), _flag_values(list(decode.extra_args))
    errors = []
    for flag in sorted(set(p) | set(d)):
        if p.get(flag) != d.get(flag):
            errors.append(FieldError(
                "spec.decode.extraArgs",
                f"--{flag} is {p.get(flag, 'unset')!s} on prefill and {d.get(flag, 'unset')!s} on decode; "
                "prefill and decode must agree on it for the KV transfer (give it to both roles, equal)"))
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
