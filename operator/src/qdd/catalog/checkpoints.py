"""Checkpoints: what a model string resolves to (an architecture and how its weights are stored),
and what vLLM's ``--kv-cache-dtype auto`` becomes for it. Exports whose layout qdd has a record of
are in :data:`CHECKPOINT_RECORDS` with their source; others follow the name's precision suffix."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .models import ARCHITECTURES, DTYPE_BYTES, Architecture


@dataclass(frozen=True)
class Checkpoint:
    """What a model string resolves to: its architecture and how its weights are stored.

    ``expert_dtype``: storage of routed experts. ``projection_dtype``: attention and Gated DeltaNet
    projections (None: as ``dense_dtype``). ``dense_dtype``: everything else (embeddings, LM head,
    shared experts, routers). NVIDIA's ModelOpt NVFP4 exports of Qwen3.5 quantize the routed experts
    and keep the rest in bf16 (this reproduces the ≈217 GB experts + ≈20 GB of
    docs/facts/memory-model.md). ``kv_cache_dtype_auto``: what vLLM's ``--kv-cache-dtype auto``
    resolves to: the checkpoint's ``kv_cache_quant_algo`` when it has one (ModelOpt NVFP4 exports:
    FP8), else the model dtype (vllm/utils/torch_utils.py, resolve_kv_cache_dtype_string).
    ``kv_cache_dtype_source`` says where that record comes from, and whether it is verified
    against the checkpoint itself.
    """

    architecture: Architecture
    expert_dtype: str
    dense_dtype: str
    kv_cache_dtype_auto: str
    kv_cache_dtype_source: str = ""
    projection_dtype: str | None = None

    def expert_weight_bytes(self) -> int:
        return math.ceil(self.architecture.expert_params * DTYPE_BYTES[self.expert_dtype])

    def non_expert_weight_bytes(self) -> int:
        a = self.architecture
        proj = DTYPE_BYTES[self.projection_dtype or self.dense_dtype]
        return math.ceil(a.projection_params * proj + (a.non_expert_params - a.projection_params) * DTYPE_BYTES[self.dense_dtype])


KV_FROM_MODELOPT_NVFP4 = ("checkpoint: ModelOpt NVFP4 exports of Qwen3.x declare kv_cache_quant_algo FP8, which vLLM "
                          "0.33 resolves 'auto' to (unverified for this checkpoint: set tuning.kvCacheDtype to be sure)")
KV_FROM_MODEL_DTYPE = "checkpoint: no KV cache quantization declared, so the model dtype (config.json torch_dtype)"

CHECKPOINT_RECORDS: dict[tuple[str, str], Checkpoint] = {
    ("Qwen3.8-2.4T-A95B", "nvfp4"): Checkpoint(
        ARCHITECTURES["Qwen3.8-2.4T-A95B"], expert_dtype="nvfp4", projection_dtype="fp8", dense_dtype="bfloat16",
        kv_cache_dtype_auto="fp8",
        kv_cache_dtype_source=("checkpoint: NVIDIA's ModelOpt recipe for nvidia/Qwen3.8-2.4T-A95B-NVFP4 (NVFP4 experts, FP8 "
                               "attention and GDN projections, FP8 KV cache); its config.json not read: set "
                               "tuning.kvCacheDtype to be sure")),
    ("Qwen3.8-2.4T-A95B", "fp8"): Checkpoint(
        ARCHITECTURES["Qwen3.8-2.4T-A95B"], expert_dtype="fp8", dense_dtype="bfloat16", kv_cache_dtype_auto="bfloat16",
        kv_cache_dtype_source=("checkpoint: Qwen/Qwen3.8-2.4T-A95B-FP8 quantizes only the routed experts and declares no "
                               "KV cache scheme, so the model dtype (bfloat16)")),
}
"""Exports whose storage differs from the name's suffix rule (docs/facts/qwen38.md)."""


class UnknownModelError(LookupError):
    pass


def supported_models() -> list[str]:
    return sorted(ARCHITECTURES)


_SUFFIX = re.compile(r"-(NVFP4|FP8|BF16|FP4|Instruct|Thinking|Base)(-V\d+)?$", re.IGNORECASE)



def resolve_checkpoint(model: str, architecture: Architecture | None = None, quantization: str = "auto") -> Checkpoint:
    """Map an HF id or path (``nvidia/Qwen3.5-397B-A17B-NVFP4``, ``/models/Qwen3.5-27B``) to a
    :class:`Checkpoint`. ``architecture`` given inline wins over the catalog; ``quantization``
    (nvfp4, fp8, bfloat16) wins over the name's suffix.

    Raises :class:`UnknownModelError` naming the supported architectures.
    """
    base = model.rstrip("/").split("/")[-1]
    precision = "bf16"
    m = _SUFFIX.search(base)
    while m:
        if m.group(1).upper() in ("NVFP4", "FP4"):
            precision = "nvfp4"
        elif m.group(1).upper() == "FP8":
            precision = "fp8"
        base = base[: m.start()]
        m = _SUFFIX.search(base)
    arch = architecture or ARCHITECTURES.get(base)
    if arch is None:
        lowered = {k.lower(): v for k, v in ARCHITECTURES.items()}
        arch = lowered.get(base.lower())
    if arch is None:
        raise UnknownModelError(
            f"model {model!r} is not in the catalog (supported: {', '.join(supported_models())}); "
            "name one of them in spec.model.architecture.name, or give its config.json numbers inline "
            "under spec.model.architecture"
        )
    if quantization != "auto":
        precision = {"bfloat16": "bf16"}.get(quantization, quantization)
    record = CHECKPOINT_RECORDS.get((arch.name, precision))
    if record is not None and record.architecture == arch:  # an inline copy of the catalog's numbers keeps the record
        return record
    if precision == "nvfp4":
        return Checkpoint(arch, expert_dtype="nvfp4", dense_dtype="bfloat16", kv_cache_dtype_auto="fp8",
                          kv_cache_dtype_source=KV_FROM_MODELOPT_NVFP4)
    if precision == "fp8":
        return Checkpoint(arch, expert_dtype="fp8", dense_dtype="fp8", kv_cache_dtype_auto="bfloat16",
                          kv_cache_dtype_source=KV_FROM_MODEL_DTYPE)
    return Checkpoint(arch, expert_dtype="bfloat16", dense_dtype="bfloat16", kv_cache_dtype_auto="bfloat16",
                      kv_cache_dtype_source=KV_FROM_MODEL_DTYPE)
