"""The engine-metrics reader's cost at 200 engine pods: CPU of the operator process per period,
bytes read, memory, and the judgement's time per pass. Prints numbers; writes
bench/results/observe-scale.json. `make bench-observe`.

The pods: 40 seed deployments (4 × DEP2 prefill + 1 × DEP8 decode each), i.e. 200 HTTP-serving
engine pods read — 160 prefill pods reporting 2 engines, 40 decode leaders reporting 8 — plus 40
headless decode workers, which serve no /metrics and cost the reader nothing. Their /metrics are
made by the engine TEST DOUBLE hack/fake_engine_metrics.py (the text captured from real vLLM
engines, replicated per engine; rendered once per pod) and served from a SEPARATE process, so that the CPU measured is
the operator's alone: the real Observer (8 reader threads, real read_pod: urllib + prometheus-
client's parser) reads every pod each period; CPU is this process's (time.process_time), memory its
peak RSS and the reads kept (tracemalloc).

    python bench/observe_scale.py [--seconds 95] [--period 15]
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
from qdd.controller import metrics
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=95)
    ap.add_argument("--period", type=int, default=15)
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT / "hack"), str(DEPLOYMENTS), str(PREFILL)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/{{namespace}}/{{role}}/{{pod}}/metrics"
        spec = ObserveSpec.model_validate({"periodSeconds": args.period, "windowSeconds": max(300, 2 * args.period)})
        rss0 = rss_mib()
        tracemalloc.start()
        obs = Observer(override=url)
        for d in range(DEPLOYMENTS):
            obs.track("bench", f"d{d}", spec, pods("bench", f"d{d}"), 8000)
        cpu0, t0 = time.process_time(), time.monotonic()
        bytes0 = metrics.ENGINE_READ_BYTES._value.get()  # noqa: SLF001
        time.sleep(args.seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        read_bytes = metrics.ENGINE_READ_BYTES._value.get() - bytes0  # noqa: SLF001
        reads = {r: metrics.ENGINE_READS.labels(r)._value.get() for r in ("ok", "error", "limit")}  # noqa: SLF001
        kept_mib = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        j0 = time.perf_counter()
        judged = [obs.judgement("bench", f"d{d}") for d in range(DEPLOYMENTS)]
        judge_ms = (time.perf_counter() - j0) * 1000 / DEPLOYMENTS
        raised = sum(c["status"] == "True" for j in judged if j for c in j[0].conditions)
        rounds = reads["ok"] / (DEPLOYMENTS * (PREFILL + 1))
        one = judged[0][0].roles if judged[0] else {}
        result = {
            "pods_read": DEPLOYMENTS * (PREFILL + 1), "engines_read": DEPLOYMENTS * (PREFILL * 2 + 8),
            "headless_workers_not_read": DEPLOYMENTS, "period_s": args.period, "seconds": round(wall, 1),
            "rounds": round(rounds, 2), "reads": reads,
            # Per read, then times the pods: the machine is shared, so the rounds done in the wall
            # time vary with its load; the CPU one read takes does not (much).
            "cpu_ms_per_pod_read": round(cpu * 1000 / max(reads["ok"], 1), 2),
            "cpu_s_per_period": round(cpu / max(reads["ok"], 1) * DEPLOYMENTS * (PREFILL + 1), 3),
            "cpu_share_of_one_core_at_the_period": round(cpu / max(reads["ok"], 1) * DEPLOYMENTS * (PREFILL + 1)
                                                         / args.period, 4),
            "bytes_per_period": int(read_bytes / max(reads["ok"], 1) * DEPLOYMENTS * (PREFILL + 1)),
            "bytes_per_pod_read": int(read_bytes / max(reads["ok"], 1)),
            "memory_kept_mib": round(kept_mib, 1), "peak_rss_mib_before": round(rss0, 1),
            "peak_rss_mib_after": round(rss_mib(), 1), "judgement_ms_per_deployment": round(judge_ms, 2),
            "conditions_raised": raised, "decode_engines_one_deployment": one["decode"].engines if one else None,
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(result, indent=2))
        OUT.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
