"""Benchmark variants of the KV-transfer preflight's fetch: several measurement configurations
(NIXL agent threads and workers, streams, bulk chunks, READ / WRITE / serve-side PUSH) against one
serve side, in one process, the first reported. The preflight Job measures one configuration
(``python -m qdd.preflight fetch``); this is the sweep bench/nixl-h200x2.sh runs.

    python bench/preflight_sweep.py --variants @bench/variants-explore.json <the fetch arguments>

``--variants``: a JSON list (or ``@file``) of objects with ``name``, ``op``, ``streams``,
``bulk_chunks``, ``num_threads``, ``split_batch_size``, ``num_workers``, ``telemetry``, ``moves``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator" / "src"))
from qdd.preflight.gpu.fetch import Variant  # noqa: E402
from qdd.preflight.gpu.program import _log, parser  # noqa: E402
from qdd.preflight.gpu.run import run_fetch  # noqa: E402


def main(argv: list[str]) -> int:
    text = None
    if "--variants" in argv:
        i = argv.index("--variants")
        text, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if text and text.startswith("@"):
        text = Path(text[1:]).read_text()
    variants = [Variant.from_json(d) for d in json.loads(text)] if text else None
    args = parser().parse_args(["fetch", *argv])
    return run_fetch(args, _log, variants)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
