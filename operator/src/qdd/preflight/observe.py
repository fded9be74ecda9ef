"""Observed preflight Jobs and pods → the ``KVTransferReady`` verdict. Pure: dicts in, Verdict out.

The controller lists the Jobs and pods labelled ``qdd.dev/deployment=<cr>, qdd.dev/role=preflight``
and calls :func:`kv_transfer_verdict` with them and the objects it rendered
(:func:`qdd.render.preflight.preflight_objects`). Per pair it reads the fetch container's
termination message from the pod of the current revision; a pod or Job of an older revision
counts as not reported (the controller deletes and re-creates such Jobs: templates are immutable).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import labels
from .names import SIDE
from .result import parse_termination_message
from .verdict import Thresholds, Verdict, combine, verdict


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _job_failed(job: dict[str, Any] | None) -> bool:
    status = (job or {}).get("status") or {}
    return bool(status.get("failed")) or any(
        c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or [])


def _fetch_message(pod: dict[str, Any]) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == "fetch":
            terminated = (cs.get("state") or {}).get("terminated") or {}
            return terminated.get("message")
    return None


def kv_transfer_verdict(desired: list[dict[str, Any]], observed: list[dict[str, Any]],
                        thresholds: Thresholds | None = None) -> Verdict:
    """``desired``: what ``preflight_objects`` rendered; ``observed``: live Jobs and Pods."""
    pairs: dict[str, Verdict] = {}
    for job in desired:
        if job.get("kind") != "Job" or _labels(job).get(SIDE) != "fetch":
            continue
        pair, rev = _labels(job)[labels.ENDPOINT], _labels(job)[labels.REVISION]

        def mine(o: dict[str, Any], kind: str, pair: str = pair, rev: str = rev) -> bool:
            lb = _labels(o)
            return (o.get("kind") == kind and lb.get(SIDE) == "fetch" and lb.get(labels.ENDPOINT) == pair
                    and lb.get(labels.REVISION) == rev)

        live_job = next((o for o in observed if mine(o, "Job")), None)
        results = [parse_termination_message(_fetch_message(p)) for p in observed if mine(p, "Pod")]
        result = next((r for r in results if r is not None), None)
        v = verdict(result, thresholds, job_failed=_job_failed(live_job))
        if result is None and live_job is None:
            v = Verdict(v.status, v.reason, "preflight Job has not been created yet")
        pairs[pair] = replace(v, result=result)
    first = next((v.result for v in pairs.values() if v.result is not None), None)
    return replace(combine(pairs), result=first)
