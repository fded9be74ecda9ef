"""The key the canary's baseline belongs to: "the generation" of the engines that answer.

A deployment's answer may change only when what computes it changes: the engine image and its
vLLM version, the model and its revision, and the engine flags prefill and decode must agree on
(plan.flags.ENGINE_FLAGS rows with ``must_match``: served name, TP, cache dtypes, prefix caching,
generation config, speculative config). Scaling, sizing or placement leave it alone.

The lead's rollout generations (``qdd.dev/generation``, qdd/plan/generation.py) will replace this
function's body at merge: it is the one place the key comes from.
"""

from __future__ import annotations

from ..hashing import content_hash
from ..plan import Plan
from ..plan.flags import ENGINE_FLAGS

_MUST_MATCH = frozenset(f.name for f in ENGINE_FLAGS if f.must_match)


def _must_match_tokens(argv: tuple[str, ...]) -> list[str]:
    """The must-match flags of one pod's argv, each with its value when it takes one."""
    out: list[str] = []
    for i, tok in enumerate(argv):
        name = tok.removeprefix("--").removeprefix("no-").split("=", 1)[0]
        if not tok.startswith("--") or name not in _MUST_MATCH:
            continue
        out.append(tok)
        if "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append(argv[i + 1])
    return out


def canary_generation(plan: Plan) -> str:
    """16 hex digits: SHA-256 of the engine image, vLLM version, model, revision and the decode
    leader's must-match flags (prefill renders the same ones: the NIXL handshake compares them)."""
    leader = next(p for p in plan.decode.pods if p.serves_http)
    spec = plan.spec
    return content_hash({"image": spec.engine.image, "vllmVersion": spec.engine.vllm_version,
                         "model": spec.model.name, "revision": spec.model.revision,
                         "flags": _must_match_tokens(leader.argv)}, 16)
