"""The node-local weight cache as observed: which trays hold a verified copy, which engines read it
and which fell back to the claim, from the pods' own status. Pure.

The prefetch pods' init container ``prefetch`` and the engine pods' ``weights-select`` write one JSON
line as their termination message (qdd.weightcache.program); the kubelet keeps it in
``status.initContainerStatuses[].state.terminated.message`` (or ``lastState`` after a restart). From
it: each prefetch pod's state (:func:`tray_state`, also put on the pod as the label
``qdd.dev/weight-cache``, which the engine pods' preferred affinity selects) and
``status.weightCache`` (:func:`weight_cache_status`). Lists in the status are bounded.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from .. import labels
from ..plan import Plan
from ..plan.weight_cache import CACHE_STATE, DEFAULT_ROOT, ROOT_PATTERN
from ..render.weight_cache import PREFETCH_INIT, ROLE, SELECT_INIT
from ..yamlinput import load_json

REPORT_BYTES = 16_384
"""A termination message is at most 4,096 bytes (the kubelet's cut); more is not a report."""
REPORT_DEPTH = 8
"""The program's report nests 3 levels."""

ROOT_ENV = "QDD_WEIGHT_CACHE_ROOT"
log = logging.getLogger("qdd.weight_cache")
MAX_TRAYS_LISTED = 64
"""Warm trays named in status (a deployment holds at most 288 engine pods; 64 names are ~1.5 KB)."""
MAX_REASONS = 8
"""Refusals and fallbacks quoted in status, most recent pods first by name."""
MESSAGE_CHARS = 240


@dataclass(frozen=True)
class TrayState:
    tray: str
    state: str
    """``verified``, ``fetching`` (the init container runs or has not started), ``failed``."""
    report: dict[str, Any]
    """The program's JSON line (empty while it runs)."""


def _init_status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    for c in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if c.get("name") == container:
            return c
    return {}


def _report(c: dict[str, Any]) -> tuple[dict[str, Any] | None, int | None]:
    """(the JSON line, exit code) of an init container's last termination, current or previous."""
    term = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
    if not term:
        return None, None
    try:
        # The message is written by a container of the resource author's image: read with bounds
        # (a deeply nested array raised RecursionError, failing every pass of the deployment).
        report = load_json(term.get("message") or "", max_bytes=REPORT_BYTES, max_depth=REPORT_DEPTH)
    except ValueError:  # InputError included
        report = None
    return (report if isinstance(report, dict) else None), term.get("exitCode")


def _role(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(labels.ROLE)


def tray_state(pod: dict[str, Any]) -> TrayState:
    """What one prefetch pod says of its tray."""
    c = _init_status(pod, PREFETCH_INIT)
    tray = (pod.get("spec") or {}).get("nodeName") or ""
    report, code = _report(c)
    if (c.get("state") or {}).get("terminated") and code == 0 and report and report.get("state") == "warm":
        return TrayState(tray, "verified", report)
    if report is not None and (code not in (0, None) or report.get("state") == "failed"):
        return TrayState(tray, "failed", report)
    return TrayState(tray, "fetching", report or {})


def prefetch_pods(observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in observed if o.get("kind") == "Pod" and _role(o) == ROLE
            and not o["metadata"].get("deletionTimestamp")]


def labels_to_set(observed: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """(pod, labels) for each prefetch pod whose ``qdd.dev/weight-cache`` label is not its state."""
    out = []
    for p in prefetch_pods(observed):
        state = tray_state(p).state
        if (p["metadata"].get("labels") or {}).get(CACHE_STATE) != state:
            out.append((p["metadata"]["name"], {CACHE_STATE: state}))
    return out


def _short(text: object) -> str:
    s = str(text)
    return s if len(s) <= MESSAGE_CHARS else s[:MESSAGE_CHARS - 1] + "…"


def weight_cache_status(plan: Plan, observed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``status.weightCache`` (None without spec.model.cache): the digest; trays verified, fetching and
    failed; the verified trays by name; the caches a prefetch refused (and fetched again) and why;
    engine pods reading the cache and the claim, and why each fallback."""
    cache = plan.spec.model.cache
    if cache is None:
        return None
    trays = sorted((tray_state(p) for p in prefetch_pods(observed)), key=lambda t: t.tray)
    warm = [t.tray for t in trays if t.state == "verified" and t.tray]
    refused = [f"{t.tray}: {_short(t.report['refused'])} (fetched again from the claim)"
               for t in trays if t.state == "verified" and t.report.get("refused")]
    failed = [f"{t.tray}: {_short(t.report.get('error') or t.report.get('refused') or 'failed')}"
              for t in trays if t.state == "failed"]
    from_cache, fallbacks = 0, []
    engines = [o for o in observed if o.get("kind") == "Pod" and _role(o) in ("prefill", "decode")
               and not o["metadata"].get("deletionTimestamp")]
    from_remote = 0
    for p in sorted(engines, key=lambda o: o["metadata"]["name"]):
        report, _ = _report(_init_status(p, SELECT_INIT))
        if report is None:
            continue
        if report.get("source") == "cache":
            from_cache += 1
        else:
            from_remote += 1
            node = (p.get("spec") or {}).get("nodeName") or "?"
            fallbacks.append(f"{p['metadata']['name']} on {node}: {_short(report.get('reason') or 'remote')}")
    out: dict[str, Any] = {
        "digest": cache.digest, "trays": len(trays), "verified": len(warm),
        "fetching": sum(1 for t in trays if t.state == "fetching"), "failed": len(failed),
        "verifiedTrays": warm[:MAX_TRAYS_LISTED], "enginesFromCache": from_cache, "enginesFromClaim": from_remote,
    }
    for k, v in (("refused", refused), ("failures", failed), ("fallbacks", fallbacks)):
        if v:
            out[k] = v[:MAX_REASONS]
    return out


def weight_cache_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message): a Warning ``WeightCacheFailed`` for each prefetch failure that ``new``
    status.weightCache lists and ``old`` did not (nothing installed: a source of another digest, a copy
    that failed); a Warning ``WeightCacheRefused`` for each refusal that ``new``
    status.weightCache lists and ``old`` did not (a tray's copy that did not hash to the digest and was
    fetched again, an engine that refused its tray's copy at start and read the claim); once each."""
    was, now = old.get("weightCache") or {}, new.get("weightCache") or {}
    seen = set(was.get("refused") or []) | set(was.get("fallbacks") or [])
    out = []
    for text in (now.get("refused") or []) + [f for f in now.get("fallbacks") or [] if ": refused:" in f]:
        if text not in seen:
            out.append(("Warning", "WeightCacheRefused", f"node-local weight cache refused: {text}"))
    for text in now.get("failures") or []:
        if text not in set(was.get("failures") or []):
            # A prefetch that fails installs nothing: the tray's engines read the claim, serving but cold.
            fix = (" spec.model.cache.digest pins another checkpoint than the claim holds: pin the claim's digest "
                   "(the one named), or put the pinned checkpoint on the claim" if "not the pinned" in text else "")
            out.append(("Warning", "WeightCacheFailed",
                        f"node-local weight cache not filled: {text}; engines on that tray read the claim.{fix}"))
    return out


def add_weight_cache(status: dict[str, Any], cr: dict[str, Any], plan: Plan | None,
                     observed: list[dict[str, Any]]) -> dict[str, Any]:
    """``status`` with status.weightCache (kept as it was for an invalid spec); changed in place."""
    cache = weight_cache_status(plan, observed) if plan is not None else (cr.get("status") or {}).get("weightCache")
    if cache is not None:
        status["weightCache"] = cache
    return status


def weight_cache_root() -> str:
    """The trays' folder of node-local weight caches: ``QDD_WEIGHT_CACHE_ROOT`` (the chart's
    ``weightCache.hostPath``) when it is an absolute path without ``..``, else qdd's default."""
    root = os.environ.get(ROOT_ENV, "") or DEFAULT_ROOT
    if not ROOT_PATTERN.match(root) or ".." in root.split("/"):
        log.error("%s=%r is not an absolute path without '..': using %s", ROOT_ENV, root, DEFAULT_ROOT)
        return DEFAULT_ROOT
    return root
