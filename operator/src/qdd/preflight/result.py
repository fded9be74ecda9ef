"""The preflight result: one JSON object, and the compact form that reaches the operator. Pure.

The fetch program prints the full result on stdout and writes :func:`compact` of it to
``--result-file`` — in the Job, the container's ``terminationMessagePath``. Kubernetes keeps at
most 4096 bytes of a termination message, so the compact form keeps the verdict's inputs and
drops the per-variant detail. The controller reads
``pod.status.containerStatuses[name=fetch].state.terminated.message`` and passes
:func:`parse_termination_message` of it to :func:`qdd.preflight.verdict.verdict`.

Keys (all present in both forms; numbers may be null when a move did not run):
``pass`` (bool), ``reason`` (CamelCase), ``message``, ``bulk_gbps``, ``peer_copy_gbps``,
``request_ms`` {``per_page``, ``coalesced``}, ``descriptors_per_request`` {``per_page``,
``coalesced``}, ``transports`` (UCX transports that moved GPU memory), ``verified`` (bool),
``verified_bytes``, ``mismatched_bytes``, ``error`` (null or the failure), ``config`` (what ran).
"""

from __future__ import annotations

import json
from typing import Any

TERMINATION_MESSAGE_LIMIT = 4096
CORE_KEYS = ("bulk_gbps", "peer_copy_gbps", "request_ms", "descriptors_per_request",
             "transports", "verified", "verified_bytes", "mismatched_bytes", "mismatch", "error")
"""The facts a fetch reports (no verdict: the operator judges them, qdd.preflight.verdict); ``error``
is always present (null when it measured), which is how a result is told from a log tail."""
CONFIG_KEYS = ("model", "tokens", "kv_cache_dtype", "mamba_ssm_cache_dtype", "page_bytes", "tensors",
               "pages_per_request", "bytes_per_request", "bulk_bytes", "alloc", "serve_alloc", "op", "variant",
               "server", "host", "gpu_name")


def _dump(d: dict[str, Any]) -> str:
    return json.dumps(d, separators=(",", ":"), sort_keys=True)


def compact(result: dict[str, Any], limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """The result in at most ``limit`` bytes: the core keys, then as much of the config as fits."""
    out: dict[str, Any] = {k: result.get(k) for k in CORE_KEYS}
    if isinstance(out.get("error"), str):
        out["error"] = out["error"][:600]
    cfg = result.get("config") or {}
    out["config"] = {k: cfg[k] for k in CONFIG_KEYS if k in cfg}
    text = _dump(out)
    while len(text.encode()) > limit and out["config"]:
        out["config"].pop(next(reversed(out["config"])))
        text = _dump(out)
    if len(text.encode()) > limit:
        out["mismatch"] = str(out.get("mismatch") or "")[:100] or None
        out["error"] = (out.get("error") or "")[:100] or None
        text = _dump(out)
    return text


def parse_termination_message(text: str | None) -> dict[str, Any] | None:
    """The result a fetch container left, or None when there is none (not finished, not JSON —
    e.g. a log tail Kubernetes substituted under ``FallbackToLogsOnError``)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "error" in value else None
