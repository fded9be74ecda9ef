"""Observed preflight Jobs and pods → KVTransferReady (what the controller calls)."""

from __future__ import annotations

import copy

from qdd.preflight.observe import kv_transfer_verdict
from qdd.render.preflight import preflight_objects
from qdd.preflight.result import compact

from ..conftest import EXAMPLES, load
from .helpers import plan_of

PASSED = {"pass": True, "reason": "KVTransferVerified", "bulk_gbps": 375.7, "peer_copy_gbps": None,
          "request_ms": {"per_page": 1.72, "coalesced": 1.11}, "descriptors_per_request": {"coalesced": 15},
          "transports": ["cuda_ipc"], "verified": True, "mismatched_bytes": 0, "error": None, "config": {}}


def _desired(endpoints: int = 1) -> list[dict]:
    cr = copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"))
    cr["spec"]["decode"]["endpoints"] = endpoints
    return preflight_objects(plan_of(cr))


def _live(desired: list[dict], side: str, pair: int, status: dict, message: str | None = None,
          revision: str | None = None) -> list[dict]:
    job = next(o for o in desired if o["kind"] == "Job" and o["metadata"]["labels"]["qdd.dev/preflight"] == side
               and o["metadata"]["labels"]["qdd.dev/endpoint"] == str(pair))
    lb = dict(job["spec"]["template"]["metadata"]["labels"])
    if revision:
        lb["qdd.dev/revision"] = revision
    live_job = {"kind": "Job", "metadata": {"name": job["metadata"]["name"], "labels": lb}, "status": status}
    state = {"terminated": {"exitCode": 0, "message": message}} if message is not None else {"running": {}}
    pod = {"kind": "Pod", "metadata": {"name": job["metadata"]["name"] + "-x7k2p", "labels": lb},
           "status": {"containerStatuses": [{"name": side, "state": state}]}}
    return [live_job, pod]


def test_nothing_created_yet():
    v = kv_transfer_verdict(_desired(), [])
    assert (v.status, v.reason, v.message) == ("Unknown", "PreflightPending", "preflight Job has not been created yet")


def test_running_job_has_not_reported():
    d = _desired()
    v = kv_transfer_verdict(d, _live(d, "fetch", 0, {"active": 1}))
    assert (v.status, v.reason, v.message) == ("Unknown", "PreflightPending", "preflight Job has not reported")


def test_passed_result_from_the_termination_message():
    d = _desired()
    v = kv_transfer_verdict(d, _live(d, "serve", 0, {"succeeded": 1}) + _live(d, "fetch", 0, {"succeeded": 1},
                                                                             compact(PASSED)))
    assert (v.status, v.reason) == ("True", "KVTransferVerified")
    assert v.message.startswith("verified over cuda_ipc: bulk 375.7 GB/s")


def test_tcp_result_of_a_failed_job_is_still_read():
    d = _desired()
    tcp = {**PASSED, "transports": ["tcp"], "bulk_gbps": 0.49}
    v = kv_transfer_verdict(d, _live(d, "fetch", 0, {"failed": 1}, compact(tcp)))
    assert (v.status, v.reason) == ("False", "TCPFallback")


def test_failed_job_without_result():
    d = _desired()
    v = kv_transfer_verdict(d, _live(d, "fetch", 0, {"failed": 1}, "Traceback (most recent call last): ..."))
    assert (v.status, v.reason) == ("False", "PreflightFailed")


def test_result_of_an_older_revision_does_not_count():
    d = _desired()
    v = kv_transfer_verdict(d, _live(d, "fetch", 0, {"succeeded": 1}, compact(PASSED), revision="0123456789"))
    assert v.status == "Unknown"


def test_worst_pair_decides():
    d = _desired(endpoints=2)
    live = _live(d, "fetch", 0, {"succeeded": 1}, compact(PASSED)) + _live(d, "fetch", 1, {"active": 1})
    v = kv_transfer_verdict(d, live)
    assert (v.status, v.reason) == ("Unknown", "PreflightPending") and v.message.startswith("pair 1: ")
