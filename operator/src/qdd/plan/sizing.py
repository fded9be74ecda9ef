"""Sizing rules: batched tokens, sequences and CUDA-graph capture per role.

Each function is one rule with its source; :mod:`qdd.plan.build` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.spec import RoleTuning
from ..catalog import EngineProfile, GPUKind, round_up_to_grid

CAPTURE_HEADROOM = 128
"""Seed recipe (vLLM blog, Recipes): decode capture size = concurrency / DP ranks + 128."""
CAPTURE_FLOOR = 512
"""vLLM's long-standing default capture ceiling (vllm/config/vllm.py, max_cudagraph_capture_size
when unset on non-Blackwell GPUs and on images older than the 1024 cap; the blog: 'The vLLM default
caps captured graphs at 512, which is enough up to cc=3072'). qdd renders the capture size
explicitly so that sizing does not depend on the engine version, and never below this floor."""


def prefill_max_num_batched_tokens(isl: int) -> int:
    """2 × ISL: two full prompts per prefill step (seed recipe; +8% total TPS when prefill-bound)."""
    return 2 * isl


def per_rank_concurrency(concurrency: int, decode_endpoints: int, dp: int) -> int:
    """Requests each decode DP rank holds when the router spreads evenly: ceil(C / (endpoints × DP))."""
    return math.ceil(concurrency / (decode_endpoints * dp))


def decode_capture_size(concurrency: int, decode_endpoints: int, dp: int) -> int:
    """ceil(C / decode DP ranks) + 128, rounded up to vLLM's capture grid, at least 512.
    Seed: 3072 → 512, 4096 → 640, 5120 → 768 on one DEP8."""
    want = per_rank_concurrency(concurrency, decode_endpoints, dp) + CAPTURE_HEADROOM
    return max(CAPTURE_FLOOR, round_up_to_grid(want))


def decode_max_num_seqs(profile: EngineProfile, gpu: GPUKind, capture: int) -> int:
    """max(engine default, capture size): never fewer sequences than the largest captured batch,
    and never below what the engine would allow by itself (1024 on ≥70 GiB GPUs: the seed ran with it)."""
    return max(profile.default_max_num_seqs(gpu), capture)


def decode_max_num_batched_tokens(profile: EngineProfile, gpu: GPUKind, max_num_seqs: int) -> int:
    """max(engine default, max_num_seqs): vLLM requires max_num_batched_tokens ≥ max_num_seqs."""
    return max(profile.default_max_num_batched_tokens(gpu), max_num_seqs)


@dataclass(frozen=True)
class RoleSizing:
    """The scheduler sizing one role renders: ``--max-num-batched-tokens`` (tokens per step),
    ``--max-num-seqs`` (sequences per DP rank) and ``--max-cudagraph-capture-size`` (the largest
    captured batch, tokens); None leaves the engine's own value."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    max_cudagraph_capture_size: int | None


def prefill_sizing(tuning: RoleTuning, isl: int) -> RoleSizing:
    """Prefill: 2 × ISL batched tokens unless tuned; sequences and capture as tuned (engine defaults)."""
    return RoleSizing(tuning.max_num_batched_tokens or prefill_max_num_batched_tokens(isl), tuning.max_num_seqs,
                      tuning.max_cudagraph_capture_size)


def decode_sizing(tuning: RoleTuning, profile: EngineProfile, gpu: GPUKind, concurrency: int, endpoints: int,
                  dp: int) -> RoleSizing:
    """Decode: capture size, then sequences, then batched tokens, each from the one before unless tuned."""
    capture = tuning.max_cudagraph_capture_size or decode_capture_size(concurrency, endpoints, dp)
    seqs = tuning.max_num_seqs or decode_max_num_seqs(profile, gpu, capture)
    mnbt = tuning.max_num_batched_tokens or decode_max_num_batched_tokens(profile, gpu, seqs)
    return RoleSizing(mnbt, seqs, capture)
