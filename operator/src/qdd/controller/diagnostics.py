"""Heap snapshots of the running operator, for ``make bench-soak`` (a DIAGNOSTIC setting, off by default).

With ``QDD_TRACEMALLOC_DIR`` set, the operator starts :mod:`tracemalloc` (``QDD_TRACEMALLOC_FRAMES``
frames per allocation, default 8) and, on each SIGUSR1, collects garbage and writes
``snapshot-<n>.pickle`` (n = 1, 2, ...) into that directory; bench/soak.py diffs the one taken after
the tenth churn cycle with the last one. tracemalloc costs CPU and memory of its own (the traces):
never set it in production.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import tracemalloc
from pathlib import Path
from types import FrameType

ENV_DIR = "QDD_TRACEMALLOC_DIR"
ENV_FRAMES = "QDD_TRACEMALLOC_FRAMES"
log = logging.getLogger("qdd.diagnostics")


def install() -> Path | None:
    """Start tracing and the SIGUSR1 handler when ``QDD_TRACEMALLOC_DIR`` is set (call from the main
    thread, before kopf's loop starts); the directory, or None when unset."""
    where = os.environ.get(ENV_DIR)
    if not where:
        return None
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(int(os.environ.get(ENV_FRAMES, "8")))
    taken = [0]

    def dump(_sig: int, _frame: FrameType | None) -> None:
        gc.collect()
        taken[0] += 1
        path = out / f"snapshot-{taken[0]}.pickle"
        tracemalloc.take_snapshot().dump(str(path))
        log.warning("heap snapshot %s written (%s is a diagnostic setting)", path, ENV_DIR)

    signal.signal(signal.SIGUSR1, dump)
    log.warning("%s is set: tracemalloc is on (a diagnostic setting); SIGUSR1 writes a heap snapshot to %s",
                ENV_DIR, out)
    return out
