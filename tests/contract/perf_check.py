"""Run by tests/contract/test_perf_model.py with the perf venv's python (aiconfigurator 0.12.0) and
PYTHONPATH=operator/src: asks qdd's performance model what the test checks, in one process (the
library's import and database load take seconds), and prints one JSON object."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    from qdd import cli
    from qdd.api import parse_resource
    from qdd.perf.aic import NotInDatabase, Shape, open_database
    from qdd.perf.profiling import build_profile
    from qdd.plan import build_plan
    from qdd.yamlinput import load_documents

    out: dict = {}
    t0 = time.monotonic()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli.main(["plan", "--predict", "-o", "json", "-f", str(ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml")])
    out["predict_seconds"] = time.monotonic() - t0
    out["predict"] = json.loads(buf.getvalue())["prediction"]
    seed = ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"
    plan = build_plan(parse_resource(load_documents(seed.read_text())[0]))
    db = open_database(plan.spec.model.name, "GB200")
    out["profile"] = json.loads(build_profile(plan, db).to_json())
    errors = {}
    for model, gpu in (("Qwen/Qwen3.5-9B", "GB200"), ("nvidia/Qwen3.5-397B-A17B-NVFP4", "L4"),
                       ("nvidia/Qwen3.5-397B-A17B-NVFP4", "H200")):
        try:
            open_database(model, gpu).static("decode", Shape(8, 1, True), 7373, 922, [8])
            errors[f"{model}@{gpu}"] = None
        except NotInDatabase as e:
            errors[f"{model}@{gpu}"] = str(e)
    out["errors"] = errors
    # calibration through the CLI: a results.json of the seed (written by the test) moves the profile
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli.main(["perf", "profile", "-f", str(seed), "--calibrate", sys.argv[2]])
    out["calibrated"] = json.loads(buf.getvalue())
    slo = Path(sys.argv[1])
    with contextlib.redirect_stdout(io.StringIO()):
        cli.main(["plan", "-f", str(seed), "--slo", "ttft=1000,tpot=40", "--rate", "30", "--name", "qwen35-397b-slo-balanced",
                  "--write", str(slo)])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
