"""Collect the runs of bench/nixl-h200x2.sh into one committed file:
python3 bench/combine.py OUT_DIR COMMAND [final|explore]
final   → OUT_DIR/nixl-preflight-h200x2.json  {"nvlink", "tcp_only", "seed_plan_fp8_kv", "nvlink_vmm", "push_sgl",
                                              "machine"}
explore → OUT_DIR/nixl-explore-h200x2.json    {"explore", "explore-push-t8", "explore-sgl", "machine"}"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator" / "src"))
from qdd.preflight.ucx import parse  # noqa: E402
from qdd.preflight.verdict import verdict  # noqa: E402

KEEP = ("pass", "reason", "message", "bulk_gbps", "peer_copy_gbps", "request_ms", "descriptors_per_request",
        "transports", "verified", "verified_bytes", "mismatched_bytes", "error", "peer_copy", "transports_detail",
        "variants", "config", "elapsed_s")
RUNS = {
    "final": ("nixl-preflight-h200x2.json", (("nvlink", "nvlink"), ("tcp_only", "tcp_only"),
                                             ("seed_plan_fp8_kv", "seed_plan"), ("nvlink_vmm", "nvlink_vmm"),
                                             ("push_sgl", "push_sgl"))),
    "explore": ("nixl-explore-h200x2.json", (("explore", "explore"), ("explore-push-t8", "explore-push-t8"),
                                             ("explore-sgl", "explore-sgl"))),
}


def _machine(d: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    gpus = d / "gpus.csv"
    if gpus.exists():
        out["gpus"] = gpus.read_text().strip().splitlines()[1:]
    topo = d / "topo.txt"
    if topo.exists():
        rows = [ln.split("\t") for ln in topo.read_text().splitlines() if ln.startswith("GPU0\t")]
        if rows:
            out["gpu0_gpu1_link"] = rows[0][2].strip()
    links = d / "nvlink.txt"
    if links.exists():
        speeds = [ln.split(":")[-1].strip() for ln in links.read_text().splitlines() if "Link" in ln]
        out["gpu0_nvlinks"] = f"{len(speeds) // 2 or len(speeds)} links at {speeds[0]}" if speeds else None
    return out


def main(out: str, command: str, mode: str = "final") -> None:
    d = Path(out)
    target, runs = RUNS[mode]
    combined: dict[str, object] = {}
    for key, name in runs:
        p = d / f"{name}.json"
        if not p.exists():
            continue
        r = json.loads(p.read_text())
        entry = {k: r.get(k) for k in KEEP}
        detail = entry.get("transports_detail") or {}
        if detail.get("log"):  # a scratch path on the machine that ran it
            detail["log"] = Path(detail["log"]).name
        log = d / f"{name}.ucx.log"
        if log.exists():  # read the transports again with the current parser, and judge again
            used = parse(log.read_text(errors="replace"))
            entry["transports"] = used.data
            entry["transports_detail"] = {"source": used.source, "lanes": used.lanes, "evidence": used.evidence,
                                          "log": log.name}
        # The program reports facts; the verdict is the operator's, with its default thresholds.
        v = verdict(entry)
        entry.update({"pass": v.passed, "reason": v.reason, "message": v.message})
        entry["command"] = command + f"  # run '{name}'"
        combined[key] = entry
    combined["machine"] = _machine(d)
    (d / target).write_text(json.dumps(combined, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
