"""How long a vLLM engine takes to start, phase by phase (docs/facts/engine-startup.md).

A vLLM 0.33 engine process does, in order: start the container and import (``process``), read its
weights (``weights``), trace and compile the model with torch.compile and profile the KV cache
(``compile``), autotune its kernels and capture CUDA graphs (``graphs``); only then does the API
server listen, and ``GET /health`` answers 200. Before that the port refuses connections, so a
startup probe fails and a readiness probe never passes.

The numbers are public measurements, scaled to the checkpoint by its bytes; each constant names its
source. The simulated cluster (hack/cluster/engine_stages.py) plays these phases with kwok Stages,
compressed by a factor in tests, with one start length per pod for the cache state the pod finds
(hack/fake_tray_disks.py: weights from a tray's verified copy or the claim, compile caches of its key
warm or cold); qdd's render sizes the startup probe from :func:`worst_case`.
Pure: no I/O, no Kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PHASES = ("weights", "compile", "graphs")
"""The phases the simulated kubelet plays, in order: groups of :class:`PhaseSeconds`' five
(``process`` is counted in ``weights``, KV profiling in ``compile``: each pair comes before the
engine's next log line the simulation needs)."""

PROCESS_SECONDS = 30.0
"""Container start, Python and torch import, engine-core process spawn, NCCL/NIXL init. vllm#20264:
about 30 s of a 59 s start were not in any phase vLLM logs; vllm#21051: plugin loading and
subprocess spawning delays of the same order."""

COMPILE_COLD_SECONDS = 85.0
"""Dynamo bytecode transform + Inductor compile of one engine with an empty cache: 15 s + 70 s for
Llama-3-70B FP8 at TP8 (vllm#19824, measurements by the vLLM maintainers)."""

COMPILE_WARM_SECONDS = 8.0
"""The same with the compile cache filled by an earlier run: 7.5 s ("Directly load the compiled
graph ... from the cache", vllm#20264)."""

KV_PROFILE_SECONDS = 30.0
"""The memory-profiling run that sizes the KV cache: 34 s in one report (kubernetes-sigs/
gateway-api-inference-extension#550, "Memory profiling takes 34.26 seconds"); 210 s in the worst
report the issue cites. Paid cold or warm."""

KV_PROFILE_PLANNED_SECONDS = 0.0
"""The same with a persisted startup plan of the same fingerprint (``VLLM_ENABLE_STARTUP_PLAN=1``,
below ``VLLM_CACHE_ROOT``): vLLM 0.33 applies the recorded KV-cache size and skips the profiling run
and the CUDA-graph memory estimate (vllm/v1/worker/startup_plan.py). What is left of it is not
measured; counted as nothing."""

GRAPHS_SECONDS = 60.0
"""CUDA-graph capture of the decode batch sizes: 60 s for Llama-3-70B at TP8 (vllm#19824); 17 s for a
small model (vllm#20264). The MoE kernels' autotuning on Blackwell is in the same step."""

GRAPHS_WARM_SECONDS = 25.0
"""Graph capture with the autotuning results and compile artefacts already on disk: capture itself
cannot be cached (graphs hold device pointers); 17-25 s seen (vllm#20264)."""


@dataclass(frozen=True)
class Storage:
    """Where the weights are read from, and how fast (GB/s, 10^9 bytes per second, per node).

    ``remote``: a network file system or object store, cold: every byte crosses the network.
    ``local``: the node's NVMe or page cache after an earlier engine on the node read them
    (vllm#19824: ~70 GB of Llama-70B FP8 in ~10 s from a hot page cache, about 7 GB/s per engine).
    ``peer``: streamed from a serving engine over the fabric (NVIDIA Dynamo ModelExpress: DeepSeek-V4
    on 8 x B200 started in 1 min 44 s with weights and compile caches from a peer, 8 min cold).
    """

    name: str
    gb_per_s: float


REMOTE = Storage("remote", 2.0)
LOCAL = Storage("local", 7.0)
PEER = Storage("peer", 25.0)


@dataclass(frozen=True)
class StartupPhases:
    """Seconds of each phase of one engine's start (``weights`` includes ``process``)."""

    weights: float
    compile: float
    graphs: float

    @property
    def total(self) -> float:
        return self.weights + self.compile + self.graphs

    def compressed(self, factor: float) -> StartupPhases:
        """Every phase divided by ``factor`` (> 0): what tests play; 60 makes 8 min into 8 s."""
        if factor <= 0:
            raise ValueError(f"compression factor must be > 0, not {factor}")
        return replace(self, weights=self.weights / factor, compile=self.compile / factor, graphs=self.graphs / factor)

    def as_durations(self) -> dict[str, str]:
        """Go durations (``"12.5s"``) by phase: what kwok's Stage ``delay.durationFrom`` parses."""
        return {p: f"{round(getattr(self, p), 3)}s" for p in PHASES}


@dataclass(frozen=True)
class PhaseSeconds:
    """Seconds of each phase of one engine's start as docs/cold-start.md's budget table has them (its
    rows, the keys of ``qdd plan -o json``'s ``startup``): ``process`` (container start, imports,
    engine-core spawn, NCCL/NIXL init), ``weights`` (reading the checkpoint), ``torch_compile``
    (Dynamo + Inductor, or loading them from the compile cache), ``kv_profile`` (the KV-cache memory
    profiling run), ``graphs`` (autotuning and CUDA-graph capture). :meth:`stages` groups them into
    the three the simulated kubelet plays."""

    process: float
    weights: float
    torch_compile: float
    kv_profile: float
    graphs: float

    @property
    def total(self) -> float:
        return self.process + self.weights + self.torch_compile + self.kv_profile + self.graphs

    def stages(self) -> StartupPhases:
        """The simulated kubelet's phases (:data:`PHASES`): process and weights, torch.compile and KV
        profiling, graphs."""
        return StartupPhases(weights=self.process + self.weights, compile=self.torch_compile + self.kv_profile,
                             graphs=self.graphs)

    def as_dict(self) -> dict[str, float]:
        """camelCase keys, seconds rounded to 0.1 s (``qdd plan -o json``; the measured counterparts in
        status.startup are ``weightsSeconds``, ``torchCompileSeconds``, ``kvProfileSeconds``,
        ``graphsSeconds``)."""
        return {"process": round(self.process, 1), "weights": round(self.weights, 1),
                "torchCompile": round(self.torch_compile, 1), "kvProfile": round(self.kv_profile, 1),
                "graphs": round(self.graphs, 1)}


def engine_phases(checkpoint_bytes: float, storage: Storage = REMOTE, compile_cache_warm: bool = False,
                  memory_plan_cached: bool = False) -> PhaseSeconds:
    """Phases of one engine's start for a checkpoint of ``checkpoint_bytes`` bytes.

    Every rank reads its shards; ranks on one node share the node's read bandwidth and the page
    cache, so a node reads about the whole checkpoint once (vLLM's default loader iterates over
    every safetensors file on each rank): ``weights = bytes / storage``. The caches: ``storage``
    says where the weights are (remote, a node-local copy or a serving peer);
    ``compile_cache_warm``: torch.compile, Triton, FlashInfer and DeepGEMM caches of the same key
    are on disk (torch.compile loads, graph capture finds its autotuning results);
    ``memory_plan_cached``: a startup plan of the same fingerprint is (KV profiling skipped).
    Raises ValueError for a negative size."""
    if checkpoint_bytes < 0:
        raise ValueError(f"checkpoint_bytes must be >= 0, not {checkpoint_bytes}")
    return PhaseSeconds(
        process=PROCESS_SECONDS, weights=checkpoint_bytes / (storage.gb_per_s * 1e9),
        torch_compile=COMPILE_WARM_SECONDS if compile_cache_warm else COMPILE_COLD_SECONDS,
        kv_profile=KV_PROFILE_PLANNED_SECONDS if memory_plan_cached else KV_PROFILE_SECONDS,
        graphs=GRAPHS_WARM_SECONDS if compile_cache_warm else GRAPHS_SECONDS)


def engine_startup(checkpoint_bytes: float, storage: Storage = REMOTE, compile_cache_warm: bool = False,
                   memory_plan_cached: bool = False) -> StartupPhases:
    """:func:`engine_phases` grouped into the simulated kubelet's three phases: ``weights = process +
    bytes / storage``, ``compile = torch.compile + KV profiling``, ``graphs``."""
    return engine_phases(checkpoint_bytes, storage, compile_cache_warm, memory_plan_cached).stages()


def worst_case(checkpoint_bytes: float) -> StartupPhases:
    """The slowest start the model expects: remote storage, cold compile cache, and the worst KV
    profiling reported (210 s, vllm issue cited by qdd issue 22) instead of the typical 30 s."""
    p = engine_startup(checkpoint_bytes, REMOTE, compile_cache_warm=False)
    return replace(p, compile=p.compile - KV_PROFILE_SECONDS + 210.0)
