"""Integration-test fixtures: a real local control plane with a simulated GB200 NVL72 rack.

The session fixture ``kube`` brings up a dedicated cluster (``QDD_TEST_CLUSTER``, default
``qdd-test``, kubeconfig ``.qdd/kubeconfig-test``) with the project's own scripts —
hack/build-tools.sh (builds or copies the pinned binaries), hack/cluster-up.sh — and tears it
down with hack/cluster-down.sh at the end of the session unless ``QDD_KEEP_CLUSTER=1``. Test
sessions of one checkout that use the same cluster run one after the other (a file lock).

Fixtures for any test under tests/integration/:

* ``kube`` (session) -> :class:`Kube`: ``kube.kubeconfig`` (Path), ``kube.context``,
  ``kube.cluster``, ``kube.env`` (environment for subprocesses: KUBECONFIG, PATH with
  .qdd/bin), ``kube.kubectl(*args, input=None, check=True, timeout=120)`` ->
  ``CompletedProcess`` (text), ``kube.get(kind, name=None, namespace=None, selector=None)`` ->
  parsed JSON, ``kube.exists(kind, name, namespace=None)`` -> bool, ``kube.apply(obj_or_yaml, namespace=None)``, ``kube.wait_for(fn, timeout=60,
  interval=0.5, desc="")`` -> first truthy value of ``fn()``, ``kube.api_client()`` -> a
  ``kubernetes.client.ApiClient`` for this cluster, ``kube.canary_double_url`` /
  ``kube.canary_env()`` (the router test double that answers the operator's canary), ``kube.timings`` (seconds taken by
  build-tools / cluster-up).
* ``kubectl`` (session) -> ``kube.kubectl``.
* ``namespace`` (function) -> name of a fresh namespace whose ``default`` ServiceAccount exists;
  deleted after the test (teardown waits until its pods are gone, not for the namespace).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".qdd" / "bin"
VENV_BIN = REPO / ".qdd" / "venv" / "bin"
LOGS = REPO / ".qdd" / "logs"
TOOLS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok", "kwokctl")


class Kube:
    """Handle on the test cluster; see the module docstring."""

    def __init__(self, cluster: str, kubeconfig: Path):
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.context = f"kwok-{cluster}"
        self.env = dict(os.environ)
        self.env["KUBECONFIG"] = str(kubeconfig)
        self.env["QDD_CLUSTER"] = cluster
        self.env["QDD_RACKS"] = os.environ.get("QDD_TEST_RACKS", "1")
        self.env["PATH"] = os.pathsep.join([str(BIN), str(VENV_BIN), os.environ.get("PATH", "")])
        # kubectl's discovery cache is keyed by host:port under ~/.kube/cache: another cluster on
        # this machine that had the same API server port leaves resource types this one does not
        # serve (`kubectl get all` then fails on a stranger's CRD). One fresh cache per handle.
        cache = REPO / ".qdd" / "kube-cache" / cluster
        shutil.rmtree(cache, ignore_errors=True)
        self.env["KUBECACHEDIR"] = str(cache)
        self.kubectl_bin = str(BIN / "kubectl") if (BIN / "kubectl").exists() else (
            shutil.which("kubectl") or "kubectl")
        self.timings: dict[str, float] = {}
        # Where hack/fake_canary_router.py writes its URL (hack/cluster/env.sh); fixed here, as
        # copies of this handle rename ``cluster`` for their log files (test_helm).
        self.canary_url_file = REPO / ".qdd" / "clusters" / cluster / "fake-canary-router.url"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), "--context", self.context,
               *args]
        p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                           env=self.env)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n"
                                 f"{p.stdout}\n{p.stderr}")
        return p

    def get(self, kind: str, name: str | None = None, namespace: str | None = None,
            selector: str | None = None) -> Any:
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        if namespace:
            args += ["-n", namespace]
        if selector:
            args += ["-l", selector]
        return json.loads(self.kubectl(*args).stdout)

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        args = ["get", kind, name, "--ignore-not-found", "-o", "name"]
        if namespace:
            args += ["-n", namespace]
        return bool(self.kubectl(*args).stdout.strip())

    def apply(self, obj: dict | list | str, namespace: str | None = None) -> str:
        text = obj if isinstance(obj, str) else json.dumps(
            obj if isinstance(obj, dict) else {"apiVersion": "v1", "kind": "List", "items": obj})
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        return self.kubectl(*args, input=text).stdout

    @staticmethod
    def wait_for(fn: Callable[[], Any], timeout: float = 60, interval: float = 0.5,
                 desc: str = "") -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = fn()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {desc or fn}; "
                                     f"last value {last!r}")
            time.sleep(interval)

    @property
    def canary_double_url(self) -> str:
        """URL template of the router TEST DOUBLE that answers the operator's canary
        (hack/fake_canary_router.py, started by hack/cluster-up.sh): kwok runs no router."""
        f = self.canary_url_file
        assert f.exists(), f"{f} is missing: hack/cluster-up.sh starts hack/fake_canary_router.py, which writes it"
        return f.read_text().strip()

    def canary_env(self) -> dict[str, str]:
        """The operator's environment that points its canary at the test double."""
        return {"QDD_CANARY_URL_OVERRIDE": self.canary_double_url}

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig),
                                             context=self.context)


def _run_script(script: str, env: dict, log_name: str, timeout: float) -> float:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / log_name
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.run(["bash", str(REPO / "hack" / script)], stdout=f,
                           stderr=subprocess.STDOUT, env=env, cwd=REPO, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"hack/{script} failed ({p.returncode}) after {took:.0f}s; "
                           f"last output:\n{log.read_text()[-6000:]}")
    return took


def keep_logs(cluster: str) -> None:
    """Copy the test doubles' and the control plane's logs of ``cluster`` to .qdd/logs/<cluster>/
    before hack/cluster-down.sh deletes them, for whoever reads a failure afterwards."""
    out = LOGS / cluster
    shutil.rmtree(out, ignore_errors=True)
    for d in (REPO / ".qdd" / "clusters" / cluster, REPO / ".qdd" / "kwok" / "clusters" / cluster / "logs"):
        for f in d.glob("*.log") if d.is_dir() else ():
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out / f.name)


def _session_lock(cluster: str):
    """Serializes test sessions of one checkout that use the same cluster (one would tear the
    cluster down under the other). Held until the process ends; not inherited by children."""
    locks = REPO / ".qdd" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    f = open(locks / f"test-session-{cluster}.lock", "w")  # noqa: SIM115 — held for the process's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another test session uses cluster {cluster}; waiting for it to finish")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


@pytest.fixture(scope="session")
def kube() -> Kube:
    cluster = os.environ.get("QDD_TEST_CLUSTER", "qdd-test")
    kubeconfig = Path(os.environ.get("QDD_TEST_KUBECONFIG", REPO / ".qdd" / "kubeconfig-test"))
    lock = _session_lock(cluster)
    k = Kube(cluster, kubeconfig)
    # Builds missing binaries (about 10 min cold on 2 cores) or links them from the cache.
    if any(not (BIN / t).exists() for t in TOOLS) or shutil.which("go", path=k.env["PATH"]):
        k.timings["build-tools"] = _run_script("build-tools.sh", k.env, "build-tools.log", 3600)
    keep = os.environ.get("QDD_KEEP_CLUSTER") == "1"
    try:
        k.timings["cluster-up"] = _run_script("cluster-up.sh", k.env, f"cluster-up-{cluster}.log", 600)
    except BaseException:
        if not keep:  # leave no half-started control plane behind
            subprocess.run(["bash", str(REPO / "hack" / "cluster-down.sh")], env=k.env, cwd=REPO,
                           capture_output=True, timeout=120)
        raise
    try:
        yield k
    finally:
        if not keep:
            keep_logs(cluster)
            _run_script("cluster-down.sh", k.env, f"cluster-down-{cluster}.log", 120)
        lock.close()


@pytest.fixture(scope="session")
def kubectl(kube: Kube) -> Callable[..., subprocess.CompletedProcess]:
    return kube.kubectl


@pytest.fixture
def namespace(kube: Kube):
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    kube.wait_for(lambda: kube.exists("serviceaccount", "default", name), timeout=60,
                  desc=f"serviceaccount default in {name}")
    yield name
    # Delete the namespace without waiting for it to go, but wait until its pods are gone so
    # that the next test finds every GPU tray free again.
    kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
    try:
        kube.wait_for(lambda: not kube.kubectl("get", "pods", "-n", name, "-o", "name",
                                               check=False).stdout.strip(),
                      timeout=90, interval=0.5, desc=f"pods of namespace {name} deleted")
    except AssertionError as e:  # a teardown problem must not fail the test itself
        print(f"warning: {e}")


def wait_established(kube: Kube, *crds: str) -> None:
    """Until every CRD is Established. `kubectl wait` right after an apply can fail with
    ".status.conditions accessor error" before the API server has written any condition."""
    for crd in crds:
        kube.wait_for(lambda c=crd: kube.kubectl("wait", "--for=condition=Established", f"crd/{c}", "--timeout=10s",
                                                 check=False).returncode == 0,
                      timeout=90, interval=0.5, desc=f"CRD {crd} Established")


PEER_RESTART_WINDOW_S = 8.0


def install_crds(kube: Kube) -> None:
    """What the chart installs before the operator: qdd's three CRDs and the qdd-tray-claims
    MutatingAdmissionPolicy (without it a tray-claim pod names no claim and is never bound)."""
    kube.kubectl("apply", "--server-side", "--force-conflicts",
                 *[a for f in ("qdd.dev_qwendisaggdeployments.yaml", "qdd.dev_qwendisaggbenchmarks.yaml",
                               "qdd.dev_qwendisaggrolescales.yaml", "qdd-tray-claims-policy.yaml")
                   for a in ("-f", str(REPO / "crds" / f))])
    wait_established(kube, "qwendisaggdeployments.qdd.dev", "qwendisaggbenchmarks.qdd.dev",
                     "qwendisaggrolescales.qdd.dev")


@pytest.fixture(scope="module")
def operator(kube: Kube):
    """The CRD installed and the operator (`qdd run`) running as a local process for one test module."""
    from .operator_proc import OperatorProcess

    install_crds(kube)
    # A short peer-restart window (default 30 s) keeps the peer-restart tests quick.
    op = OperatorProcess(kube, args=("--peer-restart-window", str(PEER_RESTART_WINDOW_S)))
    op.start()
    yield op
    op.stop()
