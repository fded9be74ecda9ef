"""Every CLI entry point that reads a file, on hostile input (issue 21): exit 0 or 2, every error
line ``error: FILE: ...`` naming the file, no traceback, each within 2 s, all in one process
limited to 2 GiB of address space (RLIMIT_AS).

One subprocess runs tests/unit/cli_hostile_driver.py over the whole corpus (python's start-up is
paid once); it prints one JSON line per case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("cli_hostile_driver.py")
LIMIT_S = 2.0


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    work = tmp_path_factory.mktemp("hostile")
    run = subprocess.run([sys.executable, str(DRIVER), str(work)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_the_corpus_covers_every_entry_point(results):
    assert {r["argv"][0] for r in results} == {"plan", "render", "import-recipe", "bench"}
    assert len(results) >= 60


def test_every_case_exits_0_or_2_with_error_lines_naming_the_file(results):
    bad = []
    for r in results:
        errors = [ln for ln in r["stderr"].splitlines() if ln.startswith("error: ")]
        if r["code"] not in (0, 2) or "Traceback" in r["stderr"] or (r["code"] == 2 and not errors) or any(
                not ln.startswith(f"error: {r['file']}") for ln in errors):
            bad.append((r["case"], r["argv"][0], r["code"], r["stderr"][-300:]))
    assert not bad, bad[:5]


def test_every_case_ends_within_2_s_in_2_gib(results):
    """CPU seconds of the process: on a shared CI machine wall time also counts the neighbours."""
    slow = [(r["case"], r["argv"][0], round(r["cpu_seconds"], 2)) for r in results if r["cpu_seconds"] > LIMIT_S]
    assert not slow, slow
    assert all(r["rlimit_as_gib"] == 2 for r in results)
