"""Generated tuning and extraArgs combinations of the seed deployment, the ones the engine's
configuration (not its parser) decides: chunked prefill against the batch limit, partial prefills,
expert-parallel load balancing without expert parallelism, sequence and batch limits. Deterministic
(a seeded draw), so the unit fuzzer (test_engine_config.py) and the vLLM contract test
(tests/contract/test_engine_config.py) judge the same list; each combination is a whole CR."""

from __future__ import annotations

import copy
import random
from typing import Any

from ..conftest import EXAMPLES, load

SEED = 24
COUNT = 40
BASE = "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"

EXTRA_POOL: list[list[str]] = [
    ["--no-enable-chunked-prefill"], ["--no-enable-chunked-prefill"], ["--enable-chunked-prefill"],
    ["--max-num-active-seqs", "128"], ["--max-num-active-seqs", "4096"],
    ["--long-prefill-token-threshold", "4096"], ["--long-prefill-token-threshold", "300000"],
    ["--enable-eplb"], ["--eplb-config.num_redundant_experts", "8"], ["-dcp", "2"],
    ["--enforce-eager"], ["--max-logprobs", "5"], ["--seed", "1"], ["--scheduling-policy", "priority"],
    ["--disable-log-stats"],
]
"""Options users add that vLLM's parser accepts, some of which its configuration refuses in some company."""

TUNING_POOL: dict[str, list[Any]] = {
    "maxNumBatchedTokens": [4096, 8192, 9216, 16384, 32768],
    "maxNumSeqs": [512, 1024],
}
"""Per-role limits within what qdd's sizing checks accept for the seed's concurrency (decode holds
512 requests per DP rank), so the draw reaches the engine's own configuration rules."""

SMALL_MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
"""Fits a DEP2 prefill and a DP8 decode without expert parallelism, so expertParallel can be drawn off."""


def _role(rng: random.Random, cr: dict[str, Any], role: str) -> None:
    spec = cr["spec"][role]
    tuning = spec.setdefault("tuning", {})
    for key, values in TUNING_POOL.items():
        if rng.random() < 0.4:
            tuning[key] = rng.choice(values)
    if cr["spec"]["model"]["name"] == SMALL_MODEL and rng.random() < 0.5:
        spec["topology"]["expertParallel"] = False
    picks = rng.sample(EXTRA_POOL, k=rng.choice([0, 1, 2, 2, 3]))
    if picks:
        spec["extraArgs"] = [a for p in picks for a in p]


def combos(count: int = COUNT, seed: int = SEED) -> list[tuple[str, dict[str, Any]]]:
    """(name, CR) pairs: ``count`` draws of both roles' tuning, topology.expertParallel and extraArgs."""
    rng = random.Random(seed)
    base = load(EXAMPLES / BASE)
    out = []
    for i in range(count):
        cr = copy.deepcopy(base)
        if rng.random() < 0.3:
            cr["spec"]["model"]["name"] = SMALL_MODEL
            cr["spec"]["model"]["servedModelName"] = SMALL_MODEL.split("/")[1]
        for role in ("prefill", "decode"):
            _role(rng, cr, role)
        out.append((f"combo-{i:02d}", cr))
    return out
