"""Fixtures of the real-engine tests: the CPU engine venv, the tiny checkpoint, one real
prefill/decode pair shared by the package and the real router per test module (one pair at a time: ≈ 8 GB).
Nothing is skipped: a venv that does not build or an engine that does not come up fails the
session's first test with the engine's log tail."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..contract.router_harness import Router
from .deployment import SERVED
from .engines import post_json
from .pair import Launch, Pair, ensure_venv, run_in_venv, start_pair, start_router


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


# Package scope: one plain pair (≈ 8 GB) for every module that needs the pair exactly as qdd renders
# it (test_observe's "after the fix", test_pd, test_probes), started once and ended with the package.
# A module that needs a different pair (a bypassed guardrail) starts and stops it BEFORE its first use
# of this one: one pair at a time.
@pytest.fixture(scope="package")
def pair(cpu_venv: Path, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = start_pair(cpu_venv, checkpoint, tmp_path_factory.mktemp("shared-pair"), wait=False)
    try:
        # Side by side: waiting for one after the other let the second finish starting unobserved.
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda e: e.wait_ready(), (p.prefill, p.decode)))
        p.launch = Launch(post_json(p.decode.base + "/v1/completions",
                                    {"model": SERVED, "prompt": "The prefill engine computes", "max_tokens": 4},
                                    timeout=60))
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def router(pair: Pair, logs: Path) -> Iterator[tuple[Router, list[str]]]:
    r, changed = start_router(pair, logs)
    with r:
        yield r, changed
