"""Time of `qdd plan --predict` and the operator's start-up cost with and without the perf extra.

1. `qdd plan --predict -f examples/qwen35-397b-4xdep2-1xdep8.yaml` in fresh processes (the
   library's import and its database's first load each time), with the perf venv
   (hack/qdd-perf.sh): wall seconds and peak RSS.
2. The operator's start-up (importing qdd.controller.main and everything it pulls in: what
   `qdd run` loads before it connects) in fresh processes of the project venv (no aiconfigurator),
   for this checkout and for a baseline ref (default: main) extracted with `git archive`:
   seconds, peak RSS, and whether qdd.perf or aiconfigurator got imported.

Run: `make bench-perf-predict` (prints a table; numbers go to docs/performance-model.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"
PROBE = ("import resource, sys, time; t0 = time.perf_counter(); import qdd.controller.main; "
         "dt = time.perf_counter() - t0; "
         "print(dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
         "any(m.startswith('qdd.perf') for m in sys.modules), any(m.startswith('aiconfigurator') for m in sys.modules), "
         "len(sys.modules))")


def predict_runs(n: int) -> list[tuple[float, int]]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "bash", str(ROOT / "hack" / "qdd-perf.sh"), "plan", "--predict",
                            "-o", "json", "-f", str(SEED)], capture_output=True, text=True, check=True)
        dt = time.monotonic() - t0
        json.loads(p.stdout)  # a whole answer
        out.append((dt, int(p.stderr.strip().splitlines()[-1])))
    return out


def operator_run(src: Path) -> tuple[float, int, bool, bool, int]:
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                       env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    dt, rss, perf, aic, mods = p.stdout.split()
    return float(dt), int(rss), perf == "True", aic == "True", int(mods)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="main", help="git ref to compare the operator's start-up with")
    args = ap.parse_args()
    pred = predict_runs(args.runs)
    print(f"qdd plan --predict (fresh process, {args.runs} runs): wall {', '.join(f'{d:.1f}' for d, _ in pred)} s; "
          f"peak RSS {max(r for _, r in pred) / 1024:.0f} MiB")
    with tempfile.TemporaryDirectory() as d:
        tar = Path(d) / "base.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(tar), args.baseline, "operator/src"], check=True)
        with tarfile.open(tar) as t:
            t.extractall(d, filter="data")
        here, base = ROOT / "operator" / "src", Path(d) / "operator" / "src"
        rows: dict[str, list] = {"this checkout": [], f"{args.baseline} (baseline)": []}
        for _ in range(args.runs * 2):  # interleaved: the machine's load falls on both alike
            rows["this checkout"].append(operator_run(here))
            rows[f"{args.baseline} (baseline)"].append(operator_run(base))
    print(f"operator start-up (import qdd.controller.main, {args.runs * 2} fresh processes each, interleaved, "
          "project venv without aiconfigurator):")
    for name, rs in rows.items():
        print(f"  {name:<18} median {statistics.median(r[0] for r in rs):.2f} s, peak RSS median "
              f"{statistics.median(r[1] for r in rs) / 1024:.1f} MiB, modules loaded {rs[0][4]}, imports qdd.perf: "
              f"{any(r[2] for r in rs)}, aiconfigurator: {any(r[3] for r in rs)}")


if __name__ == "__main__":
    main()
