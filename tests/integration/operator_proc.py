"""The operator as a real process (`qdd run`) against the test cluster, for integration tests."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import signal
import socket
import subprocess
import weakref
import time
import urllib.request
from pathlib import Path

from .conftest import LOGS, VENV_BIN, Kube


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_RUNNING: weakref.WeakSet[OperatorProcess] = weakref.WeakSet()
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when pytest dies (Linux prctl), so that a test run killed
    mid-way leaves no operator reconciling the next run's cluster."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@atexit.register
def stop_all() -> None:
    """Every operator a test left running (a fixture's teardown skipped by an error) is stopped."""
    for op in list(_RUNNING):
        op.kill()


class OperatorProcess:
    def __init__(self, kube: Kube, resync_seconds: float = 5.0, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, log_name: str = "", source: Path | None = None):
        """``args``: extra `qdd run` arguments (e.g. --peering); ``env``: added to the cluster env;
        ``source``: run the qdd package found there (an ``operator/src`` of another version, same
        venv) instead of the installed one."""
        self.kube = kube
        self.resync = resync_seconds
        self.args, self.extra_env = args, env or {}
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.log_path: Path = LOGS / f"operator-{kube.cluster}{log_name}.log"
        self.proc: subprocess.Popen | None = None
        self.source = source

    def start(self) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 — the operator process writes it until stop()
        qdd = [str(VENV_BIN / "qdd")] if self.source is None else [str(VENV_BIN / "python"), "-m", "qdd.cli"]
        env = {**self.kube.env, **self.kube.canary_env(), **self.extra_env,
               **({"PYTHONPATH": str(self.source)} if self.source else {})}
        self.proc = subprocess.Popen(
            [*qdd, "run", "--metrics-port", str(self.metrics_port),
             "--liveness-port", str(self.liveness_port), "--resync-seconds", str(self.resync), *self.args],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        _RUNNING.add(self)
        self.kube.wait_for(self.live, timeout=60, interval=0.3, desc="operator liveness endpoint")

    def live(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, f"operator exited; see {self.log_path}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies mid-reconcile."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def counter(self, name: str, **label_filter: str) -> float:
        """Sum of a metric's samples whose labels include ``label_filter``."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in head for k, v in label_filter.items()):
                total += float(value)
        return total

    def wait_idle(self, seconds: float = 1.0) -> None:
        time.sleep(seconds)
