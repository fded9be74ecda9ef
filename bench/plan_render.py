"""Worst-case cost of planning and rendering one QwenDisaggDeployment (make bench-plan).

The operator plans and renders every resource on every pass, so one resource must not be able
to make that slow or large. Prints, per case, the time (median of 5 runs, ms) and the peak
Python memory (tracemalloc, MiB) of parse + plan + render_all, and whether qdd refused it. The
cases are the largest the API accepts along each axis: the engine-pod cap (288), the largest
concurrency, ISL and architecture numbers, and the ones that used to crash or hang.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import yaml

from qdd.api import parse_resource
from qdd.errors import SpecError
from qdd.plan import build_plan
from qdd.render import render_all

SEED = Path(__file__).resolve().parents[1] / "examples" / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml"


def _set(cr: dict[str, Any], **paths: Any) -> None:
    for dotted, value in paths.items():
        node = cr
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value


CASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "seed (4 x DEP2 + 1 x DEP8)": lambda c: None,
    "288 engine pods, the cap (32 x DEP2 + 16 x DEP64)": lambda c: _set(
        c, spec__decode__endpoints=16, spec__decode__topology={"dataParallel": 64}, spec__prefill__endpoints=32,
        spec__cluster__sameNVLinkDomain=False, spec__workload__concurrency=4096),
    "64 x DEP20 prefill (refused: 322 engine pods)": lambda c: _set(
        c, spec__prefill__endpoints=64, spec__prefill__topology={"dataParallel": 20}, spec__cluster__sameNVLinkDomain=False),
    "concurrency 1,048,576 (refused)": lambda c: _set(c, spec__workload__concurrency=1 << 20),
    "ISL 1,048,576 (refused: context)": lambda c: _set(c, spec__workload__isl=1 << 20),
    "architecture at every upper bound (refused)": lambda c: _set(
        c, spec__model__architecture={"name": "X", "numHiddenLayers": 1024, "numAttentionHeads": 1024,
                                      "numKeyValueHeads": 1024, "linearNumKeyHeads": 1024, "linearNumValueHeads": 1024,
                                      "hiddenSize": 65536, "vocabSize": 4194304, "headDim": 4096, "numExperts": 4096,
                                      "numExpertsPerTok": 256, "moeIntermediateSize": 1048576}),
    "architecture with no GDN layer (refused; was ZeroDivisionError)": lambda c: _set(
        c, spec__model__architecture={"name": "Qwen3.5-397B-A17B", "numHiddenLayers": 4, "fullAttentionInterval": 1}),
}


def measure(cr: dict[str, Any]) -> tuple[float, float, str]:
    times, outcome = [], ""
    for _ in range(5):
        start = time.perf_counter()
        try:
            objs = render_all(build_plan(parse_resource(cr)))
            outcome = f"{len(objs)} objects"
        except SpecError as e:
            outcome = "refused: " + str(e).split(";")[0][:70]
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    with contextlib.suppress(SpecError):
        render_all(build_plan(parse_resource(cr)))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(times) * 1000, peak, outcome


def main() -> int:
    base = yaml.safe_load(SEED.read_text())
    print(f"{'case':62s} {'ms':>8s} {'peak MiB':>9s}  outcome")
    worst = 0.0
    for label, mutate in CASES.items():
        cr = copy.deepcopy(base)
        mutate(cr)
        ms, peak, outcome = measure(cr)
        worst = max(worst, ms)
        print(f"{label:62s} {ms:8.1f} {peak:9.1f}  {outcome}")
    print(f"worst: {worst:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
