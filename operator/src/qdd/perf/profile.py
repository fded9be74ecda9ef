"""The performance profile of one deployment: per role, latency against load, per endpoint.

This module is the contract between the performance model (``qdd.perf``, built on NVIDIA's
aiconfigurator, an optional extra) and whoever sizes a running deployment (the autoscaler, the
operator): it imports only pydantic and the standard library, so a running operator reads a
profile without the library installed.

Shape (JSON, camelCase; ``PerfProfile.model_dump_json(by_alias=True)``)::

    {"schema": "qdd.dev/perf-profile/v1", "deployment": "qwen35", "model": "nvidia/Qwen3.5-…",
     "gpu": "GB200", "backend": "vllm", "backendVersion": "0.24.0", "database": "aiconfigurator 0.12.0 …",
     "isl": 8192, "osl": 1024,
     "prefill": {"role": "prefill", "topology": "DEP2", "gpusPerEndpoint": 2,
                 "points": [{"load": 1.9, "latencyMs": 520.0, "tokensPerSecond": 15600.0,
                             "source": "predicted"}, …],
                 "predicted": [<the model's own points, kept through calibration>]},
     "decode":  {"role": "decode", "topology": "DEP8", "gpusPerEndpoint": 8, "maxLoad": 5632,
                 "points": [{"load": 512, "latencyMs": 21.0, "tokensPerSecond": 24380.0,
                             "source": "measured"}, …]},
     "measured": [<MeasuredPoint>…], "notCaptured": ["…"]}

Units (every point is per endpoint, one DP/EP group):
- prefill ``load``: requests/s arriving at one prefill endpoint (ISL tokens each); ``latencyMs``:
  TTFT at that rate; ``tokensPerSecond``: input tokens/s the endpoint prefills at that rate.
- decode ``load``: concurrent requests held by one decode endpoint; ``latencyMs``: TPOT (time
  per output token after the first); ``tokensPerSecond``: output tokens/s of the endpoint.
- ``maxLoad``: the most load the endpoint can hold at all (decode: KV-cache capacity in
  requests of ISL + OSL, from ``qdd plan``); ``None`` when unknown.

Calibration (:func:`calibrate`): a finished QwenDisaggBenchmark's sweep points become
:class:`MeasuredPoint` s (deployment concurrency, request rate, TTFT, TPOT, endpoints); each gives
one measured point per role; the predicted curve is scaled by the measured/predicted ratio,
interpolated over load (held constant beyond the outermost measurements), and the measured points
replace predicted ones near them. The interpolation functions then answer from measured values
where they exist.

Queries (the autoscaler's): :func:`latency_at`, :func:`max_load_under`,
:func:`max_prefill_rate` (req/s per prefill endpoint under a TTFT target) and
:func:`max_decode_concurrency` (requests per decode endpoint under a TPOT target); and, as methods,
the autoscaler's capacity protocol: :meth:`PerfProfile.prefill_tokens_per_s` (isl, ttft_ms) and
:meth:`PerfProfile.decode_concurrency` (isl, osl, tpot_ms), first order at other lengths.
"""

from __future__ import annotations

import bisect
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

SCHEMA = "qdd.dev/perf-profile/v1"
CONFIGMAP_KEY = "profile.json"
"""The key of the profile's JSON in its ConfigMap."""
NEAR = 0.10
"""A measured point replaces predicted points whose load is within this fraction of its own."""
MAX_POINTS = 256
"""Predicted points of one role (``qdd perf profile`` writes 2 to 20; a role's points are these and
the measured ones). The operator reads
the ConfigMap, which whoever may write ConfigMaps in the namespace controls: before (round 4) a
1 MiB profile of thousands of points cost calibration (quadratic in points × measurements) seconds
in every pass of every completed benchmark of the deployment."""
MAX_MEASURED = 512
"""Benchmark points a profile keeps (16 sweeps of 32 points): calibration keeps the newest. Every
benchmark added its points for ever before, until the ConfigMap outgrew the API server's 1 MiB."""
MAX_NUMBER = 1e9
"""The largest load, latency (ms: 11 days) or rate a profile holds; latencies at least 1 µs. A
calibrated point beyond it (measurements that contradict the prediction by 10^15) is refused, not
written as a profile that no longer reads back (an overflowed ``inf`` was written as null)."""

Role = Literal["prefill", "decode"]
Source = Literal["predicted", "calibrated", "measured"]


def configmap_name(deployment: str) -> str:
    """Name of the ConfigMap that holds the profile of QwenDisaggDeployment ``deployment``, in its
    namespace (``qdd perf profile`` writes it; a running operator reads it)."""
    return f"{deployment}-perf-profile"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid",
                              allow_inf_nan=False)


class Point(_Model):
    """One operating point of one endpoint (units in the module docstring)."""

    load: float = Field(gt=0, le=MAX_NUMBER, description="prefill: requests/s per endpoint; decode: concurrent requests per endpoint")
    latency_ms: float = Field(ge=1e-3, le=MAX_NUMBER, description="prefill: TTFT; decode: TPOT; milliseconds")
    tokens_per_second: float = Field(ge=0, le=MAX_NUMBER * 1e3, description="prefill: input tokens/s; decode: output tokens/s; per endpoint")
    source: Source = Field("predicted", description="predicted: the model's; calibrated: the model's scaled to "
                           "measurements near it; measured: a benchmark's")


class RoleProfile(_Model):
    """Latency against load of one endpoint of one role. ``points`` (what the queries read) are
    sorted by load with latency not decreasing (:func:`monotone` makes them so: a faster point at
    a higher load is noise, and a query must never find more room by asking for more load);
    ``predicted`` keeps the model's own points, unchanged by calibration, for comparison and for
    calibrating again."""

    role: Role
    topology: str = Field(description="e.g. DEP2, DEP8, TEP4")
    gpus_per_endpoint: int = Field(ge=1)
    max_load: float | None = Field(None, gt=0, le=MAX_NUMBER, description="most load the endpoint holds at all (decode: KV capacity)")
    points: list[Point] = Field(min_length=1, max_length=MAX_POINTS + MAX_MEASURED)
    predicted: list[Point] = Field(default_factory=list, max_length=MAX_POINTS, description="the model's points before calibration")

    @model_validator(mode="after")
    def _sorted(self) -> RoleProfile:
        loads = [p.load for p in self.points]
        if loads != sorted(loads) or len(set(loads)) != len(loads):
            raise ValueError(f"{self.role}.points: loads must be strictly increasing, got {loads}")
        lat = [p.latency_ms for p in self.points]
        if any(b < a for a, b in zip(lat, lat[1:], strict=False)):
            raise ValueError(f"{self.role}.points: latency must not fall as load rises, got {lat}")
        return self


def monotone(points: list[Point]) -> list[Point]:
    """``points`` sorted by load (the later of two at one load kept), latency made non-decreasing
    by a running maximum."""
    by = {p.load: p for p in points}
    out, worst = [], 0.0
    for load in sorted(by):
        p = by[load]
        worst = max(worst, p.latency_ms)
        out.append(p if p.latency_ms == worst else p.model_copy(update={"latency_ms": worst}))
    return out


class MeasuredPoint(_Model):
    """One sweep point of a finished QwenDisaggBenchmark, with the topology it ran on."""

    benchmark: str
    concurrency: int = Field(ge=1, le=1 << 20, description="deployment-wide concurrent requests (vllm bench --max-concurrency)")
    request_rate: float = Field(gt=0, le=MAX_NUMBER, description="completed requests/s over the run, deployment-wide")
    ttft_ms: float = Field(ge=1e-3, le=MAX_NUMBER, description="median TTFT")
    tpot_ms: float = Field(ge=1e-3, le=MAX_NUMBER, description="median TPOT")
    total_tokens_per_second_per_gpu: float = Field(ge=0, le=MAX_NUMBER)
    prefill_endpoints: int = Field(ge=1, le=64)
    decode_endpoints: int = Field(ge=1, le=16)


class PerfProfile(_Model):
    """The profile of one deployment at one workload (ISL/OSL); see the module docstring."""

    schema_: str = Field(SCHEMA, alias="schema")
    deployment: str
    model: str
    gpu: str
    backend: str
    backend_version: str
    database: str = Field(description="what the prediction came from (library, version, database)")
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    prefill: RoleProfile
    decode: RoleProfile
    measured: list[MeasuredPoint] = Field(default_factory=list, max_length=MAX_MEASURED)
    not_captured: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list, max_length=64,
                                                                     description="what the prediction leaves out")

    @model_validator(mode="after")
    def _schema(self) -> PerfProfile:
        if self.schema_ != SCHEMA:
            raise ValueError(f"schema: {self.schema_!r} is not {SCHEMA!r} (a profile of another qdd version)")
        if self.prefill.role != "prefill" or self.decode.role != "decode":
            raise ValueError("prefill.role and decode.role must be prefill and decode")
        return self

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=1)

    # The autoscaler's capacity protocol (qdd.autoscale.types.CapacityProfile on branch issue-27),
    # answered to first order at lengths other than the profile's own.

    def prefill_tokens_per_s(self, isl: float, ttft_ms: float) -> float:
        """Input tokens/s one prefill endpoint sustains at mean input ``isl`` with TTFT ≤
        ``ttft_ms``. First order away from the profile's ISL: a prompt's prefill time is
        proportional to its length, so the target is read at ``ttft_ms × profile.isl / isl`` and
        the tokens/s are the profile's (attention's quadratic share is left out)."""
        if isl <= 0 or ttft_ms <= 0:
            raise ValueError(f"prefill_tokens_per_s: isl and ttft_ms must be > 0, got {isl}, {ttft_ms}")
        return max_load_under(self.prefill, ttft_ms * self.isl / isl) * self.isl

    def decode_concurrency(self, isl: float, osl: float, tpot_ms: float) -> float:
        """Requests one decode endpoint holds with TPOT ≤ ``tpot_ms`` at mean lengths ``isl``/``osl``.
        First order away from the profile's lengths: TPOT as profiled (its context-length share is
        left out); the KV capacity (``max_load``) scaled by the resident tokens of a request at
        mid-decode, (isl + osl / 2), profiled over asked."""
        if isl <= 0 or osl <= 0 or tpot_ms <= 0:
            raise ValueError(f"decode_concurrency: isl, osl and tpot_ms must be > 0, got {isl}, {osl}, {tpot_ms}")
        cap = None if self.decode.max_load is None else \
            self.decode.max_load * (self.isl + self.osl / 2) / (isl + osl / 2)
        role = self.decode.model_copy(update={"max_load": cap})
        return max_load_under(role, tpot_ms)


def load_profile(text: str) -> PerfProfile:
    """A profile from its JSON (the ConfigMap's ``profile.json``); pydantic's ValidationError names
    the bad field."""
    return PerfProfile.model_validate_json(text)


# --- queries ---------------------------------------------------------------------------------

def latency_at(role: RoleProfile, load: float) -> float:
    """Latency (ms) at ``load`` (units of the role), linear between points; below the first point
    the first latency; above the last point, or above ``max_load``, ``inf`` (not predicted, so
    not promised)."""
    pts = role.points
    if role.max_load is not None and load > role.max_load:
        return math.inf
    if load <= pts[0].load:
        return pts[0].latency_ms
    if load > pts[-1].load:
        return math.inf
    i = bisect.bisect_left([p.load for p in pts], load)
    a, b = pts[i - 1], pts[i]
    return a.latency_ms + (b.latency_ms - a.latency_ms) * (load - a.load) / (b.load - a.load)


def max_load_under(role: RoleProfile, latency_ms: float) -> float:
    """The highest load (units of the role) whose latency stays at or under ``latency_ms``; 0 when
    even the lightest point misses it. Never above the last point or ``max_load``."""
    pts = role.points
    if pts[0].latency_ms > latency_ms:
        return 0.0
    best = pts[0].load
    for a, b in zip(pts, pts[1:], strict=False):
        if b.latency_ms <= latency_ms:
            best = b.load
            continue
        if b.latency_ms > a.latency_ms:
            best = a.load + (b.load - a.load) * (latency_ms - a.latency_ms) / (b.latency_ms - a.latency_ms)
        break
    return min(best, role.max_load) if role.max_load is not None else best


def max_prefill_rate(profile: PerfProfile, ttft_ms: float) -> float:
    """Requests/s one prefill endpoint takes at the profile's ISL with TTFT ≤ ``ttft_ms``."""
    return max_load_under(profile.prefill, ttft_ms)


def max_decode_concurrency(profile: PerfProfile, tpot_ms: float) -> int:
    """Concurrent requests one decode endpoint holds with TPOT ≤ ``tpot_ms`` (and within its KV
    capacity), rounded down."""
    return int(max_load_under(profile.decode, tpot_ms))


# --- calibration -----------------------------------------------------------------------------

def measured_role_points(m: MeasuredPoint, osl: int, isl: int) -> tuple[Point, Point]:
    """The prefill and decode points one benchmark point gives, per endpoint: prefill at the
    measured request rate shared by the prefill endpoints (TTFT), decode at the concurrency shared
    by the decode endpoints (TPOT). The router spreads requests evenly (round robin), so the
    even share is what each endpoint saw."""
    rate = m.request_rate / m.prefill_endpoints
    conc = m.concurrency / m.decode_endpoints
    prefill = Point(load=rate, latency_ms=m.ttft_ms, tokens_per_second=rate * isl, source="measured")
    decode = Point(load=conc, latency_ms=m.tpot_ms, tokens_per_second=conc * 1000.0 / m.tpot_ms, source="measured")
    return prefill, decode


def _ratio_at(ratios: list[tuple[float, float]], load: float) -> float:
    """measured/predicted at ``load``: linear between measurements, constant beyond them."""
    if load <= ratios[0][0]:
        return ratios[0][1]
    if load >= ratios[-1][0]:
        return ratios[-1][1]
    i = bisect.bisect_left([x for x, _ in ratios], load)
    (x0, r0), (x1, r1) = ratios[i - 1], ratios[i]
    return r0 + (r1 - r0) * (load - x0) / (x1 - x0)


def calibrate_role(role: RoleProfile, measured: list[Point]) -> RoleProfile:
    """``role``'s points recomputed from its prediction and ``measured``: the predicted latency
    scaled by the measured/predicted ratio (linear between measurements, constant beyond them;
    source ``calibrated``), predicted points within ``NEAR`` of a measured load dropped, the
    measured points added, the whole made :func:`monotone`. No measurement: the prediction."""
    predicted = role.predicted or [p for p in role.points if p.source == "predicted"]
    if not predicted:
        raise ValueError(f"{role.role}: a profile without predicted points cannot be calibrated")
    base = role.model_copy(update={"points": monotone(predicted), "max_load": None})
    if not measured:
        return role.model_copy(update={"points": base.points, "predicted": predicted})
    ratios = [(m.load, m.latency_ms / pred) for m in sorted(measured, key=lambda p: p.load)
              if math.isfinite(pred := latency_at(base, m.load))]
    kept = [p for p in base.points if all(abs(p.load - m.load) > NEAR * m.load for m in measured)]
    if ratios:
        kept = [p.model_copy(update={"latency_ms": p.latency_ms * _ratio_at(ratios, p.load), "source": "calibrated"})
                for p in kept]
    return role.model_copy(update={"points": monotone(kept + list(measured)), "predicted": predicted})


def calibrate(profile: PerfProfile, measured: list[MeasuredPoint]) -> PerfProfile:
    """``profile`` with benchmark points taken in: kept in ``measured`` (with the ones it held, the
    newest :data:`MAX_MEASURED`) and each role's curve recomputed from its prediction and all of
    them (calibrating twice with the same points gives the same profile). Raises ValueError
    (pydantic's ValidationError) when the result is out of a profile's bounds."""
    every = (list(profile.measured) + [m for m in measured if m not in profile.measured])[-MAX_MEASURED:]
    pre, dec = [], []
    for m in every:
        p, d = measured_role_points(m, profile.osl, profile.isl)
        pre.append(p)
        dec.append(d)
    new = profile.model_copy(update={
        "prefill": calibrate_role(profile.prefill, _mean_by_load(pre)),
        "decode": calibrate_role(profile.decode, _mean_by_load(dec)),
        "measured": every,
    })
    # model_copy does not validate: what is written must read back (ValidationError, a ValueError, if not).
    return PerfProfile.model_validate(new.model_dump(by_alias=True))


def _mean_by_load(points: list[Point]) -> list[Point]:
    """Measurements at one load averaged (two benchmarks at one concurrency)."""
    by: dict[float, list[Point]] = {}
    for p in points:
        by.setdefault(p.load, []).append(p)
    return [Point(load=k, latency_ms=sum(p.latency_ms for p in v) / len(v),
                  tokens_per_second=sum(p.tokens_per_second for p in v) / len(v), source="measured")
            for k, v in sorted(by.items())]
