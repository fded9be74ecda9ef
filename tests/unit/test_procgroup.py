"""tests/realengine/procgroup.py (the /proc readers the real-engine harness and bench/real_engines.py
share) and Engine's start, wait and stop, on a process group of stand-in processes: a tiny HTTP
server that answers /health in place of `vllm serve`, with a child of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.realengine.engines import Engine, free_port
from tests.realengine.procgroup import group_cpu_seconds, group_pids, group_rss_bytes

SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _wait(pred, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_process_group_is_counted_and_ended():
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                             "sum(range(3_000_000)); time.sleep(600)"], start_new_session=True)
    try:
        _wait(lambda: len(group_pids(proc.pid)) == 2)
        assert proc.pid in group_pids(proc.pid)
        assert group_rss_bytes(proc.pid) > 2 * 1024 * 1024  # two Python interpreters, a few MiB each
        _wait(lambda: group_cpu_seconds(proc.pid) > 0)
        assert group_pids(os.getpgid(0)) and proc.pid not in group_pids(os.getpgid(0))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _wait(lambda: group_pids(proc.pid) == [])
    # The killed child may stay a zombie (until whatever PID 1 is reaps it): not live, no memory,
    # but still in /proc with the CPU time it used, which no longer grows.
    assert group_rss_bytes(proc.pid) == 0
    spent = group_cpu_seconds(proc.pid)
    time.sleep(0.3)
    assert group_cpu_seconds(proc.pid) == spent


def test_engine_waits_for_health_and_stop_ends_its_whole_group(tmp_path):
    port = free_port()
    engine = Engine("stand-in", [sys.executable, "-c", SERVER, str(port)], {}, tmp_path / "stand-in.log", port)
    with engine:
        assert 0 < engine.wait_ready(timeout=30) < 30
        _wait(lambda: len(group_pids(engine.proc.pid)) >= 3)  # timeout, the server, its child
        assert engine.rss_bytes() > 0
    assert group_pids(engine.proc.pid) == []
