"""Write tests/unit/data/vllm-<version>-metrics.json: the Prometheus metrics vLLM declares, read from
its source, each with the file and line that declares it. tests/unit/test_dashboard.py checks every
metric name of the Grafana dashboard against this list.

    python tests/unit/gen_vllm_metrics.py                 # vLLM 0.33.0: .qdd/vllm-venv, else PyPI
    python tests/unit/gen_vllm_metrics.py --source DIR    # a checkout or site-packages holding vllm/
    python tests/unit/gen_vllm_metrics.py --check         # exit 1 if the committed file differs

What counts: every call whose ``name=`` is a string ``"vllm:…"`` (or a variable assigned one in the
same function) and whose callee is a Gauge/Counter/Histogram constructor — ``self._gauge_cls``,
``self._counter_cls``, ``self._histogram_cls``, ``prometheus_client.Gauge``, … — in SOURCES.
A metric declared under an ``if`` records that condition (e.g. only on a KV consumer); its
``labelnames`` are recorded when they are static (null: the stat logger's base labels, passed in).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.33.0"
OUT = ROOT / "tests" / "unit" / "data" / f"vllm-{VERSION}-metrics.json"
SOURCES = (
    "vllm/v1/metrics/loggers.py",  # scheduler, cache, tokens, latency histograms (PrometheusStatLogger)
    "vllm/v1/metrics/perf.py",  # estimated FLOPs / bytes per GPU
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py",  # NIXL transfer stats (NixlPromMetrics)
)
KINDS = {"gauge": "gauge", "counter": "counter", "histogram": "histogram"}


def _kind(func: ast.expr) -> str | None:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    low = name.lower()
    for key, kind in KINDS.items():
        if key in low:
            return kind
    return None


def _string_assignments(fn: ast.AST) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                and node.value.value.startswith("vllm:")):
            out.setdefault(node.targets[0].id, []).append(node.value.value)
    return out


def _str_list(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _labelnames(node: ast.expr | None, fn: ast.AST) -> list[str] | None:
    """Static label names: a list literal, a local list variable, or either ``+`` a list literal.
    None when they come from elsewhere (a parameter: the base labels of the stat logger)."""
    if node is None:
        return []
    if (lst := _str_list(node)) is not None:
        return lst
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _labelnames(node.left, fn), _labelnames(node.right, fn)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name):
        for n in ast.walk(fn):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and n.targets[0].id == node.id and (lst := _str_list(n.value)) is not None):
                return lst
    return None


def _conditions(tree: ast.Module) -> dict[int, str]:
    """Line of a node → the test of the innermost enclosing ``if`` inside a function, if any."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, cond: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            c = cond
            if isinstance(child, ast.If):
                c = ast.unparse(child.test)
                for sub in child.body:
                    visit_stmt(sub, c)
                for sub in child.orelse:
                    visit_stmt(sub, f"not ({c})")
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                c = None
            if c and hasattr(child, "lineno"):
                out.setdefault(child.lineno, c)
            visit(child, c)

    def visit_stmt(stmt: ast.stmt, cond: str) -> None:
        for n in ast.walk(stmt):
            if hasattr(n, "lineno"):
                out.setdefault(n.lineno, cond)
        visit(stmt, cond)

    visit(tree, None)
    return out


def scan(rel: str, text: str) -> list[dict[str, Any]]:
    tree = ast.parse(text)
    conds = _conditions(tree)
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in functions:
        strings = _string_assignments(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or not (kind := _kind(node.func)):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name = kw.get("name")
            names: list[str] = []
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                names = [name.value]
            elif isinstance(name, ast.Name):
                names = strings.get(name.id, [])
            for n in names:
                if not n.startswith("vllm:"):
                    continue
                entry = {"name": n, "type": kind, "file": rel, "line": node.lineno, "function": fn.name,
                         "labelnames": _labelnames(kw.get("labelnames"), fn)}
                if node.lineno in conds:
                    entry["condition"] = conds[node.lineno]
                found.append(entry)
    return found


def _base_labelnames(loggers_text: str) -> dict[str, Any]:
    """``labelnames = [...]`` in PrometheusStatLogger.__init__: the labels every per-engine metric
    gets, also those declared elsewhere (NIXL stats, perf) with ``labelnames`` passed in."""
    tree = ast.parse(loggers_text)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "PrometheusStatLogger"):
        for n in ast.walk(cls):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and n.targets[0].id == "labelnames" and (lst := _str_list(n.value)) is not None):
                return {"labelnames": lst, "file": SOURCES[0], "line": n.lineno}
    raise SystemExit("no `labelnames = [...]` in PrometheusStatLogger")


def _read_sources(source: Path) -> dict[str, str]:
    if source.is_file() and source.suffix == ".whl":
        with zipfile.ZipFile(source) as z:
            return {rel: z.read(rel).decode() for rel in SOURCES}
    return {rel: (source / rel).read_text() for rel in SOURCES}


def _version_of(source: Path) -> tuple[str, str | None]:
    text = (zipfile.ZipFile(source).read("vllm/_version.py").decode() if source.suffix == ".whl"
            else (source / "vllm" / "_version.py").read_text())
    values: dict[str, Any] = {}
    for node in ast.parse(text).body:  # a generated file of assignments: read, never run
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    values[t.id] = node.value.value
    return values["__version__"], values.get("__commit_id__")


def find_source(version: str) -> Path:
    venv = ROOT / ".qdd" / "vllm-venv"
    for sp in sorted(venv.glob("lib/python3*/site-packages")):
        if (sp / "vllm" / "_version.py").exists():
            return sp
    tmp = Path(tempfile.mkdtemp(prefix="vllm-wheel-"))
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp),
                    f"vllm=={version}"], check=True, timeout=1800)
    (whl,) = tmp.glob("vllm-*.whl")
    return whl


def build(source: Path) -> dict[str, Any]:
    version, commit = _version_of(source)
    texts = _read_sources(source)
    metrics: list[dict[str, Any]] = []
    for rel in SOURCES:
        metrics += scan(rel, texts[rel])
    seen: dict[str, dict[str, Any]] = {}
    for m in metrics:
        if m["name"] in seen and seen[m["name"]]["type"] != m["type"]:
            raise SystemExit(f"{m['name']} declared as {seen[m['name']]['type']} and {m['type']}")
        seen.setdefault(m["name"], m)
    base = _base_labelnames(texts[SOURCES[0]])
    return {
        "base_labelnames": base,
        "vllm_version": version,
        "vllm_commit": commit,
        "generated_by": "tests/unit/gen_vllm_metrics.py",
        "sources": {rel: hashlib.sha256(texts[rel].encode()).hexdigest() for rel in SOURCES},
        "note": "Declared names; prometheus_client exposes counters as <name>_total (a trailing _total "
                "in the declared name is not doubled) and histograms as <name>_bucket/_sum/_count.",
        "metrics": sorted(seen.values(), key=lambda m: m["name"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, help="a dir holding vllm/ (checkout or site-packages) or a vllm wheel")
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    a = ap.parse_args()
    data = build(a.source or find_source(VERSION))
    if data["vllm_version"] != VERSION:
        raise SystemExit(f"source is vLLM {data['vllm_version']}, not {VERSION}")
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if a.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT.relative_to(ROOT)}: {'up to date' if same else 'STALE'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(data['metrics'])} metrics from vLLM {data['vllm_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
