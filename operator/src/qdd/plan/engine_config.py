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


def role_options(role: str, argv: list[str], extra_args: list[str]) -> RoleOptions:
    """The effective options of one pod's argv (model first), knowing which tail is the role's extraArgs."""
    tail = argv[1:]
    first_extra = len(tail) - len(extra_args)
    values: dict[str, str] = {}
    where: dict[str, str] = {}
    for tok in option_tokens(tail)[0]:
        for o in tok.resolved.options:
            v = tok.value if o.takes_value else _switch_value(tok.given, o.dest, tok.value)
            if v is None or tok.resolved.subkey:
                continue
            values[o.dest] = v
            if tok.index >= first_extra:
                where[o.dest] = f"spec.{role}.extraArgs[{tok.index - first_extra}]"
            elif o.dest in _FIELDS:
                f = _FIELDS[o.dest]
                where[o.dest] = f if f.startswith("spec.") else f"spec.{role}.{f}"
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


def _partial_prefills(o: RoleOptions) -> tuple[str, str] | None:
    n, long_n = o.int("max_num_partial_prefills", 1), o.int("max_long_partial_prefills", 1)
    if n > 1 and not o.on("enable_chunked_prefill", True):
        return (o.field("max_num_partial_prefills", f"spec.{o.role}.extraArgs"),
                f"--max-num-partial-prefills {n} needs chunked prefill, which "
                f"{o.field('enable_chunked_prefill', 'extraArgs')} turns off: vLLM's SchedulerConfig refuses it")
    if long_n < 1 or long_n > n:
        return (o.field("max_long_partial_prefills", f"spec.{o.role}.extraArgs"),
                f"--max-long-partial-prefills {long_n} must be between 1 and --max-num-partial-prefills ({n}): "
                "vLLM's SchedulerConfig refuses it")
    mml = o.int("max_model_len", 0)
    threshold = o.int("long_prefill_token_threshold", 0)
    if n > 1 and threshold > mml:
        return (o.field("long_prefill_token_threshold", f"spec.{o.role}.extraArgs"),
                f"--long-prefill-token-threshold {threshold} exceeds max-model-len {mml}: vLLM's SchedulerConfig "
                "refuses it")
    return None


def _eplb_needs_expert_parallel(o: RoleOptions) -> tuple[str, str] | None:
    if o.on("enable_eplb", False) and not o.on("enable_expert_parallel", False):
        return (o.field("enable_eplb", f"spec.{o.role}.extraArgs"),
                f"--enable-eplb needs expert parallelism, which spec.{o.role}.topology.expertParallel turns off: "
                "vLLM's ParallelConfig refuses to start; remove it or set expertParallel: true")
    return None


CONFIG_RULES: tuple[ConfigRule, ...] = (
    ConfigRule("chunked-prefill-off-below-max-model-len", "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len",
               _chunked_prefill_off_limits_length),
    ConfigRule("partial-prefills", "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len", _partial_prefills),
    ConfigRule("eplb-needs-expert-parallel", "vllm/config/parallel.py ParallelConfig.__post_init__",
               _eplb_needs_expert_parallel),
)


def config_errors(options: RoleOptions) -> list[FieldError]:
    """Every rule of :data:`CONFIG_RULES` the role's options break."""
    return [FieldError(*found) for rule in CONFIG_RULES if (found := rule.check(options)) is not None]
