"""Sizing rules: batched tokens, sequences and CUDA-graph capture per role.

Each function is one rule with its source; :mod:`qdd.plan.build` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.spec import RoleTuning
from ..catalog import EngineProfile, GPUKind, round_up_to_grid
from ..catalog.engines import round_down_to_grid

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


def decode_query_len(num_speculative_tokens: int) -> int:
    """Tokens one sequence carries in a decode step: 1 + k with k draft tokens (vllm/config/vllm.py,
    VllmConfig.uniform_decode_query_len)."""
    return 1 + num_speculative_tokens


def round_up_to_grid_multiple(n: int, q: int) -> int:
    """Smallest size on vLLM's capture grid that is ≥ n and a multiple of q. With speculative decoding
    vLLM rounds every capture size up to a multiple of the decode query length and drops those that
    then exceed the largest (vllm/config/compilation.py, adjust_cudagraph_sizes_for_spec_decode), so
    the largest must be one already. At most q grid steps."""
    size = round_up_to_grid(n)
    while size % q:
        size = round_up_to_grid(size + 1)
    return size


def grid_multiple_near(n: int, q: int, limit: int) -> int:
    """The capture size to suggest for ``n``: the next grid size that is a multiple of q, or, when that
    exceeds ``limit`` (the batched tokens), the largest such size within it (q when none is)."""
    up = round_up_to_grid_multiple(n, q)
    if up <= limit:
        return up
    size = round_down_to_grid(limit)
    while size > q and size % q:
        size = round_down_to_grid(size - 1)
    return max(q, size if size % q == 0 else q)


def decode_capture_size(concurrency: int, decode_endpoints: int, dp: int, num_speculative_tokens: int = 0) -> int:
    """(1 + k) × (ceil(C / decode DP ranks) + 128) tokens, rounded up to vLLM's capture grid (and to a
    multiple of 1 + k), at least 512. The headroom is in requests, so it scales with the query length.
    Seed (k = 0): 3072 → 512, 4096 → 640, 5120 → 768 on one DEP8; MTP k = 1 at 5120: 1536 (covers
    the 1,280 tokens of 640 requests per rank)."""
    q = decode_query_len(num_speculative_tokens)
    want = q * (per_rank_concurrency(concurrency, decode_endpoints, dp) + CAPTURE_HEADROOM)
    return round_up_to_grid_multiple(max(CAPTURE_FLOOR, want), q)


def decode_max_num_seqs(profile: EngineProfile, gpu: GPUKind, capture: int, num_speculative_tokens: int = 0) -> int:
    """max(engine default, requests the capture size covers): never fewer sequences than the largest
    captured batch holds (capture / (1 + k)), and never below what the engine would allow by itself
    (1024 on ≥70 GiB GPUs: the seed ran with it)."""
    return max(profile.default_max_num_seqs(gpu), capture // decode_query_len(num_speculative_tokens))


def decode_max_num_batched_tokens(profile: EngineProfile, gpu: GPUKind, max_num_seqs: int, capture: int = 0,
                                  num_speculative_tokens: int = 0) -> int:
    """max(engine default, (1 + k) × max_num_seqs, capture size): a step of every sequence with its
    draft tokens fits one batch (vLLM requires max_num_batched_tokens ≥ max_num_seqs), and the
    capture size is not clamped by the batch (vllm/config/vllm.py clamps it to max_num_batched_tokens)."""
    q = decode_query_len(num_speculative_tokens)
    return max(profile.default_max_num_batched_tokens(gpu), q * max_num_seqs, capture)


@dataclass(frozen=True)
class RoleSizing:
    """The scheduler sizing one role renders: ``--max-num-batched-tokens`` (tokens per step),
    ``--max-num-seqs`` (sequences per DP rank) and ``--max-cudagraph-capture-size`` (the largest
    captured batch, tokens); None leaves the engine's own value."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    max_cudagraph_capture_size: int | None


def prefill_sizing(tuning: RoleTuning, isl: int, default_max_num_seqs: int) -> RoleSizing:
    """Prefill: max(2 × ISL, max-num-seqs) batched tokens unless tuned (vLLM requires
    max_num_batched_tokens ≥ max_num_seqs: short prompts would otherwise not start; vllm/config/scheduler.py);
    sequences (``default_max_num_seqs``: the engine's when untuned) and capture as tuned."""
    seqs = tuning.max_num_seqs or default_max_num_seqs
    return RoleSizing(tuning.max_num_batched_tokens or max(prefill_max_num_batched_tokens(isl), seqs),
                      tuning.max_num_seqs, tuning.max_cudagraph_capture_size)


def decode_sizing(tuning: RoleTuning, profile: EngineProfile, gpu: GPUKind, concurrency: int, endpoints: int,
                  dp: int, num_speculative_tokens: int = 0) -> RoleSizing:
    """Decode: capture size, then sequences, then batched tokens, each from the one before unless tuned;
    ``num_speculative_tokens`` (k) from spec.speculative, 0 without it."""
    k = num_speculative_tokens
    capture = tuning.max_cudagraph_capture_size or decode_capture_size(concurrency, endpoints, dp, k)
    seqs = tuning.max_num_seqs or decode_max_num_seqs(profile, gpu, capture, k)
    mnbt = tuning.max_num_batched_tokens or decode_max_num_batched_tokens(profile, gpu, seqs, capture, k)
    return RoleSizing(mnbt, seqs, capture)
