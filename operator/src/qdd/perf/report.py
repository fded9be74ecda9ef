"""Measured against predicted (``qdd bench report --profile``): a profile's prediction beside a
benchmark's measurements, per role, as a figure and a markdown table. Needs matplotlib (the
``report`` extra), not aiconfigurator: the profile is read from its JSON.

Figure: two panels — prefill TTFT (ms) against requests/s per prefill endpoint, decode TPOT (ms)
against requests per decode endpoint; each with the prediction (line), the profile after
calibration (dashed) and the measured points (markers).
Table: per measured point, the prediction at its load and the error (measured / predicted − 1).
"""

from __future__ import annotations

import math
from pathlib import Path

from .profile import PerfProfile, Point, RoleProfile, latency_at, measured_role_points


def _predicted(role: RoleProfile) -> RoleProfile:
    pts = role.predicted or [p for p in role.points if p.source == "predicted"]
    return role.model_copy(update={"points": pts, "max_load": None})


def comparison(profile: PerfProfile) -> list[dict[str, float | int | str]]:
    """Per measured point and role: load, measured and predicted latency, error."""
    rows: list[dict[str, float | int | str]] = []
    for m in profile.measured:
        for role, pt in zip((profile.prefill, profile.decode), measured_role_points(m, profile.osl, profile.isl),
                            strict=True):
            pred = latency_at(_predicted(role), pt.load)
            rows.append({"benchmark": m.benchmark, "concurrency": m.concurrency, "role": role.role,
                         "load": round(pt.load, 3), "measuredMs": round(pt.latency_ms, 2),
                         "predictedMs": round(pred, 2) if math.isfinite(pred) else "beyond the prediction",
                         "error": round(pt.latency_ms / pred - 1, 3) if math.isfinite(pred) else "-"})
    return rows


def table(profile: PerfProfile) -> str:
    lines = [f"## Measured against predicted ({profile.database})", "",
             "| benchmark | concurrency | role | load per endpoint | measured ms | predicted ms | error |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in comparison(profile):
        err = f"{r['error']:+.0%}" if isinstance(r["error"], float) else str(r["error"])
        pred = f"{r['predictedMs']:,.1f}" if isinstance(r["predictedMs"], float) else str(r["predictedMs"])
        unit = "req/s" if r["role"] == "prefill" else "requests"
        lines.append(f"| {r['benchmark']} | {r['concurrency']:,} | {r['role']} ({'TTFT' if r['role'] == 'prefill' else 'TPOT'}) "
                     f"| {r['load']:,} {unit} | {r['measuredMs']:,.1f} | {pred} | {err} |")
    return "\n".join(lines) + "\n"


def _line(ax: object, pts: list[Point], style: str, label: str) -> None:
    ax.plot([p.load for p in pts], [p.latency_ms for p in pts], style, label=label)  # type: ignore[attr-defined]


def figure(profile: PerfProfile, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, role, xlabel, ylabel in ((axes[0], profile.prefill, "requests/s per prefill endpoint", "TTFT ms"),
                                     (axes[1], profile.decode, "requests per decode endpoint", "TPOT ms")):
        _line(ax, _predicted(role).points, "-o", "predicted")
        measured = [p for p in role.points if p.source == "measured"]
        if measured:
            _line(ax, role.points, "--", "calibrated profile")
            ax.plot([p.load for p in measured], [p.latency_ms for p in measured], "s", color="k", label="measured")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{role.role}: {role.topology} ({role.gpus_per_endpoint} GPUs per endpoint)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{profile.deployment}: {profile.model} on {profile.gpu}, mean ISL/OSL {profile.isl}/{profile.osl}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
