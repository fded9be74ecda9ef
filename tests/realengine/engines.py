"""Start real vLLM engines (the CPU build) with the argv and env qdd rendered for their pods.

What is substituted, and why — everything else runs exactly as rendered; :func:`engine_launch`
returns the list of what it changed (a :class:`Substitution` each) so a test can assert exactly
that and the docs can print it:

* the model path (argv[0], ``/models/...``): the pod mounts the checkpoint PVC there; here the
  checkpoint is a folder the tests made.
* ``--port 8000`` → a free port: both engines share one host (pods have one IP each).
* ``VLLM_NIXL_SIDE_CHANNEL_HOST`` (downward API ``status.podIP``) → ``127.0.0.1``: no pod IP here;
  loopback is the address both engines reach on one host.
* ``VLLM_NIXL_SIDE_CHANNEL_PORT`` 5600 → a free port per engine: same reason as ``--port``.
* the device: ``kv_buffer_device`` ``cuda`` → ``cpu`` in ``--kv-transfer-config`` (vLLM's CPU
  platform registers DRAM with NIXL and accepts only ``cpu``), and env the CPU build needs in
  place of a GPU: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache; the CPU build sizes its cache by
  this, not by --gpu-memory-utilization), ``VLLM_CPU_OMP_THREADS_BIND`` (one core per engine,
  so prefill and decode do not fight over the 2 cores), ``PYTHONPATH`` (the plugin that turns
  NIXL's spinning progress thread off, tests/realengine/plugin), ``HF_HUB_OFFLINE``/
  ``TRANSFORMERS_OFFLINE`` (nothing is downloaded).
* the executable: ``vllm`` → the CPU engine venv's ``vllm`` (the image's is on PATH in a pod).

Processes: each engine runs in its own session (process group) under coreutils ``timeout``, so
the API server and its engine-core child end together and by themselves even if pytest dies;
:meth:`Engine.stop` kills the whole group.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .procgroup import group_pids, group_rss_bytes

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(__file__).resolve().with_name("plugin")
ENGINE_MAX_S = 1800
"""Wall-clock bound of one engine process (coreutils timeout): it ends by itself after this."""
READY_TIMEOUT_S = 300.0
"""Start budget; measured ≈ 30–60 s per engine on 2 cores (docs/real-engines.md)."""
KV_CACHE_GIB = 1
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Substitution:
    what: str
    rendered: str
    used: str
    why: str


PORT_RANGE = (20000, 32000)
"""Ports the harness hands out: below Linux's ephemeral range (32768–60999 by default), from which
vLLM picks its own internal ZMQ ports while starting. A port taken from the ephemeral range (bind
to 0) can be picked again by the other engine before the first one binds it: seen here as the
prefill dying with "ZMQError: Address already in use" on the decode's side-channel port."""
_handed: set[int] = set()


def free_port() -> int:
    """A port free now on 127.0.0.1 in :data:`PORT_RANGE`, never the same one twice per process."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(*PORT_RANGE)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE}")


def _env_value(entry: dict[str, Any]) -> str:
    if "value" in entry:
        return str(entry["value"])
    return json.dumps(entry.get("valueFrom"), sort_keys=True)


def engine_launch(container: dict[str, Any], *, venv: Path, model_dir: Path, port: int, side_channel_port: int,
                  core: int) -> tuple[list[str], dict[str, str], list[Substitution]]:
    """(argv, env, substitutions) for one rendered ``vllm`` container, per the module docstring."""
    subs: list[Substitution] = []
    command = list(container["command"])
    assert command[:2] == ["vllm", "serve"], command
    args = list(container["args"])
    exe = str(venv / "bin" / "vllm")
    subs.append(Substitution("command", "vllm", exe, "the CPU engine venv's vllm (in a pod: the image's)"))
    subs.append(Substitution("argv[0] (model)", args[0], str(model_dir), "the checkpoint the tests made, not a PVC"))
    args[0] = str(model_dir)
    i = args.index("--port")
    subs.append(Substitution("--port", args[i + 1], str(port), "both engines on one host"))
    args[i + 1] = str(port)
    i = args.index("--kv-transfer-config")
    kv = json.loads(args[i + 1])
    subs.append(Substitution("--kv-transfer-config kv_buffer_device", kv["kv_buffer_device"], "cpu",
                             "device: vLLM's CPU platform registers DRAM with NIXL, only 'cpu'"))
    kv["kv_buffer_device"] = "cpu"
    args[i + 1] = json.dumps(kv, separators=(",", ":"), sort_keys=True)

    env: dict[str, str] = {}
    for e in container["env"]:
        env[e["name"]] = _env_value(e)
    new = {"VLLM_NIXL_SIDE_CHANNEL_HOST": ("127.0.0.1", "no pod IP; loopback reaches both engines on one host"),
           "VLLM_NIXL_SIDE_CHANNEL_PORT": (str(side_channel_port), "both engines on one host")}
    for name, (value, why) in new.items():
        subs.append(Substitution(f"env {name}", env[name], value, why))
        env[name] = value
    added = {
        "VLLM_CPU_KVCACHE_SPACE": (str(KV_CACHE_GIB), "device: the CPU build sizes its KV cache in GiB by this"),
        "VLLM_CPU_OMP_THREADS_BIND": (str(core), "device: one core per engine on the 2-core machine"),
        "PYTHONPATH": (str(PLUGIN_DIR), "the vLLM plugin that turns NIXL's idle-spinning progress thread off"),
        "HF_HUB_OFFLINE": ("1", "nothing may be downloaded"),
        "TRANSFORMERS_OFFLINE": ("1", "nothing may be downloaded"),
    }
    for name, (value, why) in added.items():
        assert name not in env, f"qdd renders {name}; substituting it needs a reason"
        subs.append(Substitution(f"env {name}", "(not rendered)", value, why))
        env[name] = value
    return [exe, "serve", *args], env, subs


def _base_env() -> dict[str, str]:
    """The test process's environment minus what would change vLLM (VLLM_*), proxies and Python paths."""
    drop = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "pythonpath", "virtual_env", "pythonhome")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "UCX_")) and k.lower() not in drop}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.0/8,localhost"
    return env


class Engine:
    """One `vllm serve` process group; a context manager that always ends it."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, port: int) -> None:
        self.name, self.argv, self.env, self.log, self.port = name, argv, env, log, port
        self.base = f"http://127.0.0.1:{port}"
        self._fh = log.open("wb")
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self.health_seen: list[tuple[float, str]] = []
        """(seconds since start, answer) of every /health asked while starting: an HTTP status
        ("200", "503") or the error ("refused", "timeout", ...): what a startup probe would have seen."""
        self.proc = subprocess.Popen(["timeout", "-k", "10", str(ENGINE_MAX_S), *argv], stdout=self._fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=log.parent,
                                     env={**_base_env(), **env}, start_new_session=True)

    def log_tail(self, n: int = 6000) -> str:
        self._fh.flush()
        return self.log.read_text(errors="replace")[-n:]

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds from start until ``/health`` answers 200; raises with the log tail if the engine
        exits or does not come up in ``timeout``."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} engine exited {self.proc.returncode} while starting:\n{self.log_tail()}")
            at = time.monotonic() - self.started
            try:
                with OPENER.open(self.base + "/health", timeout=2) as r:
                    self.health_seen.append((at, str(r.status)))
                    if r.status == 200:
                        self.ready_s = time.monotonic() - self.started
                        return self.ready_s
            except urllib.error.HTTPError as e:
                self.health_seen.append((at, str(e.code)))
            except (OSError, urllib.error.URLError) as e:
                reason = getattr(e, "reason", e)
                self.health_seen.append((at, "refused" if isinstance(reason, ConnectionRefusedError) else
                                         "timeout" if isinstance(reason, TimeoutError) else type(reason).__name__))
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} engine not healthy in {timeout:.0f} s:\n{self.log_tail()}")

    def metrics(self) -> str:
        with OPENER.open(self.base + "/metrics", timeout=10) as r:
            return r.read().decode()

    def rss_bytes(self) -> int:
        return group_rss_bytes(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after 20 s; raises if any process of the group is
        still alive after that (an engine must never outlive its test)."""
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while group_pids(self.proc.pid) and time.monotonic() < deadline:
                self.proc.poll()
                time.sleep(0.2)
            if not group_pids(self.proc.pid):
                break
        self.proc.poll()
        if not self._fh.closed:
            self._fh.close()
        left = group_pids(self.proc.pid)
        if left:
            raise RuntimeError(f"{self.name} engine: processes {left} survived SIGKILL")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def post_json(url: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, Any]:
    """POST a JSON body; (status, parsed body or text)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    try:
        with OPENER.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")
