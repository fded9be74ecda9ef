"""Endpoint timing for the offline autoscaling loop (bench/autoscale.py), from AIConfigurator.

One simulated worker of Dynamo's mocker stands for one qdd endpoint (a DP/EP group): Dynamo 1.4.2's
offline disaggregated replay refuses dp_size > 1, and its mocker cannot use AIConfigurator 0.12's
compiled engine (schema 15 vs the 4 it was built for; aiconfigurator-core 0.11.0 is a stub on PyPI).
So AIConfigurator's own Python session (Dynamo's ``dynamo._internal.aic``) evaluates Qwen3.5-397B
NVFP4 on GB200 (vLLM 0.24.0 kernels, FP8 KV) per DP rank, and this module turns it into one
endpoint's timing:

* decode (DEP``d``): a step of ``b`` requests on the endpoint takes the per-rank time at ``b / d``
  requests per rank (vLLM's DP coordinator balances ranks); KV capacity is ``d`` ranks' blocks.
* prefill (DEP``p``): a pass of ``n`` tokens takes the per-rank time at ``n / p`` tokens (the ranks
  prefill different requests side by side); one request alone is thus optimistic by at most the
  rank count at low load, exact in throughput at load, which is what sizing depends on.

The same tables feed the simulator (a mocker ``planner_profile_data`` npz), Dynamo's Planner (the
benchmark forward-pass metrics its replay bootstrap would take from AIConfigurator) and qdd's
policy (a :class:`qdd.autoscale.profile.TableProfile`): all three see one engine.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

AIC = dict(backend_name="vllm", system="gb200", model_path="nvidia/Qwen3.5-397B-A17B-NVFP4", backend_version="0.24.0",
           gemm_dtype="nvfp4", moe_dtype="nvfp4", kv_cache_dtype="fp8")
"""AIConfigurator's support matrix marks this model / system / backend / version as passing for disagg."""
BLOCK = 64


@dataclass(frozen=True)
class Role:
    dp: int
    """DP ranks (= GPUs, TP 1) of one endpoint."""
    max_batched_tokens: int
    max_num_seqs: int


PREFILL = Role(dp=2, max_batched_tokens=2 * 8192, max_num_seqs=2 * 64)
DECODE = Role(dp=4, max_batched_tokens=4 * 2048, max_num_seqs=4 * 256)


class EndpointModel:
    """AIConfigurator sessions for one prefill and one decode endpoint; ``predict_*`` have the
    shape of Dynamo's AicSession (milliseconds), so Dynamo's own FPM generators accept it."""

    def __init__(self, role: str, dp: int) -> None:
        from dynamo._internal.aic import create_session, estimate_num_gpu_blocks
        self.role, self.dp = role, dp
        self._s = create_session(tp_size=1, moe_tp_size=1, moe_ep_size=dp, attention_dp_size=dp, **AIC)
        self.blocks_per_rank = int(estimate_num_gpu_blocks(tp_size=1, block_size=BLOCK, max_num_batched_tokens=8192,
                                                           moe_tp_size=1, moe_ep_size=dp, attention_dp_size=dp, **AIC))

    def predict_prefill(self, batch_size: int, isl: int, prefix: int) -> float:
        per_rank = max(1, math.ceil(batch_size * isl / self.dp))
        return float(self._s.predict_prefill(1, per_rank, prefix))

    def predict_decode(self, batch_size: int, isl: int, osl: int) -> float:
        per_rank = max(1, math.ceil(batch_size / self.dp))
        return float(self._s.predict_decode(per_rank, max(isl, 1), osl))


def write_npz(prefill: EndpointModel, decode: EndpointModel, path: Path) -> Path:
    """The mocker's perf table (keys per dynamo.mocker.utils.planner_profiler_perf_data_converter):
    prefill time by tokens in a pass; decode step time by (active KV tokens, context length)."""
    isl = np.linspace(16, 32768, 128)
    ttft = np.array([prefill.predict_prefill(1, int(i), 0) for i in isl])
    kv_max = decode.blocks_per_rank * BLOCK * decode.dp
    kv = np.linspace(0, kv_max, 48)
    ctx = np.linspace(1, 16384, 48)
    itl = np.array([[decode.predict_decode(min(max(1, round(k / c)), DECODE.max_num_seqs), int(c), 2) for c in ctx]
                    for k in kv])
    np.savez(path, prefill_isl=isl, prefill_ttft_ms=ttft, decode_active_kv_tokens=kv, decode_context_length=ctx,
             decode_itl=itl)
    return path


def measured_decode_concurrency(prefill_args, decode_args, isl: int, osl: int, tpot_ms: float) -> int:
    """The largest number of requests one simulated decode endpoint holds with the 95th percentile
    of per-request TPOT within ``tpot_ms``: a profiling sweep (bisection over a closed-loop
    concurrency) in the simulator itself, as a user profiles real engines before deploying. 64
    prefill endpoints feed it, so prefill never caps the concurrency the decode endpoint sees (with
    short outputs a few prefill endpoints cannot keep a large decode batch full, and the sweep would
    read their limit as the decode endpoint's)."""
    from dynamo.replay import run_synthetic_trace_replay
    lo, hi = 1, DECODE.max_num_seqs
    while hi - lo > max(2, lo // 32):
        mid = (lo + hi) // 2
        r = run_synthetic_trace_replay(isl, osl, max(10 * mid, 400), prefill_engine_args=prefill_args,
                                       decode_engine_args=decode_args, num_prefill_workers=64, num_decode_workers=1,
                                       replay_concurrency=mid)
        lo, hi = (mid, hi) if r["p95_itl_ms"] <= tpot_ms else (lo, mid)
    return lo


def _poisson_trace(path: Path, lengths: list[tuple[int, int]], isl_scale: float, rate_rps: float, seconds: float,
                   seed: int = 26) -> None:
    """A Mooncake trace of Poisson arrivals at ``rate_rps`` for ``seconds``, each request's
    (input, output) lengths drawn from ``lengths`` with the input scaled by ``isl_scale``."""
    rnd, t, i = random.Random(seed), 0.0, 0
    with path.open("w") as f:
        while True:
            t += rnd.expovariate(rate_rps) * 1000.0
            if t > seconds * 1000.0:
                break
            isl, osl = rnd.choice(lengths)
            isl = max(1, round(isl * isl_scale))
            f.write(json.dumps({"timestamp": round(t, 3), "input_length": isl, "output_length": osl,
                                "hash_ids": list(range(i * 512, i * 512 + (isl + 511) // 512))}) + "\n")
            i += 1


def measured_prefill_tokens_per_s(prefill_args, decode_args, lengths: list[tuple[int, int]], isl: float,
                                  ttft_ms: float, work: Path) -> float:
    """The most input tokens per second one simulated prefill endpoint takes while the 95th
    percentile of TTFT stays within ``ttft_ms``: Poisson arrivals for 120 s with the traffic's own
    mix of input and output lengths (``lengths``, inputs scaled to mean ``isl``), bisection over the
    rate, 8 decode endpoints so decode never limits. A saturated endpoint at one fixed length
    overstates it: the length mix and the requests' decode hand-off both cost prefill time (the
    simulator's trace replay ran out of one prefill endpoint at ~60 % of the saturated rate)."""
    from dynamo._core import run_mocker_trace_replay
    mean_isl = sum(x[0] for x in lengths) / len(lengths)
    scale = isl / mean_isl
    trace, report = work / "profile-prefill.jsonl", work / "profile-prefill-report.jsonl"
    lo, hi = 10000.0, 130000.0  # tokens/s: under and over one GB200 DEP2 endpoint (saturated: ~105K)
    while hi / lo > 1.03:
        mid = (lo * hi) ** 0.5
        _poisson_trace(trace, lengths, scale, mid / isl, 120.0)
        run_mocker_trace_replay([str(trace)], prefill_engine_args=prefill_args, decode_engine_args=decode_args,
                                num_prefill_workers=1, num_decode_workers=8, trace_format="mooncake",
                                replay_mode="offline", router_mode="round_robin", report_jsonl_path=str(report),
                                scaling_policy=None, trace_block_size=512)
        ttfts = sorted(json.loads(line)["ttft_ms"] or math.inf for line in report.open())
        lo, hi = (mid, hi) if ttfts[int(0.95 * (len(ttfts) - 1))] <= ttft_ms else (lo, mid)
    trace.unlink()
    report.unlink()
    return lo


def capacity_table(prefill_args, decode_args, ttft_ms: float, tpot_ms: float, isl_points: tuple[float, ...], osl: float,
                   lengths: list[tuple[int, int]], work: Path):
    """qdd's CapacityProfile for this engine, as the performance model (issue 26) gives it, measured
    in the simulator before the replay (a user's profiling run with the traffic's length mix, not
    its timing): prefill input tokens/s under the TTFT target at the 95th percentile
    (:func:`measured_prefill_tokens_per_s`), decode concurrency under the TPOT target
    (:func:`measured_decode_concurrency`), at each ISL point."""
    from qdd.autoscale.profile import TableProfile
    pre, conc = [], []
    for isl in isl_points:
        pre.append(measured_prefill_tokens_per_s(prefill_args, decode_args, lengths, isl, ttft_ms, work))
        conc.append(float(measured_decode_concurrency(prefill_args, decode_args, int(isl), max(int(osl), 2), tpot_ms)))
    return TableProfile(ttft_ms=ttft_ms, tpot_ms=tpot_ms, isl_points=isl_points, prefill_tokens_per_s_at=tuple(pre),
                        decode_concurrency_at=tuple(conc))
