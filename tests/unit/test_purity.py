"""The pure core (api, catalog, plan, render) never imports kopf or kubernetes (docs/facts/design-brief.md#2-architecture-a-pure-core-and-a-thin-shell)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from ..conftest import ROOT

PACKAGE = ROOT / "operator" / "src" / "qdd"
PURE = ("api", "catalog", "plan", "render", "autoscale")
FORBIDDEN = ("kopf", "kubernetes")


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """`file:line module` for every import of a forbidden package, including ``from x import y``,
    dotted names, ``import a, b`` and imports nested in functions or ``if TYPE_CHECKING``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{filename}:{node.lineno} {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    return found


@pytest.mark.parametrize("source", [
    "import kopf", "import os, kubernetes.client", "from kubernetes import client",
    "def f():\n    from kopf._core import x\n", "if TYPE_CHECKING:\n    import kubernetes\n",
])
def test_the_scan_flags_forbidden_imports(source):
    assert len(forbidden_imports(source)) == 1


def test_the_scan_ignores_look_alikes():
    assert forbidden_imports("import kopfish\nfrom .kubernetes import x\nk = 'import kopf'\n") == []


def test_pure_packages_import_neither_kopf_nor_kubernetes():
    files = [p for pkg in PURE for p in sorted((PACKAGE / pkg).rglob("*.py"))]
    assert len(files) >= 15
    assert [hit for f in files for hit in forbidden_imports(f.read_text(), str(f.relative_to(ROOT)))] == []


def test_plan_and_render_paths_load_neither_at_runtime(tmp_path):
    """Run `qdd plan` and `qdd render` in one fresh interpreter and look at sys.modules."""
    example = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"
    code = (
        "import contextlib, io, sys\n"
        "import qdd.render, qdd.plan, qdd.api, qdd.catalog\n"
        "from qdd import cli\n"
        "for cmd in ('plan', 'render'):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        cli.main([cmd, '-f', {str(example)!r}])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kopf', 'kubernetes')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_runtime_check_can_fail(tmp_path):
    """The same probe sees kopf when something does import it (kopf is installed with the test extras)."""
    code = "import sys, kopf\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'kopf')[:1])\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['kopf']"
