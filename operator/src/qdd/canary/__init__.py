"""The end-to-end serving canary (spec.validation.canary): one deterministic completion through
the router, compared with the generation's baseline. ``client`` sends it (standard library only),
``judge`` keeps the baseline and decides (pure), ``generation`` keys the baseline. The controller
calls them (qdd.controller.canary); docs/canary.md."""

from .client import Answer, complete, request_body
from .generation import canary_generation
from .judge import CanaryState, canary_events, due, judge, state_of

__all__ = ["Answer", "CanaryState", "canary_events", "canary_generation", "complete", "due", "judge",
           "request_body", "state_of"]
