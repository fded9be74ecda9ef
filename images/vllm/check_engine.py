"""Build-time check of the engine image (images/vllm/Dockerfile): the pinned versions are the ones
installed, and the pieces qdd's P/D deployments need are there. Reads package metadata only —
nothing is imported, since a build has no GPU."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm", required=True)
    ap.add_argument("--flashinfer", required=True)
    ap.add_argument("--nixl", required=True)
    a = ap.parse_args()
    problems = []
    for dist, want in (("vllm", a.vllm), ("flashinfer-python", a.flashinfer), ("nixl-cu13", a.nixl)):
        try:
            have = metadata.version(dist)
        except metadata.PackageNotFoundError:
            problems.append(f"{dist} is not installed")
            continue
        if have != want:
            problems.append(f"{dist} is {have}, not {want}")

    def has(dist: str, suffix: str) -> bool:
        try:
            return any(str(f).replace("\\", "/").endswith(suffix) for f in metadata.files(dist) or [])
        except metadata.PackageNotFoundError:
            return False

    # --gdn-prefill-backend flashinfer calls flashinfer.gdn_prefill.chunk_gated_delta_rule.
    if not (has("flashinfer-python", "flashinfer/gdn_prefill.py") or has("flashinfer-python", "flashinfer/gdn_prefill/__init__.py")):
        problems.append("flashinfer-python has no flashinfer.gdn_prefill (the GDN prefill kernel)")
    # The NixlConnector imports `nixl._api`; the `nixl` package provides that name.
    if not (has("nixl", "nixl/_api.py") or has("nixl", "nixl/__init__.py")):
        problems.append("the `nixl` import package is missing (pip install nixl)")
    if not has("vllm", "vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py"):
        problems.append("vllm has no NixlConnector")
    for p in problems:
        print(f"check_engine: {p}", file=sys.stderr)
    if not problems:
        print(f"check_engine: vllm {a.vllm}, flashinfer {a.flashinfer}, nixl-cu13 {a.nixl}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
