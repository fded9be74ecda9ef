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

import datetime as dt
from typing import Any

from .. import labels
from .groups import GroupState, pod_ready


def prefill_pod_uids(observed: list[dict[str, Any]], generation: str | None = None) -> dict[str, str]:
    """{pod name: uid} of the prefill pods that exist and are not terminating; with ``generation``, only
    those of that generation (a pod without the label counts as of it: made before generations). A
    pod of another generation under the same name is a rollout's new engine (a superseding edit
    recreates slot b's names), not a replaced peer: counting it recycled the new generation's decode
    group right after the router switched to it."""
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in observed
            if o["kind"] == "Pod" and (o["metadata"].get("labels") or {}).get(labels.ROLE) == "prefill"
            and not o["metadata"].get("deletionTimestamp") and o["metadata"].get("uid")
            and (generation is None or (o["metadata"].get("labels") or {}).get(labels.GENERATION, generation)
                 == generation)}


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


BURST_WINDOW_S = 30
"""Seconds without a further prefill replacement, with every prefill pod back and Ready, before the
decode groups are recycled: one recycle for a burst (a drain evicting the prefill pods of a tray one
by one under their PodDisruptionBudget, retrying every 5 s as kubectl drain does; a prefill roll
replacing pod after pod) instead of one per replaced pod (issue 23: a tray of two prefill pods
recycled decode twice, each a full model load, with Ready=True between the two)."""


def _parse(t: str) -> float:
    return dt.datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


def burst(pending: dict[str, Any] | None, gone: list[str], now: str) -> dict[str, Any] | None:
    """``status.peerRestartPending`` after this pass saw ``gone`` replaced: the prefill pods replaced
    since the burst began, when it began and when the last one was seen. None: no burst."""
    if not gone:
        return pending or None
    pods = sorted(set((pending or {}).get("pods") or []) | set(gone))
    return {"pods": pods, "since": (pending or {}).get("since") or now, "last": now}


def settled(pending: dict[str, Any], observed: list[dict[str, Any]], endpoints: int, now: str,
            window_s: float = BURST_WINDOW_S) -> float:
    """Seconds until the burst may be closed by recycling decode (0: now): every desired prefill pod is
    there, not terminating and Ready, and none was replaced or turned Ready for ``window_s``. ``float('inf')`` while
    prefill pods are missing, terminating or starting (the burst goes on: a drain's next eviction)."""
    pods = [o for o in observed if o["kind"] == "Pod" and (o["metadata"].get("labels") or {}).get(labels.ROLE)
            == "prefill"]
    if any(o["metadata"].get("deletionTimestamp") for o in pods):
        return float("inf")
    if len(pods) < endpoints or not all(pod_ready(o) for o in pods):
        return float("inf")
    # The window runs from the burst's last replacement or the last prefill pod to turn Ready, whichever
    # is later: a drain evicts the next pod only once the previous one's replacement is Ready.
    became_ready = [_parse(str(c["lastTransitionTime"])) for o in pods for c in (o.get("status") or {}).get(
        "conditions") or [] if c.get("type") == "Ready" and c.get("lastTransitionTime")]
    return max(0.0, max([_parse(str(pending["last"])), *became_ready]) + window_s - _parse(now))


def pending_text(pending: dict[str, Any], window_s: float = BURST_WINDOW_S) -> str:
    return (f"prefill pod {', '.join(pending['pods'])} replaced since {pending['since']}: decode is recycled once, when "
            f"every prefill pod is back and Ready and none was replaced for {window_s:.0f} s (its NIXL state of the "
            "old engines is stale meanwhile)")
