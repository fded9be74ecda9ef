"""The key the canary's baseline belongs to: "the generation" of the engines that answer.

A deployment's answer may change only when what computes it changes: the engine image and its
vLLM version, the model, the resolved KV-cache dtype, the KV connector and the engine flags
prefill and decode must agree on. That is exactly the rollout generation (``qdd.dev/generation``,
qdd.plan.generation.generation_id), so the canary takes its baseline per rollout generation:
scaling, sizing or placement keep it; a new image, model or must-match flag takes a new one.
"""

from __future__ import annotations

from ..plan import Plan


def canary_generation(plan: Plan) -> str:
    """The plan's rollout generation (8 hex digits, qdd.plan.generation): the one place the
    canary's baseline key comes from."""
    return plan.generation
