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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def load(text: str, source: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ReportError(f"{source}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sweep", []), list):
        raise ReportError(f"{source}: sweep: must be a list (a benchmark's results.json)")
    if not doc.get("sweep") and not doc.get("accuracy"):
        raise ReportError(f"{source}: neither sweep results nor accuracy: has the benchmark run?")
    return doc


def points(doc: dict[str, Any], source: str = "(results)") -> list[Point]:
    topo = str(doc.get("topology") or doc.get("deployment") or source)
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
    (with one strictly better), by tok/s/user ascending."""
    def beaten(p: Point) -> bool:
        return any(q.tokens_per_user >= p.tokens_per_user and q.tokens_per_gpu >= p.tokens_per_gpu
                   and (q.tokens_per_user, q.tokens_per_gpu) != (p.tokens_per_user, p.tokens_per_gpu) for q in pts)
    return sorted((p for p in pts if not beaten(p)), key=lambda p: p.tokens_per_user)


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
            lines.append(f"| {d.get('topology', '—')} | {d.get('benchmark', '—')} | {_fmt(a.get('mean'), 3)} | {reps} | "
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
        for p in mine:
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
