"""Golden manifests: `qdd render` of each base example, byte for byte, in tests/golden/<example>.yaml.

A change to what qdd renders shows up here as a diff to review. After an intended change,
regenerate the files and commit them with the change:

    QDD_UPDATE_GOLDEN=1 .qdd/venv/bin/python -m pytest -q tests/unit/test_golden.py

A missing golden file fails the test (it is never skipped).
"""

from __future__ import annotations

import difflib
import os

import pytest

from qdd import cli

from ..conftest import BASE_EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("QDD_UPDATE_GOLDEN") == "1"


def test_the_five_base_examples_are_covered():
    assert [p.stem for p in BASE_EXAMPLES] == [f"qwen35-397b-{n}xdep2-1xdep8" for n in range(4, 9)]


@pytest.mark.parametrize("example", BASE_EXAMPLES, ids=lambda p: p.stem)
def test_render_matches_golden(example, capsys):
    cli.main(["render", "-f", str(example)])
    rendered = capsys.readouterr().out
    golden = GOLDEN / f"{example.stem}.yaml"
    if UPDATE:
        golden.write_text(rendered)
    assert golden.exists(), f"{golden.relative_to(ROOT)} is missing: run QDD_UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py"
    want = golden.read_text()
    if rendered != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), rendered.splitlines(True), str(golden), "rendered",
                                            n=2))
        pytest.fail(f"rendered objects differ from {golden.relative_to(ROOT)} (QDD_UPDATE_GOLDEN=1 to accept):\n"
                    f"{diff[:4000]}")
