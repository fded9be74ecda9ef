"""``qdd``: plan, render, crd, import-recipe, bench report, run (the operator).

Bad input exits 2 with one ``error:`` line per bad field; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from . import labels
from .api import parse_resource
from .api.benchmark import KIND as BENCHMARK_KIND
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
        if isinstance(doc, dict) and doc.get("kind") == BENCHMARK_KIND and str(doc.get("apiVersion", "")).startswith(
                f"{labels.GROUP}/"):
            # `qdd import-recipe` writes the deployment and its benchmark into one file.
            print(f"note: {path}: a {BENCHMARK_KIND}, not planned (kubectl apply it with the deployment)", file=sys.stderr)
            continue
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
    if not plans:
        print(f"error: {', '.join(paths)}: no {labels.KIND} in it", file=sys.stderr)
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
    from .api.benchmark_crd import benchmark_crd

    text = yaml.safe_dump(benchmark_crd() if args.kind == "benchmark" else crd(), sort_keys=False, width=100)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


def _write_imported(done: list[Any], out_dir: str | None) -> None:
    """The objects to stdout (one YAML stream) or one file per recipe in ``out_dir``, then the notes
    to stderr (the objects first: a reader that stops early still gets them)."""
    if out_dir is None:
        sys.stdout.write(yaml.safe_dump_all([o for imp in done for o in imp.objects()], sort_keys=False))
    else:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for imp in done:
            target = Path(out_dir) / f"{imp.deployment['metadata']['name']}.yaml"
            target.write_text(yaml.safe_dump_all(imp.objects(), sort_keys=False))
            print(f"wrote {target}", file=sys.stderr)
    for imp in done:
        for note in imp.notes:
            print(f"note: {imp.source}: {note}", file=sys.stderr)


def cmd_import_recipe(args: argparse.Namespace) -> None:
    from .recipe import RecipeError
    from .recipe.objects import import_directory, import_objects

    if Path(args.recipe).is_dir():
        if args.name:
            print("error: --name: names one recipe; a directory's recipes are named from their name keys",
                  file=sys.stderr)
            raise SystemExit(EXIT_INVALID)
        done, errors = import_directory(Path(args.recipe), args.image)
        for path, key, msg in errors:
            print(f"error: {path}: {key}: {msg}", file=sys.stderr)
        if errors:
            raise SystemExit(EXIT_INVALID)
        _write_imported(done, args.output_dir)
        return
    try:
        imp = import_objects(yaml.safe_load(Path(args.recipe).read_text()), name=args.name, image=args.image,
                             source=args.recipe)
    except RecipeError as e:
        for key, msg in e.errors:
            print(f"error: {args.recipe}: {key}: {msg}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    _write_imported([imp], args.output_dir)


def _configmap_results(ref: str) -> str:
    """``results.json`` of ConfigMap ``NAMESPACE/NAME`` (or ``NAME`` in default), read with the
    current kubeconfig."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    ns, _, name = ref.rpartition("/")
    config.load_kube_config()
    try:
        cm = client.CoreV1Api().read_namespaced_config_map(name, ns or "default")
    except ApiException as e:
        print(f"error: configmap {ns or 'default'}/{name}: {e.reason}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    text = (cm.data or {}).get("results.json")
    if text is None:
        print(f"error: configmap {ns or 'default'}/{name}: no results.json key (a benchmark's <name>-results "
              "ConfigMap has one)", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    return str(text)


def cmd_bench_report(args: argparse.Namespace) -> None:
    from .bench.report import ReportError, figure, load, points, table

    sources = [(p, _read(p)) for p in args.filename or []]
    sources += [(f"configmap {ref}", _configmap_results(ref)) for ref in args.configmap or []]
    if not sources:
        print("error: give -f FILE (a saved results.json) or --configmap NS/NAME, or both", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    try:
        docs = [load(text, src) for src, text in sources]
        pts = [p for (src, _), d in zip(sources, docs, strict=True) for p in points(d, src)]
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    md = table(docs, pts)
    if args.table:
        Path(args.table).write_text(md)
    else:
        sys.stdout.write(md)
    if pts:
        figure(pts, Path(args.output))
        print(f"wrote {args.output} ({len(pts)} points, {len({p.topology for p in pts})} topologies)", file=sys.stderr)
    else:
        print("no sweep points: no figure, accuracy table only", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> None:
    from .controller.main import run
    from .controller.watching import WatchTimeouts

    run(namespaces=args.namespace, metrics_port=args.metrics_port, liveness_port=args.liveness_port,
        resync_seconds=args.resync_seconds, peering=args.peering, priority=args.priority,
        peering_lifetime=args.peering_lifetime, prometheus_url=args.prometheus_url,
        watch=WatchTimeouts(args.watch_server_timeout, args.watch_client_timeout, args.watch_inactivity_timeout))


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
    c = sub.add_parser("crd", help="print a CustomResourceDefinition")
    c.add_argument("-o", "--output", help="write to this file instead of stdout")
    c.add_argument("--kind", choices=["deployment", "benchmark"], default="deployment",
                   help="QwenDisaggDeployment (default) or QwenDisaggBenchmark")
    c.set_defaults(func=cmd_crd)
    i = sub.add_parser("import-recipe", help="turn srt-slurm recipes into a QwenDisaggDeployment and QwenDisaggBenchmark")
    i.add_argument("recipe", help="a recipe file, or a directory: every *.yaml in it")
    i.add_argument("-o", "--output-dir", help="write <name>.yaml per recipe here instead of one stream to stdout")
    i.add_argument("--name", help="metadata.name (default: from the recipe)")
    i.add_argument("--image", default="qdd/vllm:0.33.0-cu13-arm64", help="engine image")
    i.set_defaults(func=cmd_import_recipe)
    b = sub.add_parser("bench", help="benchmark results (QwenDisaggBenchmark)")
    bsub = b.add_subparsers(dest="bench_command", required=True)
    rep = bsub.add_parser("report", help="Pareto figure (PNG) and markdown table from benchmarks' results")
    rep.add_argument("-f", "--filename", action="append", help="a saved results.json (repeatable)")
    rep.add_argument("--configmap", action="append", help="NAMESPACE/NAME of a <benchmark>-results ConfigMap (repeatable)")
    rep.add_argument("-o", "--output", default="pareto.png", help="PNG to write (default pareto.png)")
    rep.add_argument("--table", help="write the markdown table here (default: stdout)")
    rep.set_defaults(func=cmd_bench_report)
    o = sub.add_parser("run", help="run the operator")
    o.add_argument("-n", "--namespace", action="append", help="watch only these namespaces (default: all)")
    o.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (default 8080)")
    o.add_argument("--liveness-port", type=int, default=8081, help="kopf liveness endpoint /healthz port (default 8081)")
    o.add_argument("--resync-seconds", type=float, default=60.0,
                   help="reconcile every resource at least this often (default 60)")
    o.add_argument("--prometheus-url", metavar="URL",
                   help="read engine metrics from this Prometheus for deployments without spec.observe.prometheus "
                        "(default: $QDD_PROMETHEUS_URL, else each engine pod's /metrics; docs/observability.md)")
    o.add_argument("--peering", metavar="NAME",
                   help="run as one of several replicas: kopf peering through the kopf.dev peering object NAME "
                        "(mandatory; the replica of highest priority reconciles). Default: standalone")
    o.add_argument("--priority", type=int, help="this replica's peering priority (default: from POD_ID or the host name)")
    o.add_argument("--peering-lifetime", type=int, default=15,
                   help="seconds a replica's keep-alive stays valid; the hand-over time after a crash (default 15)")
    # Defaults as in qdd.controller.watching.WatchTimeouts, which says why.
    o.add_argument("--watch-inactivity-timeout", type=float, default=70.0, metavar="SECONDS",
                   help="a watch stream with no event (bookmarks included) for this long is dropped and watched "
                        "again (default 70; the API server sends a bookmark about every 60 s)")
    o.add_argument("--watch-server-timeout", type=int, default=300, metavar="SECONDS",
                   help="the API server ends each watch request after this long (default 300)")
    o.add_argument("--watch-client-timeout", type=float, default=330.0, metavar="SECONDS",
                   help="the operator ends a watch request after this long at most (default 330)")
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
