"""The test cluster's own control-plane processes, for fault injection: stop, pause, start again.

hack/cluster-up.sh runs every component with `kwokctl --runtime binary`: one process each, its pid
in ``.qdd/kwok/clusters/<cluster>/pids/<component>.pid``, its flags in the cluster's kwok config.
`kwokctl start cluster` starts every component whose recorded process is not running, with the
flags it was created with, and leaves the running ones alone (kwok v0.8.0,
pkg/kwokctl/runtime/binary/cluster_operation.go ``startComponent``): a stopped kube-apiserver or
etcd comes back exactly as it was. kube-controller-manager and kube-scheduler exit by themselves
when the API server is gone long enough to lose their leader lease; the same command brings them
back, as a kubelet restarts static pods.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from .conftest import BIN, REPO, Kube

APISERVER, ETCD = "kube-apiserver", "etcd"


def cluster_dir(kube: Kube) -> Path:
    return REPO / ".qdd" / "kwok" / "clusters" / kube.cluster


def pid_of(kube: Kube, component: str) -> int:
    """The running process of ``component`` (its pid file, checked against its command line)."""
    d = cluster_dir(kube)
    pid = int((d / "pids" / f"{component}.pid").read_text().strip())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert f"{d}/".encode() in cmdline, f"pid {pid} is not {component} of {kube.cluster}"
    return pid


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie child of an exited kwokctl still answers kill 0; its state says it is dead.
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def kill(kube: Kube, component: str) -> int:
    """SIGKILL ``component`` (a crash: every connection reset, nothing flushed beyond what the
    process already made durable); returns when the process is gone. SIGTERM would do for etcd,
    but kube-apiserver's graceful shutdown holds open watches for about 60 s first (measured)."""
    pid = pid_of(kube, component)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not _gone(pid):
        assert time.monotonic() < deadline, f"{component} (pid {pid}) still alive 30 s after SIGKILL"
        time.sleep(0.05)
    return pid


def _kwokctl_start(kube: Kube, timeout: float) -> None:
    env = {**kube.env, "KWOK_WORKDIR": str(REPO / ".qdd" / "kwok"),
           # kwokctl must never fetch anything: a dead proxy makes any attempt fail at once.
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}
    p = subprocess.run([str(BIN / "kwokctl"), "start", "cluster", "--name", kube.cluster, "--wait", "60s"],
                       env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"kwokctl start cluster failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"


def _dead(kube: Kube) -> list[str]:
    out = []
    for f in sorted((cluster_dir(kube) / "pids").glob("*.pid")):
        pid = int(f.read_text().strip())
        if not Path(f"/proc/{pid}").exists() or _gone(pid):
            out.append(f.stem)
    return out


def _renewed_since(kube: Kube, lease: str, since: str) -> bool:
    r = kube.kubectl("get", "lease", lease, "-n", "kube-system", "-o", "jsonpath={.spec.renewTime}", check=False)
    return r.returncode == 0 and r.stdout.strip() > since


LEASES = ("kube-scheduler", "kube-controller-manager")
"""Leader leases of the components that exit when they cannot renew theirs (10 s renew deadline)."""


def start(kube: Kube, timeout: float = 120) -> float:
    """`kwokctl start cluster`: every stopped component started again with its flags. Returns
    when the API server answers /readyz and the scheduler and controller-manager have renewed
    their leader leases since (one that lost its lease in the meantime and exited is started
    again: it would otherwise die seconds after this returned). Returns the seconds it took."""
    t0 = time.monotonic()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    _kwokctl_start(kube, timeout)
    kube.wait_for(lambda: kube.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0,
                  timeout=timeout, interval=0.2, desc="kube-apiserver /readyz after the restart")

    def settled() -> bool:
        if _dead(kube):
            _kwokctl_start(kube, timeout)
            return False
        return all(_renewed_since(kube, lease, since) for lease in LEASES)
    kube.wait_for(settled, timeout=timeout, interval=0.5, desc=f"{', '.join(LEASES)} running and leading")
    return time.monotonic() - t0


def pause(kube: Kube, component: str) -> int:
    """SIGSTOP: the process keeps its sockets open and answers nothing."""
    pid = pid_of(kube, component)
    os.kill(pid, signal.SIGSTOP)
    return pid


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


DOUBLES = ("fake-compute-domain-driver", "fake-preflight-result", "fake-bench-result")
"""The test doubles hack/cluster-up.sh starts (hack/cluster/env.sh); they must ride out a restart."""


def dead_doubles(kube: Kube) -> list[str]:
    state = REPO / ".qdd" / "clusters" / kube.cluster
    out = []
    for d in DOUBLES:
        pidf = state / f"{d}.pid"
        if not pidf.exists() or _gone_or_missing(int(pidf.read_text().strip())):
            out.append(d)
    return out


def _gone_or_missing(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists() or _gone(pid)


class Supervisor:
    """Plays the kubelet of the control plane's static pods while a test runs: every 0.5 s, a
    component that exited is started again (`kwokctl start cluster`). Needed because components
    exit on purpose after an outage: kube-controller-manager and kube-scheduler when they lose
    their leader lease, kube-scheduler v1.36.3 also when an informer event contradicts its cache
    ("Pod updated on a different node than previously added to. Scheduler cache is corrupted",
    then exit 1: seen when kube-apiserver was SIGKILLed while the scheduler bound pods).
    ``restarts``: (component, seconds since the supervisor started) for each restart."""

    def __init__(self, kube: Kube):
        self.kube, self.restarts = kube, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-plane-supervisor", daemon=True)
        self._t0 = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            dead = _dead(self.kube)
            if dead:
                self.restarts += [(d, round(time.monotonic() - self._t0, 1)) for d in dead]
                try:
                    _kwokctl_start(self.kube, 120)
                except AssertionError as e:  # the API server may still be down: next round
                    print(f"supervisor: {e}")

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(150)


KWOK = "kwok-controller"


def restart_kwok(kube: Kube) -> None:
    """Restart kwok, the simulated kubelets. After an etcd restart kwok v0.8.0 can miss a pod event
    for good (seen: a pod deleted right after etcd came back stayed Terminating; kwok acted on
    later events but has no periodic resync, unlike a real kubelet). A restarted kwok lists every
    pod again. Its new identity would wait out the node leases of the old one (200 s): they are
    dropped first, as hack/cluster-up.sh does."""
    kill(kube, KWOK)
    kube.kubectl("-n", "kube-node-lease", "delete", "lease", "--all")
    start(kube)
