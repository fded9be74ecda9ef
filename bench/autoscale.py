"""Offline closed loop: qdd's autoscaler vs Dynamo's Planner vs the cheapest static split (make bench-autoscale).

Both Azure LLM inference traces of 2023 (code, conversation; ../shared/traces in the workplace,
QDD_TRACES here; CC-BY 4.0, attribution below) are time-compressed and rate-scaled (each request
repeated with jitter) so that Qwen3.5-397B NVFP4 endpoints on GB200 (prefill DEP2, decode DEP4)
need several endpoints, and replayed in NVIDIA Dynamo 1.4.2's own simulator (mocker + offline
replay) with timing from AIConfigurator 0.12's GB200 database (bench/autoscale_model.py). In the
same simulation, side by side: qdd's policy (qdd.autoscale.decide), Dynamo's Planner (its own code
from the ai-dynamo 1.4.2 wheel, SLA mode, predictive 180 s + reactive 5 s) and the cheapest static
split that meets the SLO, over a sweep of engine start-up time. Prints a table and writes
bench/results/autoscale.json (docs/autoscaling.md shows it). Not a test: a run takes minutes.

Trace attribution: Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed
Maleki, Ricardo Bianchini, "Splitwise: Efficient generative LLM inference using phase splitting",
ISCA 2024; data from the AzurePublicDataset repository (AzureLLMInferenceTrace_code/_conv), CC-BY 4.0.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator" / "src"))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("DYN_LOG", "error")
os.environ.setdefault("RUST_LOG", "error")

from autoscale_model import DECODE, PREFILL, EndpointModel, capacity_table, write_npz  # noqa: E402
from autoscale_policies import QddPolicy, dynamo_planner  # noqa: E402
from autoscale_static import cheapest_static  # noqa: E402

from qdd.autoscale import PolicyConfig, RoleLimits  # noqa: E402
from qdd.autoscale.profile import TableProfile  # noqa: E402

GPUS_P, GPUS_D = PREFILL.dp, DECODE.dp
TTFT_MS, TPOT_MS, ATTAIN = 2000.0, 15.0, 0.95
BUDGET, MAX_P, MAX_D = 64, 16, 8
ATTRIBUTION = ("Azure LLM inference traces 2023 (AzurePublicDataset, AzureLLMInferenceTrace_code/_conv), CC-BY 4.0: "
               "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, Ricardo Bianchini, "
               "\"Splitwise: Efficient generative LLM inference using phase splitting\", ISCA 2024. Derived here: time-compressed, "
               "requests repeated.")
TRACES = {  # name: (file, time compression, copies of each request)
    "code": ("azure-llm-2023-code.csv", 4.0, 3),
    "conv": ("azure-llm-2023-conv.csv", 4.0, 2),
}


def mooncake(src: Path, dst: Path, compress: float, copies: int, block: int = 512) -> dict:
    """The CSV as a Mooncake trace (ms timestamps, lengths, unique hash ids: no prefix sharing, as
    qdd renders prefix caching off), ``compress`` times faster, each request ``copies`` times
    within the following second (seeded jitter)."""
    rnd, rows, out = random.Random(27), list(csv.DictReader(src.open())), []
    t0 = datetime.datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    for r in rows:
        t = (datetime.datetime.fromisoformat(r["TIMESTAMP"][:26]) - t0).total_seconds() * 1000.0 / compress
        isl, osl = max(1, int(r["ContextTokens"])), max(1, int(r["GeneratedTokens"]))
        for _ in range(copies):
            out.append((t + rnd.random() * 1000.0, isl, osl))
    out.sort()
    with dst.open("w") as f:
        for i, (t, isl, osl) in enumerate(out):
            f.write(json.dumps({"timestamp": round(t, 3), "input_length": isl, "output_length": osl,
                                "hash_ids": list(range(i * 256, i * 256 + (isl + block - 1) // block))}) + "\n")
    span = out[-1][0] / 1000.0
    return {"requests": len(out), "span_s": round(span, 1), "mean_rate_rps": round(len(out) / span, 2),
            "mean_isl": round(sum(x[1] for x in out) / len(out), 1), "mean_osl": round(sum(x[2] for x in out) / len(out), 1)}


def lengths(trace: Path) -> list[tuple[int, int]]:
    """(input, output) lengths of a Mooncake trace's requests: the length mix a user profiles with."""
    out = []
    for line in trace.open():
        r = json.loads(line)
        out.append((int(r["input_length"]), int(r["output_length"])))
    return out


def engine_args(npz: Path, startup_s: float):
    from dynamo.mocker import MockEngineArgs
    common = dict(planner_profile_data=str(npz), enable_prefix_caching=False, block_size=64, startup_time=float(startup_s))
    p = MockEngineArgs(worker_type="prefill", max_num_batched_tokens=PREFILL.max_batched_tokens,
                       max_num_seqs=PREFILL.max_num_seqs, num_gpu_blocks=MODELS["prefill"].blocks_per_rank * GPUS_P, **common)
    d = MockEngineArgs(worker_type="decode", max_num_batched_tokens=DECODE.max_batched_tokens,
                       max_num_seqs=DECODE.max_num_seqs, num_gpu_blocks=MODELS["decode"].blocks_per_rank * GPUS_D, **common)
    return p, d


def replay(trace: Path, args, n_p: int, n_d: int, policy, report: Path) -> dict:
    """One simulation; SLO attainment from the per-request report, GPU-hours from the replay's worker
    lifetimes (start-up and draining included) × GPUs per endpoint."""
    from dynamo._core import run_mocker_trace_replay
    t = time.monotonic()
    rep = run_mocker_trace_replay([str(trace)], prefill_engine_args=args[0], decode_engine_args=args[1],
                                  num_prefill_workers=n_p, num_decode_workers=n_d, trace_format="mooncake",
                                  replay_mode="offline", router_mode="round_robin", report_jsonl_path=str(report),
                                  scaling_policy=policy, trace_block_size=512)
    ok = n = ttft_miss = tpot_miss = 0
    ttfts, tpots = [], []
    for line in report.open():
        r = json.loads(line)
        n += 1
        done = r.get("terminal_status") == "completed"
        t_ok = done and r["ttft_ms"] <= TTFT_MS
        p_ok = done and (r["output_length"] <= 1 or (r.get("itl_ms") or 0.0) <= TPOT_MS)
        ok += t_ok and p_ok
        ttft_miss += not t_ok
        tpot_miss += not p_ok
        ttfts.append(r["ttft_ms"] or 0.0)
        tpots.append(r.get("itl_ms") or 0.0)
    ttfts.sort()
    tpots.sort()
    gpu_h = (rep["prefill_worker_seconds"] * GPUS_P + rep["decode_worker_seconds"] * GPUS_D) / 3600.0
    report.unlink()
    return {"attainment": round(ok / max(n, 1), 4), "gpu_hours": round(gpu_h, 3), "requests": n,
            "gpu_hours_per_1k_in_slo": round(1000.0 * gpu_h / ok, 4) if ok else None,
            "ttft_missed": round(ttft_miss / max(n, 1), 4), "tpot_missed": round(tpot_miss / max(n, 1), 4),
            "p90_ttft_ms": round(ttfts[int(0.9 * (n - 1))], 1), "p90_tpot_ms": round(tpots[int(0.9 * (n - 1))], 2),
            "sim_s": round(rep["duration_ms"] / 1000.0, 1), "wall_s": round(time.monotonic() - t, 1),
            "actions": getattr(policy, "actions", 0)}


MODELS: dict[str, EndpointModel] = {}
CONTENDERS = ("static", "qdd", "dynamo")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="code,conv")
    ap.add_argument("--startup", default="0,60,120,180,300", help="engine start-up times to sweep, s")
    ap.add_argument("--contenders", default=None,
                    help="which to simulate (static, qdd, dynamo); without static the autoscalers start from "
                         "the split of the last full run cached under .qdd/autoscale")
    ap.add_argument("--quick", action="store_true",
                    help="iteration mode: reuse the cached capacity profile and static split (.qdd/autoscale), "
                         "qdd only unless --contenders says otherwise; results to .qdd/autoscale/quick.json")
    ap.add_argument("--timeline", action="store_true", help="write qdd's per-decision log next to the results")
    ap.add_argument("--out", default=None, help="default: bench/results/autoscale.json for a full run")
    ap.add_argument("--table", metavar="JSON", help="print the markdown table of a results file and exit")
    a = ap.parse_args()
    if a.table:
        print(markdown(json.loads(Path(a.table).read_text())))
        return 0
    work = ROOT / ".qdd" / "autoscale"
    work.mkdir(parents=True, exist_ok=True)
    contenders = a.contenders.split(",") if a.contenders else ["qdd"] if a.quick else list(CONTENDERS)
    full = set(contenders) == set(CONTENDERS) and a.traces == "code,conv" and a.startup == "0,60,120,180,300" \
        and not a.quick
    out = Path(a.out) if a.out else (ROOT / "bench" / "results" / "autoscale.json" if full else work / "quick.json")
    traces_dir = Path(os.environ.get("QDD_TRACES", ROOT.parent / "shared" / "traces"))
    MODELS["prefill"], MODELS["decode"] = EndpointModel("prefill", GPUS_P), EndpointModel("decode", GPUS_D)
    npz = write_npz(MODELS["prefill"], MODELS["decode"], work / "gb200-qwen35-397b.npz")
    startups = [float(x) for x in a.startup.split(",")]
    results: dict = {"setup": {"model": "nvidia/Qwen3.5-397B-A17B-NVFP4", "system": "gb200 (AIConfigurator 0.12.0, vLLM 0.24.0 data)",
                               "prefill_endpoint": f"DEP{GPUS_P}", "decode_endpoint": f"DEP{GPUS_D}", "ttft_ms": TTFT_MS,
                               "tpot_ms": TPOT_MS, "attainment_target": ATTAIN, "gpu_budget": BUDGET,
                               "simulator": "ai-dynamo 1.4.2 mocker + offline replay",
                               "command": "make bench-autoscale" + (f" AUTOSCALE_ARGS='{' '.join(sys.argv[1:])}'"
                                                                     if sys.argv[1:] else "")},
                     "traces_attribution": ATTRIBUTION, "traces": {}}
    for name in a.traces.split(","):
        fname, compress, copies = TRACES[name]
        trace = work / f"{name}.jsonl"
        info = mooncake(traces_dir / fname, trace, compress, copies)
        cache = work / f"cache-{name}.json"
        cached = json.loads(cache.read_text()) if a.quick and cache.exists() else {}
        isl_points = (512.0, 2048.0, 8192.0)
        if cached.get("profile_table"):
            profile = TableProfile(**{k: tuple(v) if isinstance(v, list) else v for k, v in cached["profile_table"].items()})
        else:
            profile = capacity_table(*engine_args(npz, 0.0), TTFT_MS, TPOT_MS, isl_points, info["mean_osl"],
                                     lengths(trace), work)
        info["profile"] = {"prefill_tokens_per_s_at_isl": dict(zip(isl_points, map(round, profile.prefill_tokens_per_s_at),
                                                                   strict=True)),
                           "decode_concurrency_at_isl": dict(zip(isl_points, profile.decode_concurrency_at, strict=True))}
        print(f"[{name}] {info}", flush=True)
        row: dict = {"trace": info, "static": None, "static_tried": [], "qdd": {}, "dynamo": {}}
        if "static" in contenders:
            row["static"] = _static_search(name, trace, engine_args(npz, 0.0), work, row["static_tried"])
            cache.write_text(json.dumps({"profile_table": dataclasses.asdict(profile), "static": row["static"],
                                         "static_tried": row["static_tried"]}))
        else:
            cached = cached or (json.loads(cache.read_text()) if cache.exists() else {})
            if "static" not in cached:
                raise SystemExit(f"no cached static split for {name}: run once with --contenders static (or a full run)")
            row["static"], row["static_tried"] = cached["static"], cached["static_tried"]
        # Both autoscalers start from the static split (what one would deploy first): from there
        # they may save GPUs in the troughs and must hold the SLO at the peaks.
        last = (row["static"] or row["static_tried"][-1])["split"]
        start = (int(last.split("P")[0]), int(last.split("P")[1].rstrip("D")))
        row["start"] = last
        for s in startups:
            args = engine_args(npz, s)
            if "qdd" in contenders:
                pol = QddPolicy(qdd_config(s), profile)
                row["qdd"][str(int(s))] = m = replay(trace, args, *start, pol, work / "report.jsonl")
                print(f"[{name}] qdd startup {s:.0f}s: {m}", flush=True)
                if a.timeline:
                    (work / f"timeline-{name}-{int(s)}.json").write_text(json.dumps(pol.log))
            if "dynamo" in contenders:
                dyn = dynamo_planner(args[0], args[1], MODELS["prefill"], MODELS["decode"], ttft_ms=TTFT_MS,
                                     itl_ms=TPOT_MS, budget=BUDGET, gpus_p=GPUS_P, gpus_d=GPUS_D, max_p=MAX_P, max_d=MAX_D)
                with dyn.inner:
                    row["dynamo"][str(int(s))] = m = replay(trace, args, *start, dyn, work / "report.jsonl")
                print(f"[{name}] dynamo startup {s:.0f}s: {m}", flush=True)
        results["traces"][name] = row
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    print(f"wrote {out}")
    return 0


def qdd_config(startup_s: float) -> PolicyConfig:
    """qdd's spec.autoscaling for the loop: the SLO, bounds and budget above; the start-up time
    known to the policy (spec.autoscaling.startupSeconds, or the measured starts); the rest defaults."""
    return PolicyConfig(ttft_ms=TTFT_MS, tpot_ms=TPOT_MS, prefill=RoleLimits(1, MAX_P, GPUS_P),
                        decode=RoleLimits(1, MAX_D, GPUS_D), gpu_budget=BUDGET, startup_s=startup_s)


def markdown(res: dict) -> str:
    """The results as the table docs/autoscaling.md shows."""
    lines = ["| trace | contender | start-up s | SLO attainment | GPU-hours | GPU-h per 1k requests in SLO | "
             "scaling actions | p90 TTFT ms | p90 TPOT ms |",
             "|---|---|---|---|---|---|---|---|---|"]

    def row(trace: str, who: str, s: str, m: dict | None) -> None:
        if m is None:
            lines.append(f"| {trace} | {who} | {s} | none within {BUDGET} GPUs | | | | | |")
            return
        per_k = m.get("gpu_hours_per_1k_in_slo")
        lines.append(f"| {trace} | {who} | {s} | {m['attainment']:.1%} | {m['gpu_hours']:.2f} | "
                     f"{'—' if per_k is None else f'{per_k:.3f}'} | {m['actions']} | "
                     f"{m['p90_ttft_ms']:.0f} | {m['p90_tpot_ms']:.1f} |")
    for trace, r in res["traces"].items():
        st = r["static"]
        row(trace, f"cheapest static ({st['split'] if st else '—'})", "—", st)
        for s in r["qdd"]:
            row(trace, "qdd", s, r["qdd"][s])
            row(trace, "Dynamo Planner", s, r["dynamo"].get(s))
    return "\n".join(lines)


def _static_search(name: str, trace: Path, args, work: Path, tried: list) -> dict | None:
    """The cheapest static split meeting the attainment target (bench/autoscale_static.py: a sweep
    of the grid under the budget, each split it needs simulated here)."""
    runs: dict[tuple[int, int], dict] = {}

    def attainment(p: int, d: int) -> float:
        m = replay(trace, args, p, d, None, work / "report.jsonl")
        m["split"] = f"{p}P{d}D"
        tried.append(m)
        runs[(p, d)] = m
        print(f"[{name}] static {p}P{d}D: {m}", flush=True)
        return m["attainment"]

    best = cheapest_static(attainment, ATTAIN, gpus_p=GPUS_P, gpus_d=GPUS_D, max_p=MAX_P, max_d=MAX_D, budget=BUDGET)
    return runs[best] if best else None


if __name__ == "__main__":
    sys.exit(main())
