"""Numbers of the real CPU P/D pair (tests/realengine), as qdd renders it, on this machine.

    python bench/real_engines.py [--requests N] [--progress delay|off|default]

Prints (and writes bench/results/real-engines-<progress>.json): each engine's start time (s from
spawn to /health 200; both start together on the 2 cores), resident memory (GiB, summed over the
engine's processes, after the requests), idle CPU (cores busy over 10 s with no request), the
latency of N sequential completions through vllm-router (16 tokens each, median and max, s), and
decode's NIXL counters per request (bytes, descriptors, transfer time). ``--progress`` picks the
NIXL progress-thread mode of the plugin (tests/realengine/plugin): ``delay`` (qdd's: 1 kHz),
``off``, or NIXL's ``default`` (a thread that polls without sleeping).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realengine.engines import Engine, post_json  # noqa: E402
from tests.realengine.pair import ensure_venv, nixl_stats, run_in_venv, start_pair, start_router  # noqa: E402
from tests.realengine.procgroup import group_cpu_seconds  # noqa: E402

GIB = 1024**3


def idle_cores(engines: list[Engine], seconds: float = 10.0) -> dict[str, float]:
    before = {e.name: group_cpu_seconds(e.proc.pid) for e in engines}
    time.sleep(seconds)
    return {e.name: round((group_cpu_seconds(e.proc.pid) - before[e.name]) / seconds, 3) for e in engines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--progress", choices=("delay", "off", "default"), default="delay")
    a = ap.parse_args()
    os.environ["QDD_NIXL_PROGRESS"] = a.progress
    venv = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="qdd-real-engines-") as tmp:
        model = Path(tmp) / "tiny-qwen35-moe"
        run_in_venv(venv, "checkpoint.py", str(model))
        pair = start_pair(venv, model, Path(tmp))
        try:
            out: dict = {"progress": a.progress, "start_s": {e.name: round(e.ready_s or 0, 1)
                                                            for e in (pair.prefill, pair.decode)}}
            router, _ = start_router(pair, Path(tmp))
            with router:
                lat = []
                before = nixl_stats(pair.decode.metrics())
                for i in range(a.requests):
                    t0 = time.monotonic()
                    status, body = post_json(router.base + "/v1/completions", {
                        "model": "tiny-qwen35-moe", "prompt": f"request {i}: the prefill engine computes",
                        "max_tokens": 16, "temperature": 0, "ignore_eos": True})
                    assert status == 200, body
                    lat.append(time.monotonic() - t0)
                after = nixl_stats(pair.decode.metrics())
                time.sleep(2)
                out["idle_cores"] = idle_cores([pair.prefill, pair.decode])
            n = after["transfers"] - before["transfers"]
            xfer = [s for s in pair.decode.metrics().splitlines() if s.startswith("vllm:nixl_xfer_time_seconds_sum")]
            out.update(
                latency_s={"median": round(statistics.median(lat), 3), "max": round(max(lat), 3), "n": len(lat)},
                nixl_per_request={"transfers": n / a.requests,
                                  "bytes": (after["bytes"] - before["bytes"]) / max(n, 1),
                                  "descriptors": (after["descriptors"] - before["descriptors"]) / max(n, 1),
                                  "failed": after["failed_transfers"]},
                nixl_mean_transfer_ms=round(1000 * float(xfer[0].split()[-1]) / max(after["transfers"], 1), 2)
                if xfer else None,
                rss_gib={e.name: round(e.rss_bytes() / GIB, 2) for e in (pair.prefill, pair.decode)},
            )
        finally:
            pair.stop()
    path = ROOT / "bench" / "results" / f"real-engines-{a.progress}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
