"""Operator high availability through kopf's peering (docs/reliability.md#operator-replicas).

Several replicas of ``qdd run --peering NAME`` share one ``ClusterKopfPeering`` (cluster-wide
mode) or ``KopfPeering`` (namespaced mode) object of group ``kopf.dev``. Each writes a keep-alive
with its priority into the object's ``status`` every few seconds; kopf pauses every handler of a
replica that sees a live peer of higher priority (or of the same one: then all pause, so
priorities must differ; qdd derives them from the pod name). Peering is mandatory with
``--peering``: kopf waits for the object rather than running unpeered.

kopf pauses only its own handlers. qdd's periodic resync is a thread of its own, so it asks
:class:`Leadership` before each pass, reading the same keep-alives with kopf's rule (a peer is
live while ``lastseen + lifetime`` is in the future; kopf/_core/engines/peering.py).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

GROUP, VERSION = "kopf.dev", "v1"
CLUSTER_KIND, NAMESPACED_KIND = "ClusterKopfPeering", "KopfPeering"
DEFAULT_LIFETIME_SECONDS = 15
"""Seconds a replica's keep-alive stays valid (kopf's default is 60). A SIGKILLed leader's peers
take over once it expires: the hand-over bound is about this plus qdd.controller.handlers.TAKEOVER_POLL_S
(the new leader then passes over every resource at once)."""


def identity() -> str:
    """kopf's identity of this process: ``POD_ID`` (the chart sets the pod name), else the host name."""
    return os.environ.get("POD_ID") or socket.gethostname()


def default_priority(who: str) -> int:
    """A priority from the identity (stable per pod, different between pods with near certainty:
    24 bits of SHA-256). kopf pauses all operators of equal priority, so they must differ."""
    return int(hashlib.sha256(who.encode()).hexdigest()[:6], 16)


def _parse(ts: str) -> datetime.datetime | None:
    try:
        t = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def live_peers(status: Mapping[str, Any], now: datetime.datetime) -> dict[str, int]:
    """{identity: priority} of the peers whose keep-alive has not expired."""
    out = {}
    for who, info in (status or {}).items():
        if not isinstance(info, Mapping):
            continue
        seen = _parse(str(info.get("lastseen", "")))
        lifetime = datetime.timedelta(seconds=int(info.get("lifetime", 60)))
        if seen is not None and seen + lifetime > now:
            out[who] = int(info.get("priority", 0))
    return out


def is_leader(status: Mapping[str, Any], me: str, priority: int, now: datetime.datetime) -> bool:
    """kopf's rule seen from ``me``: no other live peer has a priority ≥ ours."""
    return all(p < priority for who, p in live_peers(status, now).items() if who != me)


class Leadership:
    """Whether this replica is the one that reconciles. ``read`` returns the peering object's
    ``status`` (None when the object cannot be read: then this replica does not act)."""

    def __init__(self, read: Callable[[], Mapping[str, Any] | None], me: str, priority: int):
        self.read, self.me, self.priority = read, me, priority

    def __call__(self) -> bool:
        status = self.read()
        return status is not None and is_leader(status, self.me, self.priority, datetime.datetime.now(datetime.UTC))
