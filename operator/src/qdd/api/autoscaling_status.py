"""``QwenDisaggDeployment.status.autoscaling``: the last decision of the autoscaler, with its inputs
(docs/autoscaling.md). Declared in full, so the structural CRD never prunes it."""

from __future__ import annotations

from pydantic import Field

from .base import ApiModel


class AutoscalingRoleStatus(ApiModel):
    driver: str = Field("Planner", description="Who writes this role's count: Planner (qdd) or External (an HPA/KEDA through the role's QwenDisaggRoleScale).")
    target: int = Field(0, description="Endpoints the last decision wants active (mode On, driver Planner: written to the role's QwenDisaggRoleScale spec.replicas; Advise: advice only).")
    effective: int = Field(0, description="Endpoints laid out now (Ready, starting and draining).")
    ready: int = Field(0, description="Endpoints Ready and in the router.")
    pending: int = Field(0, description="Endpoints created and not Ready yet (they count as capacity already bought).")
    draining: int = Field(0, description="Endpoints out of the router, finishing their requests and KV leases before removal.")
    needed: int = Field(0, description="Endpoints the SLO needs at the forecast load, before bounds and budget.")
    target_latency_ms: float | None = Field(None, description="The target: TTFT (prefill) or TPOT (decode), ms.")
    observed_latency_ms: float | None = Field(None, description="What the engines report at the SLO's percentile over spec.observe.windowSeconds, ms (prefill: prefill TTFT + decode TTFT, the KV transfer included; decode: inter-token latency).")
    predicted_latency_ms: float | None = Field(None, description="What the performance profile predicts at the current load per Ready endpoint, ms (none beyond the profile's last point).")
    reason: str = Field("", description="Why this target.")


class AutoscalingInputs(ApiModel):
    request_rate: float | None = Field(None, description="Requests per second arriving (prefill's finished requests over the window, plus its queue's growth).")
    forecast_rate: float | None = Field(None, description="Requests per second the decision sized for (the trend startupSeconds + periodSeconds ahead, or the busiest recent period).")
    mean_isl: float | None = Field(None, description="Prompt tokens per request over the window.")
    mean_osl: float | None = Field(None, description="Generated tokens per request over the window.")
    profile: str = Field("", description="The performance profile read (ConfigMap <deployment>-perf-profile), or why none could be.")
    startup_seconds: float | None = Field(None, description="Seconds an endpoint is assumed to take to start (the forecast's horizon).")
    startup_source: str = Field("", description="spec (autoscaling.startupSeconds), measured (median of this deployment's engine starts) or model (qdd.catalog.startup).")


class AutoscalingStatus(ApiModel):
    mode: str = Field("Off", description="spec.autoscaling.mode the decision was made in.")
    last_decision_time: str | None = Field(None, description="RFC 3339 time of the last decision.")
    ttft_ms: int | None = Field(None, description="spec.autoscaling.targets.ttftMs.")
    tpot_ms: int | None = Field(None, description="spec.autoscaling.targets.tpotMs.")
    percentile: int | None = Field(None, description="spec.autoscaling.targets.percentile.")
    gpu_budget: int | None = Field(None, description="spec.autoscaling.gpuBudget.")
    gpus_held: int | None = Field(None, description="GPUs the engine pods hold now, starting, draining and terminating ones included.")
    slo_attainable: bool | None = Field(None, description="False when the SLO needs more endpoints than the bounds or the GPU budget allow (condition SLOAttainable).")
    prefill: AutoscalingRoleStatus | None = Field(None, description="Prefill's decision.")
    decode: AutoscalingRoleStatus | None = Field(None, description="Decode's decision.")
    inputs: AutoscalingInputs | None = Field(None, description="What the decision read.")
    message: str = Field("", description="Why no decision was made, when none was.")
    policy_state: str | None = Field(None, description="The policy's memory (load history, cooldowns, corrections) as JSON, so that a restarted operator continues it.")
