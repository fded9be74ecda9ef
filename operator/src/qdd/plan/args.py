"""What users may add to an engine pod (``extraArgs``, ``extraEnv``) and what it may not touch: every
token resolved as vLLM 0.33.0's parser resolves it and checked against the owned flags
(:mod:`qdd.plan.flags`), the owned variables, and the flags that must match between roles; plus the
``--kv-transfer-config`` value and the user's env entries (docs/facts/vllm-flags.md; checked
against vLLM's parser by tests/contract)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..api.spec import EnvVar, RoleSpec
from ..catalog.vllm_envs import env_problem, vllm_envs
from ..catalog.vllm_options import Resolved, serve_options
from ..errors import FieldError
from .compile_cache import CACHE_ENV, STARTUP_PLAN_ENV
from .engine_facts import env_no_effect_problem, kv_extra_problem
from .flags import OWNED_FLAGS
from .types import EnvEntry

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
    **{name: "spec.engine.compileCache" for name in (*CACHE_ENV, STARTUP_PLAN_ENV)},
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "spec.engine.compileCache (FlashInfer's autotune results stay below "
                                          "VLLM_CACHE_ROOT, in folders of FlashInfer's version and GPU arch)",
    "TORCHINDUCTOR_CACHE_DIR": "(owned: vLLM sets it itself below VLLM_CACHE_ROOT, whatever the pod says; "
                               "spec.engine.compileCache keeps it)",
    "PROMETHEUS_MULTIPROC_DIR": "(owned: vLLM makes a fresh one at every start; a fixed one on a volume that outlives "
                                "the engine serves stale metrics)",
}


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
    """One option of an extraArgs list: its index, its spelling, what it resolves to, its value
    (``true`` for a flag), and whether a value it needs is missing."""

    index: int
    given: str
    resolved: Resolved
    value: str | None
    missing_value: bool = False


def _values_wanted(r: Resolved) -> tuple[int, int]:
    """(fewest, most) values that follow an option in the argv (none when attached)."""
    nargs = {o.nargs for o in r.options}
    if r.attached is not None or nargs <= {"0"}:
        return 0, 0
    if nargs & {"+"}:
        return 1, 1 << 30
    if nargs & {"*"}:
        return 0, 1 << 30
    if nargs <= {"?"}:
        return 0, 1
    counts = [int(n) for n in nargs if n.isdigit()]
    return (max(counts), max(counts)) if counts else (1, 1)


def option_tokens(args: list[str]) -> tuple[list[ArgToken], list[int]]:
    """The options of an argv tail with their values, as vLLM's parser pairs them (a value is
    attached, ``--x=v``, or the following tokens that are not options themselves, as many as the
    option's nargs takes), and the indexes of the tokens that are neither (vLLM would exit with
    "unrecognized arguments")."""
    table = serve_options()
    out: list[ArgToken] = []
    stray: list[int] = []
    i = 0
    while i < len(args):
        r = table.resolve(args[i])
        if r is None:
            stray.append(i)
            i += 1
            continue
        fewest, most = _values_wanted(r)
        j = i + 1
        while j < len(args) and j - i - 1 < most and table.resolve(args[j]) is None:
            j += 1
        values = args[i + 1:j]
        value = r.attached if r.attached is not None else (" ".join(values) if values else (None if fewest else "true"))
        out.append(ArgToken(i, args[i], r, value, missing_value=len(values) < fewest and bool(r.options)))
        i = j
    return out, stray


def _owned_error(role: str, given: str, flag: str) -> str:
    where = OWNED_FLAGS[flag]
    fix = f"set spec.{role}.{where} instead" if where.startswith(("tuning", "topology")) else (
        f"set {where} instead" if where.startswith("spec") else f"remove it {where}")
    what = f"--{flag} is" if given.lstrip("-").replace("_", "-") == flag else f"{given} sets --{flag}, which is"
    return f"{what} owned by qdd; {fix}"


def _token_error(role: str, tok: ArgToken, profile_version: str) -> str | None:
    """Why one option of extraArgs is refused, or None."""
    table = serve_options()
    given = tok.given.split("=", 1)[0]
    names = [o.name for o in tok.resolved.options]
    owned = [n for n in names if n in OWNED_FLAGS]
    if given == "--":
        return "'--' would end vLLM's options: remove it"
    if tok.resolved.ambiguous:
        also = f"; {', '.join('--' + n for n in owned)} {'is' if len(owned) == 1 else 'are'} owned by qdd" if owned else ""
        return (f"{given} is ambiguous in vLLM {table.vllm_version}'s parser, which refuses it "
                f"(--{', --'.join(names[:6])}{', ...' if len(names) > 6 else ''}): spell the option out{also}")
    if "kv-transfer-config" in owned:
        for key in _kv_extra_keys(tok):
            if why := kv_extra_problem(key, profile_version):
                return why
    if owned:
        return _owned_error(role, given, owned[0])
    if _owned_subkeys(tok):
        opt, key, where = _owned_subkeys(tok)[0]
        return f"{key} of --{opt} is what qdd sets from spec.{role}.{where}: set that field instead"
    if not names and profile_version == table.vllm_version:
        return (f"{given} is not a `vllm serve` option of vLLM {table.vllm_version} (the engine would exit at start): "
                "check its spelling")
    if tok.missing_value:
        return f"{given} needs a value: give it as the next list item"
    return None


def _arg_errors(role: str, spec: RoleSpec, profile_version: str) -> list[FieldError]:
    """Every refused element of one role's extraArgs, by index."""
    errors = []
    args = list(spec.extra_args)
    for i, arg in enumerate(args):
        if arg.startswith("-") and len(arg.split("=", 1)[0].split()) > 1:
            flag = owned_flag(arg)
            errors.append(FieldError(f"spec.{role}.extraArgs[{i}]", _owned_error(role, arg.split()[0], flag) if flag else
                                     f"{arg!r} is one argv element: give the flag and its value as two list items"))
    tokens, stray = option_tokens(args)
    for tok in tokens:
        why = _token_error(role, tok, profile_version)
        if why:
            errors.append(FieldError(f"spec.{role}.extraArgs[{tok.index}]", why))
    if profile_version == serve_options().vllm_version:
        errors += [FieldError(f"spec.{role}.extraArgs[{i}]", f"{args[i][:60]!r} is neither an option nor the value of "
                              "the one before it (vLLM would exit with 'unrecognized arguments'): remove it or give it "
                              "to a flag that takes a value")
                   for i in stray if not (args[i].startswith("-") and " " in args[i])]  # those are reported above
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
        elif problem := env_problem(env.name, profile_version) or env_no_effect_problem(env.name, profile_version):
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}].name", problem))
        elif (env.value is not None and profile_version == vllm_envs().vllm_version
              and (problem := vllm_envs().value_problem(env.name, env.value))):
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}].value", problem))
        if env.value is not None and env.value_from is not None:
            errors.append(FieldError(f"spec.{role}.extraEnv[{i}]", "set value or valueFrom, not both"))
        seen.add(env.name)
    return errors


# Flags qdd does not own but whose values must be equal on prefill and decode: the NIXL handshake
# of hybrid models compares them, or the transferred bytes are laid out differently (docs/facts/vllm-flags.md).
MUST_MATCH_FLAGS = ("block-size", "dtype", "mamba-cache-dtype", "quantization", "attention-backend",
                    "attention-config", "hf-overrides", "tokenizer")
"""``attention-config`` carries the backend too (``--attention-config.backend``; vllm/engine/arg_utils.py)."""

OWNED_SUBKEYS: dict[str, dict[str, str]] = {
    "compilation-config": {"max_cudagraph_capture_size": "tuning.maxCudagraphCaptureSize",
                           "cudagraph_capture_sizes": "tuning.maxCudagraphCaptureSize"},
    "additional-config": {"gdn_prefill_backend": "tuning.gdnPrefillBackend"},
}
"""Keys of JSON options that hold what an owned flag sets (vllm/engine/arg_utils.py stores
--max-cudagraph-capture-size in compilation_config and --gdn-prefill-backend in additional_config):
``--compilation-config.max_cudagraph_capture_size 8192`` would override the rendered sizing."""


def _json_or_text(value: str | None) -> Any:
    try:
        return json.loads(value) if value is not None else "true"
    except ValueError:
        return value


def _set_key(tree: Any, dotted: str, value: Any) -> dict[str, Any]:
    out = dict(tree) if isinstance(tree, dict) else {}
    head, _, rest = dotted.partition(".")
    out[head] = _set_key(out.get(head), rest, value) if rest else value
    return out


def _flag_values(args: list[str]) -> dict[str, str]:
    """``{flag: value}`` of the must-match flags in an extraArgs list, by the option each token
    resolves to (``--x v``, ``--x=v``, ``-q v``, a prefix; a bare flag is ``true``), with dotted
    keys (``--hf-overrides.a 1``) merged into the option's JSON value as vLLM's parser merges them."""
    merged: dict[str, Any] = {}
    for tok in option_tokens(args)[0]:
        for o in tok.resolved.options:
            if o.name in MUST_MATCH_FLAGS:
                value = _json_or_text(tok.value)
                sub = tok.resolved.subkey
                merged[o.name] = _set_key(merged.get(o.name), sub, value) if sub else value
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
            for k, v in merged.items()}


def _kv_extra_keys(tok: ArgToken) -> list[str]:
    """Keys of kv_connector_extra_config a --kv-transfer-config token sets (dotted or JSON)."""
    sub = tok.resolved.subkey or ""
    if sub.startswith("kv_connector_extra_config."):
        return [sub.split(".", 2)[1]]
    value = _json_or_text(tok.value)
    if not sub and isinstance(value, dict) and isinstance(value.get("kv_connector_extra_config"), dict):
        return list(value["kv_connector_extra_config"])
    if sub == "kv_connector_extra_config" and isinstance(value, dict):
        return list(value)
    return []


def _owned_subkeys(tok: ArgToken) -> list[tuple[str, str, str]]:
    """(option, key, owning field) for each key of a JSON option that an owned flag sets."""
    out = []
    for o in tok.resolved.options:
        owned = OWNED_SUBKEYS.get(o.name, {})
        if tok.resolved.subkey:
            keys = [tok.resolved.subkey.split(".", 1)[0]]
        else:
            value = _json_or_text(tok.value)
            keys = list(value) if isinstance(value, dict) else []
        out += [(o.name, k, owned[k]) for k in keys if k in owned]
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


def kv_transfer_config(kv_role: str, load_failure_policy: str, backends: list[str], lease_seconds: int) -> str:
    """--kv-transfer-config JSON (vllm/config/kv_transfer.py, KVTransferConfig); compact, sorted keys.
    ``kv_lease_duration``: seconds prefill keeps a request's blocks for decode (NixlConnector's
    scheduler, nixl/base_scheduler.py; default 30 there)."""
    cfg = {
        "kv_connector": "NixlConnector",
        "kv_role": kv_role,
        "kv_buffer_device": "cuda",
        "kv_load_failure_policy": load_failure_policy,
        "kv_connector_extra_config": {"backends": list(backends), "kv_lease_duration": lease_seconds},
    }
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def extra_env(spec: RoleSpec) -> list[EnvEntry]:
    out = []
    for e in spec.extra_env:
        out.append(_user_env(e))
    return out


def _user_env(e: EnvVar) -> EnvEntry:
    return EnvEntry(e.name, value=e.value, value_from=e.value_from.to_k8s() if e.value_from else None)
