"""The catalog: model architectures, GPU kinds and vLLM engine profiles, as data."""

from .engines import ENGINE_PROFILES, EngineProfile, UnknownEngineError, capture_grid, engine_profile, round_up_to_grid
from .gpus import GPU_KINDS, GPUKind, UnknownGPUError, gpu_kind
from .checkpoints import Checkpoint, UnknownModelError, resolve_checkpoint
from .models import ARCHITECTURES, DTYPE_BYTES, Architecture

__all__ = [
    "ARCHITECTURES", "DTYPE_BYTES", "ENGINE_PROFILES", "GPU_KINDS", "Architecture", "Checkpoint", "EngineProfile",
    "GPUKind", "UnknownEngineError", "UnknownGPUError", "UnknownModelError", "capture_grid", "engine_profile",
    "gpu_kind", "resolve_checkpoint", "round_up_to_grid",
]
