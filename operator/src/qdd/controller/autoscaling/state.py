"""The policy's memory (:class:`qdd.autoscale.PolicyState`) to and from the compact JSON kept in
``status.autoscaling.policyState``, so that a restarted operator, or the replica taking over,
continues the load history, the cooldowns and the capacity corrections. Pure."""

from __future__ import annotations

import json
from dataclasses import fields

from ...autoscale import PolicyState
from ...autoscale.types import Sample

DICTS = ("last_scale_up_s", "last_change_s", "lower_since_s", "correction")


def dump(state: PolicyState) -> str:
    """JSON of ``state`` (floats rounded to ms and 4 digits: it goes into the status every period)."""
    out: dict[str, object] = {"history": [[round(s.t_s, 3), round(s.rate_rps, 4), round(s.isl, 1), round(s.osl, 1)]
                                          for s in state.history]}
    for name in DICTS:
        out[name] = {k: round(v, 4) for k, v in sorted(getattr(state, name).items())}
    return json.dumps(out, separators=(",", ":"), sort_keys=True)


def load(text: str | None) -> PolicyState | None:
    """The state ``dump`` wrote; None for nothing or anything that does not read back (a state of
    another qdd version starts afresh rather than failing the pass)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        history = tuple(Sample(float(t), float(r), float(i), float(o)) for t, r, i, o in raw.get("history", []))
        dicts = {f.name: {str(k): float(v) for k, v in (raw.get(f.name) or {}).items()}
                 for f in fields(PolicyState) if f.name in DICTS}
        return PolicyState(history=history, **dicts)
    except (ValueError, TypeError, AttributeError):
        return None
