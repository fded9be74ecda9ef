"""The KVTransferReady condition from a preflight result: pass, slow, TCP, failed, missing."""

from __future__ import annotations

import json

import pytest
from qdd.preflight.result import TERMINATION_MESSAGE_LIMIT, compact, parse_termination_message
from qdd.preflight.verdict import Thresholds, Verdict, combine, verdict


def _result(**over):
    r = {"pass": True, "reason": "KVTransferVerified", "message": "", "error": None,
         "bulk_gbps": 375.7, "peer_copy_gbps": 374.4, "request_ms": {"per_page": 1.72, "coalesced": 1.11},
         "descriptors_per_request": {"per_page": 180, "coalesced": 15}, "transports": ["cuda_ipc"],
         "verified": True, "verified_bytes": 10 ** 11, "mismatched_bytes": 0,
         "config": {"model": "Qwen3.5-397B-A17B", "alloc": "cudamalloc"}}
    r.update(over)
    return r


def test_pass_states_the_numbers():
    v = verdict(_result())
    assert (v.status, v.reason, v.passed) == ("True", "KVTransferVerified", True)
    assert v.message == ("verified over cuda_ipc: bulk 375.7 GB/s, 100% of peer copy 374.4 GB/s, "
                         "request 1.11 ms, 15 descriptors")
    assert v.condition() == {"type": "KVTransferReady", "status": "True", "reason": "KVTransferVerified",
                             "message": v.message}


def test_missing_result_is_unknown():
    v = verdict(None)
    assert (v.status, v.reason, v.message) == ("Unknown", "PreflightPending", "preflight Job has not reported")


def test_failed_job_without_result():
    v = verdict(None, job_failed=True)
    assert (v.status, v.reason) == ("False", "PreflightFailed")


def test_error_is_failed_with_its_reason():
    v = verdict(_result(error="TimeoutError: no NIXL metadata from 10.0.0.7:5600 within 300 s",
                        bulk_gbps=None, request_ms=None))
    assert (v.status, v.reason) == ("False", "PreflightFailed")
    assert "no NIXL metadata from 10.0.0.7:5600" in v.message


def test_mismatch_fails_before_speed():
    v = verdict(_result(verified=False, mismatched_bytes=4096, mismatch="reported/coalesced/rep 3: region 7"))
    assert (v.status, v.reason) == ("False", "DataMismatch")
    assert "4096 bytes" in v.message and "region 7" in v.message


def test_tcp_fallback_names_transport_and_speed():
    v = verdict(_result(transports=["tcp"], bulk_gbps=3.1, request_ms={"per_page": 900.0, "coalesced": 806.4}))
    assert (v.status, v.reason) == ("False", "TCPFallback")
    assert v.message.startswith("UCX used tcp at 3.1 GB/s; expected cuda_ipc/NVLink")


def test_tcp_fallback_blames_missing_fabric_handles():
    cfg = {"alloc": "vmm:POSIX_FD (FABRIC refused: cuMemCreate failed with CUresult 800)"}
    v = verdict(_result(transports=["tcp"], bulk_gbps=0.51, config=cfg))
    assert v.reason == "TCPFallback" and "FABRIC handle" in v.message


def test_tcp_next_to_a_gpu_transport_is_not_a_fallback():
    assert verdict(_result(transports=["cuda_ipc", "tcp"])).passed
    assert verdict(_result(transports={"data": ["rc_mlx5", "tcp"]})).passed


@pytest.mark.parametrize(("over", "th", "needle"), [
    ({"bulk_gbps": 31.5}, Thresholds(), "bulk 31.5 GB/s is below the floor of 50.0 GB/s"),
    ({"request_ms": {"per_page": 40.0, "coalesced": 12.5}}, Thresholds(),
     "one request took 12.5 ms, above the ceiling of 10.0 ms"),
    ({"bulk_gbps": 250.0}, Thresholds(min_peer_fraction=0.8),
     "bulk 250.0 GB/s is below 80% of the 374.4 GB/s peer copy (299.5 GB/s)"),
])
def test_slow(over, th, needle):
    v = verdict(_result(**over), th)
    assert (v.status, v.reason) == ("False", "TransferSlow")
    assert needle in v.message


def test_peer_fraction_ignored_without_peer_copy():
    assert verdict(_result(peer_copy_gbps=None, bulk_gbps=250.0), Thresholds(min_peer_fraction=0.8)).passed


def test_combine_pairs():
    ok = Verdict("True", "KVTransferVerified", "verified over cuda_ipc: bulk 376 GB/s")
    tcp = Verdict("False", "TCPFallback", "UCX used tcp at 0.49 GB/s; expected cuda_ipc/NVLink")
    pending = Verdict("Unknown", "PreflightPending", "preflight Job has not reported")
    assert combine({"0": ok, "1": ok}).passed
    assert combine({"0": ok, "1": ok}).message == ("pair 0: verified over cuda_ipc: bulk 376 GB/s; "
                                                   "pair 1: verified over cuda_ipc: bulk 376 GB/s")
    assert combine({"0": tcp}) is tcp
    worst = combine({"0": pending, "1": tcp})
    assert (worst.status, worst.reason) == ("False", "TCPFallback")
    assert worst.message.startswith("pair 1: UCX used tcp")
    assert combine({"0": ok, "1": pending}).status == "Unknown"
    assert combine({}).reason == "PreflightPending"


def test_termination_message_round_trip_and_limit():
    r = _result(variants=[{"name": f"v{i}", "bulk": {"x": "y" * 500}} for i in range(50)],
                message="m" * 5000, transports_detail={"evidence": ["z" * 3000]})
    text = compact(r)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    back = parse_termination_message(text)
    assert back is not None and "variants" not in back
    assert verdict(back).passed == verdict(r).passed
    assert back["config"]["model"] == "Qwen3.5-397B-A17B"


def test_termination_message_that_is_not_a_result():
    assert parse_termination_message(None) is None
    assert parse_termination_message("") is None
    assert parse_termination_message("Traceback (most recent call last):\n ...") is None
    assert parse_termination_message(json.dumps({"role": "serve"})) is None
