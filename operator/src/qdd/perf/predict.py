"""What a planned QwenDisaggDeployment will serve: aiconfigurator's estimate for its topology.

Input: a :class:`qdd.plan.Plan` (each role's endpoints, DP/TP/EP, max-num-batched-tokens, the GPU
kind, ISL/OSL and range ratio, concurrency, MTP) and an open :class:`qdd.perf.aic.Database`.
Output: :func:`predict` — a JSON-able dict (``qdd plan --predict -o json`` prints it):

    {"database": "aiconfigurator 0.12.0: gb200 / vllm 0.24.0 …", "engine": "vLLM 0.33.0",
     "model": …, "gpu": "GB200", "gpus": 24,
     "workload": {"isl": 7373, "osl": 922, "concurrency": 5120},       # mean lengths, tokens
     "ttftMs": …, "tpotMs": …, "requestLatencyMs": …, "requestsPerSecond": …,
     "outputTokensPerSecondPerGpu": …, "totalTokensPerSecondPerGpu": …, "outputTokensPerSecondPerUser": …,
     "bottleneck": "prefill" | "decode",
     "prefill": {"endpoints", "topology", "gpusPerEndpoint", "batchPerRank", "capacityRequestsPerSecond"},
     "decode": {"endpoints", "topology", "gpusPerEndpoint", "batchPerRank", "concurrencyPerEndpoint",
                "capacityRequestsPerSecond", "maxConcurrencyPerEndpoint", "libraryMemoryGb", "libraryOom"},
     "notCaptured": [...], "notes": [...]}

How: the operating point is aiconfigurator's ``run_disagg`` (its rate matching: requests/s =
min(prefill capacity × 0.9, decode capacity × 0.92) at the decode batch the concurrency gives;
every constant is the library's). Its TTFT is one prefill batch × 1.8 (queueing) whatever the
load (``libraryTtftMs``); ``ttftMs`` is read at the prefill endpoints' actual load from
:func:`prefill_points` (the library's light-load and rate-matched anchors, linear between). Lengths: sa-bench
draws uniformly in [ratio × L, L], so the mean, L × (1 + ratio) / 2, stands for every request.
Total tokens/s/GPU = requests/s × (ISL + OSL) / GPUs, as the seed and ``qdd bench`` count it.
Decode capacity (how many requests fit) is qdd's memory model (``qdd plan``), not the library's:
aiconfigurator's memory estimate for the hybrid GDN model refuses batches the seed ran (5,120 on
one DEP8), so its OOM flag is reported, not obeyed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..plan.types import Plan
from .aic import Database, RateMatching, Shape, rate_matching
from .profile import Point, latency_at, monotone
from .profile import RoleProfile as _Role

NOT_CAPTURED = (
    "engine changes after the database's vLLM 0.24.0 (the seed ran a later nightly): async scheduling and its P/D "
    "race fixes (vLLM #45357, #48481), newer kernel builds; the database times kernels, not the engine's scheduling",
    "NIXL transfer of KV blocks and GDN state from prefill to decode (counted as zero time)",
    "the router (vllm-router's proxying, the P/D handshake, its load balancing; requests are spread evenly)",
    "queueing beyond aiconfigurator's empirical constants (throughput x0.9 prefill, x0.92 decode; latency x1.1 "
    "prefill, x1.08 decode; TTFT x1.8 at the rate-matched load)",
    "the random length spread: every request is the mean length",
)


def mean_lengths(plan: Plan) -> tuple[int, int]:
    """Mean ISL and OSL of sa-bench's uniform draw in [ratio × L, L] (tokens)."""
    w = plan.spec.workload
    f = (1 + w.random_range_ratio) / 2
    return max(1, round(w.isl * f)), max(1, round(w.osl * f))


@dataclass(frozen=True)
class Topology:
    """What aiconfigurator is asked about, from a Plan."""

    prefill: Shape
    prefill_endpoints: int
    prefill_batch: int
    decode: Shape
    decode_endpoints: int
    decode_max_per_endpoint: int
    nextn: int
    isl: int
    osl: int

    @property
    def gpus(self) -> int:
        return self.prefill.gpus * self.prefill_endpoints + self.decode.gpus * self.decode_endpoints


def topology(plan: Plan) -> Topology:
    """The plan's topology. Prefill batch per rank: the prompts of mean ISL one engine step holds
    (max-num-batched-tokens // ISL, at least 1): what a loaded prefill rank runs."""
    isl, osl = mean_lengths(plan)
    p, d = plan.prefill, plan.decode
    sp = plan.spec.speculative
    return Topology(Shape(p.dp, p.tp, p.expert_parallel), p.endpoints, max(1, p.max_num_batched_tokens // isl),
                    Shape(d.dp, d.tp, d.expert_parallel), d.endpoints, plan.capacity.per_endpoint,
                    0 if sp is None else sp.num_speculative_tokens, isl, osl)


_PREFILL: dict[tuple[int, Topology], list[Point]] = {}


def prefill_points(db: Database, t: Topology) -> list[Point]:
    """TTFT against requests/s of one prefill endpoint, from aiconfigurator's two anchors: a light
    load (10% of the one-prompt-per-rank capacity) at one prompt's latency, and the rate-matched
    load — its prefill factor 0.9 × the capacity at the batch a loaded engine step holds
    (:attr:`Topology.prefill_batch`, as ``run_disagg`` is asked) — at that batch's latency × its
    queueing factor 1.8."""
    key = (id(db.db), t)
    if key not in _PREFILL:
        rm = rate_matching()
        stat = db.static("prefill", t.prefill, t.isl, t.osl, sorted({1, t.prefill_batch}))
        one, full = stat[0], stat[-1]
        light = round(0.1 * one.seq_per_s, 4)
        load = max(round(rm.prefill * full.seq_per_s, 4), light * 1.01)
        _PREFILL[key] = monotone([
            Point(load=light, latency_ms=round(one.latency_ms, 1), tokens_per_second=round(light * t.isl, 1)),
            Point(load=load, latency_ms=round(full.latency_ms * rm.ttft_queue, 1), tokens_per_second=round(load * t.isl, 1)),
        ])
    return _PREFILL[key]


def ttft_at(db: Database, t: Topology, rate: float) -> float:
    """TTFT (ms) at ``rate`` requests/s over the prefill endpoints (spread evenly), from
    :func:`prefill_points`; at or beyond the rate-matched load, the rate-matched TTFT."""
    pts = prefill_points(db, t)
    role = _Role(role="prefill", topology="-", gpus_per_endpoint=t.prefill.gpus, points=pts)
    return latency_at(role, min(rate / t.prefill_endpoints, pts[-1].load))


def point(db: Database, t: Topology, concurrency: int, accepted: float | None = None,
          rm: RateMatching | None = None) -> dict[str, Any]:
    """The prediction at ``concurrency`` requests in flight over the deployment (see the module
    docstring for the keys)."""
    rm = rm or rate_matching()
    per_rank = max(1, math.ceil(concurrency / (t.decode_endpoints * t.decode.dp)))
    row = db.disagg(t.prefill, t.prefill_batch, t.prefill_endpoints, t.decode, per_rank, t.decode_endpoints,
                    t.isl, t.osl, t.nextn, accepted)
    rps = float(row["seq/s"])
    p_cap, d_cap = float(row["(p)seq/s/worker"]), float(row["(d)seq/s/worker"])
    bottleneck = "prefill" if p_cap * t.prefill_endpoints * rm.prefill < d_cap * t.decode_endpoints * rm.decode else "decode"
    ttft = ttft_at(db, t, rps)
    return {
        "concurrency": concurrency, "ttftMs": round(ttft, 1), "libraryTtftMs": round(float(row["ttft"]), 1),
        "tpotMs": round(float(row["tpot"]), 2),
        "requestLatencyMs": round(ttft + float(row["tpot"]) * max(t.osl - 1, 0), 1), "requestsPerSecond": round(rps, 3),
        "outputTokensPerSecondPerGpu": round(rps * t.osl / t.gpus, 1),
        "totalTokensPerSecondPerGpu": round(rps * (t.isl + t.osl) / t.gpus, 1),
        "outputTokensPerSecondPerUser": round(float(row["tokens/s/user"]), 2), "bottleneck": bottleneck,
        "prefillCapacityRequestsPerSecond": round(p_cap, 3), "decodeCapacityRequestsPerSecond": round(d_cap, 3),
        "decodeBatchPerRank": per_rank, "libraryOom": bool(row["oom"]),
        "libraryMemoryGb": {"prefill": round(float(row["(p)memory"]), 1), "decode": round(float(row["(d)memory"]), 1)},
    }


def concurrency_for_rate(db: Database, t: Topology, rate: float, accepted: float | None = None) -> tuple[int, dict[str, Any]]:
    """The least concurrency (requests in flight) at which the deployment serves ``rate``
    requests/s, and the point there: requests/s rises with concurrency until a role saturates, so
    a bisection over [1 per decode rank, qdd's decode capacity]. Raises ValueError when even the
    capacity does not serve the rate."""
    lo, hi = t.decode_endpoints * t.decode.dp, max(t.decode_max_per_endpoint * t.decode_endpoints, 1)
    rm = rate_matching()
    top = point(db, t, hi, accepted, rm)
    if top["requestsPerSecond"] < rate:
        raise ValueError(f"rate {rate:g} req/s: this topology serves at most about {top['requestsPerSecond']:g} req/s "
                         f"({top['bottleneck']} bound at its decode capacity, {hi:,} in flight)")
    best = top
    while hi - lo > max(1, lo // 50):  # 2% is finer than the model
        mid = (lo + hi) // 2
        pt = point(db, t, mid, accepted, rm)
        if pt["requestsPerSecond"] >= rate:
            hi, best = mid, pt
        else:
            lo = mid
    return best["concurrency"], best


def predict(plan: Plan, db: Database, concurrency: int | None = None, rate: float | None = None,
            accepted: float | None = None) -> dict[str, Any]:
    """The prediction for ``plan`` at ``concurrency`` (default: spec.workload.concurrency) or at
    ``rate`` requests/s (module docstring)."""
    t = topology(plan)
    if t.nextn and accepted is None:
        raise ValueError(f"spec.speculative: MTP with {t.nextn} draft tokens needs an acceptance assumption: "
                         f"give --mtp-accepted N (mean accepted draft tokens per step, 0..{t.nextn}); "
                         "aiconfigurator has no built-in one")
    if rate is not None:
        _, pt = concurrency_for_rate(db, t, rate, accepted)
    else:
        pt = point(db, t, concurrency or plan.spec.workload.concurrency, accepted)
    notes = []
    if plan.profile.version != db.version:
        notes.append(f"engine vLLM {plan.profile.version}; the database was measured on vLLM {db.version}")
    if pt["libraryOom"]:
        notes.append(f"aiconfigurator's memory estimate ({pt['libraryMemoryGb']['decode']} GB per decode GPU) says the "
                     f"decode batch does not fit; qdd's memory model gives {t.decode_max_per_endpoint:,} requests per "
                     "decode endpoint (calibrated on the seed, docs/facts/memory-model.md) and is the one used")
    if pt["concurrency"] > t.decode_max_per_endpoint * t.decode_endpoints:
        notes.append(f"concurrency {pt['concurrency']:,} is above the decode capacity qdd predicts "
                     f"({t.decode_max_per_endpoint * t.decode_endpoints:,}): requests beyond it queue")
    return {
        "database": db.description, "engine": f"vLLM {plan.profile.version}", "model": db.model, "gpu": db.gpu,
        "gpus": t.gpus, "workload": {"isl": t.isl, "osl": t.osl, "concurrency": pt["concurrency"], "requestRate": rate,
                                     "mtpDraftTokens": t.nextn, "mtpAccepted": accepted},
        **{k: v for k, v in pt.items() if k != "concurrency"},
        "prefill": {"endpoints": t.prefill_endpoints, "topology": plan.prefill.topology_name,
                    "gpusPerEndpoint": t.prefill.gpus, "batchPerRank": t.prefill_batch,
                    "capacityRequestsPerSecond": pt["prefillCapacityRequestsPerSecond"]},
        "decode": {"endpoints": t.decode_endpoints, "topology": plan.decode.topology_name,
                   "gpusPerEndpoint": t.decode.gpus, "batchPerRank": pt["decodeBatchPerRank"],
                   "concurrencyPerEndpoint": round(pt["concurrency"] / t.decode_endpoints, 1),
                   "capacityRequestsPerSecond": pt["decodeCapacityRequestsPerSecond"],
                   "maxConcurrencyPerEndpoint": t.decode_max_per_endpoint},
        "notCaptured": list(NOT_CAPTURED), "notes": notes,
    }


def table(pred: dict[str, Any]) -> str:
    """The prediction for people, printed under ``qdd plan``'s sizing table."""
    w, p, d = pred["workload"], pred["prefill"], pred["decode"]
    load = f"rate {w['requestRate']:g} req/s -> {w['concurrency']:,} in flight" if w["requestRate"] else \
        f"concurrency {w['concurrency']:,}"
    lines = [
        "",
        f"Predicted ({pred['database']}; {pred['engine']}):",
        f"  workload: mean ISL {w['isl']:,} / OSL {w['osl']:,} tokens, {load}"
        + (f", MTP {w['mtpDraftTokens']} draft tokens, {w['mtpAccepted']} accepted" if w["mtpDraftTokens"] else ""),
        f"  TTFT {pred['ttftMs']:,.0f} ms, TPOT {pred['tpotMs']:.1f} ms ({pred['outputTokensPerSecondPerUser']:.1f} tok/s/user), "
        f"request {pred['requestLatencyMs'] / 1000:,.1f} s",
        f"  {pred['requestsPerSecond']:.2f} req/s: {pred['totalTokensPerSecondPerGpu']:,.0f} total and "
        f"{pred['outputTokensPerSecondPerGpu']:,.0f} output tok/s/GPU over {pred['gpus']} GPUs; {pred['bottleneck']} bound",
        f"  prefill: {p['endpoints']} x {p['topology']}, {p['batchPerRank']} prompt(s) per rank per step, "
        f"{p['capacityRequestsPerSecond']:.2f} req/s per endpoint",
        f"  decode: {d['endpoints']} x {d['topology']}, {d['concurrencyPerEndpoint']:,.0f} requests per endpoint "
        f"({d['batchPerRank']} per rank), {d['capacityRequestsPerSecond']:.2f} req/s per endpoint; holds "
        f"{d['maxConcurrencyPerEndpoint']:,} (qdd memory model)",
        "  not captured: " + "; ".join(pred["notCaptured"]),
    ]
    lines += [f"  note: {n}" for n in pred["notes"]]
    return "\n".join(lines) + "\n"
