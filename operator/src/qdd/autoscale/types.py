"""Inputs and outputs of the autoscaling decision (:func:`qdd.autoscale.policy.decide`).

Small frozen dataclasses with units in their names, so that adapters from the engines' metrics
(qdd.observe) and from the performance model (qdd.perf.profile) can be written against them
without this package importing either. Nothing here reads a clock or the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, Role] = ("prefill", "decode")


class CapacityProfile(Protocol):
    """Per-endpoint capacity of one deployment's engines (one endpoint = one DP/EP group).

    The performance model (qdd.perf.profile) answers these from AIConfigurator's data or from
    measurements; an adapter maps it onto this protocol.
    """

    def prefill_tokens_per_s(self, isl: float, ttft_ms: float) -> float:
        """Input tokens per second one prefill endpoint sustains at mean input length ``isl``
        (tokens) while the chosen percentile of TTFT stays at or under ``ttft_ms``. > 0."""
        ...

    def decode_concurrency(self, isl: float, osl: float, tpot_ms: float) -> float:
        """Requests one decode endpoint holds at once (all its DP ranks together) while TPOT
        stays at or under ``tpot_ms``, at mean input ``isl`` and output ``osl`` tokens. > 0."""
        ...


@dataclass(frozen=True)
class Observation:
    """What the deployment saw over the last decision period (router and engines' metrics).

    ``request_rate_rps``: requests arriving per second (router, or prefill
    ``vllm:request_success_total`` + waiting growth). ``mean_isl``/``mean_osl``: tokens per request
    (``vllm:prompt_tokens_total`` / requests, ``vllm:generation_tokens_total`` / requests).
    ``ttft_ms``/``tpot_ms``: the observed latency at the SLO's percentile (from the engines'
    ``vllm:time_to_first_token_seconds`` / ``vllm:inter_token_latency_seconds`` histograms);
    None when no request finished in the period.
    """

    now_s: float
    request_rate_rps: float
    mean_isl: float
    mean_osl: float
    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True)
class RoleCounts:
    """Endpoints of one role by state. ``ready``: serving. ``pending``: created, not Ready yet
    (scheduling, pulling, loading weights, warming up). ``draining``: taken out of routing,
    finishing in-flight requests and the KV transfers they owe; they still hold their GPUs."""

    ready: int
    pending: int = 0
    draining: int = 0
    cancellable: int | None = None
    """Of the ``pending``, how many a lower count removes at once, newest first: those above every
    Ready or draining endpoint in the order endpoints are removed (the controller removes the
    highest-numbered first; a not-Ready endpoint below a Ready one, e.g. one restarting, is not
    removed by a lower count: the Ready one above it would be drained instead). None: all of them
    (Dynamo's replay removes its newest starting worker first)."""

    @property
    def cancellable_pending(self) -> int:
        """Pending endpoints a lower count removes at once (:attr:`cancellable`, at most ``pending``)."""
        return self.pending if self.cancellable is None else max(min(self.cancellable, self.pending), 0)

    @property
    def active(self) -> int:
        """Endpoints that serve now or will: ready + pending."""
        return self.ready + self.pending

    @property
    def held(self) -> int:
        """Endpoints that hold GPUs: ready + pending + draining."""
        return self.ready + self.pending + self.draining


@dataclass(frozen=True)
class Counts:
    prefill: RoleCounts
    decode: RoleCounts

    def of(self, role: Role) -> RoleCounts:
        return self.prefill if role == "prefill" else self.decode


@dataclass(frozen=True)
class RoleLimits:
    min_endpoints: int
    max_endpoints: int
    gpus_per_endpoint: int
    external: bool = False
    """True when another writer (an HPA or KEDA through the role's scale subresource) owns this
    role's count: the policy never changes it, and counts its GPUs against the budget."""


@dataclass(frozen=True)
class PolicyConfig:
    """The knobs of spec.autoscaling plus the policy's own constants (documented defaults)."""

    ttft_ms: float
    tpot_ms: float
    prefill: RoleLimits
    decode: RoleLimits
    gpu_budget: int
    at_budget: Literal["Rebalance", "Hold"] = "Rebalance"
    startup_s: float = 600.0
    period_s: float = 15.0
    scale_up_cooldown_s: float = 30.0
    scale_down_cooldown_s: float = 300.0
    utilization_up: float = 0.85
    """Prefill: scale up when forecast demand exceeds this share of the active endpoints' capacity
    (TTFT is a queue: it climbs steeply as the load nears the capacity, and bursts need room)."""
    utilization_down: float = 0.65
    """Prefill: scale down only to a count at which demand stays under this share: the hysteresis
    band between the two keeps a constant load from flipping a count."""
    decode_utilization_up: float = 0.95
    """Decode: as ``utilization_up``. TPOT is one batch step, which grows smoothly with the batch
    (the profile's concurrency is where its 95th percentile reaches the target), not a queue, so
    decode can run closer to its profiled capacity."""
    decode_utilization_down: float = 0.75
    """Decode: as ``utilization_down``."""
    trend_window_s: float = 300.0
    """Seconds of history the load trend is fitted on."""
    peak_window_s: float = 60.0
    """Demand is sized for the busiest period of the last this many seconds (bursts)."""
    latency_down: float = 0.5
    """Scale a role down only while its observed latency stayed at or under this share of its
    target in every period of the hold window: requests that arrive in bursts shorter than a
    period load the endpoints more than the period's mean rate says, and the latency shows it."""

    def limits(self, role: Role) -> RoleLimits:
        return self.prefill if role == "prefill" else self.decode

    def band(self, role: Role) -> tuple[float, float]:
        """(scale-up, scale-down) utilization of the role."""
        if role == "prefill":
            return self.utilization_up, self.utilization_down
        return self.decode_utilization_up, self.decode_utilization_down


@dataclass(frozen=True)
class Sample:
    """One period's observation as the policy remembers it (PolicyState.history)."""

    t_s: float
    rate_rps: float
    isl: float
    osl: float
    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between decisions (kept in status by the controller)."""

    history: tuple[Sample, ...] = ()
    last_scale_up_s: dict[str, float] = field(default_factory=dict)
    last_change_s: dict[str, float] = field(default_factory=dict)
    lower_since_s: dict[str, float] = field(default_factory=dict)
    """Per role: since when a lower count than the active one has been enough (hysteresis)."""
    correction: dict[str, float] = field(default_factory=dict)
    """Per role: share of the profile's capacity the engines have shown (1 = as profiled; lowered
    when the observed latency misses the target, raised back slowly while it is well met)."""


@dataclass(frozen=True)
class RoleDecision:
    """``target``: active endpoints wanted once the actions below and their follow-ups settle.
    ``add``: endpoints to create now (they fit the budget now). ``cancel_pending``: not-yet-Ready
    endpoints to delete now, the newest first (they serve nothing: no drain, no hold). ``drain``:
    Ready endpoints to take out of routing now; the controller deletes each once its in-flight
    requests and KV leases are done (decode groups whole). ``needed``: endpoints the SLO needs at
    the forecast load, before bounds and budget."""

    target: int
    add: int = 0
    cancel_pending: int = 0
    drain: int = 0
    needed: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    prefill: RoleDecision
    decode: RoleDecision
    slo_attainable: bool
    """False when the SLO needs more than the bounds or the budget allow (condition SLOAttainable)."""
    gpus_held_after: int
    """GPUs held once this decision's actions are applied (draining endpoints included): ≤ budget."""
    forecast_rate_rps: float
    state: PolicyState

    def of(self, role: Role) -> RoleDecision:
        return self.prefill if role == "prefill" else self.decode
