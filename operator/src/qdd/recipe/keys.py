"""The srt-slurm recipe format qdd reads (the keys and flag tables) and the record of what each
resource field came from; used by :mod:`.flags` and :mod:`.build`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import FieldError
from ..plan.flags import ENGINE_FLAGS


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
GSM8K_KEYS = ("type", "num_examples", "num_shots", "repeat")
ACCURACY_WORKLOAD = {"isl": 8192, "osl": 1024, "randomRangeRatio": 0.8, "concurrency": 3072}
"""spec.workload of a gsm8k recipe (which gives none): the workload of the base sa-bench recipes of
the Qwen3.5 GB200 8k1k set whose -acc variants these are (ISL/OSL 8192/1024, ratio 0.8, up to
3072; docs/facts/seed-recipe.md), so the deployment checked for accuracy runs the same flags."""
SA_BENCH_KEYS = ("isl", "osl", "concurrencies", "random_range_ratio", "type", "req_rate", "num_prompts_mult",
                 "num_warmup_mult")

TOPOLOGY_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    f.name: (f.field, f.value) for f in ENGINE_FLAGS if f.value not in (None, bool) and f.field.startswith("topology.")}
"""vLLM flags with a value that set a topology field (from qdd.plan.flags.ENGINE_FLAGS)."""
TUNING_VALUE_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    f.name: (f.field, f.value) for f in ENGINE_FLAGS if f.value not in (None, bool) and f.field.startswith("tuning.")}
"""vLLM flags with a value that qdd has a tuning field for (from ENGINE_FLAGS; path below the role)."""
SWITCHES = {f.name: f.field for f in ENGINE_FLAGS if f.value is bool}
"""Boolean vLLM flags with a field (``--no-<flag>`` sets it false; from ENGINE_FLAGS)."""
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
               *INVARIANT_FLAGS, "pipeline-parallel-size", "served-model-name", "max-model-len", "revision", "kv-transfer-config",
               "speculative-config"}
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
        self.said: list[str] = []
        """What the import decided that a user should read (a shortened name, kv_both)."""

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


def _levels(sweep: Any) -> list[Any]:
    """sa-bench ``concurrencies`` (a list, a number or ``"64x128x…"``) as a list, ints where they read as one."""
    parts = sweep.lower().split("x") if isinstance(sweep, str) else sweep if isinstance(sweep, list) else [sweep]
    return [_num(p.strip() if isinstance(p, str) else p, int) for p in parts]


def _pos(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def _put(node: dict[str, Any], field: str, value: Any) -> None:
    """Set ``node[a][b]`` for ``field`` ``a.b``."""
    *parents, last = field.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value



