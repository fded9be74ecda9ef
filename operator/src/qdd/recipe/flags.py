"""One role's ``vllm_config`` flags and environment → topology, tuning, extraArgs and extraEnv."""

from __future__ import annotations

import json
from typing import Any

from ..catalog.vllm_options import serve_options
from ..plan.args import OWNED_ENV
from .keys import (DROPPED_FLAGS, DYNAMO_ENV_PREFIXES, Found, INVARIANT_FLAGS, KNOWN_FLAGS, KV_DROPPED,
                   RENDERED_ENV, SWITCHES, TOPOLOGY_FLAGS, TUNING_VALUE_FLAGS, UCX_ENV, _Build, _FLAG_KEY,
                   _mapping, _num, _only, _put)


def _canonical(flag: str) -> str:
    """A flag as qdd's tables name it, resolved as vLLM's parser does (prefixes, ``_``); unchanged
    where it names no flag of the tables or is ambiguous (extraArgs' checks say so)."""
    if flag in KNOWN_FLAGS:
        return flag
    r = serve_options().resolve(f"--{flag}")
    if r is None or r.ambiguous or not r.options or r.options[0].name not in KNOWN_FLAGS:
        return flag
    name = r.options[0].name
    return f"no-{name}" if flag.startswith("no-") and f"no-{name}" in KNOWN_FLAGS else name


def _flags(b: _Build, cfg: Any, key: str) -> dict[str, Found]:
    """{flag: (value, recipe key)}, flags normalised (``max_num_seqs`` → ``max-num-seqs``);
    ``false``/``null`` left out as srtctl does."""
    out: dict[str, Found] = {}
    for raw, value in _mapping(b, cfg, key).items():
        k = f"{key}.{raw}"
        flag = str(raw).lstrip("-").replace("_", "-")
        if not isinstance(raw, str) or not _FLAG_KEY.match(flag):
            b.error(k, "not a vLLM flag name")
        elif (flag := _canonical(flag)) in out:
            b.error(k, f"given twice (also as {out[flag][1][len(key) + 1:]!r})")
        else:
            out[flag] = (value, k)
    return {f: vk for f, vk in out.items() if vk[0] is not None and vk[0] is not False}


def _kv_transfer(b: _Build, value: Any, key: str) -> dict[str, Found]:
    """What of a --kv-transfer-config qdd keeps (connector, load failure policy, NIXL backends)."""
    found = _json_object(b, value, key)
    if found is None:
        return {}
    cfg: dict[str, Any] = found
    if "kv_connector" not in cfg:
        b.error(f"{key}.kv_connector", "required (NixlConnector)")
    fields = {"kv_connector": "connector", "kv_load_failure_policy": "loadFailurePolicy"}
    _only(b, cfg, key, (*fields, *KV_DROPPED, "kv_connector_extra_config"))
    out = {fields[k]: (v, f"{key}.{k}") for k, v in cfg.items() if k in fields}
    for k, v in cfg.items():
        if k in KV_DROPPED and v not in KV_DROPPED[k]:
            b.error(f"{key}.{k}", f"{v!r}: qdd sets it, to {' or '.join(KV_DROPPED[k])}")
    if cfg.get("kv_role") == "kv_both":
        note = ("kv_role kv_both (deprecated for NIXL in vLLM 0.33: docs/facts/vllm-flags.md, KV transfer) becomes "
                "kv_producer on prefill and kv_consumer on decode")
        if note not in b.said:
            b.said.append(note)
    extra_key = f"{key}.kv_connector_extra_config"
    extra = _mapping(b, cfg.get("kv_connector_extra_config"), extra_key, required=False)
    _only(b, extra, extra_key, ("backends", "kv_lease_duration"))
    if "backends" in extra:
        out["backends"] = (extra["backends"], f"{extra_key}.backends")
    if "kv_lease_duration" in extra:
        out["leaseSeconds"] = (_num(extra["kv_lease_duration"], int), f"{extra_key}.kv_lease_duration")
    return out


def _json_object(b: _Build, value: Any, key: str) -> dict[str, Any] | None:
    """A flag's JSON value (a mapping in YAML, or a JSON string), or None after an error."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            b.error(key, f"not valid JSON: {e}")
            return None
    if not isinstance(value, dict):
        b.error(key, f"must be a JSON object or a mapping, got {type(value).__name__}")
        return None
    return value


MTP_METHODS = ("mtp", "qwen3_5_mtp", "qwen3_next_mtp")
"""--speculative-config methods that mean the checkpoint's MTP layers (vLLM 0.33 maps the model-type
names to mtp: vllm/config/speculative.py)."""


def _speculative(b: _Build, value: Any, key: str) -> dict[str, Found]:
    """spec.speculative from a --speculative-config: the method (MTP only) and num_speculative_tokens."""
    cfg = _json_object(b, value, key)
    if cfg is None:
        return {}
    _only(b, cfg, key, ("method", "num_speculative_tokens"))
    method = cfg.get("method")
    if method not in MTP_METHODS:
        b.error(f"{key}.method", f"{method!r}: qdd plans MTP speculative decoding only (method mtp)")
    return {"spec.speculative.method": ("mtp", f"{key}.method"),
            "spec.speculative.numSpeculativeTokens": (_num(1 if cfg.get("num_speculative_tokens") is None
                                                                     else cfg["num_speculative_tokens"], int),
                                                      f"{key}.num_speculative_tokens")}


def _arg_value(value: Any) -> list[str]:
    if value is True:
        return []
    if isinstance(value, list):
        return [json.dumps(v) if isinstance(v, dict | list) else str(v) for v in value]
    if isinstance(value, dict):
        return [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    return [str(value)]


SET_ONCE: dict[str, tuple[str, Any]] = {
    "served-model-name": ("spec.model.servedModelName", str), "max-model-len": ("spec.workload.maxModelLen", int),
    "revision": ("spec.model.revision", str)}
"""Flags a recipe gives per role that qdd sets once for both (they must agree: qdd.recipe.build._shared)."""


def _role_flag(b: _Build, out: dict[str, Any], flag: str, value: Any, k: str) -> None:
    """One flag of a role into ``out`` (the role's spec, at ``out["path"]``; served name and KV
    settings under ``"shared"``)."""
    spec, path = out["spec"], out["path"]
    base = flag[3:] if flag.startswith("no-") else flag
    if flag in DROPPED_FLAGS or (flag in INVARIANT_FLAGS and value == INVARIANT_FLAGS[flag]):
        return
    if flag in TOPOLOGY_FLAGS or flag in TUNING_VALUE_FLAGS:
        field, conv = {**TOPOLOGY_FLAGS, **TUNING_VALUE_FLAGS}[flag]
        b.at(f"{path}.{field}", k)
        _put(spec, field, _num(value, conv))
    elif base in SWITCHES:
        field = SWITCHES[base].split(".")[1]
        given = spec["topology" if base == "enable-expert-parallel" else "tuning"]
        if value is not True:
            b.error(k, "a switch: true or false")
        elif field in given:
            b.error(k, f"contradicts --{base if flag != base else 'no-' + base} in the same role")
        else:
            b.at(f"{path}.{SWITCHES[base]}", k)
            _put(spec, SWITCHES[base], flag == base)
    elif flag == "pipeline-parallel-size":
        if _num(value, int) != 1:
            b.error(k, "qdd deploys no pipeline parallelism: use tensor or data parallel")
    elif flag in SET_ONCE:
        path_once, conv = SET_ONCE[flag]
        out["shared"][path_once] = (_num(value, conv), k)
    elif flag == "kv-transfer-config":
        out["shared"].update({f"spec.kvTransfer.{f}": vk for f, vk in _kv_transfer(b, value, k).items()})
    elif flag == "speculative-config":
        out["shared"].update(_speculative(b, value, k))
    else:
        extra = spec["extraArgs"]
        for i in range(len(extra), len(extra) + 1 + len(_arg_value(value))):
            b.at(f"{path}.extraArgs[{i}]", k)
        extra += [f"--{flag}", *_arg_value(value)]



def _yes_no(text: str) -> Any:
    s = text.strip().lower()
    return True if s in ("y", "yes", "1", "true", "on") else False if s in ("n", "no", "0", "false", "off") else text


def _kept(name: str, text: Any) -> bool:
    """Whether a variable goes to extraEnv: not one qdd renders (unless it contradicts qdd's value, for
    extraEnv's check to refuse), not Dynamo's."""
    if name == "VLLM_SSM_CONV_STATE_LAYOUT":
        return text != "DS"
    return not (name in OWNED_ENV or name in RENDERED_ENV or name.startswith(DYNAMO_ENV_PREFIXES))


def _env(b: _Build, role: str, env: Any, key: str) -> tuple[list[dict[str, Any]], dict[str, Found]]:
    """(extraEnv, {UCX field: (value, key)}) of one role."""
    extra: list[dict[str, Any]] = []
    ucx: dict[str, Found] = {}
    for name, value in _mapping(b, env, key, required=False).items():
        k = f"{key}.{name}"
        if value is None:
            b.error(k, "must be a string or a number")
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else _num(value, str)
        if name in UCX_ENV:
            ucx[UCX_ENV[name]] = (text if name == "UCX_TLS" or not isinstance(text, str) else _yes_no(text), k)
        elif _kept(str(name), text):
            b.at(f"spec.{role}.extraEnv[{len(extra)}]", k)
            extra.append({"name": name, "value": text})
    return extra, ucx



