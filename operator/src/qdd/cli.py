"""``qdd``: plan, render, crd, import-recipe, run (the operator).

Bad input exits 2 with one ``error:`` line per bad field; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from .api import parse_resource
from .api.crd import crd
from .errors import SpecError
from .plan import build_plan
from .plan.summary import summary, table
from .render import render_all, to_yaml
from .yamlinput import MAX_BYTES, InputError, load_documents

EXIT_INVALID = 2


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read(MAX_BYTES + 1)


def _documents(paths: list[str]) -> list[tuple[str, Any]]:
    docs = []
    for p in paths:
        text = sys.stdin.read(MAX_BYTES + 1) if p == "-" else _read(p)
        try:
            found = load_documents(text)
        except InputError as e:
            print(f"error: {p}: {e}", file=sys.stderr)
            raise SystemExit(EXIT_INVALID) from None
        if not found:
            print(f"error: {p}: no QwenDisaggDeployment in it", file=sys.stderr)
            raise SystemExit(EXIT_INVALID)
        docs += [(p if len(found) == 1 else f"{p} (document {i + 1})", doc) for i, doc in enumerate(found)]
    return docs


def _plans(paths: list[str]) -> list[Any]:
    plans, failed = [], False
    for path, doc in _documents(paths):
        try:
            plans.append(build_plan(parse_resource(doc)))
        except SpecError as e:
            failed = True
            for err in e.errors:
                print(f"error: {path}: {err}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 — a qdd bug: say so in one line, as the operator does
            failed = True
            print(f"error: {path}: qdd could not plan this resource ({type(e).__name__}: {e}); this is a qdd bug: "
                  "report it with the resource", file=sys.stderr)
    if failed:
        raise SystemExit(EXIT_INVALID)
    return plans


def cmd_plan(args: argparse.Namespace) -> None:
    plans = _plans(args.filename)
    if args.output == "json":
        out = [summary(p) for p in plans]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, sort_keys=True))
    else:
        print("\n".join(table(p) for p in plans), end="")


def cmd_render(args: argparse.Namespace) -> None:
    objs = []
    for p in _plans(args.filename):
        objs += render_all(p, gang=args.placement == "gang")
    sys.stdout.write(to_yaml(objs))


def cmd_crd(args: argparse.Namespace) -> None:
    text = yaml.safe_dump(crd(), sort_keys=False, width=100)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


def cmd_import_recipe(args: argparse.Namespace) -> None:
    from .recipe import RecipeError, import_recipe

    try:
        obj = import_recipe(yaml.safe_load(Path(args.recipe).read_text()), name=args.name, image=args.image)
    except RecipeError as e:
        for key, msg in e.errors:
            print(f"error: {args.recipe}: {key}: {msg}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))


def cmd_run(args: argparse.Namespace) -> None:
    from .controller.main import run

    run(namespaces=args.namespace, metrics_port=args.metrics_port, liveness_port=args.liveness_port,
        resync_seconds=args.resync_seconds, peering=args.peering, priority=args.priority,
        peering_lifetime=args.peering_lifetime)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qdd", description="Prefill/decode disaggregated vLLM on Kubernetes.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print the sizing of a QwenDisaggDeployment")
    p.add_argument("-f", "--filename", action="append", required=True, help="CR file (repeatable; - for stdin)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_plan)
    r = sub.add_parser("render", help="print every Kubernetes object the operator would apply")
    r.add_argument("-f", "--filename", action="append", required=True, help="CR file (repeatable; - for stdin)")
    r.add_argument("--placement", choices=["gang", "affinity"], default="gang",
                   help="gang (default): Workload/PodGroup objects for a cluster that serves the Workload API "
                        "(scheduling.k8s.io/v1alpha2, gang and topology-aware scheduling on); affinity: the fallback "
                        "for a cluster without it, a pod affinity on the NVLink clique (docs/placement.md)")
    r.set_defaults(func=cmd_render)
    c = sub.add_parser("crd", help="print the CustomResourceDefinition")
    c.add_argument("-o", "--output", help="write to this file instead of stdout")
    c.set_defaults(func=cmd_crd)
    i = sub.add_parser("import-recipe", help="turn an srt-slurm recipe into a QwenDisaggDeployment")
    i.add_argument("recipe")
    i.add_argument("--name", help="metadata.name (default: from the recipe)")
    i.add_argument("--image", default="qdd/vllm:0.33.0-cu13-arm64", help="engine image")
    i.set_defaults(func=cmd_import_recipe)
    o = sub.add_parser("run", help="run the operator")
    o.add_argument("-n", "--namespace", action="append", help="watch only these namespaces (default: all)")
    o.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (default 8080)")
    o.add_argument("--liveness-port", type=int, default=8081, help="kopf liveness endpoint /healthz port (default 8081)")
    o.add_argument("--resync-seconds", type=float, default=60.0,
                   help="reconcile every resource at least this often (default 60)")
    o.add_argument("--peering", metavar="NAME",
                   help="run as one of several replicas: kopf peering through the kopf.dev peering object NAME "
                        "(mandatory; the replica of highest priority reconciles). Default: standalone")
    o.add_argument("--priority", type=int, help="this replica's peering priority (default: from POD_ID or the host name)")
    o.add_argument("--peering-lifetime", type=int, default=15,
                   help="seconds a replica's keep-alive stays valid; the hand-over time after a crash (default 15)")
    o.set_defaults(func=cmd_run)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # `qdd render ... | head`: the reader left; not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except FileNotFoundError as e:
        print(f"error: {e.filename}: no such file", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    except OSError as e:
        print(f"error: {e.filename}: {e.strerror}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    except UnicodeDecodeError as e:
        print(f"error: not UTF-8 text: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    except yaml.YAMLError as e:
        print(f"error: not valid YAML: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None


if __name__ == "__main__":
    main()
