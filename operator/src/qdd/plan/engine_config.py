"""What vLLM 0.33.0's engine configuration refuses at start-up, checked at plan time.

vLLM's parser accepts every argv below; its configuration classes (``EngineArgs.create_engine_config``:
SchedulerConfig, ParallelConfig, ...) refuse them when the engine starts — after the pod was
scheduled, the image pulled and, for some, the checkpoint loaded. Each rule reads a role's effective
options (what qdd renders plus the role's ``extraArgs``, resolved as vLLM's parser resolves them,
qdd.plan.args.option_tokens) and names the field to change. Each cites the vLLM source it follows;
tests/contract/test_engine_config.py runs the same argvs through vLLM 0.33.0's own
``create_engine_config`` (with the catalog's config.json, qdd.catalog.config_json) and checks that
qdd refuses exactly what vLLM refuses, over generated tuning and extraArgs combinations.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import FieldError
from .args import option_tokens


@dataclass(frozen=True)
class RoleOptions:
    """One role's effective `vllm serve` options: ``values`` by argparse dest (a switch is
    ``"true"``/``"false"``), ``where`` the spec field that set each (a tuning field, or
    ``extraArgs[i]``), and the role's max-model-len (always rendered)."""

    role: str
    values: dict[str, str]
    where: dict[str, str]

    def get(self, dest: str) -> str | None:
        return self.values.get(dest)

    def int(self, dest: str, default: int) -> int:
        v = self.values.get(dest)
        try:
            return int(v) if v is not None else default
        except ValueError:
            return default

    def on(self, dest: str, default: bool) -> bool:
        v = self.values.get(dest)
        return default if v is None else v.lower() not in ("false", "0", "no")

    def field(self, dest: str, fallback: str) -> str:
        return self.where.get(dest, fallback)


_FIELDS = {"max_num_batched_tokens": "tuning.maxNumBatchedTokens", "max_num_seqs": "tuning.maxNumSeqs",
           "max_model_len": "spec.workload.maxModelLen", "enable_expert_parallel": "topology.expertParallel"}


def _switch_value(given: str, dest: str, value: str | None) -> str | None:
    """A switch's value from its spelling: --no-x / --disable-x are false."""
    flag = given.split("=", 1)[0].lstrip("-")
    if flag.startswith("no-") or (flag.startswith("disable-") and not dest.startswith("disable")):
        return "false"
    return value


def _entries(dest: str, subkey: str | None, value: str) -> list[tuple[str, str]]:
    """(key, value) pairs one token sets: the option itself, and ``dest.key`` for each key of a JSON
    option (``--eplb-config.num_redundant_experts 8`` or ``--eplb-config '{"num_redundant_experts": 8}'``)."""
    if subkey:
        return [(f"{dest}.{subkey}", value)]
    try:
        parsed = json.loads(value)
    except ValueError:
        return [(dest, value)]
    if isinstance(parsed, dict):
        return [(dest, value)] + [(f"{dest}.{k}", json.dumps(v) if not isinstance(v, str) else v) for k, v in parsed.items()]
    return [(dest, value)]


def role_options(role: str, argv: list[str], extra_args: list[str]) -> RoleOptions:
    """The effective options of one pod's argv (model first), knowing which tail is the role's extraArgs."""
    tail = argv[1:]
    first_extra = len(tail) - len(extra_args)
    values: dict[str, str] = {}
    where: dict[str, str] = {}
    for tok in option_tokens(tail)[0]:
        for o in tok.resolved.options:
            v = tok.value if o.takes_value else _switch_value(tok.given, o.dest, tok.value)
            if v is None:
                continue
            for dest, value in _entries(o.dest, tok.resolved.subkey, v):
                values[dest] = value
                if tok.index >= first_extra:
                    where[dest] = f"spec.{role}.extraArgs[{tok.index - first_extra}]"
                elif dest in _FIELDS:
                    f = _FIELDS[dest]
                    where[dest] = f if f.startswith("spec.") else f"spec.{role}.{f}"
    return RoleOptions(role, values, where)


@dataclass(frozen=True)
class ConfigRule:
    """One refusal of vLLM's engine configuration: ``source`` (vLLM 0.33.0 file and function),
    ``check`` (the problem for a role's options, as (field, message), or None)."""

    name: str
    source: str
    check: Callable[[RoleOptions], tuple[str, str] | None]


def _chunked_prefill_off_limits_length(o: RoleOptions) -> tuple[str, str] | None:
    if o.on("enable_chunked_prefill", True):
        return None
    mnbt, mml = o.int("max_num_batched_tokens", 0), o.int("max_model_len", 0)
    if not mnbt or mnbt >= mml:
        return None
    return (o.field("max_num_batched_tokens", o.field("enable_chunked_prefill", f"spec.{o.role}.extraArgs")),
            f"max-num-batched-tokens {mnbt} is below max-model-len {mml} with chunked prefill off "
            f"({o.field('enable_chunked_prefill', 'extraArgs')}): vLLM's SchedulerConfig refuses to start, since no "
            f"prompt longer than {mnbt} tokens could be scheduled; raise maxNumBatchedTokens to at least {mml} or keep "
            "chunked prefill on")


def _scheduler_limits(o: RoleOptions) -> tuple[str, str] | None:
    mml, seqs = o.int("max_model_len", 0), o.int("max_num_seqs", 0)
    active = o.get("max_num_active_seqs")
    if active is not None and seqs and o.int("max_num_active_seqs", 0) > seqs:
        return (o.field("max_num_active_seqs", f"spec.{o.role}.extraArgs"),
                f"--max-num-active-seqs {active} exceeds max-num-seqs {seqs}: vLLM's SchedulerConfig refuses to start; "
                f"use at most {seqs} or raise spec.{o.role}.tuning.maxNumSeqs")
    threshold = o.int("long_prefill_token_threshold", 0)
    if threshold > mml:
        return (o.field("long_prefill_token_threshold", f"spec.{o.role}.extraArgs"),
                f"--long-prefill-token-threshold {threshold} exceeds max-model-len {mml}: vLLM's SchedulerConfig "
                f"refuses to start; use at most {mml}")
    return None


def _eplb(o: RoleOptions) -> tuple[str, str] | None:
    eplb = o.on("enable_eplb", False)
    if eplb and not o.on("enable_expert_parallel", False):
        return (o.field("enable_eplb", f"spec.{o.role}.extraArgs"),
                f"--enable-eplb needs expert parallelism, which spec.{o.role}.topology.expertParallel turns off: "
                "vLLM's ParallelConfig refuses to start; remove it or set expertParallel: true")
    if eplb and o.int("tensor_parallel_size", 1) * o.int("data_parallel_size", 1) <= 1:
        return (o.field("enable_eplb", f"spec.{o.role}.extraArgs"),
                "--enable-eplb needs more than one rank (tensorParallel × dataParallel > 1): vLLM's ParallelConfig "
                "refuses to start; remove it")
    redundant = o.get("eplb_config.num_redundant_experts")
    if not eplb and redundant not in (None, "0"):
        return (o.field("eplb_config.num_redundant_experts", f"spec.{o.role}.extraArgs"),
                f"num_redundant_experts {redundant} without --enable-eplb: vLLM's ParallelConfig refuses to start; "
                "add --enable-eplb or remove it")
    return None


def _decode_context_parallel(o: RoleOptions) -> tuple[str, str] | None:
    tp, dcp = o.int("tensor_parallel_size", 1), o.int("decode_context_parallel_size", 1)
    if dcp > 0 and tp % dcp:
        return (o.field("decode_context_parallel_size", f"spec.{o.role}.extraArgs"),
                f"--decode-context-parallel-size {dcp} does not divide tensorParallel {tp} (decode context parallelism "
                "reuses the TP ranks): vLLM's ParallelConfig refuses to start; use a divisor of the TP size")
    return None


CONFIG_RULES: tuple[ConfigRule, ...] = (
    ConfigRule("chunked-prefill-off-below-max-model-len", "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len",
               _chunked_prefill_off_limits_length),
    ConfigRule("scheduler-limits", "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len", _scheduler_limits),
    ConfigRule("eplb", "vllm/config/parallel.py ParallelConfig._validate_parallel_config", _eplb),
    ConfigRule("decode-context-parallel", "vllm/config/parallel.py ParallelConfig._validate_parallel_config",
               _decode_context_parallel),
)


def config_errors(options: RoleOptions) -> list[FieldError]:
    """Every rule of :data:`CONFIG_RULES` the role's options break."""
    return [FieldError(*found) for rule in CONFIG_RULES if (found := rule.check(options)) is not None]
