"""Prefill pods replaced under running decode groups (a peer restart). Pure.

A decode engine keeps a NIXL agent per prefill engine it has read from. When a prefill pod is
replaced (same name, new pod: a new engine with a new IP), vLLM 0.33's decode keeps the old agent
(and, on GB200, the old pod's GPU memory mapped) until ``engine_ttl`` expires (engine profile
``nixl_recovers_peer_restart``, qdd.catalog.engines). Where the engine does not recover by itself,
qdd recycles the decode groups that were running when the replacement came: they are the ones
that may hold the stale agent. Replacement is told apart from a scale-up by the prefill pod UIDs
recorded in ``status.prefillPods`` on the previous pass.
"""

from __future__ import annotations

from typing import Any

from .. import labels
from .groups import GroupState


def prefill_pod_uids(observed: list[dict[str, Any]]) -> dict[str, str]:
    """{pod name: uid} of the prefill pods that exist and are not terminating."""
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in observed
            if o["kind"] == "Pod" and (o["metadata"].get("labels") or {}).get(labels.ROLE) == "prefill"
            and not o["metadata"].get("deletionTimestamp") and o["metadata"].get("uid")}


def replaced(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """Prefill pods whose name was recorded with another UID: replaced since the last pass."""
    return sorted(n for n, uid in current.items() if n in recorded and recorded[n] != uid)


def _created(observed: list[dict[str, Any]], names: set[str]) -> list[str]:
    return [o["metadata"].get("creationTimestamp") or "" for o in observed
            if o["kind"] == "Pod" and o["metadata"]["name"] in names]


def stale_decode_groups(states: list[GroupState], observed: list[dict[str, Any]],
                        replacements: list[str]) -> list[GroupState]:
    """Decode groups whose pods all predate the newest replacement prefill pod, or share its second
    (creation times have a resolution of one second; RFC 3339 strings compare in time order): they
    ran while the replaced engine served and may hold its agent. A group created in that same
    second after the replacement is recycled once too: a restart rather than a wedge."""
    if not replacements:
        return []
    newest = max(_created(observed, set(replacements)), default="")
    return [g for g in states if g.role == "decode" and g.present and not g.broken
            and all(t and t <= newest for t in _created(observed, set(g.present)))]
