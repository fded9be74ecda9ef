"""Benchmark (not a test): how much the operator adds on top of what the cluster itself needs.

In one run on the local cluster (`make cluster-up`, operator from `hack/operator.sh start`):
  1. `kubectl apply` of the seed CR → Ready=True (the operator's path);
  2. `kubectl apply` of the same objects pre-rendered by `qdd render` → all their pods Running
     (the preflight Jobs' pods: Succeeded)
     (the floor the API server, scheduler, DRA allocation and kwok set);
and prints both times, their ratio, the operator's API writes for path 1 (qdd_api_writes_total)
and its resident memory (VmRSS of the `qdd run` process).

Usage: python bench/operator_ready.py [--example PATH] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = str(ROOT / ".qdd" / "bin" / "kubectl")


def kubectl(*args: str, input: str | None = None) -> str:
    p = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p.stdout


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wait(pred, timeout: float = 300, interval: float = 0.05) -> float:
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError
        time.sleep(interval)
    return time.perf_counter()


def cr_ready(ns: str, name: str) -> bool:
    obj = json.loads(kubectl("get", "qdd", name, "-n", ns, "-o", "json"))
    st = obj.get("status") or {}
    return st.get("observedGeneration") == obj["metadata"]["generation"] and any(
        c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])


def pods_running(ns: str, expected: int) -> bool:
    items = json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
    # Preflight Job pods run to completion (kwok completes them at once).
    return len(items) >= expected and all((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in items)


def one_run(example: Path, port: int) -> dict[str, float]:
    cr = yaml.safe_load(example.read_text())
    name = cr["metadata"]["name"]
    ns_op, ns_raw = f"bench-op-{uuid.uuid4().hex[:6]}", f"bench-raw-{uuid.uuid4().hex[:6]}"
    for ns in (ns_op, ns_raw):
        kubectl("create", "namespace", ns)
        wait(lambda ns=ns: bool(kubectl("get", "sa", "default", "-n", ns, "--ignore-not-found", "-o", "name").strip()))
    try:
        cr["metadata"]["namespace"] = ns_op
        writes0 = metric(port, "qdd_api_writes_total")
        t0 = time.perf_counter()
        kubectl("apply", "-f", "-", input=json.dumps(cr))
        t_op = wait(lambda: cr_ready(ns_op, name)) - t0
        time.sleep(2)  # let trailing status writes land before counting
        writes = metric(port, "qdd_api_writes_total") - writes0
        kubectl("delete", "namespace", ns_op, "--wait=true", "--timeout=120s")

        cr["metadata"]["namespace"] = ns_raw
        rendered = subprocess.run([str(ROOT / ".qdd" / "venv" / "bin" / "qdd"), "render", "-f", "-"],
                                  input=yaml.safe_dump(cr), capture_output=True, text=True, check=True).stdout
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        expected = sum(1 for d in docs if d["kind"] in ("Pod", "Job")) + sum(
            d["spec"]["replicas"] for d in docs if d["kind"] in ("StatefulSet", "Deployment"))
        t0 = time.perf_counter()
        kubectl("apply", "-f", "-", input=rendered)
        t_raw = wait(lambda: pods_running(ns_raw, expected)) - t0
    finally:
        for ns in (ns_op, ns_raw):
            kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=120s")
    return {"operator_s": t_op, "floor_s": t_raw, "writes": writes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", type=Path, default=ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--metrics-port", type=int, default=int(os.environ.get("QDD_METRICS_PORT", "18080")))
    args = ap.parse_args()
    pid = int((ROOT / ".qdd" / "operator.pid").read_text())
    runs = [one_run(args.example, args.metrics_port) for _ in range(args.runs)]
    op = statistics.median(r["operator_s"] for r in runs)
    floor = statistics.median(r["floor_s"] for r in runs)
    print(f"example: {args.example.name}, runs: {args.runs} (medians)")
    each = lambda k: ", ".join(f"{r[k]:.2f}" for r in runs)  # noqa: E731
    print(f"kubectl apply CR -> Ready:                  {op:.2f} s   (runs: {each('operator_s')})")
    print(f"kubectl apply rendered -> all pods Running: {floor:.2f} s   (runs: {each('floor_s')})")
    print(f"ratio operator / floor:                    {op / floor:.2f}")
    print(f"operator API writes per CR -> Ready:       {statistics.median(r['writes'] for r in runs):.0f}")
    print(f"operator RSS:                              {rss_mib(pid):.0f} MiB")


if __name__ == "__main__":
    main()
