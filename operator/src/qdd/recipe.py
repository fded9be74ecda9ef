"""``qdd import-recipe``: an srt-slurm recipe (docs/facts/recipes.md) → a QwenDisaggDeployment dict.

What goes where:

- ``resources``: ``prefill_workers``/``decode_workers`` → endpoints; ``gpus_per_prefill``/
  ``gpus_per_decode`` must equal the role's DP × TP; ``prefill_nodes``/``decode_nodes`` must
  hold the workers; ``gpu_type`` → ``cluster.gpuType`` (``gpus_per_node`` only where it differs
  from the GPU kind's). Aggregated recipes (``agg_*``) are refused: qdd deploys P/D only.
- ``backend.vllm_config.{prefill,decode}`` (srtctl's spelling: names without dashes, ``_`` or
  ``-``, ``true`` = bare flag, ``false``/``null`` = left out, lists = several values; a name is
  resolved as vLLM's parser resolves it, so ``async`` is ``async-scheduling``): topology flags →
  ``topology``; flags qdd has a field for → ``tuning`` (and ``servedModelName``, ``kvTransfer``);
  flags that restate what qdd always renders (``no-enable-prefix-caching``, ``generation-config
  vllm``, ``no-disable-hybrid-kv-cache-manager``) and flags srtctl or qdd set per process
  (``headless``, ``port``, DP local size/start rank/address/RPC port, hybrid or external LB) are
  dropped; every other flag goes to ``extraArgs`` as ``--flag [value…]``.
- ``backend.{prefill,decode}_environment``: variables qdd owns or renders are dropped
  (``VLLM_SSM_CONV_STATE_LAYOUT`` only as ``DS``), UCX settings → ``kvTransfer.ucx``,
  Dynamo-only (``DYN_*``, ``DYNAMO_*``) dropped, the rest → ``extraEnv``.
- ``benchmark`` (``sa-bench``): ``isl``, ``osl``, ``random_range_ratio`` and the highest of
  ``concurrencies`` → ``workload``.
- ``model.path`` ``hf:<org>/<name>`` → ``model.name``; the container is replaced by ``image``.
  Launcher-only sections (``slurm``, ``frontend``, ``dynamo``, …) are ignored.

Only what is about the recipe itself is checked here: unknown keys, values that cannot be read,
keys that contradict each other, settings qdd has no field for. Every value that lands in the
resource is then checked by qdd's own API and planner checks (:func:`qdd.api.parse_resource`,
:func:`qdd.plan.args.check_extra`), and each error they report is traced back to the recipe key
the field came from. :class:`RecipeError` carries every problem found, not just the first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from . import labels
from .api import parse_resource, parse_spec
from .api.resource import Resource
from .api.spec import EngineSpec
from .catalog import GPU_KINDS
from .catalog.vllm_options import serve_options
from .errors import FieldError, SpecError
from .plan.args import OWNED_ENV, check_extra, check_roles_match

ROLES = ("prefill", "decode")
_FLAG_KEY = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_LAST_PART = re.compile(r"(\.[^.\[]*|\[\d+\])$")

TOP_LEVEL_USED = ("name", "model", "resources", "backend", "benchmark")
TOP_LEVEL_IGNORED = ("slurm", "frontend", "dynamo", "profiling", "output", "health_check", "infra", "observability",
                     "telemetry", "sbatch_directives", "srun_options", "enable_config_dump", "setup_script", "identity",
                     "reporting", "extra_mount", "container_mounts")
"""srtctl sections that only concern Slurm, the Dynamo frontend or the benchmark harness."""
RESOURCE_KEYS = ("gpu_type", "gpus_per_node", "prefill_nodes", "prefill_workers", "gpus_per_prefill", "decode_nodes",
                 "decode_workers", "gpus_per_decode")
BACKEND_KEYS = ("type", "connector", "prefill_environment", "decode_environment", "vllm_config")
MODEL_KEYS = ("path", "container", "precision")
SA_BENCH_KEYS = ("isl", "osl", "concurrencies", "random_range_ratio", "type", "req_rate", "num_prompts_mult",
                 "num_warmup_mult")

TOPOLOGY_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "tensor-parallel-size": ("topology.tensorParallel", int), "data-parallel-size": ("topology.dataParallel", int)}
TUNING_VALUE_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "max-num-batched-tokens": ("tuning.maxNumBatchedTokens", int),
    "max-num-seqs": ("tuning.maxNumSeqs", int),
    "max-cudagraph-capture-size": ("tuning.maxCudagraphCaptureSize", int),
    "stream-interval": ("tuning.streamInterval", int),
    "mamba-ssm-cache-dtype": ("tuning.mambaSsmCacheDtype", str),
    "kv-cache-dtype": ("tuning.kvCacheDtype", str),
    "gpu-memory-utilization": ("tuning.gpuMemoryUtilization", float),
    "gdn-prefill-backend": ("tuning.gdnPrefillBackend", str),
    "api-server-count": ("tuning.apiServerCount", int),
    "all2all-backend": ("tuning.all2allBackend", str),
}
"""vLLM flags with a value that qdd has a field for (path below the role)."""
SWITCHES = {"enable-expert-parallel": "topology.expertParallel", "async-scheduling": "tuning.asyncScheduling",
            "language-model-only": "tuning.languageModelOnly", "enable-prefix-caching": "tuning.prefixCaching"}
"""Boolean vLLM flags with a field (``--no-<flag>`` sets it false)."""
DROPPED_FLAGS = ("headless", "port", "host", "model", "data-parallel-size-local", "data-parallel-start-rank",
                 "data-parallel-rank", "data-parallel-address", "data-parallel-rpc-port", "data-parallel-hybrid-lb",
                 "data-parallel-external-lb", "no-data-parallel-hybrid-lb", "no-data-parallel-external-lb")
"""Set per process by srtctl and by qdd (docs/facts/recipes.md): the recipe's value would be wrong in a pod."""
INVARIANT_FLAGS: dict[str, Any] = {"no-enable-prefix-caching": True, "generation-config": "vllm",
                                   "no-disable-hybrid-kv-cache-manager": True}
"""Flags that restate what qdd always renders (or the engine default qdd relies on): dropped. Any
other value goes to extraArgs, where qdd's check of owned flags refuses it."""
ENGINE_DEFAULTS = {"languageModelOnly": False, "streamInterval": 1, "mambaSsmCacheDtype": "auto"}
"""vLLM 0.33's behaviour when a flag is absent, for the tuning fields whose qdd default (the seed
recipe's value) differs: a recipe that leaves the flag out keeps vLLM's behaviour."""
KNOWN_FLAGS = {*TOPOLOGY_FLAGS, *TUNING_VALUE_FLAGS, *SWITCHES, *(f"no-{s}" for s in SWITCHES), *DROPPED_FLAGS,
               *INVARIANT_FLAGS, "pipeline-parallel-size", "served-model-name", "kv-transfer-config"}
KV_DROPPED = {"kv_role": ("kv_both", "kv_producer", "kv_consumer"), "kv_buffer_device": ("cuda",)}
"""kv-transfer-config keys qdd derives itself (kv_role per role, the buffer on cuda): the values it accepts."""

RENDERED_ENV = {"VLLM_LOGGING_COLOR", "HF_HOME"}
"""Variables qdd renders itself besides the owned ones (qdd.plan.build: VLLM_LOGGING_COLOR=0)."""
UCX_ENV: dict[str, str] = {"UCX_TLS": "tls", "UCX_CUDA_IPC_ENABLE_MNNVL": "mnnvl", "UCX_MEMTYPE_CACHE": "memtypeCache"}
DYNAMO_ENV_PREFIXES = ("DYN_", "DYNAMO_")


class RecipeError(ValueError):
    """The recipe cannot be imported. ``errors`` lists every problem as (key, message), where key is
    the dotted path of the offending recipe key (or ``--name``, ``--image``); ``key`` is the first's.
    ``str()`` gives one ``key: message`` line per problem."""

    def __init__(self, errors: list[tuple[str, str]] | str, message: str = ""):
        self.errors = [(errors, message)] if isinstance(errors, str) else list(errors)
        self.key = self.errors[0][0]
        super().__init__("\n".join(f"{k}: {m}" for k, m in self.errors))


Found = tuple[Any, str]
"""A value read from the recipe and the recipe key it came from."""


class _Build:
    """Errors found so far, and which recipe keys each resource field came from."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        self.origin: dict[str, list[str]] = {}
        self.covered: list[str] = []
        self.notes: dict[str, str] = {}

    def error(self, key: str, message: str, covers: str | None = None) -> None:
        """``covers``: a resource path whose API errors this one already explains."""
        self.errors.append((key, message))
        if covers:
            self.covered.append(covers)

    def at(self, path: str, *keys: str) -> None:
        self.origin.setdefault(path, list(keys))

    def trace(self, e: FieldError) -> list[tuple[str, str]]:
        """The recipe keys a resource field came from, with the API's message; none where covered."""
        if any(e.field == c or e.field.startswith((c + ".", c + "[")) for c in self.covered):
            return []
        path = e.field
        while path not in self.origin and _LAST_PART.search(path):
            path = _LAST_PART.sub("", path)
        note = self.notes.get(path, "")
        return [(k, f"{e.message} (as {e.field}{note})") for k in self.origin.get(path, ["(recipe)"])]


def _mapping(b: _Build, value: Any, key: str, required: bool = True) -> dict[str, Any]:
    if isinstance(value, dict) or (value is None and not required):
        return value or {}
    b.error(key, f"must be a mapping, got {type(value).__name__}")
    return {}


def _only(b: _Build, d: dict[str, Any], key: str, allowed: Iterable[str], also: str = "") -> None:
    for k in d:
        if k not in allowed:
            b.error(f"{key}.{k}" if key else str(k), f"unknown key (qdd imports {', '.join(allowed)}{also})")


def _num(value: Any, conv: Callable[[Any], Any]) -> Any:
    """``value`` as ``conv`` (int, float, str) where it reads as one (``"8"`` → 8); else unchanged, for
    the API to refuse in its own words."""
    if isinstance(value, bool | dict | list) or value is None or (conv is int and isinstance(value, float)):
        return value
    try:
        return conv(value)
    except ValueError:
        return value


def _pos(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def _put(node: dict[str, Any], field: str, value: Any) -> None:
    """Set ``node[a][b]`` for ``field`` ``a.b``."""
    *parents, last = field.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value



def _model(b: _Build, recipe: dict[str, Any]) -> dict[str, Any]:
    model = _mapping(b, recipe.get("model"), "model")
    _only(b, model, "model", MODEL_KEYS)
    path = model.get("path")
    b.at("spec.model.name", "model.path")
    if not isinstance(path, str) or not path:
        b.error("model.path", "required: the HF id as 'hf:<org>/<name>'", covers="spec.model.name")
        return {}
    name = path[3:] if path.startswith("hf:") else path
    if "/" not in name:
        b.error("model.path", f"{path!r} is an srtslurm.yaml alias, which means nothing in a cluster; write the HF "
                              "id as 'hf:<org>/<name>' (e.g. hf:nvidia/Qwen3.5-397B-A17B-NVFP4)", covers="spec.model")
    precision = model.get("precision")
    if precision is not None:
        want = {"nvfp4": "NVFP4", "fp4": "NVFP4", "fp8": "FP8"}.get(str(precision).lower())
        suffix = re.search(r"-(NVFP4|FP4|FP8)$", name, re.IGNORECASE)
        have = None if suffix is None else {"FP4": "NVFP4"}.get(suffix.group(1).upper(), suffix.group(1).upper())
        if have is not None and want != have:
            b.error("model.precision", f"{precision!r} contradicts the checkpoint {name!r} ({have})")
    return {"name": name}


def _name(b: _Build, recipe: dict[str, Any], name: str | None) -> str | None:
    if name is not None:
        b.at("metadata.name", "--name")
        return name
    b.at("metadata.name", "name")
    raw = recipe.get("name")
    if not isinstance(raw, str) or not raw.strip():
        b.error("name", "required (or pass --name)", covers="metadata.name")
        return None
    out = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw.lower())).strip("-")
    out = out if out[:1].isalpha() else f"qdd-{out}"
    b.notes["metadata.name"] = (f", made from {raw!r}" if out != raw else "") + "; pass --name to choose another"
    return out



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
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            b.error(key, f"not valid JSON: {e}")
            return {}
    if not isinstance(value, dict):
        b.error(key, f"must be a JSON object or a mapping, got {type(value).__name__}")
        return {}
    cfg: dict[str, Any] = value
    if "kv_connector" not in cfg:
        b.error(f"{key}.kv_connector", "required (NixlConnector)")
    fields = {"kv_connector": "connector", "kv_load_failure_policy": "loadFailurePolicy"}
    _only(b, cfg, key, (*fields, *KV_DROPPED, "kv_connector_extra_config"))
    out = {fields[k]: (v, f"{key}.{k}") for k, v in cfg.items() if k in fields}
    for k, v in cfg.items():
        if k in KV_DROPPED and v not in KV_DROPPED[k]:
            b.error(f"{key}.{k}", f"{v!r}: qdd sets it, to {' or '.join(KV_DROPPED[k])}")
    extra_key = f"{key}.kv_connector_extra_config"
    extra = _mapping(b, cfg.get("kv_connector_extra_config"), extra_key, required=False)
    _only(b, extra, extra_key, ("backends",))
    if "backends" in extra:
        out["backends"] = (extra["backends"], f"{extra_key}.backends")
    return out


def _arg_value(value: Any) -> list[str]:
    if value is True:
        return []
    if isinstance(value, list):
        return [json.dumps(v) if isinstance(v, dict | list) else str(v) for v in value]
    if isinstance(value, dict):
        return [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    return [str(value)]


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
    elif flag == "served-model-name":
        out["shared"]["spec.model.servedModelName"] = (_num(value, str), k)
    elif flag == "kv-transfer-config":
        out["shared"].update({f"spec.kvTransfer.{f}": vk for f, vk in _kv_transfer(b, value, k).items()})
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



def _gpu(b: _Build, res: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(GPUs per node, cluster spec)."""
    raw = res.get("gpu_type")
    b.at("spec.cluster.gpuType", "resources.gpu_type")
    b.at("spec.cluster.gpusPerNode", "resources.gpus_per_node")
    if raw is None:
        b.error("resources.gpu_type", f"required (qdd supports {', '.join(GPU_KINDS)})")
    kind = GPU_KINDS.get({k.lower(): k for k in GPU_KINDS}.get(str(raw).lower(), ""))
    cluster: dict[str, Any] = {"gpuType": kind.name if kind else raw}
    gpn = kind.gpus_per_node if kind else None
    if res.get("gpus_per_node") is not None:
        given = _num(res["gpus_per_node"], int)
        if kind is None or given != kind.gpus_per_node:
            cluster["gpusPerNode"] = given
        gpn = given if _pos(given) else None
    return gpn, cluster


def _count(b: _Build, res: dict[str, Any], k: str) -> int | None:
    """A count qdd only checks against others (GPUs per worker, nodes)."""
    n = _num(res.get(k), int)
    if n is not None and not _pos(n):
        b.error(f"resources.{k}", f"must be a positive integer, got {res[k]!r}")
        return None
    return n


def _topology(b: _Build, role: str, res: dict[str, Any], topo: dict[str, Any], gpn: int | None) -> dict[str, Any]:
    """endpoints and topology of one role: DP from the flags, else from the GPUs (or nodes) per worker."""
    wkey, gkey, nkey = (f"resources.{k}" for k in (f"{role}_workers", f"gpus_per_{role}", f"{role}_nodes"))
    if res.get(f"{role}_workers") is None:
        b.error(wkey, "required: the number of endpoints of this role")
    b.at(f"spec.{role}.endpoints", wkey)
    workers, tp = _num(res.get(f"{role}_workers"), int), topo.get("tensorParallel", 1)
    gpus, nodes = _count(b, res, f"gpus_per_{role}"), _count(b, res, f"{role}_nodes")
    if gpus is None and nodes and gpn and _pos(workers) and (nodes * gpn) % workers == 0:
        gpus = nodes * gpn // workers
        b.at(f"spec.{role}.topology.dataParallel", nkey)
    elif gpus is not None:
        b.at(f"spec.{role}.topology.dataParallel", gkey)
    dp = topo.get("dataParallel", gpus // tp if gpus and _pos(tp) and gpus % tp == 0 else 1)
    if _pos(dp, tp) and gpus is not None and gpus != dp * tp:
        b.error(gkey, f"{gpus} GPUs per worker contradict data-parallel-size {dp} × tensor-parallel-size {tp} in "
                      f"backend.vllm_config.{role}")
    if _pos(dp, tp, workers) and nodes and gpn and nodes * gpn < workers * dp * tp:
        b.error(nkey, f"{nodes} nodes of {gpn} GPUs cannot hold {workers} workers of {dp * tp} GPUs")
    return {"endpoints": workers, "topology": {"dataParallel": dp, "tensorParallel": tp,
                                               "expertParallel": topo.get("expertParallel", False)}}


def _workload(b: _Build, recipe: dict[str, Any]) -> dict[str, Any]:
    bench = _mapping(b, recipe.get("benchmark"), "benchmark")
    if bench.get("type") != "sa-bench":
        b.error("benchmark.type", f"{bench.get('type')!r}: only an sa-bench recipe gives the workload (isl, osl, "
                                  "concurrencies); import the sa-bench variant of this topology", covers="spec.workload")
        return {}
    _only(b, bench, "benchmark", SA_BENCH_KEYS)
    for field, k in (("isl", "isl"), ("osl", "osl"), ("randomRangeRatio", "random_range_ratio"),
                     ("concurrency", "concurrencies")):
        b.at(f"spec.workload.{field}", f"benchmark.{k}")
    out = {"isl": _num(bench.get("isl"), int), "osl": _num(bench.get("osl"), int)}
    if bench.get("random_range_ratio") is not None:
        out["randomRangeRatio"] = _num(bench["random_range_ratio"], float)
    sweep = bench.get("concurrencies")
    parts = sweep.lower().split("x") if isinstance(sweep, str) else sweep if isinstance(sweep, list) else [sweep]
    levels = [_num(p.strip() if isinstance(p, str) else p, int) for p in parts]
    if sweep is not None and (not levels or not _pos(*levels)):
        b.error("benchmark.concurrencies", f"{sweep!r}: must be positive integers (a list, or joined by 'x')",
                covers="spec.workload.concurrency")
    out["concurrency"] = max(levels) if levels and _pos(*levels) else None
    return out



def _shared(b: _Build, path: str, given: dict[str, Found], what: str) -> Any:
    """The single value both roles give for a resource field set once (``given``: role → (value, key))."""
    values = {role: v for role, (v, _) in given.items()}
    if len(values) == 2 and values["prefill"] != values["decode"]:
        b.error(given["decode"][1], f"{values['decode']!r} differs from prefill's {values['prefill']!r}; qdd sets "
                                    f"{what} once for both roles ({path})")
    value = next(iter(values.values()), None)
    b.at(path, *(k for v, k in given.values() if v == value))
    return value


def _roles(b: _Build, backend: dict[str, Any], res: dict[str, Any], gpn: int | None) -> dict[str, Any]:
    """prefill, decode, and what both set once ({resource path: {role: (value, key)}})."""
    vcfg = _mapping(b, backend.get("vllm_config"), "backend.vllm_config")
    _only(b, vcfg, "backend.vllm_config", ROLES)
    out: dict[str, Any] = {"shared": {}}
    for role in ROLES:
        key, env_key = f"backend.vllm_config.{role}", f"backend.{role}_environment"
        b.at(f"spec.{role}", key)
        parsed: dict[str, Any] = {"path": f"spec.{role}", "shared": {},
                                  "spec": {"topology": {}, "tuning": {}, "extraArgs": []}}
        flags = _flags(b, vcfg.get(role), key)
        for flag, (value, k) in flags.items():
            _role_flag(b, parsed, flag, value, k)
        if "kv-transfer-config" not in flags and backend.get("connector") is None:
            b.error(f"{key}.kv-transfer-config", "required (or backend.connector: nixl): qdd moves KV from prefill "
                                                 "to decode with NIXL")
        extra_env, ucx = _env(b, role, backend.get(f"{role}_environment"), env_key)
        parsed["shared"].update({f"spec.kvTransfer.ucx.{f}": ucx.get(f, (None, f"{env_key}.{n}"))
                                 for n, f in UCX_ENV.items()})
        spec, tuning = parsed["spec"], parsed["spec"]["tuning"]
        out[role] = _topology(b, role, res, spec["topology"], gpn)
        out[role]["tuning"] = tuning | {f: v for f, v in ENGINE_DEFAULTS.items() if f not in tuning}
        out[role] |= {f: spec[f] for f in ("extraArgs",) if spec[f]} | ({"extraEnv": extra_env} if extra_env else {})
        for path, found in parsed["shared"].items():
            out["shared"].setdefault(path, {})[role] = found
    return out


def _kv_spec(b: _Build, shared: dict[str, dict[str, Found]]) -> dict[str, Any]:
    """spec.kvTransfer from both roles' settings (the connector only where it is not qdd's, for the API to refuse)."""
    kv: dict[str, Any] = {}
    for field in ("loadFailurePolicy", "backends", "connector", "ucx.tls", "ucx.mnnvl", "ucx.memtypeCache"):
        path = f"spec.kvTransfer.{field}"
        if path in shared:
            value = _shared(b, path, shared[path], field.rsplit(".", 1)[-1])
            if value is not None and (field, value) != ("connector", "NixlConnector"):
                _put(kv, f"kvTransfer.{field}", list(value) if isinstance(value, list) else value)
    return kv


def _spec(b: _Build, recipe: dict[str, Any], image: str) -> dict[str, Any]:
    model = _model(b, recipe)
    res = _mapping(b, recipe.get("resources"), "resources")
    for k in res:
        if str(k).startswith("agg_") or k == "gpus_per_agg":
            b.error(f"resources.{k}", "an aggregated recipe: qdd deploys disaggregated prefill/decode only")
    _only(b, {k: v for k, v in res.items() if not str(k).startswith("agg_") and k != "gpus_per_agg"}, "resources",
          RESOURCE_KEYS)
    gpn, cluster = _gpu(b, res)
    backend = _mapping(b, recipe.get("backend"), "backend")
    _only(b, backend, "backend", BACKEND_KEYS)
    if backend.get("type") != "vllm":
        b.error("backend.type", f"{backend.get('type')!r}: qdd serves with vllm")
    if backend.get("connector") is not None and str(backend["connector"]).lower() != "nixl":
        b.error("backend.connector", f"{backend['connector']!r}: qdd transfers KV with NIXL only")
    roles = _roles(b, backend, res, gpn)
    if "spec.model.servedModelName" in roles["shared"]:
        model["servedModelName"] = _shared(b, "spec.model.servedModelName",
                                           roles["shared"]["spec.model.servedModelName"], "served-model-name")
    b.at("spec.engine.image", "--image")
    spec = {"model": model, "engine": {"image": image, "vllmVersion": EngineSpec.model_fields["vllm_version"].default},
            "workload": _workload(b, recipe), "prefill": roles["prefill"], "decode": roles["decode"], "cluster": cluster}
    return spec | _kv_spec(b, roles["shared"])


def _checked(cr: dict[str, Any]) -> list[FieldError]:
    """What qdd's API (every field error, metadata's and the spec's) and its extraArgs/extraEnv checks refuse."""
    try:
        resource: Resource = parse_resource(cr)
    except SpecError as e:
        if any(f.field.startswith("spec") for f in e.errors):
            return e.errors
        try:
            parse_spec(cr["spec"])
        except SpecError as spec_error:
            return e.errors + spec_error.errors
        return e.errors
    s = resource.spec
    return [*check_extra("prefill", s.prefill, s.engine.vllm_version),
            *check_extra("decode", s.decode, s.engine.vllm_version), *check_roles_match(s.prefill, s.decode)]


def import_recipe(recipe: dict[str, Any], name: str | None, image: str) -> dict[str, Any]:
    """The QwenDisaggDeployment an srt-slurm ``recipe`` describes, named ``name`` (default: from the
    recipe's name), running engine ``image``. Raises :class:`RecipeError` listing every problem, each
    naming the recipe key to change."""
    if not isinstance(recipe, dict):
        raise RecipeError("(recipe)", f"must be a mapping, got {type(recipe).__name__}")
    b = _Build()
    _only(b, {k: v for k, v in recipe.items() if k not in TOP_LEVEL_IGNORED}, "", TOP_LEVEL_USED,
          f"; ignores {', '.join(TOP_LEVEL_IGNORED)}")
    spec = _spec(b, recipe, image)
    cr = {"apiVersion": f"{labels.GROUP}/{labels.VERSION}", "kind": labels.KIND,
          "metadata": {"name": _name(b, recipe, name)}, "spec": spec}
    for e in _checked(cr):
        b.errors += [err for err in b.trace(e) if err not in b.errors]
    if b.errors:
        raise RecipeError(b.errors)
    return cr
