"""The KV-transfer preflight's GPU program (qdd.preflight.gpu), run for real over host memory: the
serve and fetch processes with NIXL 1.5.1 from PyPI (UCX bundled) on this CPU-only machine,
``--device cpu``. What it proves on CPUs: the program starts from the contract alone, exchanges
NIXL metadata through its own listener, READs and PUSHes every page of a hybrid-cache layout,
verifies the bytes, and reports facts — no verdict; the operator's verdict judges them with the
spec's thresholds. GPU numbers come from bench/nixl-h200x2.sh on two H200s (bench/README.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from qdd.preflight.result import compact, parse_termination_message
from qdd.preflight.verdict import Thresholds, verdict

from .vllm_harness import ROOT, _child_env, ensure_venv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    ensure_venv()  # torch and numpy for the program
    nixl = subprocess.run(["bash", str(ROOT / "hack" / "nixl-cpu.sh")], capture_output=True, text=True, check=True,
                          timeout=600).stdout.strip()
    e = _child_env()
    e["PYTHONPATH"] = os.pathsep.join([nixl, str(ROOT / "operator" / "src")])
    return e


@pytest.fixture(scope="module")
def layout(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout of a Qwen3.5-35B-A3B rank, from the operator side (``python -m qdd.preflight layout``)."""
    path = tmp_path_factory.mktemp("preflight") / "layout.json"
    out = subprocess.run([sys.executable, "-m", "qdd.preflight", "layout", "--model", "Qwen3.5-35B-A3B",
                          "--kv-cache-dtype", "bfloat16", "--isl", "512", "--osl", "128"],
                         capture_output=True, text=True, check=True, timeout=60, cwd=ROOT).stdout
    path.write_text(out)
    return path


@pytest.mark.parametrize("op", ["READ", "PUSH"])
def test_serve_and_fetch_move_and_verify_every_page_and_report_facts(env, layout, tmp_path, op):
    python = str(ROOT / ".qdd" / "vllm-venv" / "bin" / "python")
    port = _free_port()
    small = ["--layout", str(layout), "--device", "cpu", "--bulk-bytes", str(4 << 20), "--requests", "2"]
    serve = subprocess.Popen([python, "-m", "qdd.preflight", "serve", *small, "--port", str(port), "--timeout", "90"],
                             env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    term = tmp_path / "termination-log"
    try:
        fetch = subprocess.run([python, "-m", "qdd.preflight", "fetch", *small, "--server-host", "127.0.0.1",
                                "--server-port", str(port), "--peer-copy", "off", "--warmup", "1", "--reps", "3",
                                "--op", op, "--connect-timeout", "60", "--result-file", str(term)],
                               env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        serve_out, _ = serve.communicate(timeout=60)
    finally:
        serve.kill()
    assert fetch.returncode == 0, fetch.stderr[-3000:]
    result = json.loads(fetch.stdout)
    assert result["error"] is None and result["verified"] is True and result["mismatched_bytes"] == 0
    assert result["verified_bytes"] > 0 and result["bulk_gbps"] > 0 and result["request_ms"]["coalesced"] > 0
    assert result["descriptors_per_request"]["coalesced"] == 10  # one run per tensor (35B: 10 layers per group)
    assert "pass" not in result and "reason" not in result  # facts only
    stats = json.loads(serve_out.strip().splitlines()[-1])
    assert stats["byes"] == 1 and stats["errors"] == [] and stats["pushes"] == (0 if op == "READ" else stats["pushes"])
    if op == "PUSH":
        assert stats["pushes"] > 0
    # The operator judges what the Job left in its termination message, with the spec's thresholds.
    reported = parse_termination_message(term.read_text())
    assert reported is not None and reported == parse_termination_message(compact(result))
    lax = verdict(reported, Thresholds(min_bulk_gbps=0.01, max_request_ms=10_000))
    assert lax.passed and lax.reason == "KVTransferVerified", lax
    strict = verdict(reported, Thresholds(min_bulk_gbps=10_000, max_request_ms=10_000))
    assert not strict.passed and strict.reason == "TransferSlow"
