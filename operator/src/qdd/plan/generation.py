"""The generation of a deployment: what its prefill and decode engines must agree on, or what
changes what they load, reduced to one short hash. Pure.

vLLM's NIXL handshake checks little of it (not the model revision, not the engine version; the
speculative method since 0.33), so a prefill and a decode of two generations can pair and move
bytes that the other side lays out differently: garbage with HTTP 200 (docs/rollouts.md). qdd
labels every engine pod with the hash (``qdd.dev/generation``), the router selects one generation
only, and a change of the hash is rolled as a whole new generation (``spec.rollout.strategy``),
never pod by pod.

In the hash: the engine image and vLLM version, the model (name, revision, quantization, source,
inline architecture), the resolved KV-cache dtype, the KV connector and its backends, and the value
of every flag the table marks must-match on prefill and decode (qdd.plan.flags: served model name,
TP, expert parallel, prefix caching, cache dtypes, max model length, all2all backend, revision,
speculative config, ...). Not in it: endpoint counts, per-role sizing (batched tokens, sequences,
capture sizes), resources, ports, the load format, the compile cache, the node-local weight cache (its
copies are the claim's bytes, verified: how they arrive, not what is loaded): those roll per role, one
endpoint at a time.
"""

from __future__ import annotations

from ..api.spec import QwenDisaggDeploymentSpec
from ..hashing import content_hash
from .flags import ENGINE_FLAGS

MUST_MATCH = tuple(f.name for f in ENGINE_FLAGS if f.must_match)


def must_match_values(argv: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """``--flag value...`` items of ``argv`` for the must-match flags, by flag name (a switch such
    as ``--no-enable-prefix-caching`` maps to ``[]``; ``--no-<flag>`` is kept under its own name)."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for item in argv:
        if item.startswith("--"):
            name = item[2:].split("=", 1)[0]
            base = name[3:] if name.startswith("no-") else name
            current = name if base in MUST_MATCH else None
            if current is not None:
                out[current] = [item.split("=", 1)[1]] if "=" in item else []
        elif current is not None:
            out[current].append(item)
    return out


def generation_id(spec: QwenDisaggDeploymentSpec, kv_cache_dtype: str, prefill_argv: tuple[str, ...]) -> str:
    """8 hex digits (SHA-256 of canonical JSON, qdd.hashing): equal for two specs exactly when
    their engines are compatible in the sense of the module docstring. ``prefill_argv``: the
    argv of a prefill pod (the must-match flags are equal on decode: a rule of the API)."""
    m, kv = spec.model, spec.kv_transfer
    return content_hash({
        "image": spec.engine.image, "vllmVersion": spec.engine.vllm_version,
        # The loader changes how fast the same bytes arrive, not what either side holds.
        "model": m.model_dump(by_alias=True, exclude={"served_model_name", "load_format", "cache"}, mode="json"),
        "kvCacheDtype": kv_cache_dtype, "connector": kv.connector, "backends": list(kv.backends),
        "flags": must_match_values(prefill_argv),
    }, 8)
