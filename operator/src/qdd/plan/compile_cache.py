"""The compilation and JIT caches of the engines on a volume, keyed by what invalidates them
(``spec.engine.compileCache``; docs/cold-start.md#compile-cache, docs/facts/compile-cache.md).

A vLLM 0.33 engine fills four caches at its first start and reads them at later ones:

- ``VLLM_CACHE_ROOT`` (vllm/envs.py; default ``~/.cache/vllm``): torch.compile artefacts under
  ``torch_compile_cache/<vLLM's own config hash>``, FlashInfer's autotune results under
  ``flashinfer_autotune_cache`` (vllm/model_executor/warmup/flashinfer_autotune_cache.py) and, when
  ``DG_JIT_CACHE_DIR`` is unset, DeepGEMM's JIT kernels under ``deep_gemm`` (vllm/utils/deep_gemm.py).
- ``TRITON_CACHE_DIR`` (triton/knobs.py; default ``~/.triton/cache``): every Triton kernel, the GDN
  (FLA) kernels of Qwen3.5 included. vLLM keeps a caller's value (vllm/compilation/compiler_interface.py,
  ``initialize_inductor_cache``); it sets ``TORCHINDUCTOR_CACHE_DIR`` itself under its compile cache.
- ``FLASHINFER_WORKSPACE_BASE`` (flashinfer/jit/env.py; default ``$HOME``): FlashInfer's JIT modules
  and downloaded cubins, under ``<base>/.cache/flashinfer``.
- ``DG_JIT_CACHE_DIR`` (DeepGEMM; vllm/utils/deep_gemm.py keeps a caller's value).

Each role's caches live in ``/compile-cache/<key>/``, ``key`` a hash of everything that invalidates
them (:func:`compile_cache_key`). vLLM and Triton hash their own inputs too, but FlashInfer's
autotune results and DeepGEMM's kernels are looked up by file name only: qdd's key keeps a cache
of another engine, model, topology or flag set out of reach; a changed input gives a new key, an
empty folder and a cold compile, never a wrong cache. Pure: no I/O, no Kubernetes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ..api.spec import QwenDisaggDeploymentSpec, RoleSpec
from .types import EnvEntry

MOUNT = "/compile-cache"
"""Where the cache volume is mounted in every engine container."""

VOLUME = "compile-cache"
"""The pod volume's name."""

CACHE_ENV: dict[str, str] = {
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
}
"""Variable → its folder below ``/compile-cache/<key>``."""

STARTUP_PLAN_ENV = "VLLM_ENABLE_STARTUP_PLAN"
"""Rendered ``1`` with the cache: vLLM 0.33 then keeps each rank's measured KV-cache size below
``VLLM_CACHE_ROOT/startup_plan``, keyed by its own fingerprint of model, config and hardware, and a
later start with the same fingerprint and at least as much free memory skips memory profiling; any
mismatch profiles again (vllm/v1/worker/startup_plan.py)."""

LOCATION_ONLY_ENV = frozenset({
    "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT", "UCX_TLS", "UCX_CUDA_IPC_ENABLE_MNNVL",
    "UCX_MEMTYPE_CACHE", "HF_TOKEN", "HF_HOME", "VLLM_LOGGING_COLOR", *CACHE_ENV})
"""qdd's variables that say where things are or how KV bytes travel, not what is compiled: left out
of the key (vLLM leaves its cache and side-channel variables out of its own compile hash too,
vllm/envs.py ``compile_factors``). Every other variable, the user's included, is in the key."""

KEY_LENGTH = 16
"""Hex digits of the key (64 bits of SHA-256): a folder name short enough to read in status."""


def checkpoint_identity(spec: QwenDisaggDeploymentSpec) -> dict[str, str]:
    """What tells two checkpoints of one model name apart, beyond its revision: the claim and
    subPath of ``spec.model.source.pvc`` (another folder of one volume may hold another export) and
    ``spec.model.cache.digest`` (the bytes themselves; a checkpoint rewritten in place gets a new
    one). Only what is set: a deployment without a claim or a digest keeps the key it had before
    these were hashed."""
    src, cache = spec.model.source, spec.model.cache
    pvc = src.pvc if src is not None else None
    out = {"claimName": pvc.claim_name if pvc else None, "subPath": pvc.sub_path if pvc else None,
           "digest": cache.digest if cache else None}
    return {k: v for k, v in out.items() if v is not None}


def compile_cache_key(spec: QwenDisaggDeploymentSpec, role: RoleSpec, gpu: str, argv: Sequence[str],
                      env: Sequence[EnvEntry]) -> str:
    """The key of one role's caches: ``KEY_LENGTH`` hex digits of SHA-256 over the engine image and
    vLLM version, the model name, revision and quantization, the checkpoint (:func:`checkpoint_identity`:
    the claim and subPath it is read from, its content digest), the role's topology (DP, TP, EP), the
    GPU kind, the role's argv without the per-pod flags (``argv``: every flag qdd renders for the
    role and every extraArgs item, in order; the model argument, the path the engine reads, among
    them) and its environment without :data:`LOCATION_ONLY_ENV` (a variable from a Secret or
    ConfigMap counts by its reference: a changed value behind the same reference keeps the key;
    docs/cold-start.md says so).

    Conservative by design: a flag that does not change compiled code (the KV lease, the stream
    interval) still changes the key; that costs one cold compile, a missing input would cost a
    wrong cache. ``spec.engine.image`` counts as written: a tag that moves to other contents keeps
    the key (pin images by digest; vLLM's own hash of its version and config still separates
    torch.compile artefacts). Enabling ``spec.model.cache`` changes the key (the digest joins it, and
    the model argument becomes the weight cache's link): the first start after it compiles cold
    (docs/cold-start.md#compile-cache says why it is kept so)."""
    t = role.topology
    doc = {
        "image": spec.engine.image, "vllmVersion": spec.engine.vllm_version, "gpu": gpu,
        "model": spec.model.name, "revision": spec.model.revision, "quantization": spec.model.quantization,
        **({"checkpoint": ckpt} if (ckpt := checkpoint_identity(spec)) else {}),
        "topology": {"dp": t.data_parallel, "tp": t.tensor_parallel, "ep": t.expert_parallel},
        "argv": list(argv),
        "env": sorted((e.to_k8s() for e in env if e.name not in LOCATION_ONLY_ENV), key=lambda e: json.dumps(e, sort_keys=True)),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:KEY_LENGTH]


def cache_env(key: str) -> list[EnvEntry]:
    """The cache variables of one role, each a folder of ``/compile-cache/<key>``, and the startup
    plan switched on."""
    return [*(EnvEntry(name, f"{MOUNT}/{key}/{folder}") for name, folder in CACHE_ENV.items()),
            EnvEntry(STARTUP_PLAN_ENV, "1")]
