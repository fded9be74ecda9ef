"""Benchmark (not a test): the operator's per-resource memory under create/delete churn, in one
process, without a cluster: the real Reconciler (plan, render, its render cache, status, events,
metrics, the canary) against the unit tests' hand-made API server and controllers
(tests/unit/test_controller_status.FakeKube, one per deployment), driven like the real operator's
passes: each deployment created with a new uid, reconciled until Ready, deleted, and passed over
once more (the pass that finds it gone). What it leaves out: kopf, the watches and the children's
cache (tests/unit/test_release.py covers those structures one by one), the API server. It is the
quick check of what ``make bench-soak`` measures on the real control plane, for a machine too
loaded to run that one.

RSS (VmRSS) and tracemalloc after every cycle; the allocations that grew between the tenth and the
last cycle by source line. The verdict: last RSS within 10 % of the tenth cycle's.

Usage: python bench/soak_inprocess.py [--cycles 60] [--snapshot-cycle 10] [--out FILE] [--label L]
(PYTHONPATH=<another operator/src> measures another version of the operator with the same script.)
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXAMPLES = [ROOT / "examples" / f"qwen35-397b-{n}xdep2-1xdep8.yaml" for n in range(4, 9)]


def rss_mib() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


class Mux:
    """Several FakeKubes behind one Kube, routed by deployment name."""

    def __init__(self) -> None:
        self.kubes: dict[str, Any] = {}

    def _of(self, obj: dict[str, Any]) -> Any:
        return self.kubes[obj["metadata"]["labels"]["qdd.dev/deployment"]]

    def get_cr(self, namespace: str, name: str) -> dict[str, Any] | None:
        k = self.kubes.get(name)
        return k.get_cr(namespace, name) if k is not None else None

    def confirm_cr(self, cr: dict[str, Any]) -> bool:
        k = self.kubes.get(cr["metadata"]["name"])
        return k is not None and k.confirm_cr(cr)

    def list_children(self, namespace: str, cr: str) -> list[dict[str, Any]]:
        k = self.kubes.get(cr)
        return k.list_children(namespace, cr) if k is not None else []

    def apply_all(self, objs: list[dict[str, Any]]) -> list[bool]:
        return [self._of(o).apply(o) for o in objs]

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        for k in self.kubes.values():
            if (kind, name) in k.objs:
                k.delete(api_version, kind, namespace, name)

    def label_pods(self, namespace: str, pods: list[tuple[str, dict[str, str]]]) -> None:
        for k in self.kubes.values():
            k.label_pods(namespace, [(n, lab) for n, lab in pods if ("Pod", n) in k.objs])

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        if name in self.kubes:
            self.kubes[name].patch_status(namespace, name, status)

    def event(self, cr: dict[str, Any], type_: str, reason: str, message: str) -> None:
        pass

    def gpu_nodes_and_pods(self) -> None:
        return None


def main() -> int:
    import yaml

    from qdd.controller import reconcile as rec
    from tests.unit.test_controller_status import FakeKube, router_canary

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--snapshot-cycle", type=int, default=10)
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    crs = []
    for p in EXAMPLES:
        cr = yaml.safe_load(p.read_text())
        cr["metadata"].update(namespace="soak", generation=1, resourceVersion="1", creationTimestamp="2030-01-01T00:00:00Z")
        crs.append(cr)
    tracemalloc.start(8)
    mux = Mux()
    r = rec.Reconciler(mux, gang=True, canary=router_canary())  # type: ignore[arg-type]
    say(f"bench-soak in-process {a.label}: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
        f"load at start {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; {len(crs)} deployments per cycle")
    say(f"{'cycle':>5} {'lifecycles':>10} {'rss_mib':>8} {'traced_mib':>10} {'s':>6}")
    first = None
    rss_warm = None
    t0 = time.monotonic()
    for cycle in range(1, a.cycles + 1):
        c0 = time.monotonic()
        for cr in crs:
            cr = copy.deepcopy(cr)
            cr["metadata"]["uid"] = f"6f1c2d3e-0000-4000-8000-{cycle:06d}{crs.index(next(c for c in crs if c['metadata']['name'] == cr['metadata']['name'])):06d}"
            mux.kubes[cr["metadata"]["name"]] = FakeKube(cr)
        for _ in range(4):  # create, settle, Ready, converged
            for name, k in list(mux.kubes.items()):
                r.once("soak", name)
                k.settle()
                k.take()
        for name in list(mux.kubes):
            del mux.kubes[name]
            assert r.once("soak", name) == "gone"
        gc.collect()
        rss, traced = rss_mib(), tracemalloc.get_traced_memory()[0] / 2**20
        say(f"{cycle:>5} {cycle * len(crs):>10} {rss:>8.1f} {traced:>10.1f} {time.monotonic() - c0:>6.1f}")
        if cycle == a.snapshot_cycle:
            rss_warm, first = rss, tracemalloc.take_snapshot()
    last = tracemalloc.take_snapshot()
    rss_end = rss_mib()
    say(f"after {a.cycles} cycles ({a.cycles * len(crs)} deployments created and deleted) in "
        f"{(time.monotonic() - t0) / 60:.1f} min; load at end {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if first is not None and rss_warm is not None:
        say(f"RSS after cycle {a.snapshot_cycle}: {rss_warm:.1f} MiB; last: {rss_end:.1f} MiB: "
            f"{100 * (rss_end - rss_warm) / rss_warm:+.1f} %; flat within 10 %: {abs(rss_end - rss_warm) <= 0.1 * rss_warm}")
        stats = [s for s in last.compare_to(first, "lineno") if s.size_diff > 0]
        say(f"tracemalloc, cycle {a.snapshot_cycle} -> {a.cycles}: {sum(s.size_diff for s in last.compare_to(first, 'filename')) / 1024:+.1f} "
            "KiB in all; grown most, by source line:")
        for s in stats[:12]:
            f = s.traceback[0]
            where = str(f.filename).split("site-packages/")[-1].split("/src/")[-1].split(str(ROOT) + os.sep)[-1]
            say(f"  {s.size_diff / 1024:+9.1f} KiB {s.count_diff:+7d} blocks  {where}:{f.lineno}")
        say(f"render cache entries held: {len(rec._RENDERED)}; resources managed: {len(r.managed)}")
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
