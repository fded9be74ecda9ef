"""Fixtures of the real-engine tests: the CPU engine venv, the tiny checkpoint, one real
prefill/decode pair and the real router per test module (one pair at a time: ≈ 8 GB).
Nothing is skipped: a venv that does not build or an engine that does not come up fails the
session's first test with the engine's log tail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..contract.router_harness import Router
from .pair import Pair, ensure_venv, run_in_venv, start_pair, start_router


@pytest.fixture(scope="session")
def cpu_venv() -> Path:
    return ensure_venv()


@pytest.fixture(scope="session")
def checkpoint(cpu_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-qwen35-moe")
    run_in_venv(cpu_venv, "checkpoint.py", str(out))
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realengine-logs")


# Module scope: the pair (≈ 8 GB) ends with the module that used it, not with the whole session.
@pytest.fixture(scope="module")
def pair(cpu_venv: Path, checkpoint: Path, logs: Path) -> Iterator[Pair]:
    p = start_pair(cpu_venv, checkpoint, logs)
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def router(pair: Pair, logs: Path) -> Iterator[tuple[Router, list[str]]]:
    r, changed = start_router(pair, logs)
    with r:
        yield r, changed
