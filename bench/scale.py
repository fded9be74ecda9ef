"""Benchmark (not a test): 10 GB200 NVL72 racks, 30 seed-mix deployments applied at once.

On a cluster of ``--racks`` simulated racks (hack/cluster-up.sh, Workload API on), one run:
  1. the floor: the 30 deployments' objects pre-rendered by ``qdd render`` (gang placement) and
     applied with one ``kubectl apply``, no operator running → time until every engine pod is
     bound and Running; then deleted;
  2. the operator (``qdd run``, started here): the 30 custom resources applied with one
     ``kubectl apply`` → time until all are Ready (or ``--timeout``), how many are;
  3. checks: each deployment's engine pods inside one clique; no node holds more GPUs than it has;
  4. the operator's numbers: peak RSS (VmHWM), API writes per deployment (qdd_api_writes_total),
     reconcile p50/p99 (from the qdd_reconcile_duration_seconds histogram, linear inside a
     bucket), CPU (utime + stime) and API writes in ``--idle-seconds`` after convergence.
The seed mix: prefill 4, 5, 6, 7, 8 x DEP2 in turn, 1 x DEP8 decode (16..24 GPUs; 30 of them ask
600 of 720 GPUs), the KV-transfer preflight off (its pods would need GPUs beyond the engines' in a
rack that the mix fills; the engines' placement is what is measured).

Before them (``--affinity-floor``), today's path for comparison: the objects of ``qdd render
--placement affinity`` (pod affinity on the clique, no gang), how many deployments are whole after
that many seconds.

Usage: python bench/scale.py [--deployments 30] [--idle-seconds 300] [--timeout 900] [--affinity-floor 120]
Env: KUBECONFIG/context of the cluster (make bench-scale sets them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = str(ROOT / ".qdd" / "bin" / "kubectl")
QDD = str(ROOT / ".qdd" / "venv" / "bin" / "qdd")
SEED = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"
CLIQUE = "nvidia.com/gpu.clique"
NS = "bench-scale"


def kubectl(*args: str, input: str | None = None, timeout: float = 300) -> str:
    p = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True, timeout=timeout)
    if p.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr[-2000:]}")
    return p.stdout


def crs(n: int) -> list[dict[str, Any]]:
    base = yaml.safe_load(SEED.read_text())
    out = []
    for i in range(n):
        cr = json.loads(json.dumps(base))
        cr["metadata"] = {"name": f"mix-{i:02d}", "namespace": NS}
        cr["spec"]["prefill"]["endpoints"] = 4 + i % 5
        cr["spec"]["kvTransfer"]["preflight"] = {"enabled": False}
        out.append(cr)
    return out


def engine_pods() -> list[dict[str, Any]]:
    return json.loads(kubectl("get", "pods", "-n", NS, "-l", "qdd.dev/role in (prefill,decode)", "-o", "json"))["items"]


def expected_engine_pods(items: list[dict[str, Any]]) -> int:
    return sum(c["spec"]["prefill"]["endpoints"] + 2 for c in items)  # DEP2 = 1 pod, DEP8 = 2 pods of 4 GPUs


def wait(pred, timeout: float, interval: float = 1.0) -> tuple[float, Any]:
    t0 = time.perf_counter()
    while True:
        got = pred()
        if got or time.perf_counter() - t0 > timeout:
            return time.perf_counter() - t0, got
        time.sleep(interval)


def fresh_namespace() -> None:
    kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=600s", timeout=660)
    kubectl("create", "namespace", NS)
    wait(lambda: kubectl("get", "sa", "default", "-n", NS, "--ignore-not-found", "-o", "name").strip(), 60, 0.2)


def pod_ready(p: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get("conditions") or [])


def all_running(want: int, ready: bool = False) -> bool:
    pods = engine_pods()
    return len(pods) == want and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                                     and (not ready or pod_ready(p)) for p in pods)


def floor(items: list[dict[str, Any]], timeout: float, placement: str = "gang") -> tuple[float, float, bool]:
    """(seconds until every engine pod is Running, until every one is also Ready, both reached). Ready is
    what the operator's Ready waits for: the engine serves (kwok plays the start-up phases,
    hack/cluster/engine_stages.py), which comes after Running."""
    fresh_namespace()
    text = subprocess.run([QDD, "render", "-f", "-", "--placement", placement], input=yaml.safe_dump_all(items),
                          capture_output=True, text=True, check=True).stdout
    want = expected_engine_pods(items)
    t0 = time.perf_counter()
    kubectl("apply", "-f", "-", input=text, timeout=600)
    _, ok = wait(lambda: all_running(want), timeout)
    running = time.perf_counter() - t0
    _, ok_ready = wait(lambda: all_running(want, ready=True), max(0.0, timeout - running))
    return running, time.perf_counter() - t0, bool(ok and ok_ready)


def ready_count() -> int:
    objs = json.loads(kubectl("get", "qdd", "-n", NS, "-o", "json"))["items"]
    return sum(1 for o in objs if any(c["type"] == "Ready" and c["status"] == "True"
                                      for c in (o.get("status") or {}).get("conditions") or []))


def load() -> str:
    """The machine's load average (1, 5, 15 min): the control plane, kwok and the operator share its cores."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _changed(old: Any, new: Any, path: str) -> list[str]:
    """Paths where ``new`` differs from ``old``: a condition by its type, a field by its name, two levels
    deep (``status.prefill.readyEndpoints``); lastTransitionTime alone is no change."""
    if isinstance(old, dict) and isinstance(new, dict) and path.count(".") < 2:
        return [p for k in sorted(set(old) | set(new)) for p in _changed(old.get(k), new.get(k), f"{path}.{k}")]
    if path.endswith(".conditions") and isinstance(new, list):
        def by_type(cs: Any) -> dict[str, Any]:
            return {c.get("type"): {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []}
        o, n = by_type(old), by_type(new)
        return [f"{path}[{t}]" for t in sorted(set(o) | set(n), key=str) if o.get(t) != n.get(t)]
    return [] if old == new else [path]


class StatusWatch:
    """``kubectl get qdd -w -o json`` in the background: every stored change of a custom resource, by
    what it changed (status fields, conditions by type, the metadata kopf writes), counted per path.
    Which writes a deployment's convergence made, and why, without an audit log."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([KUBECTL, "get", "qdd", "-n", NS, "-w", "--output-watch-events", "-o", "json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.last: dict[str, dict[str, Any]] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.updates = 0
        self.trace: list[str] = []
        """The first deployment's changes, one line each: seconds, paths, the Ready condition's message."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if not line.strip():
                continue
            ev = json.loads(line)  # kubectl writes one watch event per line
            obj = ev.get("object") or {}
            name = obj.get("metadata", {}).get("name")
            before = self.last.get(name)
            self.last[name] = obj
            if before is None or ev.get("type") != "MODIFIED":
                continue
            self.updates += 1
            meta = lambda o: {k: o["metadata"].get(k) for k in ("annotations", "finalizers", "labels")}  # noqa: E731
            paths = _changed(before.get("status"), obj.get("status"), "status") + _changed(
                meta(before), meta(obj), "metadata")
            for p in paths:
                self.counts[p] += 1
            if name == "mix-00":
                ready = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
                self.trace.append(f"{time.monotonic() - self._t0:7.1f} s  {' '.join(paths)}  | Ready {ready.get('status')} "
                                  f"{ready.get('reason')}: {ready.get('message')}")

    def report(self, deployments: int) -> str:
        self.proc.terminate()
        top = sorted(self.counts.items(), key=lambda kv: -kv[1])
        return (f"{self.updates} stored changes of the custom resources ({self.updates / deployments:.1f} per "
                f"deployment); fields changed: " + ", ".join(f"{p} {n}" for p, n in top[:25]))


def events_by_reason() -> str:
    """The operator's Events in the namespace, by type and reason."""
    items = json.loads(kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
    n: dict[str, int] = defaultdict(int)
    for e in items:
        if (e.get("source") or {}).get("component") == "qdd-operator" or e.get("reportingComponent") == "qdd-operator":
            n[f"{e.get('type')} {e.get('reason')}"] += e.get("count") or 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(n.items(), key=lambda kv: -kv[1])) or "none"


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_sum(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def quantile(text: str, name: str, q: float, step: str | None = None) -> float:
    """Quantile of a Prometheus histogram, linear inside the bucket (what histogram_quantile does);
    ``step``: only the series with that ``step`` label."""
    buckets = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{") and (step is None or f'step="{step}"' in line):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets:
        return 0.0
    buckets.sort()
    total = buckets[-1][1]
    rank, lo, below = q * total, 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - below) / max(count - below, 1e-9))
        lo, below = le, count
    return lo


def by_labels(text: str, name: str) -> dict[str, float]:
    """Samples of a labelled counter: ``{'a="x",b="y"': value}``."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            lab, value = line[len(name) + 1:].rsplit("} ", 1)
            out[lab] = float(value)
    return out


def delta(before: str, after: str, name: str) -> str:
    """A labelled counter's growth between two scrapes, by label set, most first."""
    a, b = by_labels(before, name), by_labels(after, name)
    d = sorted(((v - a.get(k, 0), k) for k, v in b.items() if v - a.get(k, 0)), reverse=True)
    return ", ".join(f"{','.join(x.split('=', 1)[1].strip(chr(34)) for x in k.split(',') if x.split('=', 1)[1] != chr(34) * 2)}"
                     f": {n:.0f}" for n, k in d) or "none"


def triggers(before: str, after: str) -> str:
    """What asked for the reconciles between two scrapes (qdd_reconcile_triggers_total: cause, event, kind)."""
    return delta(before, after, "qdd_reconcile_triggers_total")


def proc(pid: int) -> tuple[float, float]:
    """(CPU seconds so far, peak RSS MiB) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    return cpu, hwm / 1024


def check_placement() -> tuple[int, int]:
    """(deployments spanning more than one clique, nodes holding more GPUs than they have)."""
    nodes = {n["metadata"]["name"]: n for n in json.loads(kubectl("get", "nodes", "-o", "json"))["items"]}
    per_cr: dict[str, set[str]] = defaultdict(set)
    used: dict[str, int] = defaultdict(int)
    for p in engine_pods():
        node = p["spec"].get("nodeName")
        if not node:
            continue
        per_cr[p["metadata"]["labels"]["qdd.dev/deployment"]].add(nodes[node]["metadata"]["labels"].get(CLIQUE, ""))
        used[node] += sum(int(c["resources"]["requests"].get("nvidia.com/gpu", 0)) for c in p["spec"]["containers"])
    split = sum(1 for s in per_cr.values() if len(s) > 1)
    over = sum(1 for n, g in used.items() if g > int(nodes[n]["status"]["allocatable"].get("nvidia.com/gpu", 0)))
    return split, over


def trays_used() -> tuple[int, int, int]:
    """(trays holding an engine pod, GPUs on them, IMEX-channel claims held): under NVIDIA's DRA
    driver a tray serves one channel claim (docs/placement.md#imex-channels-one-claim-per-tray)."""
    nodes, claims = set(), set()
    for p in engine_pods():
        if p["spec"].get("nodeName"):
            nodes.add(p["spec"]["nodeName"])
            for c in p["spec"].get("resourceClaims") or []:
                claims.add(c.get("resourceClaimName") or f"{p['metadata']['name']}/{c['name']}")
    return len(nodes), 4 * len(nodes), len(claims)


def whole_deployments() -> tuple[int, int]:
    """(deployments with every engine pod Running, engine pods bound)."""
    by: dict[str, list[bool]] = defaultdict(list)
    for p in engine_pods():
        by[p["metadata"]["labels"]["qdd.dev/deployment"]].append(p["status"].get("phase") == "Running")
    return sum(1 for v in by.values() if all(v)), sum(sum(v) for v in by.values())


def affinity_floor(items: list[dict[str, Any]], settle: float) -> None:
    """Today's path for comparison: the same objects with the pod affinity on the clique, no gang."""
    t, _, ok = floor(items, settle, "affinity")
    whole, bound = whole_deployments()
    split, over = check_placement()
    print(f"affinity path (qdd render --placement affinity + kubectl apply): {whole}/{len(items)} deployments whole, "
          f"{bound}/{expected_engine_pods(items)} engine pods Running after {t:.0f} s; split: {split}, over-booked: "
          f"{over}", flush=True)


def start_operator(port: int, liveness: int) -> subprocess.Popen:
    log = open(ROOT / ".qdd" / "bench-scale-operator.log", "w")  # noqa: SIM115 — the process writes it
    p = subprocess.Popen([QDD, "run", "--metrics-port", str(port), "--liveness-port", str(liveness),
                          "--resync-seconds", "60"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait(lambda: _live(liveness), 60, 0.2)
    return p


def _live(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployments", type=int, default=30)
    ap.add_argument("--idle-seconds", type=float, default=300)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--metrics-port", type=int, default=18090)
    ap.add_argument("--liveness-port", type=int, default=18091)
    ap.add_argument("--affinity-floor", type=float, default=120, metavar="SECONDS",
                    help="first apply the objects of today's affinity path and report after SECONDS (0: skip)")
    ap.add_argument("--skip-floor", action="store_true", help="no gang floor (while profiling the operator)")
    a = ap.parse_args()
    items = crs(a.deployments)
    gpus = sum(2 * c["spec"]["prefill"]["endpoints"] + 8 for c in items)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT).stdout
    print(f"bench-scale: commit {commit.strip()}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
          f"{' '.join(sys.argv[1:]) or 'default arguments'}", flush=True)
    print(f"{a.deployments} deployments, {gpus} GPUs asked, {expected_engine_pods(items)} engine pods; {load()}, "
          f"{os.cpu_count()} CPUs", flush=True)

    if a.affinity_floor > 0:
        affinity_floor(items, a.affinity_floor)
    t_floor = float("nan")
    if not a.skip_floor:
        t_running, t_floor, floor_ok = floor(items, a.timeout)
        floor_split, floor_over = check_placement()
        print(f"floor (qdd render + kubectl apply, no operator): every engine pod Running in {t_running:.1f} s, "
              f"Ready (serving) in {t_floor:.1f} s, all reached: {floor_ok}, "
              f"split across cliques: {floor_split}, over-booked nodes: {floor_over}; {load()} at its end", flush=True)
        n, g, c = trays_used()
        print(f"  trays used: {n} ({g} GPUs) for {gpus} GPUs asked, {c} IMEX-channel claims", flush=True)

    fresh_namespace()
    op = start_operator(a.metrics_port, a.liveness_port)
    try:
        m0 = metrics(a.metrics_port)
        c0, _ = proc(op.pid)
        watch = StatusWatch()
        print(f"operator run starts: {load()}", flush=True)
        t0 = time.perf_counter()
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(items), timeout=600)
        serving_at: list[float] = []

        def converged() -> bool:
            # Where the time over the floor goes: the engine pods serving (placement and start-up,
            # as in the floor) against every deployment Ready (the operator's own gates after that).
            if not serving_at and all_running(expected_engine_pods(items), ready=True):
                serving_at.append(time.perf_counter() - t0)
            return ready_count() == len(items)
        _, done = wait(converged, a.timeout)
        took = time.perf_counter() - t0
        ready = ready_count()
        m1 = metrics(a.metrics_port)
        c1, _ = proc(op.pid)
        split, over = check_placement()
        writes = metric_sum(m1, "qdd_api_writes_total") - metric_sum(m0, "qdd_api_writes_total")
        reconciles = metric_sum(m1, "qdd_reconcile_duration_seconds_count")
        print(f"operator: {ready}/{len(items)} Ready in {took:.1f} s (x{took / t_floor:.2f} the floor); "
              f"split across cliques: {split}, over-booked nodes: {over}; {load()} at its end")
        print(f"  every engine pod Ready (serving) at {serving_at[0] if serving_at else float('nan'):.1f} s "
              f"(x{(serving_at[0] if serving_at else float('nan')) / t_floor:.2f} the floor); the rest is the "
              f"operator's gates after that (router registration, canary, status)")
        n, g, c = trays_used()
        print(f"  trays used: {n} ({g} GPUs) for {gpus} GPUs asked, {c} IMEX-channel claims", flush=True)
        print(f"  API writes: {writes:.0f} ({writes / len(items):.1f} per deployment); reconciles: {reconciles:.0f}, "
              f"p50 {quantile(m1, 'qdd_reconcile_duration_seconds', 0.5) * 1000:.0f} ms, "
              f"p99 {quantile(m1, 'qdd_reconcile_duration_seconds', 0.99) * 1000:.0f} ms; operator CPU {c1 - c0:.1f} s "
              f"({1000 * (c1 - c0) / max(reconciles, 1):.0f} ms per reconcile, kopf's watch streams included)", flush=True)
        print(f"  API writes by verb and kind: {delta(m0, m1, 'qdd_api_writes_total')}", flush=True)
        print(f"  custom resources: {watch.report(len(items))}", flush=True)
        (ROOT / ".qdd" / "bench-scale-status-trace.txt").write_text("\n".join(watch.trace) + "\n")
        print(f"  the operator's events: {events_by_reason()}", flush=True)
        print("  reconcile steps p50 / p99 (qdd_reconcile_step_seconds): " + ", ".join(
            f"{step} {quantile(m1, 'qdd_reconcile_step_seconds', 0.5, step) * 1000:.0f} / "
            f"{quantile(m1, 'qdd_reconcile_step_seconds', 0.99, step) * 1000:.0f} ms"
            for step in ("read", "plan", "write", "status", "capacity")) + " (capacity: within status, when a gang "
            "waits: the cluster's free GPUs)", flush=True)
        cpu0, _ = proc(op.pid)
        i0 = metrics(a.metrics_port)
        time.sleep(a.idle_seconds)
        cpu1, hwm = proc(op.pid)
        i1 = metrics(a.metrics_port)
        w = metric_sum(i1, "qdd_api_writes_total") - metric_sum(i0, "qdd_api_writes_total")
        passes = metric_sum(i1, "qdd_reconcile_duration_seconds_count") - metric_sum(i0, "qdd_reconcile_duration_seconds_count")
        busy = metric_sum(i1, "qdd_reconcile_duration_seconds_sum") - metric_sum(i0, "qdd_reconcile_duration_seconds_sum")
        print(f"  steady state ({a.idle_seconds:.0f} s after convergence): CPU {100 * (cpu1 - cpu0) / a.idle_seconds:.2f}% "
              f"of one core ({cpu1 - cpu0:.1f} s), API writes {w:.0f}, reconciles {passes:.0f} "
              f"({1000 * busy / max(passes, 1):.0f} ms mean); peak RSS {hwm:.0f} MiB; {load()}")
        print(f"  reconcile triggers while converging: {triggers(m0, m1)}")
        print(f"  reconcile triggers in the steady state: {triggers(i0, i1)}", flush=True)
        return 0 if done else 1
    finally:
        op.terminate()
        op.wait(30)
        kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")


if __name__ == "__main__":
    sys.exit(main())
