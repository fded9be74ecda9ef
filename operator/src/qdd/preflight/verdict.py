"""The ``KVTransferReady`` condition from a preflight result. Pure: stdlib only.

``verdict(result, thresholds)`` → :class:`Verdict` (status ``"True"``/``"False"``/``"Unknown"``,
CamelCase reason, a message for humans that states the numbers). The order of checks is the order
of what a user must fix first:

1. no result: ``Unknown``/``PreflightPending`` ("preflight Job has not reported"), or, when the Job
   failed without writing one, ``False``/``PreflightFailed``;
2. the program reported an error (no connection, NIXL/UCX failure, timeout): ``PreflightFailed``;
3. bytes differ from what the serve side wrote: ``DataMismatch`` — a wrong layout or a broken
   path, never to be served;
4. UCX moved the bytes over TCP and over no GPU path (cuda_ipc/NVLink, RDMA): ``TCPFallback``
   ("UCX used tcp at 3.1 GB/s; expected cuda_ipc/NVLink") — the silent fallback of the field;
5. bulk bandwidth under the floor, or a request slower than the ceiling: ``TransferSlow``;
6. otherwise ``True``/``KVTransferVerified`` with the numbers.

The default floor and ceiling catch a path that is not NVLink-class (PCIe Gen5 x16 tops out near
50 GB/s, TCP far lower) rather than encode tuning targets; tighten them per cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ucx import GPU_PATH_TRANSPORTS  # the contract: ucx.py is stdlib-only parsing

CONDITION = "KVTransferReady"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclass(frozen=True)
class Thresholds:
    """``min_bulk_gbps``: floor of the bulk read. ``max_request_ms``: ceiling of one request
    (coalesced descriptors). ``min_peer_fraction``: optional floor as a fraction of the torch
    peer copy measured in the same run (ignored when the run had no peer copy)."""

    min_bulk_gbps: float = 50.0
    max_request_ms: float = 10.0
    min_peer_fraction: float | None = None


@dataclass(frozen=True)
class Verdict:
    status: str
    reason: str
    message: str
    result: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The facts judged (the first pair's with a result, after :func:`combine`): what
    ``status.kvTransfer`` shows. Found once, by :func:`qdd.preflight.observe.kv_transfer_verdict`."""

    @property
    def passed(self) -> bool:
        return self.status == TRUE

    def condition(self) -> dict[str, str]:
        """A metav1.Condition body (type, status, reason, message); times are the caller's."""
        return {"type": CONDITION, "status": self.status, "reason": self.reason, "message": self.message}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _request_ms(result: dict[str, Any]) -> float | None:
    r = result.get("request_ms")
    if isinstance(r, dict):
        return _num(r.get("coalesced", r.get("per_page")))
    return _num(r)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    text = f"{v:.2f}".rstrip("0").rstrip(".") if v < 10 else f"{v:.1f}"
    return f"{text} {unit}"


def _transports(result: dict[str, Any]) -> list[str]:
    t = result.get("transports")
    if isinstance(t, dict):
        t = t.get("data", [])
    return [str(x) for x in t] if isinstance(t, list) else []


def _mismatch(result: dict[str, Any]) -> Verdict | None:
    mism = result.get("mismatched_bytes")
    if result.get("verified") is False or (isinstance(mism, int) and mism > 0):
        where = f"{mism} bytes" if isinstance(mism, int) and mism > 0 else "data"
        return Verdict(FALSE, "DataMismatch",
                       f"{where} read from prefill differ from what it wrote"
                       + (f" ({result['mismatch']})" if result.get("mismatch") else "")
                       + ": the KV layout or the transfer path is broken")
    return None


def _tcp_fallback(result: dict[str, Any], transports: list[str], bulk: float | None) -> Verdict | None:
    if "tcp" not in transports or GPU_PATH_TRANSPORTS.intersection(transports):
        return None
    cfg = result.get("config") or {}
    allocs = " ".join(str(cfg.get(k, "")) for k in ("alloc", "serve_alloc"))
    hint = ("GPU memory could not be exported as a FABRIC handle (no IMEX channel from the ComputeDomain?)"
            if "FABRIC refused" in allocs else
            "check UCX_TLS, the IMEX channel of the ComputeDomain, UCX_CUDA_IPC_ENABLE_MNNVL")
    return Verdict(FALSE, "TCPFallback",
                   f"UCX used {'/'.join(transports)} at {_fmt(bulk, 'GB/s')}; expected cuda_ipc/NVLink ({hint})")


def _too_slow(th: Thresholds, bulk: float | None, req: float | None, peer: float | None) -> list[str]:
    slow: list[str] = []
    if bulk is not None and bulk < th.min_bulk_gbps:
        slow.append(f"bulk {_fmt(bulk, 'GB/s')} is below the floor of {_fmt(th.min_bulk_gbps, 'GB/s')}")
    if th.min_peer_fraction is not None and bulk is not None and peer:
        floor = th.min_peer_fraction * peer
        if bulk < floor:
            slow.append(f"bulk {_fmt(bulk, 'GB/s')} is below {th.min_peer_fraction:.0%} of the "
                        f"{_fmt(peer, 'GB/s')} peer copy ({_fmt(floor, 'GB/s')})")
    if req is not None and req > th.max_request_ms:
        slow.append(f"one request took {_fmt(req, 'ms')}, above the ceiling of {_fmt(th.max_request_ms, 'ms')}")
    return slow


def _verified(result: dict[str, Any], transports: list[str], bulk: float | None, req: float | None,
              peer: float | None) -> Verdict:
    via = "/".join(transports) if transports else "transports not reported"
    parts = [f"bulk {_fmt(bulk, 'GB/s')}"]
    if peer:
        parts.append(f"{(bulk or 0) / peer:.0%} of peer copy {_fmt(peer, 'GB/s')}")
    parts.append(f"request {_fmt(req, 'ms')}")
    d = result.get("descriptors_per_request")
    if isinstance(d, dict) and d.get("coalesced") is not None:
        parts.append(f"{d['coalesced']} descriptors")
    return Verdict(TRUE, "KVTransferVerified", f"verified over {via}: " + ", ".join(parts))


def verdict(result: dict[str, Any] | None, thresholds: Thresholds | None = None, job_failed: bool = False) -> Verdict:
    """The condition a preflight result gives: failed, data mismatch, TCP fallback, too slow, or
    verified (with the numbers)."""
    th = thresholds or Thresholds()
    if result is None:
        if job_failed:
            return Verdict(FALSE, "PreflightFailed", "preflight Job failed without reporting a result")
        return Verdict(UNKNOWN, "PreflightPending", "preflight Job has not reported")
    if result.get("error"):
        return Verdict(FALSE, "PreflightFailed", f"preflight failed: {str(result['error'])[:300]}")
    bulk, req, peer = _num(result.get("bulk_gbps")), _request_ms(result), _num(result.get("peer_copy_gbps"))
    transports = _transports(result)
    failed = _mismatch(result) or _tcp_fallback(result, transports, bulk)
    if failed:
        return failed
    slow = _too_slow(th, bulk, req, peer)
    if bulk is None and req is None:
        return Verdict(FALSE, "PreflightFailed", "preflight result has neither bulk_gbps nor request_ms")
    if slow:
        return Verdict(FALSE, "TransferSlow", "; ".join(slow))
    return _verified(result, transports, bulk, req, peer)


_SEVERITY = {FALSE: 0, UNKNOWN: 1, TRUE: 2}


def combine(pairs: dict[str, Verdict]) -> Verdict:
    """One condition over several preflight pairs (one per decode endpoint): the worst pair decides
    (False before Unknown before True, then pair order); its message names the pair."""
    if not pairs:
        return Verdict(UNKNOWN, "PreflightPending", "no preflight pair has been rendered yet")
    if len(pairs) == 1:
        return next(iter(pairs.values()))
    name, worst = min(pairs.items(), key=lambda kv: _SEVERITY[kv[1].status])
    if worst.status == TRUE:
        return Verdict(TRUE, worst.reason, "; ".join(f"pair {k}: {v.message}" for k, v in pairs.items()))
    return Verdict(worst.status, worst.reason, f"pair {name}: {worst.message}")
