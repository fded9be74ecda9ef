"""What /proc says of a process group (an engine's ``vllm serve`` and its engine-core children, in
their own session: tests/realengine/engines.py): its live processes, resident memory and CPU time.
Used by the real-engine tests and bench/real_engines.py. Linux only."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def _members(pgid: int) -> Iterator[tuple[Path, list[str]]]:
    """(/proc/<pid>, the fields of its ``stat`` after the command name: state, ppid, pgrp, ...) of
    every process of process group ``pgid``; a process that ends while being read is skipped."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) != pgid:
                continue
        except (OSError, ValueError, IndexError):
            continue
        yield d, fields


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    return [int(d.name) for d, fields in _members(pgid) if fields[0] != "Z"]


def group_rss_bytes(pgid: int) -> int:
    """Resident memory (bytes) summed over every process of a process group (shared pages count
    once per process, so this is an upper bound)."""
    total = 0
    for d, _ in _members(pgid):
        try:
            for line in (d / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total


def group_cpu_seconds(pgid: int) -> float:
    """utime + stime (s) of every process of a process group, from /proc/<pid>/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[11]) + int(fields[12]) for _, fields in _members(pgid)) / tick
