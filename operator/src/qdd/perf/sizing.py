"""SLO sizing: the topology and endpoint counts that meet a TTFT and a TPOT target at a request
rate with the fewest GPUs (or serve the most requests within a GPU budget).

Candidates (:data:`SHAPES`): prefill and decode endpoint layouts of equal TP (qdd refuses mixed TP
for hybrid models): DEP2 or DEP4 prefill with DEP4, DEP8 or DEP16 decode; TEP4 prefill with TEP4
or DP2TP4 (expert parallel) decode. Each is planned by qdd (its rules and its decode capacity) and
profiled by aiconfigurator (:mod:`qdd.perf.profiling`); from the profile, per endpoint:

- prefill: the request rate it takes with TTFT ≤ the target (:func:`~qdd.perf.profile.max_prefill_rate`);
- decode: the concurrency it holds with TPOT ≤ the target (:func:`~qdd.perf.profile.max_decode_concurrency`,
  within qdd's KV capacity), and the rate that gives — concurrency / request time, times
  aiconfigurator's decode rate-matching factor 0.92.

Endpoints: P = ⌈rate / prefill rate⌉, D = ⌈rate / decode rate⌉ (the P:D ratio follows). The
choice: fewest GPUs, then the most headroom. With a GPU budget instead of a rate: every P, D that
fits, the most requests/s served, then the fewest GPUs.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..api import parse_resource
from ..errors import SpecError
from ..plan import build_plan
from ..plan.types import topology_name
from .aic import Database, NotInDatabase, rate_matching
from .profile import PerfProfile, latency_at, max_decode_concurrency, max_prefill_rate
from .profiling import build_profile

SHAPES: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 1), (8, 1)), ((2, 1), (4, 1)), ((2, 1), (16, 1)), ((4, 1), (8, 1)), ((4, 1), (4, 1)), ((4, 1), (16, 1)),
    ((1, 4), (1, 4)), ((1, 4), (2, 4)),
)
"""(prefill (dp, tp), decode (dp, tp)) pairs, all expert parallel."""


@dataclass(frozen=True)
class Slo:
    ttft_ms: float
    tpot_ms: float


SLO_MAX_MS = {"ttft": 600_000, "tpot": 60_000}


def parse_slo(text: str) -> Slo:
    """``ttft=MS,tpot=MS`` (either order); ValueError naming the fix."""
    got: dict[str, float] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*(ttft|tpot)\s*=\s*([0-9]+(?:\.[0-9]+)?)\s*(ms)?\s*", part)
        if not m or float(m.group(2)) <= 0:
            raise ValueError(f"--slo: {part.strip()!r} is not ttft=MS or tpot=MS with MS > 0 (e.g. --slo ttft=2000,tpot=50)")
        # The bounds of spec.autoscaling.targets (qdd.api.autoscaling.SLOTargets): 400 digits were inf.
        if float(m.group(2)) > SLO_MAX_MS[m.group(1)]:
            raise ValueError(f"--slo: {m.group(1)} {m.group(2)[:20]} ms is above {SLO_MAX_MS[m.group(1)]:,} ms")
        got[m.group(1)] = float(m.group(2))
    if set(got) != {"ttft", "tpot"}:
        raise ValueError("--slo: give both, e.g. --slo ttft=2000,tpot=50 (milliseconds)")
    return Slo(got["ttft"], got["tpot"])


@dataclass
class Option:
    """One candidate layout and what it needs."""

    prefill: str
    decode: str
    prefill_gpus: int
    decode_gpus: int
    prefill_rate: float = 0.0          # req/s per prefill endpoint under the TTFT target
    decode_concurrency: int = 0        # requests per decode endpoint under the TPOT target
    decode_rate: float = 0.0           # req/s per decode endpoint at that concurrency
    prefill_endpoints: int = 0
    decode_endpoints: int = 0
    served: float = 0.0                # req/s the endpoints serve together under the SLO
    ttft_ms: float = 0.0               # at the operating load
    tpot_ms: float = 0.0
    concurrency: int = 0               # requests in flight at the operating load
    refused: str | None = None
    lost: str | None = None
    doc: dict[str, Any] = field(default_factory=dict)
    profile: PerfProfile | None = None

    @property
    def gpus(self) -> int:
        return self.prefill_endpoints * self.prefill_gpus + self.decode_endpoints * self.decode_gpus

    @property
    def label(self) -> str:
        return f"{self.prefill_endpoints}x{self.prefill}-{self.decode_endpoints}x{self.decode}" \
            if self.prefill_endpoints else f"{self.prefill} + {self.decode}"


def _doc(base: dict[str, Any], pre: tuple[int, int], dec: tuple[int, int], p: int, d: int, conc: int,
         name: str | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    s = doc["spec"]
    s["prefill"]["endpoints"], s["decode"]["endpoints"] = p, d
    s["prefill"]["topology"] = {"dataParallel": pre[0], "tensorParallel": pre[1], "expertParallel": True}
    s["decode"]["topology"] = {"dataParallel": dec[0], "tensorParallel": dec[1], "expertParallel": True}
    s["workload"]["concurrency"] = conc
    for role in ("prefill", "decode"):  # sized again by qdd's rules for the new concurrency
        for k in ("maxCudagraphCaptureSize", "maxNumSeqs"):
            s[role].get("tuning", {}).pop(k, None)
    if name:
        doc["metadata"]["name"] = name
    return doc


def decode_rate(profile: PerfProfile, concurrency: float, factor: float) -> float:
    """Requests/s one decode endpoint completes holding ``concurrency`` requests: concurrency over
    the request's decode time (TPOT × OSL), times the rate-matching factor."""
    tpot = latency_at(profile.decode, concurrency)
    return 0.0 if not math.isfinite(tpot) else factor * concurrency * 1000.0 / (tpot * profile.osl)


def _concurrency_for(profile: PerfProfile, per_endpoint_rate: float, hi: int, factor: float) -> int:
    """Least concurrency per decode endpoint that completes ``per_endpoint_rate`` req/s (bisection:
    the rate rises with concurrency)."""
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if decode_rate(profile, mid, factor) >= per_endpoint_rate:
            hi = mid
        else:
            lo = mid + 1
    return lo


def evaluate(base: dict[str, Any], db: Database, pre: tuple[int, int], dec: tuple[int, int], slo: Slo,
             accepted: float | None) -> Option:
    """One layout's per-endpoint limits under ``slo`` (``refused`` says why it cannot meet it)."""
    # one request per decode rank: the layout's own limits, not the base deployment's concurrency
    doc = _doc(base, pre, dec, 1, 1, dec[0])
    try:
        plan = build_plan(parse_resource(doc))
    except SpecError as e:
        o = Option(_shape_name(pre), _shape_name(dec), pre[0] * pre[1], dec[0] * dec[1])
        o.refused = f"refused by qdd plan: {'; '.join(str(x) for x in e.errors)}"
        return o
    o = Option(plan.prefill.topology_name, plan.decode.topology_name, plan.prefill.gpus_per_endpoint,
               plan.decode.gpus_per_endpoint)
    try:
        prof = build_profile(plan, db, accepted)
    except NotInDatabase as e:
        o.refused = f"not in the database: {e}"
        return o
    o.profile = prof
    factor = rate_matching().decode
    o.prefill_rate = max_prefill_rate(prof, slo.ttft_ms)
    o.decode_concurrency = max_decode_concurrency(prof, slo.tpot_ms)
    o.decode_rate = decode_rate(prof, o.decode_concurrency, factor) if o.decode_concurrency else 0.0
    if o.prefill_rate <= 0:
        o.refused = (f"TTFT {slo.ttft_ms:g} ms is below what one {o.prefill} prefill batch takes "
                     f"({prof.prefill.points[0].latency_ms:,.0f} ms)")
    elif o.decode_rate <= 0:
        o.refused = (f"TPOT {slo.tpot_ms:g} ms is below {o.decode}'s at one request per rank "
                     f"({prof.decode.points[0].latency_ms:.1f} ms)")
    return o


def _operate(o: Option, rate: float, factor: float) -> None:
    """Fill the operating point of ``o`` at ``rate`` req/s with its endpoint counts set."""
    assert o.profile is not None
    per_dec = rate / o.decode_endpoints
    c = _concurrency_for(o.profile, per_dec, max(1, o.decode_concurrency), factor)
    o.served = min(o.prefill_endpoints * o.prefill_rate, o.decode_endpoints * o.decode_rate)
    o.ttft_ms = latency_at(o.profile.prefill, rate / o.prefill_endpoints)
    o.tpot_ms = latency_at(o.profile.decode, c)
    o.concurrency = c * o.decode_endpoints


def _fit_rate(o: Option, rate: float, factor: float, max_endpoints: int) -> None:
    o.prefill_endpoints = math.ceil(rate / o.prefill_rate)
    o.decode_endpoints = math.ceil(rate / o.decode_rate)
    if o.prefill_endpoints > max_endpoints or o.decode_endpoints > 16:
        o.refused = (f"needs {o.prefill_endpoints} prefill and {o.decode_endpoints} decode endpoints "
                     f"(qdd allows {max_endpoints} and 16)")
        return
    _operate(o, rate, factor)


def _fit_budget(o: Option, budget: int, factor: float, max_endpoints: int = 64) -> None:
    best = (0.0, 0, 0, 0)
    # At most qdd's prefill endpoints: before (round 4) the loop ran to budget / GPUs per endpoint
    # (half a billion steps for --gpu-budget 10**9) and could recommend more endpoints than qdd allows.
    for p in range(1, min(budget // o.prefill_gpus, max_endpoints) + 1):
        d = min(16, (budget - p * o.prefill_gpus) // o.decode_gpus)
        if d < 1:
            break
        d = min(d, max(1, math.ceil(p * o.prefill_rate / o.decode_rate)))  # no decode left idle
        served = min(p * o.prefill_rate, d * o.decode_rate)
        g = p * o.prefill_gpus + d * o.decode_gpus
        if (served, -g) > (best[0], -best[3]):
            best = (served, p, d, g)
    if best[1] == 0:
        o.refused = f"one {o.prefill} + one {o.decode} needs {o.prefill_gpus + o.decode_gpus} GPUs, over the budget"
        return
    o.prefill_endpoints, o.decode_endpoints = best[1], best[2]
    _operate(o, best[0] * 0.999, factor)


def _endpoints(o: Option) -> int:
    return o.prefill_endpoints + o.decode_endpoints


def _explain(ok: list[Option], by_rate: bool) -> None:
    """Sort ``ok`` best first and say why each other one lost."""
    ok.sort(key=(lambda o: (o.gpus, -round(o.served, 2), _endpoints(o))) if by_rate else
            (lambda o: (-round(o.served, 2), o.gpus, _endpoints(o))))
    for o in ok[1:]:
        top = ok[0]
        if by_rate and o.gpus > top.gpus:
            o.lost = f"{o.gpus - top.gpus} more GPUs"
        elif round(o.served, 2) < round(top.served, 2):
            o.lost = (f"{'same GPUs, ' if o.gpus == top.gpus else ''}less headroom ({o.served:.1f} vs {top.served:.1f} req/s)"
                      if by_rate else f"serves {o.served:.1f} vs {top.served:.1f} req/s")
        elif o.gpus > top.gpus:
            o.lost = f"same rate on {o.gpus} GPUs vs {top.gpus}"
        else:
            o.lost = f"same GPUs and rate, {_endpoints(o)} endpoints vs {_endpoints(top)}"


def size(base: dict[str, Any], db: Database, slo: Slo, rate: float | None = None, gpu_budget: int | None = None,
         accepted: float | None = None, shapes: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = SHAPES,
         max_endpoints: int = 64) -> list[Option]:
    """Every layout, best first: feasible ones sorted (the first is the recommendation, ``lost``
    says why each other one lost), then refused ones (``refused`` says why)."""
    if (rate is None) == (gpu_budget is None):
        raise ValueError("give --rate R (requests/s) or --gpu-budget N, one of them")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError("--rate: must be a number > 0 requests/s")
    factor = rate_matching().decode
    opts = [evaluate(base, db, pre, dec, slo, accepted) for pre, dec in shapes]
    for o in opts:
        if o.refused is None:
            if rate is not None:
                _fit_rate(o, rate, factor, max_endpoints)
            else:
                _fit_budget(o, gpu_budget or 0, factor, max_endpoints)
    ok = [o for o in opts if o.refused is None]
    _explain(ok, rate is not None)
    return ok + [o for o in opts if o.refused is not None]


def deployment(base: dict[str, Any], o: Option, name: str) -> dict[str, Any]:
    """The QwenDisaggDeployment of option ``o``: its endpoints and layouts, workload concurrency =
    requests in flight at the operating point (sizes decode's batch and CUDA graphs)."""
    pre = next(s for s, d in SHAPES if _shape_name(s) == o.prefill)
    dec = next(d for s, d in SHAPES if _shape_name(d) == o.decode)
    return _doc(base, pre, dec, o.prefill_endpoints, o.decode_endpoints, max(1, o.concurrency), name)


def _shape_name(s: tuple[int, int]) -> str:
    return topology_name(s[0], s[1], True)
