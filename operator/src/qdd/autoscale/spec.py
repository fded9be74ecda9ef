"""``spec.autoscaling`` (qdd.api.autoscaling) → :class:`PolicyConfig`."""

from __future__ import annotations

from ..api.autoscaling import AutoscalingSpec
from ..api.rules import endpoint_gpus
from ..api.spec import QwenDisaggDeploymentSpec
from .types import PolicyConfig, RoleLimits

DEFAULT_STARTUP_S = 600.0
"""Start-up time assumed when neither spec.autoscaling.startupSeconds nor a measured start is known:
a Qwen3.5-397B endpoint on GB200 loads ~230 GB of NVFP4 weights and captures CUDA graphs (minutes)."""


PEAK_WINDOW_PERIODS, TREND_WINDOW_PERIODS = 4, 20
"""PolicyConfig.peak_window_s and trend_window_s in decision periods (60 s and 300 s at 15 s)."""


def config_from_spec(spec: QwenDisaggDeploymentSpec, measured_startup_s: float | None = None) -> PolicyConfig:
    """The policy's configuration for a deployment whose ``spec.autoscaling`` is set.
    ``measured_startup_s``: median of this deployment's measured endpoint starts, if any. A role
    whose ``driver`` is External is left to its other writer. Raises ValueError when
    spec.autoscaling is unset."""
    a: AutoscalingSpec | None = spec.autoscaling
    if a is None:
        raise ValueError("spec.autoscaling is unset: autoscaling is off")
    startup = float(a.startup_seconds) if a.startup_seconds is not None else (measured_startup_s or DEFAULT_STARTUP_S)
    return PolicyConfig(
        ttft_ms=float(a.targets.ttft_ms), tpot_ms=float(a.targets.tpot_ms),
        prefill=RoleLimits(a.prefill.min_endpoints, a.prefill.max_endpoints, endpoint_gpus(spec, "prefill"),
                           external=a.prefill.driver == "External"),
        decode=RoleLimits(a.decode.min_endpoints, a.decode.max_endpoints, endpoint_gpus(spec, "decode"),
                          external=a.decode.driver == "External"),
        gpu_budget=a.gpu_budget, at_budget=a.at_budget, startup_s=startup, period_s=float(a.period_seconds),
        scale_up_cooldown_s=float(a.scale_up_cooldown_seconds), scale_down_cooldown_s=float(a.scale_down_cooldown_seconds),
        # The windows count decision periods: at the default 15 s period they are the policy's 60 s
        # peak window and 300 s trend window; a shorter period (a compressed live loop) shortens them alike.
        peak_window_s=PEAK_WINDOW_PERIODS * float(a.period_seconds),
        trend_window_s=TREND_WINDOW_PERIODS * float(a.period_seconds),
    )
