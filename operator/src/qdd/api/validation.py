"""``QwenDisaggDeployment.spec.validation``: checks of the serving path the operator runs itself.

The accuracy gate (``accuracy``, off by default) makes Ready wait, after each change of generation,
for a GSM8K result of a QwenDisaggBenchmark measured on that generation (qdd.canary.accuracy):
the production NVFP4 checkpoint scored about 0.35 instead of about 0.9 on some engine builds, with
HTTP 200 everywhere (vllm#36094; docs/facts/engine-fixes.md).

The canary (:mod:`qdd.canary`) is one deterministic completion through the router Service after
the KV-transfer preflight passed and every endpoint is Ready: the first answer of a generation is
kept as the baseline, later answers must equal it. Sampling is fixed by qdd, not by this spec:
temperature 0, seed 0, one choice, no streaming (qdd.canary.client.request_body).
"""

from __future__ import annotations

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .base import ApiModel, cel
from .types import DNS1035_LABEL

DEFAULT_PROMPT = "The capital of France is"
"""A short prompt every instruction-tuned or base checkpoint continues; its answer matters only as
a baseline to compare with, never as a fact the canary checks."""

DEFAULT_TIMEOUT_SECONDS, DEFAULT_PERIOD_SECONDS = 10, 300
# The API server checks the rule on the schema's default ({}) too, before nested defaults apply:
# an absent field reads as its default.
_TIMEOUT_RULE = (f"(has(self.timeoutSeconds) ? self.timeoutSeconds : {DEFAULT_TIMEOUT_SECONDS}) < "
                 f"(has(self.periodSeconds) ? self.periodSeconds : {DEFAULT_PERIOD_SECONDS})", ".timeoutSeconds",
                 "must be below periodSeconds (a check may not outlast its period): lower "
                 "spec.validation.canary.timeoutSeconds or raise spec.validation.canary.periodSeconds; "
                 f"the defaults are {DEFAULT_TIMEOUT_SECONDS} and {DEFAULT_PERIOD_SECONDS}")


class CanarySpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel(_TIMEOUT_RULE)}

    enabled: bool = Field(True, description="Send one deterministic completion through the router before Ready and every periodSeconds; a wrong answer, an HTTP error or a timeout sets Degraded. False: Ready does not wait for it (CanaryPassed reason CanaryDisabled).")
    prompt: str = Field(DEFAULT_PROMPT, min_length=1, max_length=2048, description="The prompt of the canary's /v1/completions request (sent as given).")
    max_tokens: int = Field(16, ge=1, le=256, description="max_tokens of the request: tokens the answer may have. Small: the check runs inside a reconcile.")
    period_seconds: int = Field(DEFAULT_PERIOD_SECONDS, ge=5, le=86400, description="Seconds between checks once one passed (a failed check is retried after min(periodSeconds, 30)); the operator checks on its passes, so the effective period rounds up to its resync interval (qdd run --resync-seconds, 60).")
    timeout_seconds: int = Field(DEFAULT_TIMEOUT_SECONDS, ge=1, le=120, description="Seconds one request may take, connect to last byte; longer is a failure (CanaryFailed). Below periodSeconds.")
    expected: str | None = Field(None, max_length=4096, description="The answer (choices[0].text, exactly) to require. Unset: the first answer of each generation is kept as the baseline (status.canary.answer) and later answers must equal it.")

    @model_validator(mode="after")
    def _timeout_below_period(self) -> "CanarySpec":
        if self.timeout_seconds >= self.period_seconds:
            # Reported at timeoutSeconds (the CEL rule's fieldPath), not at the canary mapping: an
            # error raised as a ValidationError keeps its own loc under the model's. A model
            # validator, not a field one, so a default timeout (unset) is compared too.
            given = f" (given: timeoutSeconds {self.timeout_seconds}, periodSeconds {self.period_seconds})"
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("timeout_not_below_period", _TIMEOUT_RULE[2] + given),
                loc=("timeoutSeconds",), input=self.timeout_seconds)])
        return self


class AccuracyGateSpec(ApiModel):
    benchmark_name: str = Field(min_length=1, max_length=63, pattern=DNS1035_LABEL, description="A QwenDisaggBenchmark of this namespace with spec.accuracy and spec.deploymentName naming this deployment. After each change of generation it is run again (its accuracy Job carries the generation), as soon as the router serves the new generation, every endpoint is registered and the canary passed; its GSM8K mean is kept in status.accuracy with the generation it measured. Give it no sweep: a sweep runs first and holds the gate for its whole length.")
    min_score: float = Field(gt=0, le=1, description="GSM8K mean accuracy (0..1] the generation must reach before Ready. The seed recipe scored 0.88 on all five topologies; vllm#36094 saw ~0.35 on some engine builds with HTTP 200 everywhere.")


class ValidationSpec(ApiModel):
    canary: CanarySpec = Field(default_factory=CanarySpec, json_schema_extra={"default": {}}, description="End-to-end canary through the router (docs/canary.md).")
    accuracy: AccuracyGateSpec | None = Field(None, description="Accuracy gate (docs/benchmark.md#accuracy-gate): Ready waits, after each change of generation, for a GSM8K result of that generation from a QwenDisaggBenchmark at or above minScore; meanwhile the router already serves the new generation and Ready is False with reason AccuracyPending. Unset: Ready does not wait for an accuracy result.")
