"""``fetch``: capture UCX's output, measure each variant, compose and judge the one JSON result."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import traceback
from typing import Any

from ..result import compact
from ..ucx import ENV_DEFAULTS, OutputCapture, parse


def _variant(args: argparse.Namespace) -> Any:
    """The one configuration the command line gives (the Job's); a benchmark sweeps several
    (bench/preflight_sweep.py passes them to :func:`run_fetch`)."""
    from .fetch import Variant
    from .wire import AgentOptions

    return Variant(op=args.op, streams=args.streams, bulk_chunks=args.bulk_chunks,
                   agent=AgentOptions(num_threads=args.num_threads, split_batch_size=args.split_batch_size,
                                      num_workers=args.num_workers))


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("nixl", "nixl-cu13", "nixl-cu12", "torch"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def _headline(primary: dict[str, Any], name: str, key: str) -> Any:
    m = primary.get(name) or {}
    return m.get(key)


def _layout(args: argparse.Namespace) -> Any:
    from ..layout import TransferLayout

    if args.layout_json:
        return TransferLayout.from_json(json.loads(args.layout_json))
    with open(args.layout) as fh:
        return TransferLayout.from_json(json.load(fh))


def _gpu_and_peer_copy(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Record the GPU in ``cfg``; measure the torch peer copy the NIXL numbers are compared with."""
    if args.device != "cuda":
        return None
    import torch

    from .fetch import peer_copy

    cfg["gpu_name"] = torch.cuda.get_device_name(args.gpu)
    cfg["visible_gpus"] = torch.cuda.device_count()
    if args.peer_copy == "off":
        return None
    src = args.peer_src if args.peer_src is not None else (1 if args.gpu == 0 else 0)
    return peer_copy(src, args.gpu, args.bulk_bytes, pull=args.peer_copy == "pull")


def _facts(p: dict[str, Any], peer: dict[str, Any] | None, layout: Any, f: Any) -> dict[str, Any]:
    """The result's headline facts, from the first (reported) variant ``p``."""
    return dict(
        bulk_gbps=_headline(p, "bulk", "gbps"),
        peer_copy_gbps=peer["gbps"] if peer else None,
        request_ms={"per_page": _headline(p, "per_page", "median_ms"),
                    "coalesced": _headline(p, "coalesced", "median_ms")},
        descriptors_per_request={"per_page": layout.descriptors_per_request_per_page,
                                 "coalesced": layout.descriptors_per_request_coalesced,
                                 "posted": {m: _headline(p, m, "posted_descriptors")
                                            for m in ("per_page", "coalesced", "nixl_merge") if m in p}},
        verified=f.mismatched == 0 and f.verified_bytes > 0, verified_bytes=f.verified_bytes,
        mismatched_bytes=f.mismatched, mismatch=f.first_mismatch)


def run_fetch(args: argparse.Namespace, log: Any, variants: list[Any] | None = None) -> int:
    """Measure ``variants`` (default: the command line's one) in order against one serve side,
    report the first; print the result and write it to ``--result-file``. Returns the exit code."""
    for k, v in ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    cap = OutputCapture(args.ucx_log)
    started = time.time()
    result: dict[str, Any] = {"error": None}
    variants_out: list[dict[str, Any]] = []
    cfg: dict[str, Any] = {"host": socket.gethostname(), "server": f"{args.server_host}:{args.server_port}",
                           "requests": args.requests, "bulk_bytes": args.bulk_bytes, "warmup": args.warmup,
                           "reps": args.reps, "device": args.device, "gpu": args.gpu,
                           "env": {k: v for k, v in sorted(os.environ.items())
                                   if k.startswith(("UCX_", "NIXL_", "CUDA_VISIBLE", "VLLM_NIXL"))}}
    try:
        from .fetch import Fetcher, resolve

        layout = _layout(args)
        cfg.update(layout.to_json())
        cfg.update(versions=_versions())
        variants = variants or [_variant(args)]
        cfg["variants"] = [v.to_json() for v in variants]
        cfg["op"], cfg["variant"] = variants[0].op, variants[0].name
        ip = resolve(args.server_host, args.connect_timeout)
        peer = _gpu_and_peer_copy(args, cfg)
        result["peer_copy"] = peer
        f = Fetcher(layout, args.device, args.gpu, args.requests, args.bulk_bytes, log, args.alloc)
        cfg["alloc"] = f.mem.allocation
        for i, variant in enumerate(variants):
            log(f"fetch: variant {i} {variant.to_json()}")
            variants_out.append(f.variant(variant, i, ip, args.server_port, i == len(variants) - 1, args.warmup,
                                          args.reps, args.budget_s, args.connect_timeout))
        cfg["serve_alloc"] = f.serve_alloc
        result.update(_facts(variants_out[0], peer, layout, f))
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        log(traceback.format_exc())
    finally:
        cap.stop()
    used = parse(cap.text(), "cuda" if args.device == "cuda" else "host")
    result["transports"] = used.data
    result["transports_detail"] = {"source": used.source, "lanes": used.lanes, "evidence": used.evidence,
                                   "log": args.ucx_log}
    result["variants"] = variants_out
    result["config"] = cfg
    result["elapsed_s"] = round(time.time() - started, 1)
    # Facts only: the operator judges them against the spec's thresholds (qdd.preflight.verdict).
    # The exit code says what ran: 0 measured with verified bytes, 1 the bytes differ, 2 no measurement.
    verified = bool(result.get("verified"))
    if result["error"] or not verified:
        tail = cap.text().splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
    if args.result_file:
        with open(args.result_file, "w") as fh:
            fh.write(compact(result))
    print(json.dumps(result, indent=1, sort_keys=False), flush=True)
    if not args.ucx_log:
        os.unlink(cap.path)
    return 2 if result["error"] else 0 if verified else 1
