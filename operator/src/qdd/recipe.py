"""``qdd import-recipe``: an srt-slurm recipe (FACTS.md §8) → a QwenDisaggDeployment dict.

What goes where:

- ``resources``: ``prefill_workers``/``decode_workers`` → endpoints; ``gpus_per_prefill``/
  ``gpus_per_decode`` must equal the role's DP × TP; ``prefill_nodes``/``decode_nodes`` must
  hold the workers; ``gpu_type`` → ``cluster.gpuType`` (``gpus_per_node`` only where it differs
  from the GPU kind's). Aggregated recipes (``agg_*``) are refused: qdd deploys P/D only.
- ``backend.vllm_config.{prefill,decode}`` (srtctl's spelling: names without dashes, ``_`` or
  ``-``, ``true`` = bare flag, ``false``/``null`` = left out, lists = several values): topology
  flags → ``topology``; flags qdd has a field for → ``tuning`` (and ``servedModelName``,
  ``kvTransfer``); flags that restate what qdd always renders (``no-enable-prefix-caching``,
  ``generation-config vllm``, ``no-disable-hybrid-kv-cache-manager``) and flags srtctl or qdd
  set per process (``headless``, ``port``, DP local size/start rank/address/RPC port, hybrid or
  external LB) are dropped; every other flag goes to ``extraArgs`` as ``--flag [value…]``.
- ``backend.{prefill,decode}_environment``: variables qdd owns or renders are dropped
  (``VLLM_SSM_CONV_STATE_LAYOUT`` must be ``DS``), UCX settings → ``kvTransfer.ucx``,
  Dynamo-only (``DYN_*``, ``DYNAMO_*``) dropped, the rest → ``extraEnv``.
- ``benchmark`` (``sa-bench``): ``isl``, ``osl``, ``random_range_ratio`` and the highest of
  ``concurrencies`` → ``workload``.
- ``model.path`` ``hf:<org>/<name>`` → ``model.name``; the container is replaced by ``image``.
  Launcher-only sections (``slurm``, ``frontend``, ``dynamo``, …) are ignored.

Anything else — an unknown key, a value of the wrong type, or two keys that contradict each other
(or contradict an invariant of qdd, e.g. prefix caching on) — raises :class:`RecipeError` naming
the key. The result is validated by qdd's own parser before it is returned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from . import labels
from .api import parse_resource
from .api.spec import EngineSpec, KVCacheDtype, MambaDtype
from .catalog import GPU_KINDS
from .errors import SpecError
from .plan.args import OWNED_ENV, owned_flag

ROLES = ("prefill", "decode")
NAME_MAX = 40
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_FLAG_KEY = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TOP_LEVEL_USED = ("name", "model", "resources", "backend", "benchmark")
TOP_LEVEL_IGNORED = ("slurm", "frontend", "dynamo", "profiling", "output", "health_check", "infra", "observability",
                     "telemetry", "sbatch_directives", "srun_options", "enable_config_dump", "setup_script", "identity",
                     "reporting", "extra_mount", "container_mounts")
"""srtctl sections that only concern Slurm, the Dynamo frontend or the benchmark harness."""
RESOURCE_KEYS = ("gpu_type", "gpus_per_node", "prefill_nodes", "prefill_workers", "gpus_per_prefill", "decode_nodes",
                 "decode_workers", "gpus_per_decode")
BACKEND_KEYS = ("type", "connector", "prefill_environment", "decode_environment", "vllm_config")
MODEL_KEYS = ("path", "container", "precision")
SA_BENCH_IGNORED = ("type", "req_rate", "num_prompts_mult", "num_warmup_mult")

TUNING_VALUE_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "max-num-batched-tokens": ("maxNumBatchedTokens", int),
    "max-num-seqs": ("maxNumSeqs", int),
    "max-cudagraph-capture-size": ("maxCudagraphCaptureSize", int),
    "stream-interval": ("streamInterval", int),
    "mamba-ssm-cache-dtype": ("mambaSsmCacheDtype", str),
    "kv-cache-dtype": ("kvCacheDtype", str),
    "gpu-memory-utilization": ("gpuMemoryUtilization", float),
    "gdn-prefill-backend": ("gdnPrefillBackend", str),
    "api-server-count": ("apiServerCount", int),
    "all2all-backend": ("all2allBackend", str),
}
"""vLLM flags with a value that qdd has a ``tuning`` field for."""
TUNING_BOOL_FLAGS = {"async-scheduling": "asyncScheduling", "language-model-only": "languageModelOnly"}
"""Boolean vLLM flags with a ``tuning`` field (``--no-<flag>`` sets it false)."""
DROPPED_FLAGS = ("headless", "port", "host", "model", "data-parallel-size-local", "data-parallel-start-rank",
                 "data-parallel-rank", "data-parallel-address", "data-parallel-rpc-port", "data-parallel-hybrid-lb",
                 "data-parallel-external-lb", "no-data-parallel-hybrid-lb", "no-data-parallel-external-lb")
"""Set per process by srtctl and by qdd (FACTS.md §8): the recipe's value would be wrong in a pod."""
INVARIANT_FLAGS: dict[str, Any] = {
    "no-enable-prefix-caching": True,
    "generation-config": "vllm",
    "no-disable-hybrid-kv-cache-manager": True,
    "disable-hybrid-kv-cache-manager": False,
}
"""Flags that restate what qdd always renders (or the engine default qdd relies on): dropped. Any
other value contradicts qdd."""
ENGINE_DEFAULTS = {"languageModelOnly": False, "streamInterval": 1, "mambaSsmCacheDtype": "auto"}
"""vLLM 0.33's behaviour when a flag is absent, for the tuning fields whose qdd default (the seed
recipe's value) differs: a recipe that leaves the flag out keeps vLLM's behaviour."""
INVARIANT_WHY = {
    "no-enable-prefix-caching": "prefix caching stays off for hybrid models over NIXL",
    "enable-prefix-caching": "prefix caching must stay off for hybrid (GDN) models over NIXL: decode crashes with it",
    "generation-config": "qdd renders --generation-config vllm (the seed's sampling defaults)",
    "no-disable-hybrid-kv-cache-manager": "NIXL P/D of GDN models needs the hybrid KV cache manager (the default)",
    "disable-hybrid-kv-cache-manager": "NIXL P/D of GDN models needs the hybrid KV cache manager on",
}

RENDERED_ENV = {"VLLM_LOGGING_COLOR", "HF_HOME"}
"""Variables qdd renders itself besides the owned ones (qdd.plan.build: VLLM_LOGGING_COLOR=0)."""
UCX_ENV: dict[str, str] = {"UCX_TLS": "tls", "UCX_CUDA_IPC_ENABLE_MNNVL": "mnnvl", "UCX_MEMTYPE_CACHE": "memtypeCache"}
DYNAMO_ENV_PREFIXES = ("DYN_", "DYNAMO_")


class RecipeError(ValueError):
    """The recipe cannot be imported. ``key`` is the dotted path of the offending recipe key."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


def _mapping(value: Any, key: str, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise RecipeError(key, f"must be a mapping, got {type(value).__name__}")
    return value


def _only(d: dict[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    for k in d:
        if k not in allowed:
            raise RecipeError(f"{key}.{k}" if key else str(k),
                              f"unknown key (qdd imports {', '.join(allowed)})")


def _int(value: Any, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RecipeError(key, f"must be an integer, got {value!r}")
    try:
        n = int(value)
    except ValueError:
        raise RecipeError(key, f"must be an integer, got {value!r}") from None
    if n < minimum:
        raise RecipeError(key, f"must be at least {minimum}, got {n}")
    return n


def _convert(conv: Callable[[Any], Any], value: Any, key: str) -> Any:
    if conv is int:
        return _int(value, key)
    if isinstance(value, bool | dict | list):
        raise RecipeError(key, f"must be a {conv.__name__}, got {value!r}")
    try:
        return conv(value)
    except ValueError:
        raise RecipeError(key, f"must be a {conv.__name__}, got {value!r}") from None


# ---------------------------------------------------------------------------- model and name


def _model(recipe: dict[str, Any]) -> dict[str, Any]:
    model = _mapping(recipe.get("model"), "model")
    _only(model, "model", MODEL_KEYS)
    path = model.get("path")
    if not isinstance(path, str) or not path:
        raise RecipeError("model.path", "required: the HF id as 'hf:<org>/<name>'")
    name = path[3:] if path.startswith("hf:") else path
    if "/" not in name:
        raise RecipeError("model.path", f"{path!r} is an srtslurm.yaml alias, which means nothing in a cluster; "
                                        "write the HF id as 'hf:<org>/<name>' (e.g. hf:nvidia/Qwen3.5-397B-A17B-NVFP4)")
    precision = model.get("precision")
    if precision is not None:
        want = {"nvfp4": "NVFP4", "fp4": "NVFP4", "fp8": "FP8"}.get(str(precision).lower())
        suffix = re.search(r"-(NVFP4|FP4|FP8)$", name, re.IGNORECASE)
        have = None if suffix is None else {"FP4": "NVFP4"}.get(suffix.group(1).upper(), suffix.group(1).upper())
        if have is not None and want != have:
            raise RecipeError("model.precision", f"{precision!r} contradicts the checkpoint {name!r} ({have})")
    return {"name": name}


def _name(recipe: dict[str, Any], name: str | None) -> str:
    if name is not None:
        if not _DNS_1035.match(name) or len(name) > NAME_MAX:
            raise RecipeError("--name", f"{name!r} must be a DNS label of at most {NAME_MAX} characters "
                                        "(lowercase letters, digits, '-', starting with a letter)")
        return name
    raw = recipe.get("name")
    if not isinstance(raw, str) or not raw.strip():
        raise RecipeError("name", "required (or pass --name)")
    out = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw.lower())).strip("-")
    if not out[:1].isalpha():
        out = f"qdd-{out}"
    if len(out) > NAME_MAX:
        raise RecipeError("name", f"{out!r} (from {raw!r}) is longer than {NAME_MAX} characters, the limit for "
                                  "child object names; pass --name")
    return out


# ---------------------------------------------------------------------------- vLLM flags


def _flags(cfg: Any, key: str) -> dict[str, Any]:
    """Normalised flags (``max_num_seqs`` → ``max-num-seqs``); ``false``/``null`` left out as srtctl does."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for raw, value in _mapping(cfg, key).items():
        if not isinstance(raw, str):
            raise RecipeError(f"{key}.{raw}", "flag names must be strings")
        flag = raw.lstrip("-").replace("_", "-")
        if not _FLAG_KEY.match(flag):
            raise RecipeError(f"{key}.{raw}", "not a vLLM flag name")
        if flag in spelled:
            raise RecipeError(f"{key}.{raw}", f"given twice (also as {spelled[flag]!r})")
        spelled[flag] = raw
        if value is None or value is False:
            continue
        out[flag] = value
    return out


def _kv_transfer(value: Any, key: str) -> dict[str, Any]:
    """What of a --kv-transfer-config qdd keeps (load failure policy, NIXL backends); kv_role is derived."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RecipeError(key, f"not valid JSON: {e}") from None
    cfg = _mapping(value, key)
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if k == "kv_connector":
            if v != "NixlConnector":
                raise RecipeError(f"{key}.kv_connector", f"{v!r}: qdd transfers KV with NixlConnector only")
        elif k == "kv_role":
            if v not in ("kv_both", "kv_producer", "kv_consumer"):
                raise RecipeError(f"{key}.kv_role", f"{v!r} is not a vLLM kv_role")
        elif k == "kv_buffer_device":
            if v != "cuda":
                raise RecipeError(f"{key}.kv_buffer_device", f"{v!r}: qdd keeps the KV buffer on cuda")
        elif k == "kv_load_failure_policy":
            if v not in ("fail", "recompute"):
                raise RecipeError(f"{key}.kv_load_failure_policy", f"{v!r}: must be fail or recompute")
            out["loadFailurePolicy"] = v
        elif k == "kv_connector_extra_config":
            extra = _mapping(v, f"{key}.kv_connector_extra_config")
            for ek, ev in extra.items():
                if ek != "backends":
                    raise RecipeError(f"{key}.kv_connector_extra_config.{ek}", "qdd has no field for it")
                if not isinstance(ev, list) or not all(isinstance(b, str) for b in ev):
                    raise RecipeError(f"{key}.kv_connector_extra_config.backends", "must be a list of names")
                out["backends"] = list(ev)
        else:
            raise RecipeError(f"{key}.{k}", "qdd has no field for it")
    if "kv_connector" not in cfg:
        raise RecipeError(f"{key}.kv_connector", "required (NixlConnector)")
    return out


def _arg_value(value: Any) -> list[str]:
    if value is True:
        return []
    if isinstance(value, list):
        return [json.dumps(v) if isinstance(v, dict | list) else str(v) for v in value]
    if isinstance(value, dict):
        return [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    return [str(value)]


def _role_flags(flags: dict[str, Any], key: str) -> dict[str, Any]:
    """One role's flags → {topology, tuning, extraArgs, servedModelName, kvTransfer}."""
    topo: dict[str, Any] = {}
    tuning: dict[str, Any] = {}
    extra: list[str] = []
    out: dict[str, Any] = {"topology": topo, "tuning": tuning, "extraArgs": extra}
    for flag, value in flags.items():
        k = f"{key}.{flag}"
        base = flag[3:] if flag.startswith("no-") else flag
        if flag == "tensor-parallel-size":
            topo["tensorParallel"] = _int(value, k)
        elif flag == "data-parallel-size":
            topo["dataParallel"] = _int(value, k)
        elif flag == "pipeline-parallel-size":
            if _int(value, k) != 1:
                raise RecipeError(k, "qdd deploys no pipeline parallelism: use tensor or data parallel")
        elif base == "enable-expert-parallel":
            if value is not True:
                raise RecipeError(k, "a switch: true or false")
            topo["expertParallel"] = flag == base
        elif flag == "served-model-name":
            out["servedModelName"] = str(value)
        elif flag == "kv-transfer-config":
            out["kvTransfer"] = _kv_transfer(value, k)
        elif flag in TUNING_VALUE_FLAGS:
            field, conv = TUNING_VALUE_FLAGS[flag]
            tuning[field] = _convert(conv, value, k)
        elif base in TUNING_BOOL_FLAGS:
            if value is not True:
                raise RecipeError(k, "a switch: true or false")
            field = TUNING_BOOL_FLAGS[base]
            if field in tuning:
                raise RecipeError(k, f"contradicts --{base if flag != base else 'no-' + base} in the same role")
            tuning[field] = flag == base
        elif flag == "enable-prefix-caching":
            raise RecipeError(k, INVARIANT_WHY[flag])
        elif flag in INVARIANT_FLAGS:
            if value != INVARIANT_FLAGS[flag]:
                raise RecipeError(k, f"{value!r} contradicts qdd: {INVARIANT_WHY[flag]}")
        elif flag in DROPPED_FLAGS:
            continue
        elif owned_flag(f"--{flag}") is not None:
            raise RecipeError(k, f"sets --{owned_flag(f'--{flag}')}, which qdd owns and has no recipe mapping for")
        else:
            extra += [f"--{flag}", *_arg_value(value)]
    # Where qdd's default differs from vLLM's, a flag the recipe left out means vLLM's default.
    for field, engine_default in ENGINE_DEFAULTS.items():
        tuning.setdefault(field, engine_default)
    return out


# ---------------------------------------------------------------------------- environment


def _truthy(value: Any, key: str) -> bool:
    s = str(value).strip().lower()
    if s in ("y", "yes", "1", "true", "on"):
        return True
    if s in ("n", "no", "0", "false", "off"):
        return False
    raise RecipeError(key, f"{value!r} is neither yes nor no")


def _env(env: Any, key: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """(extraEnv, UCX settings) of one role."""
    extra: list[dict[str, str]] = []
    ucx: dict[str, Any] = {}
    for name, value in _mapping(env, key, required=False).items():
        k = f"{key}.{name}"
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise RecipeError(k, "not an environment variable name")
        if isinstance(value, dict | list) or value is None:
            raise RecipeError(k, "must be a string or a number")
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if name == "VLLM_SSM_CONV_STATE_LAYOUT":
            if text != "DS":
                raise RecipeError(k, f"{text!r}: NIXL P/D of GDN models needs DS, which qdd always sets")
        elif name in UCX_ENV:
            ucx[UCX_ENV[name]] = text if name == "UCX_TLS" else _truthy(text, k)
        elif name in OWNED_ENV or name in RENDERED_ENV or name.startswith(DYNAMO_ENV_PREFIXES):
            continue
        else:
            extra.append({"name": name, "value": text})
    return extra, ucx


# ---------------------------------------------------------------------------- resources, workload


def _gpu(res: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """(GPU kind name, GPUs per node, cluster spec)."""
    raw = res.get("gpu_type")
    kinds = {k.lower(): k for k in GPU_KINDS}
    if not isinstance(raw, str) or raw.lower() not in kinds:
        raise RecipeError("resources.gpu_type", f"{raw!r} is not supported (supported: {', '.join(GPU_KINDS)})")
    kind = GPU_KINDS[kinds[raw.lower()]]
    cluster: dict[str, Any] = {"gpuType": kind.name}
    gpn = kind.gpus_per_node
    if res.get("gpus_per_node") is not None:
        gpn = _int(res["gpus_per_node"], "resources.gpus_per_node")
        if gpn != kind.gpus_per_node:
            cluster["gpusPerNode"] = gpn
    return kind.name, gpn, cluster


def _topology(role: str, res: dict[str, Any], topo: dict[str, Any], gpn: int) -> dict[str, Any]:
    workers = _int(res.get(f"{role}_workers"), f"resources.{role}_workers") if f"{role}_workers" in res else None
    if workers is None:
        raise RecipeError(f"resources.{role}_workers", "required: the number of endpoints of this role")
    tp = topo.get("tensorParallel", 1)
    gpus_key = f"resources.gpus_per_{role}"
    gpus = _int(res[f"gpus_per_{role}"], gpus_key) if res.get(f"gpus_per_{role}") is not None else None
    nodes = _int(res[f"{role}_nodes"], f"resources.{role}_nodes") if res.get(f"{role}_nodes") is not None else None
    if gpus is None and nodes is not None and (nodes * gpn) % workers == 0:
        gpus = nodes * gpn // workers
    if "dataParallel" in topo:
        dp = topo["dataParallel"]
    elif gpus is not None and gpus % tp == 0:
        dp = gpus // tp
    else:
        dp = 1
    if gpus is not None and gpus != dp * tp:
        raise RecipeError(gpus_key, f"{gpus} GPUs per worker contradict data-parallel-size {dp} × "
                                    f"tensor-parallel-size {tp} in backend.vllm_config.{role}")
    if nodes is not None and nodes * gpn < workers * dp * tp:
        raise RecipeError(f"resources.{role}_nodes", f"{nodes} nodes of {gpn} GPUs cannot hold {workers} workers "
                                                     f"of {dp * tp} GPUs")
    return {"endpoints": workers, "topology": {"dataParallel": dp, "tensorParallel": tp,
                                               "expertParallel": topo.get("expertParallel", False)}}


def _concurrency(value: Any) -> int:
    key = "benchmark.concurrencies"
    if isinstance(value, str):
        parts = value.lower().split("x")
    elif isinstance(value, list):
        parts = value
    else:
        parts = [value]
    if not parts:
        raise RecipeError(key, "empty")
    return max(_int(p.strip() if isinstance(p, str) else p, key) for p in parts)


def _workload(recipe: dict[str, Any]) -> dict[str, Any]:
    bench = _mapping(recipe.get("benchmark"), "benchmark")
    if bench.get("type") != "sa-bench":
        raise RecipeError("benchmark.type", f"{bench.get('type')!r}: only an sa-bench recipe gives the workload "
                                            "(isl, osl, concurrencies); import the sa-bench variant of this topology")
    _only(bench, "benchmark", ("isl", "osl", "concurrencies", "random_range_ratio", *SA_BENCH_IGNORED))
    for k in ("isl", "osl", "concurrencies"):
        if bench.get(k) is None:
            raise RecipeError(f"benchmark.{k}", "required")
    out: dict[str, Any] = {"isl": _int(bench["isl"], "benchmark.isl"), "osl": _int(bench["osl"], "benchmark.osl")}
    ratio = bench.get("random_range_ratio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise RecipeError("benchmark.random_range_ratio", f"{ratio!r}: must be in (0, 1]")
        out["randomRangeRatio"] = float(ratio)
    out["concurrency"] = _concurrency(bench["concurrencies"])
    return out


# ---------------------------------------------------------------------------- both roles


def _agree(values: dict[str, Any], key: str, what: str) -> Any:
    """The single value both roles give (``key`` names the decode-side key on a mismatch)."""
    if len(values) == 2 and values["prefill"] != values["decode"]:
        raise RecipeError(key, f"{what} {values['decode']!r} differs from prefill's {values['prefill']!r}; "
                               "qdd sets it once for both roles")
    return next(iter(values.values()), None)


def import_recipe(recipe: dict[str, Any], name: str | None, image: str) -> dict[str, Any]:
    """The QwenDisaggDeployment an srt-slurm ``recipe`` describes, named ``name`` (default: from the
    recipe's name), running engine ``image``. Raises :class:`RecipeError` naming the offending key."""
    recipe = _mapping(recipe, "(recipe)")
    for k in recipe:
        if k not in TOP_LEVEL_USED and k not in TOP_LEVEL_IGNORED:
            raise RecipeError(str(k), f"unknown key (qdd imports {', '.join(TOP_LEVEL_USED)}; "
                                      f"ignores {', '.join(TOP_LEVEL_IGNORED)})")
    model = _model(recipe)
    res = _mapping(recipe.get("resources"), "resources")
    for k in res:
        if str(k).startswith("agg_") or k == "gpus_per_agg":
            raise RecipeError(f"resources.{k}", "an aggregated recipe: qdd deploys disaggregated prefill/decode only")
    _only(res, "resources", RESOURCE_KEYS)
    _gpu_name, gpn, cluster = _gpu(res)
    backend = _mapping(recipe.get("backend"), "backend")
    _only(backend, "backend", BACKEND_KEYS)
    if backend.get("type") != "vllm":
        raise RecipeError("backend.type", f"{backend.get('type')!r}: qdd serves with vllm")
    connector = backend.get("connector")
    if connector is not None and str(connector).lower() != "nixl":
        raise RecipeError("backend.connector", f"{connector!r}: qdd transfers KV with NIXL only")
    vcfg = _mapping(backend.get("vllm_config"), "backend.vllm_config")
    _only(vcfg, "backend.vllm_config", ROLES)

    roles: dict[str, dict[str, Any]] = {}
    served: dict[str, Any] = {}
    kv: dict[str, dict[str, Any]] = {}
    ucx: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        key = f"backend.vllm_config.{role}"
        parsed = _role_flags(_flags(vcfg.get(role), key), key)
        if "servedModelName" in parsed:
            served[role] = parsed["servedModelName"]
        if "kvTransfer" in parsed:
            kv[role] = parsed["kvTransfer"]
        elif connector is None:
            raise RecipeError(f"{key}.kv-transfer-config", "required (or backend.connector: nixl): "
                                                           "qdd moves KV from prefill to decode with NIXL")
        extra_env, ucx[role] = _env(backend.get(f"{role}_environment"), f"backend.{role}_environment")
        spec = _topology(role, res, parsed["topology"], gpn)
        spec["tuning"] = parsed["tuning"]
        if parsed["extraArgs"]:
            spec["extraArgs"] = parsed["extraArgs"]
        if extra_env:
            spec["extraEnv"] = extra_env
        roles[role] = spec

    for field in ("kvCacheDtype", "mambaSsmCacheDtype"):
        values = {r: roles[r]["tuning"].get(field, "auto" if field == "kvCacheDtype" else None) for r in ROLES}
        if values["prefill"] != values["decode"]:
            flag = "kv-cache-dtype" if field == "kvCacheDtype" else "mamba-ssm-cache-dtype"
            raise RecipeError(f"backend.vllm_config.decode.{flag}",
                              f"{values['decode']!r} differs from prefill's {values['prefill']!r}: transferred "
                              "state would be corrupted")
    allowed = {"kvCacheDtype": KVCacheDtype.__args__, "mambaSsmCacheDtype": MambaDtype.__args__}
    for role in ROLES:
        for field, values in allowed.items():
            v = roles[role]["tuning"].get(field)
            if v is not None and v not in values:
                flag = "kv-cache-dtype" if field == "kvCacheDtype" else "mamba-ssm-cache-dtype"
                raise RecipeError(f"backend.vllm_config.{role}.{flag}", f"{v!r}: qdd supports {', '.join(values)}")
    tps = {r: roles[r]["topology"]["tensorParallel"] for r in ROLES}
    if tps["prefill"] != tps["decode"]:
        raise RecipeError("backend.vllm_config.decode.tensor-parallel-size",
                          f"{tps['decode']} differs from prefill's {tps['prefill']}: NIXL transfer of hybrid (GDN) "
                          "models supports homogeneous TP only")

    model_spec = dict(model)
    if served:
        model_spec["servedModelName"] = _agree(served, "backend.vllm_config.decode.served-model-name",
                                               "served-model-name")
    kv_spec: dict[str, Any] = {}
    for field in ("loadFailurePolicy", "backends"):
        values = {r: kv[r][field] for r in kv if field in kv[r]}
        if values:
            kv_spec[field] = _agree(values, "backend.vllm_config.decode.kv-transfer-config", field)
    ucx_spec: dict[str, Any] = {}
    for env_name, field in UCX_ENV.items():
        values = {r: ucx[r].get(field) for r in ROLES}
        if values["prefill"] != values["decode"]:
            raise RecipeError(f"backend.decode_environment.{env_name}",
                              f"{values['decode']!r} differs from prefill's {values['prefill']!r}; qdd sets UCX "
                              "once for both roles (spec.kvTransfer.ucx)")
        if values["prefill"] is not None:
            ucx_spec[field] = values["prefill"]
    if ucx_spec:
        kv_spec["ucx"] = ucx_spec

    spec: dict[str, Any] = {
        "model": model_spec,
        "engine": {"image": image, "vllmVersion": EngineSpec.model_fields["vllm_version"].default},
        "workload": _workload(recipe),
        "prefill": roles["prefill"],
        "decode": roles["decode"],
        "cluster": cluster,
    }
    if kv_spec:
        spec["kvTransfer"] = kv_spec
    cr = {"apiVersion": f"{labels.GROUP}/{labels.VERSION}", "kind": labels.KIND,
          "metadata": {"name": _name(recipe, name)}, "spec": spec}
    try:
        parse_resource(cr)
    except SpecError as e:
        raise RecipeError(e.errors[0].field, f"the imported resource is invalid: {e}") from None
    return cr
