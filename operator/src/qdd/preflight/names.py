"""Names and label keys of the preflight's objects (deterministic: kopf retries never duplicate)."""

from __future__ import annotations

from .. import labels

ROLE = "preflight"
"""``qdd.dev/role`` of preflight pods. Never prefill/decode: the role selectors of the engines'
StatefulSets and Services and the router's service discovery must not pick these pods up."""
SIDE = f"{labels.GROUP}/preflight"
"""``serve`` | ``fetch``."""
TERMINATION_LOG = "/dev/termination-log"


def service_name(cr: str) -> str:
    """Headless Service that gives the serve pods DNS names."""
    return f"{cr}-preflight"


def job_name(cr: str, side: str, pair: int) -> str:
    """``<cr>-preflight-serve-<pair>`` / ``<cr>-preflight-fetch-<pair>``; the serve Job's pod also
    takes it as its hostname."""
    return f"{cr}-preflight-{side}-{pair}"


def serve_host(cr: str, namespace: str, pair: int) -> str:
    return f"{job_name(cr, 'serve', pair)}.{service_name(cr)}.{namespace}.svc"
