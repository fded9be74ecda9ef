"""Runs ``qdd`` (qdd.cli.main, in this process) on a corpus of hostile files under RLIMIT_AS = 2 GiB;
one JSON line per case: case, argv, file, exit code, stderr, seconds (wall) and cpu_seconds (this
process's CPU time: what the case costs, whatever else the machine runs). Used by test_cli_hostile.py.

Usage: python cli_hostile_driver.py WORKDIR"""

from __future__ import annotations

import io
import json
import resource
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

GIB = 1 << 30
SEED = Path(__file__).resolve().parents[2] / "examples" / "qwen35-397b-4xdep2-1xdep8.yaml"


def corpus() -> dict[str, bytes]:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    seed = SEED.read_bytes()
    return {
        "empty": b"",
        "deep-flow": b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
        "deep-block": "".join("  " * i + f"k{i}:\n" for i in range(200)).encode() + b"  " * 200 + b"v\n",
        "deep-json": b"[" * 200_000,
        "self-alias": b"a: &a [*a]\n",
        "alias-bomb": laughs.encode(),
        "duplicate-key": b"name: a\nname: b\n",
        "not-utf8": b"metadata:\n  name: caf\xe9\n",
        "c1-control": "a: \"\u0087\"\n".encode(),
        "nul": b"a: b\x00c\n",
        "huge-int": b"a: " + b"9" * 100_000 + b"\n",
        "huge-float": b"a: 1e99999\n",
        "nan": b'{"sweep": [{"totalTokensPerSecondPerGpu": NaN, "outputTokensPerSecondPerUser": 1}]}',
        "too-big": b"# " + b"x" * 1_600_000 + b"\n",
        "many-values": b"[" + b"1," * 200_000 + b"1]",
        "list-document": b"- 1\n- 2\n",
        "scalar-document": b"hello\n",
        "several-documents": b"--- {}\n--- {}\n--- []\n",
        "binary": bytes(range(256)) * 64,
        "tags": b"a: !!python/object/apply:os.system ['true']\n",
        "seed-with-bad-benchmark": seed + b"---\napiVersion: qdd.dev/v1alpha1\nkind: QwenDisaggBenchmark\n"
                                         b"metadata: {name: b}\nspec: {deploymentName: '-x', sweep: 7}\n",
        "flag-model": seed.replace(b"name: nvidia/Qwen3.5-397B-A17B-NVFP4", b"name: --headless"),
        "results-bad-types": json.dumps({"topology": ["x"], "sweep": [{"concurrency": "x"}, 7, None],
                                         "accuracy": {"repeats": [True, "x"], "passed": 3}}).encode(),
        "results-many-points": json.dumps({"topology": "t", "sweep": [
            {"concurrency": i, "totalTokensPerSecondPerGpu": float(i % 977), "outputTokensPerSecondPerUser": float(i % 89)}
            for i in range(1000)]}).encode(),
    }


def main(work: Path) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))
    from qdd.cli import main as qdd

    files = {}
    for name, data in corpus().items():
        files[name] = work / f"{name}.yaml"
        files[name].write_bytes(data)
    out_png = work / "out.png"
    for name, path in files.items():
        for argv in (["plan", "-f", str(path)], ["render", "-f", str(path)], ["import-recipe", str(path)],
                     ["bench", "report", "-f", str(path), "-o", str(out_png)]):
            out, err = io.StringIO(), io.StringIO()
            t0, c0 = time.perf_counter(), time.process_time()
            code = 0
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    qdd(argv)
                except SystemExit as e:
                    code = int(e.code or 0) if not isinstance(e.code, str) else 1
                except BaseException as e:  # noqa: BLE001 — what the test must see, as a traceback would show it
                    code = -1
                    err.write(f"Traceback (escaped): {type(e).__name__}: {e}"[:500])
            print(json.dumps({"case": name, "argv": argv, "file": str(path), "code": code, "stderr": err.getvalue()[-4000:],
                              "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                              "rlimit_as_gib": resource.getrlimit(
                                  resource.RLIMIT_AS)[0] // GIB}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
