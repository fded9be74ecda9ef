"""A real prefill/decode pair (and the real router) started from what qdd rendered.

:func:`start_pair` renders a CR (tests/realengine/deployment.py), launches the prefill on core 0
and the decode on core 1 with :func:`tests.realengine.engines.engine_launch` (which lists every
substitution), waits for both, and returns a :class:`Pair` whose ``stop`` ends both process
groups. :func:`start_router` runs vllm-router with the args qdd rendered for its Deployment
(substitutions: tests/contract/router_harness.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ..contract import router_harness as rh
from . import deployment
from .engines import Engine, Substitution, engine_launch, free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_SCRIPT = ROOT / "hack" / "cpu-engine-venv.sh"
HERE = Path(__file__).resolve().parent

ContainerEdit = Callable[[str, dict[str, Any]], None]
"""A bypass: edits the rendered container of a role in place (guardrail runs only)."""


def ensure_venv() -> Path:
    """Build or link .qdd/cpu-engine-venv (hack/cpu-engine-venv.sh); raises with its output on failure."""
    proc = subprocess.run(["bash", str(VENV_SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    venv = ROOT / ".qdd" / "cpu-engine-venv"
    if proc.returncode != 0 or not (venv / "bin" / "vllm").exists():
        raise RuntimeError(f"hack/cpu-engine-venv.sh failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return venv


def run_in_venv(venv: Path, script: str, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
    """Run ``tests/realengine/<script>`` with the CPU venv's python; its stdout, or raise with stderr."""
    proc = subprocess.run([str(venv / "bin" / "python"), str(HERE / script), *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                               "HOME": str(Path.home())})
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc.stdout


@dataclass
class Launch:
    """A pair's start as a startup probe saw it (``Engine.health_seen`` of both, polled side by side
    from launch), then ``completion``: (status, body) of one completion sent to decode the moment both
    said 200."""

    completion: tuple[int, Any]


@dataclass
class Pair:
    prefill: Engine
    decode: Engine
    objects: list[dict[str, Any]]
    substitutions: dict[str, list[Substitution]] = field(default_factory=dict)
    launch: Launch | None = None

    def stop(self) -> None:
        """Stop both engines (both, even if the first raises); raises if a process survived."""
        errors = []
        for e in (self.decode, self.prefill):
            try:
                e.stop()
            except RuntimeError as err:
                errors.append(str(err))
        if errors:
            raise RuntimeError("; ".join(errors))


def start_pair(venv: Path, model_dir: Path, logs: Path, cr: dict[str, Any] | None = None,
               edit: ContainerEdit | None = None, wait: bool = True) -> Pair:
    """Render ``cr`` (default: the tiny deployment), launch both engines; with ``wait`` block until
    both are healthy (raising with the log tail of one that exits or stays down)."""
    objs = deployment.rendered(cr or deployment.tiny_cr())
    engines: dict[str, Engine] = {}
    subs: dict[str, list[Substitution]] = {}
    try:
        for core, role in ((0, "prefill"), (1, "decode")):
            container = json.loads(json.dumps(deployment.engine_container(objs, role)))
            if edit is not None:
                edit(role, container)
            port = free_port()
            argv, env, subs[role] = engine_launch(container, venv=venv, model_dir=model_dir, port=port,
                                                  side_channel_port=free_port(), core=core)
            engines[role] = Engine(role, argv, env, logs / f"{role}.log", port)
        if wait:
            for e in engines.values():
                e.wait_ready()
    except BaseException:
        for e in engines.values():
            with contextlib.suppress(RuntimeError):
                e.stop()
        raise
    return Pair(engines["prefill"], engines["decode"], objs, subs)


@contextlib.contextmanager
def started_pair(*args: Any, **kwargs: Any) -> Iterator[Pair]:
    pair = start_pair(*args, **kwargs)
    try:
        yield pair
    finally:
        pair.stop()


def start_router(pair: Pair, logs: Path) -> tuple[rh.Router, list[str]]:
    """vllm-router with qdd's rendered args, static URLs of the pair; (router, substituted flags)."""
    rendered = list(rh.router_container(pair.objects)["args"])
    args, changed = rh.substitute(rendered, port=free_port(), prometheus_port=free_port(),
                                  prefill_urls=[pair.prefill.base], decode_urls=[pair.decode.base])
    router = rh.Router(args, logs / "router.log")
    try:
        router.wait_ready(1, 1)
    except BaseException:
        router.stop()
        raise
    return router, changed


def nixl_stats(metrics_text: str) -> dict[str, float]:
    """The NIXL connector's counters from an engine's /metrics (vllm/distributed/kv_transfer/
    kv_connector/v1/nixl/stats.py): ``transfers`` (vllm:nixl_xfer_time_seconds count: successful
    READs), ``bytes`` (vllm:nixl_bytes_transferred sum), ``descriptors``, ``failed_transfers``,
    ``failed_notifications``, ``expired`` (vllm:nixl_num_kv_expired_reqs). Missing series are 0."""
    want = {"vllm:nixl_xfer_time_seconds_count": "transfers", "vllm:nixl_bytes_transferred_sum": "bytes",
            "vllm:nixl_num_descriptors_sum": "descriptors",
            "vllm:nixl_num_failed_transfers_total": "failed_transfers",
            "vllm:nixl_num_failed_notifications_total": "failed_notifications",
            "vllm:nixl_num_kv_expired_reqs_total": "expired"}
    out = dict.fromkeys(want.values(), 0.0)
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name in want:
                out[want[s.name]] += s.value
    return out


def generated_tokens(metrics_text: str) -> float:
    """vllm:generation_tokens_total of an engine's /metrics (tokens the engine generated)."""
    return sum(s.value for fam in text_string_to_metric_families(metrics_text) for s in fam.samples
               if s.name == "vllm:generation_tokens_total")


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

