"""`qdd render` prints the same bytes in every process: no output depends on hash seeds, set or
dict iteration order, or anything but the input (rendering twice in one process could not tell)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qdd import cli

from ..conftest import EXAMPLES, ROOT

CASES = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("example", CASES, ids=lambda p: p.stem)
def test_render_is_byte_identical_across_processes_and_hash_seeds(example, capsys):
    cli.main(["render", "-f", str(example)])
    here = capsys.readouterr().out
    outs = set()
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        p = subprocess.run([sys.executable, "-m", "qdd.cli", "render", "-f", str(example)], capture_output=True,
                           text=True, env=env, cwd=ROOT, timeout=60, check=True)
        outs.add(p.stdout)
    assert outs == {here}
