"""``QwenDisaggDeployment.spec.observe``: how the operator watches what its engines do.

The operator reads the engines' own Prometheus metrics (vLLM 0.33, docs/observability.md) on a
period, from each HTTP-serving engine pod's ``/metrics`` or from a Prometheus the user names, and
judges them (:mod:`qdd.observe`) into ``status.serving`` and the serving conditions
(KVTransferFailing, KVLeaseExpiring, KVCacheSaturated, RequestsQueueing, EngineStalled). Every
threshold below has its default's source in its description and in docs/observability.md.
"""

from __future__ import annotations

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .base import ApiModel, cel
from .types import HTTP_URL

DEFAULT_PERIOD_SECONDS, DEFAULT_WINDOW_SECONDS, DEFAULT_STALL_SECONDS = 15, 300, 120
MAX_READS = 60
"""Reads of one pod the observer keeps at most: max(windowSeconds, stallSeconds) / periodSeconds.
Every read is kept for the window and every pass judges all of them, so memory and each pass's CPU
grow with this ratio: a 86,400 s window read every 5 s kept 17,280 reads per pod (about 3 GiB for
the largest deployment and seconds of CPU in every pass, from a valid spec; docs/security.md).
The default is 20 (300 s / 15 s); 60 still gives a one-hour window read every minute."""
_WINDOW_RULE = (f"(has(self.windowSeconds) ? self.windowSeconds : {DEFAULT_WINDOW_SECONDS}) >= "
                f"2 * (has(self.periodSeconds) ? self.periodSeconds : {DEFAULT_PERIOD_SECONDS})", ".windowSeconds",
                "must be at least twice periodSeconds (a rate needs two reads in the window): raise "
                "spec.observe.windowSeconds or lower spec.observe.periodSeconds; the defaults are "
                f"{DEFAULT_WINDOW_SECONDS} and {DEFAULT_PERIOD_SECONDS}")


_PERIOD = f"(has(self.periodSeconds) ? self.periodSeconds : {DEFAULT_PERIOD_SECONDS})"
_READS_RULES = (
    (f"(has(self.windowSeconds) ? self.windowSeconds : {DEFAULT_WINDOW_SECONDS}) <= {MAX_READS} * {_PERIOD}",
     ".windowSeconds",
     f"must be at most {MAX_READS} × periodSeconds (the observer keeps every read of the window in memory and "
     "judges them in every pass): lower spec.observe.windowSeconds or raise spec.observe.periodSeconds"),
    (f"!has(self.thresholds) || !has(self.thresholds.stallSeconds) || self.thresholds.stallSeconds <= {MAX_READS} * "
     f"{_PERIOD}", ".thresholds.stallSeconds",
     f"must be at most {MAX_READS} × spec.observe.periodSeconds (EngineStalled keeps the reads of that long): lower "
     "spec.observe.thresholds.stallSeconds or raise spec.observe.periodSeconds"),
)


class ObserveThresholds(ApiModel):
    """When a serving condition is raised. Counts are over spec.observe.windowSeconds (cleared when a
    whole window passes without one); levels (kvCacheUsage, waitingPerEngine) are raised after a
    whole window at every read and cleared after a whole window below; stallSeconds is its own
    duration (docs/observability.md)."""

    failed_transfers: int = Field(0, ge=0, le=1000000, description="KVTransferFailing is True when more NIXL transfers than this failed in the window (vllm:nixl_num_failed_transfers, every engine; it counts failed handshakes and notifications too). Default 0: a failed KV transfer is an HTTP 500 or a recomputed prefill, never normal.")
    expired_leases: int = Field(0, ge=0, le=1000000, description="KVLeaseExpiring is True when more requests than this had their KV lease expire in the window (vllm:nixl_num_kv_expired_reqs on prefill), or more read notifications than this came after expiry (vllm:nixl_num_notifications_after_expiry, one per remote rank). Default 0: a late read after expiry answers HTTP 200 with garbage (docs/facts/vllm-observe.md).")
    kv_cache_usage: float = Field(0.95, gt=0, le=1, description="KVCacheSaturated (reason KVCacheFull) is True when an engine's vllm:kv_cache_usage_perc (0..1) is at or above this at every read for a whole window, and stays True until every read of a whole window is below it. Default 0.95: vLLM's scheduler preempts when it cannot allocate a block; at 95% a decode step of the running batch is a few blocks from it.")
    preemptions: int = Field(0, ge=0, le=1000000, description="KVCacheSaturated (reason Preempting) is True when engines preempted more requests than this in the window (vllm:num_preemptions). Default 0: a preempted decode request recomputes its whole prefill locally, which P/D exists to avoid.")
    waiting_per_engine: int = Field(32, ge=0, le=1000000, description="RequestsQueueing is True when an engine's vllm:num_requests_waiting is above this at every read for a whole window, and stays True until every read of a whole window is at or below it. Default 32: a queue that never drains below a full decode CUDA-graph batch step of a small engine (vLLM's smallest capture sizes) is load beyond capacity, not a burst.")
    stall_seconds: int = Field(DEFAULT_STALL_SECONDS, ge=30, le=86400, description="EngineStalled is True when an engine with requests running at every read has produced no token (vllm:prompt_tokens + vllm:generation_tokens unchanged) for this long, whether or not another engine of its role has (the message says which); it clears when the engine makes a token or has no request running. Default 120: longer than one 8K prefill chunked over a busy batch and than a CUDA-graph recapture, shorter than a user's patience. At most " f"{MAX_READS} × spec.observe.periodSeconds.")


class PrometheusSource(ApiModel):
    url: str = Field(max_length=2048, pattern=HTTP_URL, description="Base URL of a Prometheus (or Thanos/Mimir query front end) that scrapes the engine pods, e.g. http://prometheus-operated.monitoring.svc:9090. The operator queries /api/v1/query with the pods' namespace and names; the series must carry the labels namespace and pod (the Prometheus operator's PodMonitor does).")


class ObserveSpec(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel(_WINDOW_RULE, *_READS_RULES)}

    enabled: bool = Field(True, description="Read the engines' metrics and write status.serving and the serving conditions. False: neither (the conditions are removed).")
    period_seconds: int = Field(DEFAULT_PERIOD_SECONDS, ge=5, le=3600, description="Seconds between two reads of every engine pod (Prometheus's common scrape interval is 15 s).")
    window_seconds: int = Field(DEFAULT_WINDOW_SECONDS, ge=10, le=86400, description=f"Seconds of reads the rates, percentiles and conditions are computed over (as a PromQL rate(...[5m])). At least twice periodSeconds and at most {MAX_READS} × periodSeconds (every read of the window is kept in memory).")
    prometheus: PrometheusSource | None = Field(None, description="Read the metrics from this Prometheus instead of the pods' /metrics. Unset: the operator's --prometheus-url (chart value observe.prometheusUrl) if set, else the pods.")
    thresholds: ObserveThresholds = Field(default_factory=ObserveThresholds, json_schema_extra={"default": {}}, description="When each serving condition is raised (docs/observability.md).")

    @model_validator(mode="after")
    def _window(self) -> "ObserveSpec":
        if self.window_seconds < 2 * self.period_seconds:
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("window_below_two_periods", _WINDOW_RULE[2]),
                loc=("windowSeconds",), input=self.window_seconds)])
        for (_, path, message), value, limit in zip(_READS_RULES, (self.window_seconds, self.thresholds.stall_seconds),
                                                    (MAX_READS * self.period_seconds,) * 2, strict=True):
            if value > limit:
                raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                    type=PydanticCustomError("too_many_reads", message),
                    loc=tuple(path.strip(".").split(".")), input=value)])
        return self
