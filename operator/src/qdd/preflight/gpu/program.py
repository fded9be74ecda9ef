"""``python -m qdd.preflight serve|fetch`` — the KV-transfer preflight program, run on the GPUs.

It needs only the stdlib, nixl and torch (numpy with ``--device cpu``) and imports nothing of qdd
but the preflight's contract (:mod:`qdd.preflight.layout`, :mod:`qdd.preflight.result`,
:mod:`qdd.preflight.ucx`; checked by import-linter), so it runs in the engine image without the
operator's dependencies. It reports facts; the operator judges them (:mod:`qdd.preflight.verdict`).
``python -m qdd.preflight layout`` (operator side, :mod:`qdd.preflight.planned`) prints a layout.

    python -m qdd.preflight layout --model nvidia/Qwen3.5-397B-A17B-NVFP4 --kv-cache-dtype bfloat16 > l.json
    CUDA_VISIBLE_DEVICES=0 python -m qdd.preflight serve --layout l.json --port 5600 &
    python -m qdd.preflight fetch --layout l.json --server-host 127.0.0.1 --server-port 5600 --gpu 1

fetch prints one JSON result (see :mod:`qdd.preflight.result`) and exits 0 when it measured with
verified bytes, 1 when the bytes read differ from those written, 2 when it could not measure;
serve prints its own small JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ..layout import DEFAULT_BULK_BYTES, DEFAULT_REQUESTS, TransferLayout


def _log(msg: str) -> None:
    print(f"[qdd-preflight {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _side_channel_port() -> int:
    return int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"))


def _load_layout(args: argparse.Namespace) -> TransferLayout:
    if args.layout_json:
        return TransferLayout.from_json(json.loads(args.layout_json))
    if args.layout:
        with open(args.layout) as f:
            return TransferLayout.from_json(json.load(f))
    raise SystemExit("give --layout FILE or --layout-json JSON (python -m qdd.preflight layout prints one)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layout", help="layout JSON file (python -m qdd.preflight layout)")
    p.add_argument("--layout-json", help="layout JSON inline")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device index of this side")
    p.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="requests' worth of pages registered")
    p.add_argument("--bulk-bytes", type=int, default=DEFAULT_BULK_BYTES)
    p.add_argument("--alloc", choices=("cudamalloc", "vmm"), default="cudamalloc",
                   help="vmm: cuMemCreate with FABRIC handles where granted (multi-node NVLink)")
    p.add_argument("--num-threads", type=int, default=0, help="UCX backend num_threads (NIXL splits transfers)")
    p.add_argument("--split-batch-size", type=int, default=0, help="UCX backend split_batch_size")
    p.add_argument("--num-workers", type=int, default=0, help="UCX backend num_workers (shared workers)")
    p.add_argument("--result-file", help="also write the compact result here (the termination message)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m qdd.preflight", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="register a rank's cache and answer fetch sides")
    _common(s)
    s.add_argument("--port", type=int, default=_side_channel_port(), help="NIXL listener port (side channel)")
    s.add_argument("--timeout", type=float, default=900.0, help="exit after this many seconds regardless")
    s.add_argument("--exit-after", type=int, default=1, help="exit after this many fetch sides said a final bye")
    f = sub.add_parser("fetch", help="read, verify and time; print one JSON result")
    _common(f)
    f.add_argument("--server-host", required=True, help="serve side's address (IP or DNS name)")
    f.add_argument("--server-port", type=int, default=_side_channel_port())
    f.add_argument("--op", default="READ", choices=("READ", "PUSH", "WRITE"))
    f.add_argument("--streams", type=int, default=1, help="Python threads posting shares of one transfer")
    f.add_argument("--bulk-chunks", type=int, default=1, help="descriptors the bulk buffer is split into")
    f.add_argument("--warmup", type=int, default=3)
    f.add_argument("--reps", type=int, default=20)
    f.add_argument("--budget-s", type=float, default=20.0, help="stop repeating a move after this long (≥3 reps)")
    f.add_argument("--connect-timeout", type=float, default=300.0)
    f.add_argument("--peer-copy", choices=("auto", "off", "pull"), default="auto")
    f.add_argument("--peer-src", type=int, help="source GPU of the peer copy (default: 0, or 1 when --gpu is 0)")
    f.add_argument("--ucx-log", help="keep the captured UCX/NIXL output here")
    return ap


def _agent_opts(args: argparse.Namespace) -> Any:
    from .wire import AgentOptions

    return AgentOptions(num_threads=args.num_threads, split_batch_size=args.split_batch_size,
                        num_workers=args.num_workers)


def _serve_cmd(args: argparse.Namespace) -> int:
    from .serve import serve

    stats = serve(_load_layout(args), device=args.device, gpu=args.gpu, alloc=args.alloc, port=args.port,
                  requests=args.requests,
                  bulk_bytes=args.bulk_bytes, opts=_agent_opts(args), timeout=args.timeout,
                  exit_after=args.exit_after, log=_log)
    text = json.dumps(stats, separators=(",", ":"))
    print(text, flush=True)
    if args.result_file:
        with open(args.result_file, "w") as fh:
            fh.write(text[:4096])
    return 0 if stats["byes"] >= 1 else 3


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "serve":
        return _serve_cmd(args)
    from .run import run_fetch

    return run_fetch(args, _log)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
