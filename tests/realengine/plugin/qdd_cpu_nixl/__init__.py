"""A vLLM general plugin for the CPU test ground: NIXL's progress thread polls at 1 kHz, not flat out.

Why: the NIXL Python API builds every agent with the progress thread on and ``pthrDelay = 0``
(nixl/_api.py, nixl_agent.__init__), so each engine's thread spins a core while idle; on the
2-core test machine that doubled request latency (docs/facts/cpu-engines.md). Turning the thread
off (mode ``off``) is not enough here: measured on this pair, 3 of 4 sequential requests went
through and the 4th READ never finished (decode logged "KV fetch: 1 in progress" until killed) —
over UCX's host transports the side being read must make progress too, and an idle prefill does
not poll. So the default mode keeps the thread and makes it sleep ``QDD_NIXL_PROGRESS_DELAY_US``
(default 1000 µs) between polls: NIXL's own ``pthrDelay`` knob, which its Python API hard-codes
to 0.

How: vLLM loads every ``vllm.general_plugins`` entry point in each of its processes before it
builds the KV connector; ``register`` swaps the bindings' ``nixlAgentConfig`` for a subclass that
keeps ``pthrDelay`` at least the delay (mode ``delay``), or makes ``nixl_agent_config`` turn the
thread off (mode ``off``). ``QDD_NIXL_PROGRESS=default`` leaves NIXL alone (for measuring the
spin: bench/real_engines.py). The entry point is declared by the dist-info folder next to this
package, found when ``tests/realengine/plugin`` is on PYTHONPATH (the harness puts it there and
lists it among its substitutions).
"""

from __future__ import annotations

import os
import sys
from typing import Any

PATCHED = "_qdd_progress_patched"
DELAY_US = 1000
"""Sleep of the progress thread between UCX progress calls, µs (NIXL's pthrDelay): 1 kHz polling."""


def register() -> None:
    """Entry point (group ``vllm.general_plugins``); idempotent, silent when NIXL is absent."""
    mode = os.environ.get("QDD_NIXL_PROGRESS", "delay")
    if mode == "default":
        return
    # vLLM sets this before its own first NIXL import (vllm/distributed/nixl_utils.py) and warns
    # when nixl was imported earlier: set it the same way before importing nixl here.
    os.environ.setdefault("UCX_RCACHE_MAX_UNRELEASED", "1024")
    try:
        from nixl import _api
    except ImportError:
        return
    if getattr(_api, PATCHED, False):
        return
    if mode == "off":
        _thread_off(_api)
    else:
        _thread_delayed(_api, int(os.environ.get("QDD_NIXL_PROGRESS_DELAY_US", DELAY_US)))
    setattr(_api, PATCHED, True)
    print(f"qdd_cpu_nixl: NIXL progress thread {mode} (pid {os.getpid()})", file=sys.stderr, flush=True)


def _thread_off(api: Any) -> None:
    cls = api.nixl_agent_config
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.enable_pthread = False

    cls.__init__ = __init__


def _thread_delayed(api: Any, delay_us: int) -> None:
    base = api.nixlBind.nixlAgentConfig
    field = base.pthrDelay

    class AgentConfig(base):  # type: ignore[misc, valid-type]
        """nixl_agent writes ``pthrDelay = 0``; this keeps at least ``delay_us``."""

        @property
        def pthrDelay(self) -> int:  # noqa: N802 (the binding's name)
            return int(field.__get__(self))

        @pthrDelay.setter
        def pthrDelay(self, value: int) -> None:  # noqa: N802
            field.__set__(self, max(int(value), delay_us))

    api.nixlBind.nixlAgentConfig = AgentConfig
