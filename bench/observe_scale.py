"""The engine-metrics reader's cost at 200 engine pods: CPU of the operator process per period,
bytes read, memory, and the judgement's time per pass. Prints numbers; writes
bench/results/observe-scale.json. `make bench-observe`.

The pods: 40 seed deployments (4 × DEP2 prefill + 1 × DEP8 decode each), i.e. 200 HTTP-serving
engine pods read — 160 prefill pods reporting 2 engines, 40 decode leaders reporting 8 — plus 40
headless decode workers, which serve no /metrics and cost the reader nothing. Their /metrics are
made by the engine TEST DOUBLE hack/fake_engine_metrics.py (the text captured from real vLLM
engines, replicated per engine; rendered once per pod) and served from a SEPARATE process, so that the CPU measured is
the operator's alone: the real Observer (8 reader threads, real read_pod: urllib + prometheus-
client's parser) reads every pod each period and judges each deployment after its round.

Memory: the first two rounds are traced (tracemalloc): the second round's kept allocations are one
round of reads, times the rounds a window keeps; the first round's, less that, the parse cache.
Then tracing stops (it slows every allocation several times over: the first committed figure, 94 ms
per pod read, was mostly its cost) and the reads run until the window is full (``--warmup``,
default the window plus two periods: judging a deployment costs in proportion to the reads kept).
CPU is this process's (time.process_time) over the next ``--seconds``; peak RSS is the process's.

    python bench/observe_scale.py [--seconds 60] [--warmup S] [--period 15] [--out FILE] [--label TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from qdd.api.observe import ObserveSpec
from qdd.controller import engine_metrics, metrics
from qdd.controller.observer import Observer

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "observe-scale.json"
DEPLOYMENTS, PREFILL = 40, 4

SERVER = r'''
import sys
sys.path.insert(0, sys.argv[1])
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import fake_engine_metrics as fem
# Each pod's text rendered once by the double (the capture replicated per engine): the server's
# own cost stays out of the way; the reader parses the same bytes a moving engine would serve.
double, texts = fem.Double(lambda ns: {}), {}
for d in range(int(sys.argv[2])):
    for i in range(int(sys.argv[3])):
        texts[f"/bench/prefill/d{d}-prefill-{i}/metrics"] = double.metrics("bench", "prefill", f"d{d}-prefill-{i}")[1]
    texts[f"/bench/decode/d{d}-decode-0-leader/metrics"] = double.metrics("bench", "decode", f"d{d}-decode-0-leader")[1]
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = texts[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def pods(ns: str, name: str) -> list[dict]:
    def pod(n: str, role: str, group_role: str | None = None) -> dict:
        lab = {"qdd.dev/role": role, "qdd.dev/endpoint": "0"}
        if group_role:
            lab["qdd.dev/group-role"] = group_role
        return {"metadata": {"name": n, "labels": lab}, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    return ([pod(f"{name}-prefill-{i}", "prefill") for i in range(PREFILL)]
            + [pod(f"{name}-decode-0-leader", "decode", "leader"), pod(f"{name}-decode-0-worker-1", "decode", "worker")])


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ok_reads() -> float:
    return metrics.ENGINE_READS.labels("ok")._value.get()  # noqa: SLF001


def traced_round(pods_read: int) -> float:
    """MiB allocated and still held after the next round of ``pods_read`` reads (tracemalloc)."""
    tracemalloc.start()
    target = ok_reads() + pods_read
    while ok_reads() < target:
        time.sleep(0.2)
    time.sleep(0.5)  # the round's judgement, after its last read
    held = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    return held


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--period", type=int, default=15)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    load = os.getloadavg()
    n_pods = DEPLOYMENTS * (PREFILL + 1)
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT / "hack"), str(DEPLOYMENTS), str(PREFILL)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/{{namespace}}/{{role}}/{{pod}}/metrics"
        spec = ObserveSpec.model_validate({"periodSeconds": args.period, "windowSeconds": max(300, 2 * args.period)})
        keep_s = max(spec.window_seconds, spec.thresholds.stall_seconds) + 2 * spec.period_seconds
        rss0 = rss_mib()
        obs = Observer(override=url)
        t_start = time.monotonic()
        for d in range(DEPLOYMENTS):
            obs.track("bench", f"d{d}", spec, pods("bench", f"d{d}"), 8000)
        first_mib = traced_round(n_pods)
        round_mib = traced_round(n_pods)
        time.sleep(max(0.0, t_start + (keep_s if args.warmup is None else args.warmup) - time.monotonic()))
        cpu0, t0, ok0 = time.process_time(), time.monotonic(), ok_reads()
        bytes0 = metrics.ENGINE_READ_BYTES._value.get()  # noqa: SLF001
        time.sleep(args.seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        read_bytes = metrics.ENGINE_READ_BYTES._value.get() - bytes0  # noqa: SLF001
        reads = {r: metrics.ENGINE_READS.labels(r)._value.get() for r in ("ok", "error", "limit")}  # noqa: SLF001
        done = reads["ok"] - ok0
        kept = sum(len(q) for t in obs._tracked.values() for q in t.reads.values()) / n_pods  # noqa: SLF001
        j0 = time.perf_counter()
        judged = [obs.judgement("bench", f"d{d}") for d in range(DEPLOYMENTS)]
        judge_ms = (time.perf_counter() - j0) * 1000 / DEPLOYMENTS
        raised = sum(c["status"] == "True" for j in judged if j for c in j[0].conditions)
        one = judged[0][0].roles if judged[0] else {}
        per_read = cpu / max(done, 1)
        result = {
            "label": args.label, "loadavg_at_start": [round(x, 2) for x in load],
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "pods_read": n_pods, "engines_read": DEPLOYMENTS * (PREFILL * 2 + 8),
            "headless_workers_not_read": DEPLOYMENTS, "period_s": args.period, "window_s": spec.window_seconds,
            "reads_kept_per_pod": round(kept, 1), "measured_seconds": round(wall, 1),
            "rounds_measured": round(done / n_pods, 2), "reads": reads,
            # Per read (the judgement of each round included), then times the pods: the machine is
            # shared, so the rounds done in the wall time vary with its load; the CPU one takes does not (much).
            "cpu_ms_per_pod_read": round(per_read * 1000, 2),
            "cpu_s_per_period": round(per_read * n_pods, 3),
            "cpu_share_of_one_core_at_the_period": round(per_read * n_pods / args.period, 4),
            "bytes_per_period": int(read_bytes / max(done, 1) * n_pods),
            "bytes_per_pod_read": int(read_bytes / max(done, 1)),
            "memory_one_round_mib": round(round_mib, 2), "rounds_kept": round(keep_s / args.period, 1),
            "memory_kept_full_window_mib": round(round_mib * keep_s / args.period, 1),
            "memory_parse_cache_mib": round(max(0.0, first_mib - round_mib), 2),
            "series_cache_entries": len(getattr(engine_metrics, "_SERIES", ())),
            "peak_rss_mib_before": round(rss0, 1), "peak_rss_mib_after": round(rss_mib(), 1),
            "judgement_ms_per_deployment_full_window": round(judge_ms, 2),
            "conditions_raised": raised, "decode_engines_one_deployment": one["decode"].engines if one else None,
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(result, indent=2))
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
