"""``QwenDisaggDeployment.spec.autoscaling``: SLO-driven endpoint counts under a GPU budget.

Absent (the default) means off: the deployment has exactly the endpoints ``spec.prefill.endpoints``
and ``spec.decode.endpoints`` say, and nothing here is rendered or written. The decision itself is
the pure function :func:`qdd.autoscale.decide`; docs/autoscaling.md describes the policy, its
inputs and how it shares the endpoint counts with HPA/KEDA and GitOps tools.

Units: milliseconds for latency targets, seconds for periods and start-up time, GPUs for the budget
(one prefill endpoint holds prefill.topology.dataParallel × tensorParallel GPUs, one decode
endpoint likewise).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import ApiModel, cel

AutoscalingMode = Literal["Off", "Advise", "On"]
AtBudget = Literal["Rebalance", "Hold"]
RoleDriver = Literal["Planner", "External"]

MAX_PREFILL_ENDPOINTS, MAX_DECODE_ENDPOINTS = 64, 16
"""The bounds of spec.prefill.endpoints and spec.decode.endpoints (qdd.api.spec)."""

_MIN_LE_MAX = ("!has(self.minEndpoints) || !has(self.maxEndpoints) || self.minEndpoints <= self.maxEndpoints",
               ".minEndpoints", "minEndpoints must not exceed maxEndpoints: lower minEndpoints or raise maxEndpoints")


class SLOTargets(ApiModel):
    ttft_ms: int = Field(ge=1, le=600_000, description="Time to first token the chosen percentile of requests must meet, ms (prefill queueing + prefill + KV transfer as the client sees it).")
    tpot_ms: int = Field(ge=1, le=60_000, description="Time per output token (inter-token latency, vLLM's TPOT/ITL) the chosen percentile of requests must meet, ms.")
    percentile: int = Field(90, ge=50, le=99, description="Percentile of requests that must meet both targets (90: p90 TTFT ≤ ttftMs and p90 TPOT ≤ tpotMs).")


class RoleBounds(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel(_MIN_LE_MAX)}

    min_endpoints: int = Field(1, ge=1, le=MAX_PREFILL_ENDPOINTS, description="Fewest endpoints of this role the autoscaler keeps (≥ 1: a P/D deployment with no endpoint of a role serves nothing).")
    max_endpoints: int = Field(ge=1, le=MAX_PREFILL_ENDPOINTS, description="Most endpoints of this role the autoscaler asks for (the GPU budget may allow fewer).")
    driver: RoleDriver = Field("Planner", description="Who writes this role's endpoint count (one writer per role). Planner: qdd's planner, through the role's scale subresource. External: an HPA or a KEDA ScaledObject through that same scale subresource; qdd's planner then never changes this role's count and counts its GPUs against gpuBudget (docs/autoscaling.md).")

    @model_validator(mode="after")
    def _min_le_max(self) -> "RoleBounds":
        if self.min_endpoints > self.max_endpoints:
            raise ValueError(f"{_MIN_LE_MAX[2]} (given: minEndpoints {self.min_endpoints}, maxEndpoints {self.max_endpoints})")
        return self


class DecodeBounds(RoleBounds):
    min_endpoints: int = Field(1, ge=1, le=MAX_DECODE_ENDPOINTS, description="Fewest decode endpoints the autoscaler keeps (≥ 1).")
    max_endpoints: int = Field(ge=1, le=MAX_DECODE_ENDPOINTS, description="Most decode endpoints the autoscaler asks for (the GPU budget may allow fewer); at most 16, as spec.decode.endpoints.")


class AutoscalingSpec(ApiModel):
    mode: AutoscalingMode = Field("Off", description="Off: endpoint counts are spec.prefill.endpoints and spec.decode.endpoints, nothing is computed. Advise: the decision is computed every periodSeconds and shown in status.autoscaling and events, counts are not changed. On: the decision is applied through the per-role scale path (docs/autoscaling.md), scale-down drains first.")
    targets: SLOTargets = Field(description="Latency targets the endpoint counts are chosen to meet.")
    prefill: RoleBounds = Field(description="Bounds of the prefill endpoint count.")
    decode: DecodeBounds = Field(description="Bounds of the decode endpoint count (decode endpoints are added and removed whole: one DP/EP group each).")
    gpu_budget: int = Field(ge=1, le=100_000, alias="gpuBudget", description="Most GPUs the deployment's engines may hold at any moment, Pending and draining endpoints included (the budget holds in every intermediate state, so a rebalance drains before it adds). At least the GPUs of minEndpoints of both roles.")
    at_budget: AtBudget = Field("Rebalance", description="What to do when the SLO needs more GPUs than gpuBudget. Rebalance: move GPUs to the role that misses its target by more (drain an endpoint of the other role first, add after), and set SLOAttainable=False. Hold: keep the counts as they are and set SLOAttainable=False.")
    period_seconds: int = Field(15, ge=5, le=3600, description="Seconds between decisions.")
    scale_up_cooldown_seconds: int = Field(30, ge=0, le=3600, description="Seconds after a scale-up of a role before the next scale-up of that role (lets the new endpoint's load show).")
    scale_down_cooldown_seconds: int = Field(300, ge=0, le=86400, description="Seconds the lower count must be wanted continuously (and since the last change of the role) before a scale-down: the stabilisation window against oscillation.")
    startup_seconds: int | None = Field(None, ge=0, le=7200, description="Seconds an engine endpoint takes from creation to Ready, used to scale up early enough (the forecast looks this far ahead). Default: the median of measured starts of this deployment, else 600.")
