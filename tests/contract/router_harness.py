"""Run the real vllm-router (PyPI vllm-router 0.1.17) with the args `qdd render` puts in the router
Deployment, in front of fake engines (tests/contract/fake_engine.py).

Which rendered args are substituted, and why (everything else is passed through unchanged, and
:func:`substitute` returns the list of what it changed so a test can assert exactly that):

* ``--host 0.0.0.0`` and ``--prometheus-host 0.0.0.0`` → ``127.0.0.1``: tests bind only to
  loopback.
* ``--port 8000`` and ``--prometheus-port 29000`` → free ports: other processes on the machine
  may hold those numbers; the router's own ports do not change what it sends to engines.
* static mode only: ``--service-discovery``, ``--service-discovery-namespace NS``,
  ``--service-discovery-port P``, ``--prefill-selector K=V…`` and ``--decode-selector K=V…`` →
  ``--prefill URL`` / ``--decode URL`` per fake endpoint. vllm-router's discovery infers a
  Kubernetes client config (in-cluster env or KUBECONFIG; without either it logs "Failed to start
  service discovery" and routes nowhere), so static URLs keep the contract test free of any
  cluster. The discovery mode itself is exercised against a fake API server instead
  (tests/contract/fake_kube_api.py), with those args kept as rendered.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
ROUTER_MAX_S = 300
"""The router process is started under coreutils `timeout`: it ends by itself even if pytest dies."""
READY_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0

BIND_FLAGS = ("--host", "--port", "--prometheus-host", "--prometheus-port")
DISCOVERY_FLAGS = ("--service-discovery", "--service-discovery-namespace", "--service-discovery-port",
                   "--prefill-selector", "--decode-selector")

# urllib honours *_proxy variables; nothing here may leave the machine.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def router_binary() -> str:
    cand = Path(sys.executable).with_name("vllm-router")
    found = str(cand) if cand.exists() else shutil.which("vllm-router")
    if not found:
        raise RuntimeError("vllm-router is not installed in this environment: "
                           "pip install vllm-router==0.1.17 (the test extra of operator/pyproject.toml)")
    return found


def render(cr: dict[str, Any]) -> list[dict[str, Any]]:
    """`qdd render -f -`: the objects exactly as the CLI prints them."""
    proc = subprocess.run([sys.executable, "-m", "qdd.cli", "render", "-f", "-"], input=yaml.safe_dump(cr),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"qdd render failed: {proc.stderr}")
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


def router_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    deps = [o for o in objs if o["kind"] == "Deployment"
            and o["metadata"]["labels"].get("qdd.dev/role") == "router"]
    assert len(deps) == 1, f"expected one router Deployment, got {len(deps)}"
    (c,) = [c for c in deps[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "router"]
    return c


def split_flags(args: list[str]) -> list[tuple[str, list[str]]]:
    """[(flag, values)] in order; a flag's values are the tokens up to the next ``--flag``."""
    out: list[tuple[str, list[str]]] = []
    for tok in args:
        if tok.startswith("--"):
            out.append((tok, []))
        else:
            assert out, f"value {tok!r} before any flag"
            out[-1][1].append(tok)
    return out


def join_flags(flags: list[tuple[str, list[str]]]) -> list[str]:
    return [t for flag, values in flags for t in (flag, *values)]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def substitute(args: list[str], *, port: int, prometheus_port: int,
               prefill_urls: list[str] | None = None, decode_urls: list[str] | None = None,
               ) -> tuple[list[str], list[str]]:
    """The rendered args with the substitutions of this module's docstring; returns (args, changed flags).

    With ``prefill_urls``/``decode_urls`` the discovery flags become static URLs (static mode);
    without, they stay as rendered (discovery mode)."""
    static = prefill_urls is not None
    new_values = {"--host": ["127.0.0.1"], "--port": [str(port)],
                  "--prometheus-host": ["127.0.0.1"], "--prometheus-port": [str(prometheus_port)]}
    out: list[tuple[str, list[str]]] = []
    changed: list[str] = []
    for flag, values in split_flags(args):
        if flag in new_values:
            out.append((flag, new_values[flag]))
            changed.append(flag)
        elif static and flag in DISCOVERY_FLAGS:
            changed.append(flag)
        else:
            out.append((flag, values))
    if static:
        out += [("--prefill", [u]) for u in prefill_urls or []]
        out += [("--decode", [u]) for u in decode_urls or []]
    return join_flags(out), changed


def _clean_env(kubeconfig: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "kubeconfig")
           and not k.startswith("KUBERNETES_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.0/8,localhost"
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


class Router:
    """The vllm-router process; a context manager that always ends it."""

    def __init__(self, args: list[str], log: Path, kubeconfig: Path | None = None) -> None:
        self.args = args
        flags = dict((f, v) for f, v in split_flags(args))
        self.port = int(flags["--port"][0])
        self.prometheus_port = int(flags["--prometheus-port"][0])
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_fh = log.open("wb")
        self.proc = subprocess.Popen(
            ["timeout", "-k", "5", str(ROUTER_MAX_S), router_binary(), *args],
            stdout=self._log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=_clean_env(kubeconfig), cwd=log.parent,
        )

    def log_tail(self, n: int = 4000) -> str:
        self._log_fh.flush()
        return self.log.read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log_fh.close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_ready(self, prefill_engines: int, decode_engines: int) -> dict[str, Any]:
        """Until ``/readiness`` counts every engine (DP ranks included) healthy; bounded."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm-router exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with OPENER.open(self.base + "/readiness", timeout=2) as r:
                    last = json.loads(r.read())
                if (last.get("prefill", {}).get("healthy") == prefill_engines
                        and last.get("decode", {}).get("healthy") == decode_engines):
                    return last
            except (OSError, ValueError, urllib.error.URLError) as e:
                last = repr(e)
            time.sleep(0.2)
        raise RuntimeError(f"vllm-router not ready in {READY_TIMEOUT_S}s (last /readiness: {last}):\n"
                           f"{self.log_tail()}")

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with OPENER.open(req, timeout=REQUEST_TIMEOUT_S) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def metrics(self) -> str:
        with OPENER.open(f"http://127.0.0.1:{self.prometheus_port}/metrics", timeout=5) as r:
            return r.read().decode()


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data:"):
                events.append(line[len("data:"):].strip())
    return events
