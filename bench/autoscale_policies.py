"""The three contenders of the offline loop, each as a scaling policy of Dynamo's replay.

Dynamo 1.4.2's Rust replay owns the loop: it calls ``initial_tick_ms()`` once and ``on_tick(snapshot)``
at each tick, applies the absolute targets returned (``target_prefill``/``target_decode``, None =
unchanged: new workers start after the mocker's ``startup_time``, removed ones drain) and re-arms at
``next_tick_ms`` (dynamo/planner/offline/replay_adapter.py documents this contract). Dynamo's own
Planner enters through that adapter; qdd's policy through :class:`QddPolicy`, the same contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qdd.autoscale import Counts, Observation, PolicyConfig, PolicyState, RoleCounts, decide


@dataclass
class QddPolicy:
    """qdd.autoscale.decide every ``cfg.period_s`` on the replay's snapshots: arrivals and mean
    lengths of the last period (the router's view), TTFT and TPOT at the 95th percentile, Ready
    (``active``), Pending (``starting``) and draining workers per role.

    The policy reads latency at the SLO's percentile (in the operator, from the engines'
    histograms). The replay reports a mean per tick only, so this adapter ticks every
    ``sample_s`` and takes the request-weighted 95th percentile of those per-second means over
    the period: a histogram with one-second resolution in time (it misses the spread inside one
    second, so it reads a little low). ``latency="mean"`` passes the period's mean instead
    (what the replay offers a planner as is).

    A decision's ``cancel_pending`` reaches the replay as a lower target: the replay removes its
    newest starting worker first (then drains active ones) and counts a worker's GPU time from its
    start to its removal, start-up included. So every starting worker is cancellable here
    (RoleCounts.cancellable None), and a cancelled one costs only the time it was starting (checked
    against the replay: one more prefill worker at 10 s and the target back at 40 s cost 30 s × 2
    GPUs more than none; kept, its whole life)."""

    cfg: PolicyConfig
    profile: Any
    sample_s: float = 1.0
    latency: str = "p95"
    state: PolicyState | None = None
    actions: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    _ticks: list[dict[str, Any]] = field(default_factory=list)
    _next_ms: float = 0.0

    def initial_tick_ms(self) -> float:
        self._next_ms = self.cfg.period_s * 1000.0
        return self.sample_s * 1000.0

    def _observe(self, now_ms: float) -> Observation:
        ticks, self._ticks = self._ticks, []
        dur = sum(float(t.get("duration_s") or 0.0) for t in ticks) or self.cfg.period_s
        shapes = sum(float(t.get("shape_count") or 0.0) for t in ticks)

        def lengths(key: str) -> float:
            return sum(float(t.get(key) or 0.0) * float(t.get("shape_count") or 0.0) for t in ticks) / shapes

        def latency(key: str, count: str) -> float | None:
            pts = sorted((float(t[key]), float(t[count])) for t in ticks if t.get(count))
            total = sum(w for _, w in pts)
            if total <= 0:
                return None
            if self.latency == "mean":
                return sum(v * w for v, w in pts) / total
            acc = 0.0
            for v, w in pts:
                acc += w
                if acc >= 0.95 * total:
                    return v
            return pts[-1][0]

        isl, osl = (lengths("avg_isl"), lengths("avg_osl")) if shapes > 0 else (0.0, 0.0)
        if isl <= 0 and self.state and self.state.history:  # a period without completions
            isl, osl = self.state.history[-1].isl, self.state.history[-1].osl
        return Observation(now_s=now_ms / 1000.0, request_rate_rps=sum(float(t.get("num_req", 0)) for t in ticks) / dur,
                           mean_isl=isl, mean_osl=osl, ttft_ms=latency("avg_ttft_ms", "ttft_count"),
                           tpot_ms=latency("avg_itl_ms", "itl_count"))

    def on_tick(self, r: dict[str, Any]) -> dict[str, Any]:
        self._ticks.append(r.get("traffic") or {})
        out: dict[str, Any] = {"next_tick_ms": r["now_ms"] + self.sample_s * 1000.0, "target_prefill": None,
                               "target_decode": None}
        if r["now_ms"] + 1e-6 < self._next_ms:
            return out
        self._next_ms += self.cfg.period_s * 1000.0
        obs = self._observe(r["now_ms"])
        counts = Counts(*(RoleCounts(r[f"active_{x}_count"], r[f"starting_{x}_count"], r[f"draining_{x}_count"])
                          for x in ("prefill", "decode")))
        d = decide(obs, self.profile, counts, self.cfg, self.state)
        self.state = d.state
        for role in ("prefill", "decode"):
            rd, c = d.of(role), counts.of(role)
            new = c.active - rd.cancel_pending - rd.drain + rd.add
            out[f"target_{role}"] = new if new != c.active else None
            self.actions += rd.add + rd.cancel_pending + rd.drain
        self.log.append({"t": obs.now_s, "rate": round(obs.request_rate_rps, 2), "isl": round(obs.mean_isl),
                         "osl": round(obs.mean_osl), "ttft": obs.ttft_ms and round(obs.ttft_ms),
                         "tpot": obs.tpot_ms and round(obs.tpot_ms, 1), "forecast": round(d.forecast_rate_rps, 2),
                         "ready": (counts.prefill.ready, counts.decode.ready),
                         "target": (d.prefill.target, d.decode.target), "why": (d.prefill.reason, d.decode.reason),
                         "corr": {k: round(v, 3) for k, v in d.state.correction.items()}})
        return out


@dataclass
class Recorder:
    """Wraps Dynamo's ReplayPlannerAdapter unchanged and counts its scaling actions (endpoints added
    or removed) from the snapshots it sees."""

    inner: Any
    actions: int = 0

    def initial_tick_ms(self) -> float:
        return float(self.inner.initial_tick_ms())

    def on_tick(self, r: dict[str, Any]) -> dict[str, Any]:
        out = self.inner.on_tick(r)
        for role in ("prefill", "decode"):
            tgt = out.get(f"target_{role}")
            if tgt is not None:
                self.actions += abs(tgt - r[f"non_draining_{role}_count"])
        return out


def dynamo_planner(prefill_args, decode_args, prefill_model, decode_model, *, ttft_ms: float, itl_ms: float,
                   budget: int, gpus_p: int, gpus_d: int, max_p: int, max_d: int) -> Recorder:
    """Dynamo's Planner as its replay builds it (dynamo.replay.main._prepare_planner_replay), with the
    benchmark forward-pass metrics generated by Dynamo's own generators from the same endpoint model
    the simulator runs (its replay would take them from AIConfigurator directly; our endpoint
    model is AIConfigurator's per-rank numbers aggregated per endpoint, bench/autoscale_model.py).
    SLA mode, throughput (predictive) scaling every 180 s plus load (reactive) scaling every 5 s:
    the two modes Dynamo documents; GPU budget and endpoint sizes as qdd's."""
    from dynamo.planner.config.planner_config import PlannerConfig
    from dynamo.planner.core.types import WorkerCapabilities
    from dynamo.planner.offline.replay_adapter import create_replay_planner_adapter
    from dynamo.replay.main import _engine_caps, _generate_aic_decode_fpms, _generate_aic_prefill_fpms

    cfg = PlannerConfig.model_validate({
        "mode": "disagg", "backend": "mocker", "optimization_target": "sla", "ttft_ms": ttft_ms, "itl_ms": itl_ms,
        "enable_throughput_scaling": True, "enable_load_scaling": True, "throughput_adjustment_interval_seconds": 180,
        "load_adjustment_interval_seconds": 5, "max_gpu_budget": budget, "min_endpoint": 1,
        "prefill_engine_num_gpu": gpus_p, "decode_engine_num_gpu": gpus_d,
    })
    cfg.advisory = True  # as the replay sets it: decisions go to the replay, not to Kubernetes
    caps = WorkerCapabilities(prefill=_engine_caps(prefill_args), decode=_engine_caps(decode_args))
    caps.prefill.num_gpu, caps.decode.num_gpu = gpus_p, gpus_d
    adapter = create_replay_planner_adapter(planner_config=cfg, capabilities=caps)
    adapter.install_benchmark_fpms(prefill_fpms=_generate_aic_prefill_fpms(prefill_model, prefill_args, 8),
                                   decode_fpms=_generate_aic_decode_fpms(decode_model, decode_args, 8))
    del max_p, max_d  # Dynamo's Planner has no per-role maximum besides the budget
    return Recorder(adapter)


def ceil_div(a: float, b: float) -> int:
    return max(1, math.ceil(a / b - 1e-9))
