"""``qdd bench report``: the seed's figure and table from benchmarks' results.

Input: one or more ``results.json`` documents — the ``results.json`` key of a benchmark's results
ConfigMap (``<benchmark>-results``, written by the operator) or the same saved to a file::

    {"benchmark": "b", "deployment": "d", "topology": "4xDEP2-1xDEP8", "gpus": 16,
     "sweep": [<status.sweep[] entries: concurrency, totalTokensPerSecondPerGpu,
                outputTokensPerSecondPerUser, ttftMs, itlMs, tpotMs, failed, …>],
     "accuracy": {"repeats": [...], "mean": 0.88, "passThreshold": 0.88, "passed": true} | null}

Output: a PNG (matplotlib, Agg) of total tok/s/GPU (y) against output tok/s per user (x), one line
per topology and the combined Pareto frontier (points no other point beats on both axes), and a
markdown table of every point and accuracy. Errors are :class:`ReportError` naming the document and key.

The documents come from outside (a file, a ConfigMap anyone with write access to it could edit): they
are read by qdd's bounded JSON reader (:func:`qdd.yamlinput.load_json`: 1.5 MiB, 64 levels, finite
numbers) and every field is checked before use (:func:`load`), so a malformed one is an error that
names it, never a traceback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from ..safetext import safe_text
from ..yamlinput import InputError, load_json

MAX_POINTS = 1024
"""Sweep points of one document: a benchmark has at most 32 (spec.sweep.concurrencies); hand-merged
files may hold more."""
ANNOTATED_POINTS = 200
"""Above this many points the figure leaves out the concurrency labels (unreadable, and slow to draw)."""
_TEXT_KEYS = ("benchmark", "deployment", "topology")
_POINT_NUMBERS = ("totalTokensPerSecondPerGpu", "outputTokensPerSecondPerUser")
_POINT_COUNTS = ("concurrency", "failed")
_POINT_PERCENTILES = ("ttftMs", "itlMs", "tpotMs")

class ReportError(ValueError):
    """A results document that cannot be used; names it and the key."""


@dataclass(frozen=True)
class Point:
    topology: str
    concurrency: int
    tokens_per_gpu: float
    tokens_per_user: float
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    failed: int


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _check_point(p: Any, at: str) -> list[str]:
    if not isinstance(p, dict):
        return [f"{at}: a JSON object (a status.sweep entry), not {type(p).__name__}"]
    errs = [f"{at}.{k}: a required number ≥ 0" for k in _POINT_NUMBERS if not _is_number(p.get(k))]
    errs += [f"{at}.{k}: an integer ≥ 0" for k in _POINT_COUNTS
             if p.get(k) is not None and not (_is_number(p[k]) and float(p[k]).is_integer() and p[k] < 2**53)]
    for k in _POINT_PERCENTILES:
        v = p.get(k)
        if v is not None and not (isinstance(v, dict) and all(x is None or _is_number(x) for x in v.values())):
            errs.append(f"{at}.{k}: an object of numbers ≥ 0 (mean, p50, p90, p99)")
    return errs


def _check_accuracy(a: Any) -> list[str]:
    if a is None:
        return []
    if not isinstance(a, dict):
        return [f"accuracy: a JSON object (status.accuracy) or null, not {type(a).__name__}"]
    errs = []
    reps = a.get("repeats", [])
    if not isinstance(reps, list) or len(reps) > MAX_POINTS or not all(_is_number(r) for r in reps):
        errs.append("accuracy.repeats: a list of accuracies (numbers 0..1)")
    errs += [f"accuracy.{k}: a number ≥ 0" for k in ("mean", "passThreshold") if a.get(k) is not None
             and not _is_number(a[k])]
    if a.get("passed") is not None and not isinstance(a["passed"], bool):
        errs.append("accuracy.passed: true or false")
    return errs


def load(text: str, source: str) -> dict[str, Any]:
    """One results document, every field checked. Raises :class:`ReportError` (``source: field: fix``)."""
    try:
        doc = load_json(text)
    except InputError as e:
        raise ReportError(f"{source}: {e}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{source}: (document): a JSON object (a benchmark's results.json), not {type(doc).__name__}")
    errs = [f"{k}: a string" for k in _TEXT_KEYS if doc.get(k) is not None and not isinstance(doc[k], str)]
    if doc.get("gpus") is not None and not (_is_number(doc["gpus"]) and float(doc["gpus"]).is_integer()):
        errs.append("gpus: an integer")
    sweep = doc.get("sweep") or []
    if not isinstance(sweep, list) or len(sweep) > MAX_POINTS:
        errs.append(f"sweep: a list of at most {MAX_POINTS} points (a benchmark's status.sweep)")
    else:
        errs += [e for i, p in enumerate(sweep) for e in _check_point(p, f"sweep[{i}]")]
    errs += _check_accuracy(doc.get("accuracy"))
    if errs:
        raise ReportError("\n".join(f"{source}: {e}" for e in errs[:20]))
    if not sweep and not doc.get("accuracy"):
        raise ReportError(f"{source}: sweep: neither sweep results nor accuracy: has the benchmark run?")
    return doc


def _cell(text: Any) -> str:
    """A document's text as one markdown cell: control characters escaped, '|' kept in the cell."""
    return safe_text(str(text), 120).replace("|", "\\|")


def points(doc: dict[str, Any], source: str = "(results)") -> list[Point]:
    topo = _cell(doc.get("topology") or doc.get("deployment") or source)
    out = []
    for i, p in enumerate(doc.get("sweep") or []):
        gpu, user = p.get("totalTokensPerSecondPerGpu"), p.get("outputTokensPerSecondPerUser")
        if not isinstance(gpu, int | float) or not isinstance(user, int | float):
            raise ReportError(f"{source}: sweep[{i}]: totalTokensPerSecondPerGpu and outputTokensPerSecondPerUser "
                              "are required numbers")
        ttft, itl = p.get("ttftMs") or {}, p.get("itlMs") or {}
        out.append(Point(topo, int(p.get("concurrency", 0)), float(gpu), float(user), ttft.get("p50"),
                         ttft.get("p99"), itl.get("p50"), int(p.get("failed", 0))))
    return out


def frontier(pts: list[Point]) -> list[Point]:
    """The Pareto frontier: points no other point matches or beats on both tok/s/user and tok/s/GPU
    (with one strictly better), by tok/s/user ascending (equal points in input order). O(n log n):
    by tok/s/user descending, a point stays when it has the best tok/s/GPU of its tok/s/user and
    beats every point of a higher tok/s/user (the pairwise definition took 47 s for 20,000 points)."""
    keep: set[int] = set()
    best_above = -math.inf
    order = sorted(range(len(pts)), key=lambda i: -pts[i].tokens_per_user)
    for _, same in groupby(order, key=lambda i: pts[i].tokens_per_user):
        group = list(same)
        top = max(pts[i].tokens_per_gpu for i in group)
        if top > best_above:
            keep.update(i for i in group if pts[i].tokens_per_gpu == top)
        best_above = max(best_above, top)
    return sorted((pts[i] for i in sorted(keep)), key=lambda p: p.tokens_per_user)


def _fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def table(docs: list[dict[str, Any]], pts: list[Point]) -> str:
    """Markdown: every sweep point (frontier points marked ★), then accuracy per benchmark."""
    best = set(frontier(pts))
    lines = ["| Topology | Concurrency | Total tok/s/GPU | Output tok/s/user | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | Failed | Pareto |",
             "|---|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for p in sorted(pts, key=lambda p: (p.topology, p.concurrency)):
        lines.append(f"| {p.topology} | {p.concurrency} | {_fmt(p.tokens_per_gpu)} | {_fmt(p.tokens_per_user)} | "
                     f"{_fmt(p.ttft_p50)} | {_fmt(p.ttft_p99)} | {_fmt(p.itl_p50, 2)} | {p.failed} | "
                     f"{'★' if p in best else ''} |")
    acc = [d for d in docs if d.get("accuracy")]
    if acc:
        lines += ["", "| Topology | Benchmark | GSM8K mean | Repeats | Threshold | Passed |", "|---|---|---:|---|---:|:---:|"]
        for d in acc:
            a = d["accuracy"]
            reps = ", ".join(f"{r:.3f}" for r in a.get("repeats", []))
            lines.append(f"| {_cell(d.get('topology') or '—')} | {_cell(d.get('benchmark') or '—')} | {_fmt(a.get('mean'), 3)} | {reps} | "
                         f"{_fmt(a.get('passThreshold'), 2)} | {'yes' if a.get('passed') else 'no'} |")
    return "\n".join(lines) + "\n"


def figure(pts: list[Point], path: Path, title: str = "Total tokens/s per GPU vs output tokens/s per user") -> None:
    """The PNG: one marked line per topology (by concurrency), the frontier dashed over all of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    for topo in sorted({p.topology for p in pts}):
        mine = sorted((p for p in pts if p.topology == topo), key=lambda p: p.concurrency)
        ax.plot([p.tokens_per_user for p in mine], [p.tokens_per_gpu for p in mine], marker="o", label=topo)
        for p in mine if len(pts) <= ANNOTATED_POINTS else []:
            ax.annotate(str(p.concurrency), (p.tokens_per_user, p.tokens_per_gpu), fontsize=7,
                        textcoords="offset points", xytext=(4, 4))
    best = frontier(pts)
    ax.plot([p.tokens_per_user for p in best], [p.tokens_per_gpu for p in best], linestyle="--", color="black",
            linewidth=1.5, label="Pareto frontier")
    ax.set_xlabel("Output tokens/s per user (1000 / median TPOT)")
    ax.set_ylabel("Total tokens/s per GPU (input + output)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
