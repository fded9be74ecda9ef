"""Benchmark (not a test): the operator's memory under create/delete churn, for hours.

One cycle: the five seed examples (4..8 x DEP2 prefill + 1 x DEP8 decode, as in examples/) applied
with one ``kubectl apply``, every one Ready, deleted, and waited for until no child of them is left
(every kind qdd manages, by its managed-by label). Cycles are at most one per ``--cycle-seconds``
(a bounded rate: a GitOps loop, a CI cluster), for ``--minutes`` or ``--cycles``.

The operator (``qdd run``, started here) runs with ``QDD_TRACEMALLOC_DIR`` (qdd.controller.
diagnostics): after the ``--snapshot-cycle``-th cycle and after the last one it writes a heap
snapshot; the allocations that grew between them are printed by source line, largest first.
After every cycle the operator's RSS (VmRSS) is sampled. The verdict: RSS of the last cycle within
10 % of the RSS after the snapshot cycle (the warm-up), the issue's bar for 1,000 lifecycles.

Usage: python bench/soak.py [--minutes 60] [--cycles N] [--cycle-seconds 15] [--label after]
       [--out bench/results/soak-after.txt] [--no-tracemalloc]
Env: KUBECONFIG/context of the cluster (make bench-soak brings up its own: QDD_SOAK_CLUSTER, 2 racks).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import QDD, ROOT, _live, kubectl, metric_sum, metrics, wait  # noqa: E402

NS = "bench-soak"
EXAMPLES = [ROOT / "examples" / f"qwen35-397b-{n}xdep2-1xdep8.yaml" for n in range(4, 9)]
CHILD_KINDS = ("computedomains,workloads,podgroups,serviceaccounts,roles,rolebindings,services,"
               "poddisruptionbudgets,statefulsets,jobs,pods,deployments")
SELECTOR = "app.kubernetes.io/managed-by=qdd"


def documents() -> str:
    docs = []
    for path in EXAMPLES:
        cr = yaml.safe_load(path.read_text())
        cr["metadata"]["namespace"] = NS
        docs.append(cr)
    return yaml.safe_dump_all(docs)


def rss_mib(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def ready(n: int) -> bool:
    objs = json.loads(kubectl("get", "qdd", "-n", NS, "-o", "json"))["items"]
    return len(objs) == n and all(any(c["type"] == "Ready" and c["status"] == "True"
                                      for c in (o.get("status") or {}).get("conditions") or []) for o in objs)


def children_left() -> int:
    out = kubectl("get", CHILD_KINDS, "-n", NS, "-l", SELECTOR, "-o", "name", "--ignore-not-found")
    crs = kubectl("get", "qdd", "-n", NS, "-o", "name", "--ignore-not-found")
    return len([x for x in (out + crs).splitlines() if x.strip()])


def start_operator(port: int, liveness: int, snapdir: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    if snapdir:
        env["QDD_TRACEMALLOC_DIR"] = snapdir
    log = open(ROOT / ".qdd" / "bench-soak-operator.log", "w")  # noqa: SIM115 — the process writes it
    p = subprocess.Popen([QDD, "run", "--metrics-port", str(port), "--liveness-port", str(liveness),
                          "--resync-seconds", "60"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env)
    wait(lambda: _live(liveness), 60, 0.2)
    return p


def snapshot(pid: int, snapdir: str, n: int) -> tracemalloc.Snapshot:
    os.kill(pid, signal.SIGUSR1)
    path = Path(snapdir) / f"snapshot-{n}.pickle"
    wait(lambda: path.exists() and path.stat().st_size > 0, 120, 0.5)
    time.sleep(1.0)  # the dump is written by the operator's main thread; let it finish
    return tracemalloc.Snapshot.load(str(path))


def growth(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot, top: int = 15) -> list[str]:
    stats = last.compare_to(first, "lineno")
    out = []
    for s in [s for s in stats if s.size_diff > 0][:top]:
        frame = s.traceback[0]
        where = str(frame.filename).split("site-packages/")[-1].split("/src/")[-1]
        out.append(f"  {s.size_diff / 1024:+9.1f} KiB {s.count_diff:+7d} blocks  {where}:{frame.lineno}")
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--cycles", type=int, default=0, help="stop after this many cycles (0: --minutes decides)")
    ap.add_argument("--cycle-seconds", type=float, default=15, help="at most one cycle per this many seconds")
    ap.add_argument("--snapshot-cycle", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300, help="per wait (Ready, children gone)")
    ap.add_argument("--metrics-port", type=int, default=18190)
    ap.add_argument("--liveness-port", type=int, default=18191)
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    ap.add_argument("--no-tracemalloc", action="store_true", help="RSS only (tracemalloc slows the operator)")
    a = ap.parse_args()
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    say(f"bench-soak {a.label}: commit {commit.strip()}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
        f"{os.cpu_count()} cores, load at start {loadavg()}; {len(EXAMPLES)} deployments per cycle, at most one cycle "
        f"per {a.cycle_seconds:.0f} s, tracemalloc {'off' if a.no_tracemalloc else 'on'}")
    kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=300s", timeout=360)
    kubectl("create", "namespace", NS)
    wait(lambda: kubectl("get", "sa", "default", "-n", NS, "--ignore-not-found", "-o", "name").strip(), 60, 0.2)
    text = documents()
    snapdir = None if a.no_tracemalloc else tempfile.mkdtemp(prefix="qdd-soak-")
    op = start_operator(a.metrics_port, a.liveness_port, snapdir)
    t_start, cycle, first_snap, rss_warm, failures = time.monotonic(), 0, None, None, 0
    say(f"{'cycle':>5} {'t_s':>7} {'lifecycles':>10} {'rss_mib':>8} {'ready_s':>7} {'gone_s':>7} {'load1':>5}")
    try:
        say(f"{0:>5} {0.0:>7.0f} {0:>10} {rss_mib(op.pid):>8.1f} {'':>7} {'':>7} {loadavg().split()[0]:>5}")
        while True:
            cycle += 1
            c0 = time.monotonic()
            kubectl("apply", "-f", "-", input=text, timeout=300)
            t_ready, ok = wait(lambda: ready(len(EXAMPLES)), a.timeout)
            kubectl("delete", "qdd", "--all", "-n", NS, "--wait=false")
            t_gone, gone = wait(lambda: children_left() == 0, a.timeout)
            failures += (not ok) + (not gone)
            time.sleep(1.0)
            rss = rss_mib(op.pid)
            say(f"{cycle:>5} {time.monotonic() - t_start:>7.0f} {cycle * len(EXAMPLES):>10} {rss:>8.1f} "
                f"{t_ready:>7.1f} {t_gone:>7.1f} {loadavg().split()[0]:>5}" + ("" if ok and gone else "  (timed out)"))
            if cycle == a.snapshot_cycle:
                rss_warm = rss
                if snapdir:
                    first_snap = snapshot(op.pid, snapdir, 1)
            done = (a.cycles and cycle >= a.cycles) or (not a.cycles and time.monotonic() - t_start > a.minutes * 60)
            if done:
                break
            time.sleep(max(0.0, a.cycle_seconds - (time.monotonic() - c0)))
        time.sleep(10)
        rss_end = rss_mib(op.pid)
        m = metrics(a.metrics_port)
        say(f"after {cycle} cycles ({cycle * len(EXAMPLES)} deployments created and deleted) in "
            f"{(time.monotonic() - t_start) / 60:.1f} min: RSS {rss_end:.1f} MiB 10 s after the last; waits timed out: "
            f"{failures}; reconcile errors: {metric_sum(m, 'qdd_reconcile_errors_total'):.0f}; load at end {loadavg()}")
        if rss_warm is not None:
            say(f"RSS after cycle {a.snapshot_cycle} (warm-up): {rss_warm:.1f} MiB; last: {rss_end:.1f} MiB: "
                f"{100 * (rss_end - rss_warm) / rss_warm:+.1f} % ({(rss_end - rss_warm) * 1024 / max(1, (cycle - a.snapshot_cycle) * len(EXAMPLES)):.1f} "
                f"KiB per lifecycle after the warm-up); flat within 10 %: {abs(rss_end - rss_warm) <= 0.1 * rss_warm}")
        if snapdir and first_snap is not None:
            last = snapshot(op.pid, snapdir, 2)
            total = sum(s.size_diff for s in last.compare_to(first_snap, "filename"))
            say(f"tracemalloc, cycle {a.snapshot_cycle} -> cycle {cycle}: {total / 1024:+.1f} KiB traced in all; "
                "grown most, by source line:")
            for line in growth(first_snap, last):
                say(line)
    finally:
        op.terminate()
        op.wait(30)
        kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
        if a.out:
            a.out.write_text("\n".join(lines) + "\n")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
