"""The QwenDisaggBenchmark API (qdd.dev/v1alpha1, short name ``qddb``): a concurrency sweep and/or
a GSM8K accuracy run against the router of one QwenDisaggDeployment, and their results.

The sweep is srt-slurm's sa-bench shape (docs/facts/recipes.md): random dataset, ISL/OSL with a
range ratio, a list of concurrencies, ``promptsPerConcurrency`` × concurrency prompts and
``warmupsPerConcurrency`` × concurrency warm-up requests per point, a request rate (unset = all at
once, sa-bench's ``req_rate: inf``). It runs as ``vllm bench serve`` from the deployment's engine
image. The accuracy run is GSM8K (``num_examples``, ``num_shots``, ``repeat`` of srt-slurm's gsm8k
benchmark) with a pass threshold; the seed's gate is 88 % (docs/facts/seed-recipe.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from ..errors import FieldError, SpecError
from .base import ApiModel, cel
from .status import Condition
from .types import MAX_CONCURRENCY, MAX_TOKENS, SUB_PATH, DNS1035_LABEL, DNS1123_SUBDOMAIN, Image

KIND = "QwenDisaggBenchmark"
PLURAL = "qwendisaggbenchmarks"
SINGULAR = "qwendisaggbenchmark"
SHORT_NAME = "qddb"

COMPLETE = "Complete"
"""True when every run (sweep points, accuracy repeats) finished and its result is recorded."""
FAILED = "Failed"
"""True when a run failed (its Job failed, its result could not be read, the deployment is gone)."""
ACCURACY_PASSED = "AccuracyPassed"
"""True when the mean GSM8K accuracy reached ``spec.accuracy.passThreshold``; Unknown until measured."""
CONDITION_TYPES = (COMPLETE, FAILED, ACCURACY_PASSED)


class SweepSpec(ApiModel):
    dataset: Literal["random"] = Field("random", description="Prompt dataset of `vllm bench serve` (random: --dataset-name random, token ids drawn at random).")
    isl: int = Field(ge=1, le=MAX_TOKENS, description="Input length, tokens (--random-input-len; upper bound of the range).")
    osl: int = Field(ge=1, le=MAX_TOKENS, description="Output length, tokens (--random-output-len; upper bound of the range).")
    random_range_ratio: float = Field(1.0, gt=0, le=1, description="Lengths uniform in [ratio × L, L] (sa-bench's random_range_ratio; 1 = fixed). vLLM draws in [L'(1 - r'), L'(1 + r')]: the Job passes L' = L(1 + ratio)/2, r' = (1 - ratio)/(1 + ratio).")
    concurrencies: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(min_length=1, max_length=32, description="--max-concurrency of each sweep point, in the order they run.")
    prompts_per_concurrency: int = Field(8, ge=1, le=100, description="--num-prompts = this × concurrency (sa-bench num_prompts_mult).")
    warmups_per_concurrency: int = Field(1, ge=0, le=100, description="--num-warmups = this × concurrency (sa-bench num_warmup_mult).")
    request_rate: float | None = Field(None, gt=0, le=1e6, description="--request-rate, requests/s. Unset: inf (all prompts at once, sa-bench req_rate: inf).")
    ignore_eos: bool = Field(True, description="--ignore-eos: every request produces osl tokens (sa-bench's behaviour), so token totals are known.")


class DatasetSource(ApiModel):
    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN, description="PersistentVolumeClaim holding the GSM8K files (test.jsonl and, for shots, train.jsonl: openai/gsm8k's main split as JSON lines of question/answer).")
    path: str = Field("gsm8k", max_length=1024, pattern=SUB_PATH, description="Directory inside the claim.")


class AccuracySpec(ApiModel):
    dataset: Literal["gsm8k"] = Field("gsm8k", description="Evaluation: GSM8K grade-school math, exact match of the final number.")
    examples: int | None = Field(None, ge=1, le=1319, description="Questions of the test split to ask (the first N). Unset: all 1,319.")
    shots: int = Field(5, ge=0, le=8, description="Worked examples from the train split before each question (5-shot: the usual GSM8K setting).")
    repeats: int = Field(1, ge=1, le=20, description="Times the whole evaluation runs; status records each and the mean.")
    max_tokens: int = Field(512, ge=16, le=MAX_TOKENS, description="max_tokens of each answer.")
    pass_threshold: float = Field(ge=0, le=1, description="Mean accuracy (0..1) at or above which AccuracyPassed is True. The seed reached 0.88 on all five topologies.")
    source: DatasetSource | None = Field(None, description="Where the dataset files are. Unset: the hub (openai/gsm8k), which needs egress from the Job.")


class BenchmarkSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel((
        "has(self.sweep) || has(self.accuracy)", "", "set sweep, accuracy or both"))}

    deployment_name: str = Field(min_length=1, max_length=40, pattern=DNS1035_LABEL, description="The QwenDisaggDeployment (same namespace) whose router is measured. Never modified.")
    sweep: SweepSpec | None = Field(None, description="Concurrency sweep with `vllm bench serve`.")
    accuracy: AccuracySpec | None = Field(None, description="GSM8K accuracy run.")
    image: Image | None = Field(None, description="Image of the benchmark Jobs. Unset: the deployment's spec.engine.image (its own `vllm bench serve`).")
    active_deadline_seconds: int = Field(7200, ge=60, le=7 * 86400, description="activeDeadlineSeconds of each Job.")


class Percentiles(ApiModel):
    mean: float | None = Field(None, description="Mean, ms.")
    p50: float | None = Field(None, description="Median, ms.")
    p90: float | None = Field(None, description="90th percentile, ms.")
    p99: float | None = Field(None, description="99th percentile, ms.")


class SweepPoint(ApiModel):
    concurrency: int = Field(description="--max-concurrency of this point.")
    completed: int = Field(description="Requests that completed.")
    failed: int = Field(description="Requests that failed.")
    input_tokens: int = Field(description="Prompt tokens of the completed requests.")
    output_tokens: int = Field(description="Generated tokens of the completed requests.")
    duration_seconds: float = Field(description="Wall time of the point, s.")
    total_tokens_per_second: float = Field(description="(input + output tokens) / duration.")
    output_tokens_per_second: float = Field(description="Output tokens / duration.")
    total_tokens_per_second_per_gpu: float | None = Field(None, description="Total tok/s over the deployment's GPUs (status.gpus).")
    output_tokens_per_second_per_user: float | None = Field(None, description="1000 / median TPOT: the speed one user sees, tok/s.")
    ttft_ms: Percentiles = Field(default_factory=Percentiles, description="Time to first token.")
    tpot_ms: Percentiles = Field(default_factory=Percentiles, description="Time per output token (after the first).")
    itl_ms: Percentiles = Field(default_factory=Percentiles, description="Inter-token latency.")


class AccuracyResult(ApiModel):
    repeats: list[float] = Field(default_factory=list, description="Accuracy (0..1) of each repeat.")
    mean: float | None = Field(None, description="Mean accuracy.")
    questions: int | None = Field(None, description="Questions per repeat.")
    invalid: int | None = Field(None, description="Answers without a number, over all repeats.")
    generation: str | None = Field(None, description="The deployment's generation (qdd.dev/generation) the run measured, when this benchmark is its accuracy gate (its spec.validation.accuracy.benchmarkName); unset otherwise.")


class BenchmarkStatus(ApiModel):
    observed_generation: int | None = Field(None, description="metadata.generation the status describes.")
    conditions: list[Condition] = Field(default_factory=list, description=", ".join(CONDITION_TYPES) + ".")
    phase: str | None = Field(None, description="WaitingForDeployment, Running, Complete or Failed.")
    topology: str | None = Field(None, description="The deployment's shape, e.g. 4xDEP2-1xDEP8.")
    gpus: int | None = Field(None, description="GPUs of the deployment when the benchmark started.")
    sweep: list[SweepPoint] = Field(default_factory=list, description="One result per concurrency.")
    accuracy: AccuracyResult | None = Field(None, description="GSM8K result.")
    results_config_map: str | None = Field(None, description="ConfigMap holding results.json (input of `qdd bench report`).")
    best_total_tokens_per_second_per_gpu: float | None = Field(None, description="Highest total tok/s/GPU of the sweep.")


def parse_benchmark_spec(spec: Any) -> BenchmarkSpec:
    """Validate a QwenDisaggBenchmark ``spec`` dict. Raises :class:`SpecError` naming each bad field."""
    if not isinstance(spec, dict):
        raise SpecError.one("spec", "must be a mapping with deploymentName and sweep and/or accuracy")
    try:
        parsed = BenchmarkSpec.model_validate({k: v for k, v in spec.items() if v is not None})
    except ValidationError as e:
        raise SpecError([FieldError("spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]),
                                    "unknown field" if err["type"] == "extra_forbidden" else
                                    err["msg"].replace("Input should be", "must be").replace("Value error, ", ""))
                         for err in e.errors()]) from None
    if parsed.sweep is None and parsed.accuracy is None:
        raise SpecError.one("spec", "set sweep, accuracy or both")
    return parsed
