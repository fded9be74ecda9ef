"""vLLM argv and env of each engine pod (FACTS.md §1–2; flags checked against vLLM 0.33.0's parser
by tests/contract)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..api.spec import EnvVar, RoleSpec
from ..catalog.vllm_options import Resolved, serve_options
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
OWNED_FLAGS.update({
    "disable-hybrid-kv-cache-manager": "(NIXL P/D of hybrid models needs the hybrid KV cache manager on)",
    "nnodes": "topology.dataParallel (qdd lays an endpoint over nodes itself)",
    "node-rank": "(owned: derived from the pod's place in its endpoint)",
    "data-parallel-backend": "(owned: qdd runs DP ranks as processes of the engine pods)",
    "data-parallel-multi-port-external-lb": "(owned: qdd uses internal load balancing per endpoint)",
})


def owned_flags(token: str) -> list[str]:
    """The owned flags (long names, no dashes) one argv token may set in vLLM 0.33.0's parser.

    Resolved by :mod:`qdd.catalog.vllm_options` as vLLM resolves it: ``--no-X``, ``--x_y``,
    ``--flag=value``, single-dash aliases (``-tp``), prefixes of them (``-as`` → ``-asc``),
    one-letter options with their value attached (``-n2``), dotted JSON keys
    (``--kv-transfer-config.kv_role``) and unique prefixes of long options (``--asy``). A flag
    and its value joined by a space are read as the flag."""
    resolved = serve_options().resolve(token.strip().split(None, 1)[0] if token.strip() else "")
    return [o.name for o in resolved.options if o.name in OWNED_FLAGS] if resolved else []


def owned_flag(token: str) -> str | None:
    """The first of :func:`owned_flags`, or None."""
    found = owned_flags(token)
    return found[0] if found else None


@dataclass(frozen=True)
class ArgToken:
    """One option of an extraArgs list: its index, its spelling, what it resolves to, its value."""

    index: int
    given: str
    resolved: Resolved
    value: str | None


def option_tokens(args: list[str]) -> list[ArgToken]:
    """The options of an argv tail and their values, as vLLM's parser pairs them: a value is
    attached (``--x=v``) or the next token when that is not itself an option."""
    table = serve_options()
    out: list[ArgToken] = []
    i = 0
    while i < len(args):
        r = table.resolve(args[i])
        if r is None:
            i += 1
            continue
        value = r.attached
        takes = any(o.takes_value for o in r.options)
        if value is None and takes and i + 1 < len(args) and table.resolve(args[i + 1]) is None:
            value = args[i + 1]
            out.append(ArgToken(i, args[i], r, value))
            i += 2
            continue
        out.append(ArgToken(i, args[i], r, value if takes or value is not None else "true"))
        i += 1
    return out


def _owned_error(role: str, given: str, flag: str) -> str:
    where = OWNED_FLAGS[flag]
    fix = f"set spec.{role}.{where} instead" if where.startswith(("tuning", "topology")) else (
        f"set {where} instead" if where.startswith("spec") else f"remove it {where}")
    what = f"--{flag} is" if given.lstrip("-").replace("_", "-") == flag else f"{given} sets --{flag}, which is"
    return f"{what} owned by qdd; {fix}"


def _arg_errors(role: str, spec: RoleSpec, profile_version: str) -> list[FieldError]:
    table = serve_options()
    errors = []
    for i, arg in enumerate(spec.extra_args):
        field = f"spec.{role}.extraArgs[{i}]"
        if arg.startswith("-") and len(arg.split("=", 1)[0].split()) > 1:
            flag = owned_flag(arg)
            errors.append(FieldError(field, _owned_error(role, arg.split()[0], flag) if flag else
                                     f"{arg!r} is one argv element: give the flag and its value as two list items"))
    for tok in option_tokens(list(spec.extra_args)):
        field = f"spec.{role}.extraArgs[{tok.index}]"
        given = tok.given.split("=", 1)[0]
        names = [o.name for o in tok.resolved.options]
        owned = [n for n in names if n in OWNED_FLAGS]
        if given == "--":
            errors.append(FieldError(field, "'--' would end vLLM's options: remove it"))
        elif owned:
            errors.append(FieldError(field, _owned_error(role, given, owned[0])))
        elif tok.resolved.ambiguous:
            errors.append(FieldError(field, f"{given} is ambiguous in vLLM {table.vllm_version}'s parser "
                                            f"(--{', --'.join(names)}): spell the option out"))
        elif not names and profile_version == table.vllm_version:
            errors.append(FieldError(field, f"{given} is not a `vllm serve` option of vLLM {table.vllm_version} "
                                            "(the engine would exit at start): check its spelling"))
    return errors


def check_extra(role: str, spec: RoleSpec, profile_version: str = "0.33.0") -> list[FieldError]:
    """extraArgs/extraEnv may add to what qdd renders, never contradict it."""
    errors = _arg_errors(role, spec, profile_version)
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
    """``{flag: value}`` of the must-match flags in an extraArgs list, by the option each token
    resolves to (``--x v``, ``--x=v``, ``-q v``, a prefix; a bare flag is ``true``)."""
    out: dict[str, str] = {}
    for tok in option_tokens(args):
        for o in tok.resolved.options:
            if o.name in MUST_MATCH_FLAGS:
                out[o.name] = tok.value if tok.value is not None else "true"
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
    return EnvEntry(e.name, value=e.value, value_from=e.value_from.to_k8s() if e.value_from else None)
