"""When a draining endpoint may go: the router no longer sends it requests, the requests it had
finished, and (prefill) the KV blocks it holds for decode were read or their lease ran out. Pure.

A drain begins when the autoscaler relabels the endpoint's serving pod out of the router's
selectors (qdd.labels.DRAINING). From then on the engines' own metrics say what is left: the
gauges ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` of every engine core of the
pod (a decode leader reports its whole group), read by the operator's observer
(qdd.controller.observer); and on prefill ``vllm:kv_cache_usage_perc``: P/D prefill keeps a finished
request's blocks until decode has read them (NIXL READ, then a notification frees them) or until the
lease (``kv_connector_extra_config.kv_lease_duration``, spec.kvTransfer.leaseSeconds) runs out
(FACTS.md §11; vllm/distributed/kv_transfer/kv_connector/v1/nixl). With prefix caching off (qdd
renders it off for P/D) a prefill engine with nothing running and nothing held has usage 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...observe import PodRead

ROUTER_GRACE_S = 2.0
"""Seconds after the relabel before a read counts: vllm-router's discovery watches pods and drops
one whose labels stop matching within a watch event (well under a second on a healthy API server);
a request it sent just before is then running or waiting at the next read."""
DRAIN_TIMEOUT_S = 1800.0
"""vllm-router's ``--request-timeout-secs`` default (1800 s, `vllm-router --help`): no request the
router sent before the drain is still in flight after it. An endpoint whose metrics cannot be read
is removed only then."""


@dataclass(frozen=True)
class DrainProgress:
    done: bool
    why: str


def _busy(r: PodRead) -> float:
    return sum(e.running + e.waiting for e in r.engines)


def _held(r: PodRead) -> float:
    return sum(e.kv_cache_usage for e in r.engines)


def drain_progress(role: str, since: float, now: float, reads: list[PodRead], lease_seconds: float) -> DrainProgress:
    """Whether the endpoint whose serving pod was taken out of the router at ``since`` (Unix s) may
    be removed at ``now``. ``reads``: the observer's reads of that pod, oldest first."""
    if now - since >= DRAIN_TIMEOUT_S:
        return DrainProgress(True, f"drain timeout: {DRAIN_TIMEOUT_S:.0f} s (the router's request timeout) passed")
    after = [r for r in reads if r.error is None and r.time >= since + ROUTER_GRACE_S and r.engines]
    if not after:
        return DrainProgress(False, "waiting for a read of its engines' metrics taken after the router dropped it")
    last = after[-1]
    busy = _busy(last)
    if busy > 0:
        return DrainProgress(False, f"{busy:.0f} requests still running or waiting")
    if role == "prefill" and _held(last) > 0:
        idle_since = last.time
        for r in reversed(after):
            if _busy(r) > 0:
                break
            idle_since = r.time
        if now - idle_since < lease_seconds:
            return DrainProgress(False, f"KV blocks still held for decode (KV-cache usage {_held(last):.2f}; the lease "
                                        f"of {lease_seconds:.0f} s ends in {lease_seconds - (now - idle_since):.0f} s)")
    return DrainProgress(True, "no request running or waiting" + (", no KV block held" if role == "prefill" else ""))
