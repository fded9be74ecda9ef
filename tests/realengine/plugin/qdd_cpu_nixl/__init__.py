"""A vLLM general plugin for the CPU test ground: NIXL agents without the progress thread.

Why: the NIXL Python API builds every agent with the progress thread on and ``pthrDelay = 0``
(nixl/_api.py, nixl_agent.__init__), so each engine's thread spins one core at 100% while idle;
on the 2-core test machine that doubled request latency (docs/facts/cpu-engines.md). With the
thread off, UCX progresses inside vLLM's own transfer polling (NixlConnector calls
check_xfer_state every engine step), which is all a CPU pair needs.

How: vLLM loads every ``vllm.general_plugins`` entry point in each of its processes before it
builds the KV connector; this one patches ``nixl_agent_config`` so that any config built
afterwards (vLLM's NixlConnector builds one per worker) has ``enable_prog_thread`` false. The
entry point is declared by the dist-info folder next to this package, found when the folder
``tests/realengine/plugin`` is on PYTHONPATH (the harness puts it there and says so). Set
``QDD_NIXL_PROGRESS_THREAD=1`` to keep NIXL's default (for measuring the spin).
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
