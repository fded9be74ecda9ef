"""``qdd``: plan, render, crd, import-recipe, bench report, run (the operator).

Bad input exits 2 with one ``error:`` line per bad field; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from . import labels
from .api import parse_resource
from .api.benchmark import KIND as BENCHMARK_KIND
from .api.benchmark import parse_benchmark_spec
from .api.crd import crd
from .errors import SpecError
from .plan import build_plan
from .plan.summary import summary, table
from .render import render_all, to_yaml
from .yamlinput import MAX_BYTES, InputError, load_documents

EXIT_INVALID = 2


def _fail(*lines: str) -> NoReturn:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    raise SystemExit(EXIT_INVALID)


def _read(path: str) -> str:
    """The text of ``path`` (``-``: stdin): at most MAX_BYTES + 1 bytes are read (the loaders refuse
    more), and a file that is not UTF-8 is named with the offending byte."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_BYTES + 1)
    else:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(f"{path}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}): save it as UTF-8")


def _documents(paths: list[str]) -> list[tuple[str, Any]]:
    docs = []
    for p in paths:
        text = _read(p)
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
            # `qdd import-recipe` writes the deployment and its benchmark into one file: the benchmark
            # is checked as the API server checks it, not planned.
            try:
                parse_benchmark_spec(doc.get("spec"))
            except SpecError as e:
                failed = True
                for err in e.errors:
                    print(f"error: {path}: {err}", file=sys.stderr)
                continue
            print(f"note: {path}: a {BENCHMARK_KIND}, checked, not planned (kubectl apply it with the deployment)",
                  file=sys.stderr)
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
    if args.slo or args.gpu_budget is not None:
        return _plan_slo(args, plans)
    if args.rate is not None or args.concurrency is not None:
        args.predict = True
    preds = _perf(lambda c: c.predictions(plans, args.perf_model, args.concurrency, args.rate, args.mtp_accepted)) \
        if args.predict else [None] * len(plans)
    if args.output == "json":
        out = [summary(p) | ({"prediction": pr} if pr else {}) for p, pr in zip(plans, preds, strict=True)]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, sort_keys=True))
    else:
        from .perf.predict import table as predicted

        print("\n".join(table(p) + (predicted(pr) if pr else "") for p, pr in zip(plans, preds, strict=True)), end="")


def _perf(call: Any) -> Any:
    """Runs a performance command (qdd.perf.commands); its CommandError is one ``error:`` line."""
    from .perf import commands

    try:
        return call(commands)
    except commands.CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None


def _plan_slo(args: argparse.Namespace, plans: list[Any]) -> None:
    if len(plans) != 1 or len(args.filename) != 1 or not args.slo:
        print("error: --slo: give one base deployment (-f) and --slo ttft=MS,tpot=MS with --rate or --gpu-budget",
              file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    base = next(d for _, d in _documents(args.filename) if isinstance(d, dict) and d.get("kind") == labels.KIND)
    text, dep, data = _perf(lambda c: c.recommend(base, plans[0], args.slo, args.rate, args.gpu_budget,
                                                  args.perf_model, args.mtp_accepted, args.name))
    out = yaml.safe_dump(dep, sort_keys=False)
    if args.write:
        Path(args.write).write_text(f"# Written by qdd plan --slo {args.slo} "
                                    + (f"--rate {args.rate:g}" if args.rate is not None else f"--gpu-budget {args.gpu_budget}")
                                    + f" from {metadata_name(base)}; docs/performance-model.md\n" + out)
    if args.output == "json":
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif args.write:
        sys.stdout.write(text + f"wrote {args.write}\n")
    else:
        sys.stderr.write(text)
        sys.stdout.write(out)


def metadata_name(doc: dict[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("name", "?"))


def cmd_perf_profile(args: argparse.Namespace) -> None:
    plans = _plans(args.filename)
    if len(plans) != 1:
        print("error: -f: qdd perf profile takes one deployment", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    results = [(p, _read(p)) for p in args.calibrate or []]
    results += [(f"configmap {ref}", _configmap_results(ref)) for ref in args.calibrate_configmap or []]
    sys.stdout.write(_perf(lambda c: c.profile_document(plans[0], args.perf_model, args.mtp_accepted, results,
                                                        args.output)))


def cmd_render(args: argparse.Namespace) -> None:
    from .plan.weight_cache import DEFAULT_ROOT, ROOT_PATTERN

    root = args.weight_cache_root or os.environ.get("QDD_WEIGHT_CACHE_ROOT") or DEFAULT_ROOT
    if not ROOT_PATTERN.match(root) or ".." in root.split("/"):
        raise SystemExit(f"error: --weight-cache-root {root!r}: an absolute path without '..' (the chart's "
                         "weightCache.hostPath)")
    objs = []
    for p in _plans(args.filename):
        objs += render_all(p, gang=args.placement == "gang", weight_cache_root=root)
    sys.stdout.write(to_yaml(objs))


def cmd_weights_digest(args: argparse.Namespace) -> None:
    """The digest spec.model.cache.digest pins: sha256 of the folder's manifest (qdd.weightcache.program)."""
    from .weightcache.program import hash_tree, manifest_digest

    folder = Path(args.dir)
    if not folder.is_dir():
        raise SystemExit(f"error: {folder}: not a folder")
    hashes = hash_tree(folder)
    if not hashes:  # the digest of an empty manifest pins nothing: a wrong folder, not a checkpoint
        raise SystemExit(f"error: {folder}: holds no files (give the checkpoint's folder, with its config.json)")
    print(manifest_digest(hashes))


def cmd_crd(args: argparse.Namespace) -> None:
    from .api.benchmark_crd import benchmark_crd
    from .api.rolescale import role_scale_crd

    if args.kind == "tray-claims-policy":
        from .render.trayclaims import admission_policy

        text = yaml.safe_dump_all(admission_policy(), sort_keys=False, width=1 << 16)
    else:
        made = {"benchmark": benchmark_crd, "rolescale": role_scale_crd}.get(args.kind, crd)()
        text = yaml.safe_dump(made, sort_keys=False, width=100)
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
    from .recipe.objects import import_directory, import_objects, read_recipe

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
        imp = import_objects(read_recipe(Path(args.recipe)), name=args.name, image=args.image, source=args.recipe)
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

    from kubernetes.config.config_exception import ConfigException

    ns, _, name = ref.rpartition("/")
    try:
        config.load_kube_config()
        cm = client.CoreV1Api().read_namespaced_config_map(name, ns or "default", _request_timeout=30)
    except ApiException as e:
        _fail(f"configmap {ns or 'default'}/{name}: {e.reason}")
    except (ConfigException, OSError, ValueError) as e:
        _fail(f"configmap {ns or 'default'}/{name}: cannot reach the cluster ({type(e).__name__}: {str(e)[:200]}); "
              "check the kubeconfig (KUBECONFIG) and the context")
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
        _fail(*str(e).splitlines())
    md = table(docs, pts)
    if args.table:
        Path(args.table).write_text(md)
    else:
        sys.stdout.write(md)
    if pts:
        try:
            figure(pts, Path(args.output))
        except ImportError:
            sys.stdout.flush()
            _fail(f"{args.output}: the figure needs matplotlib, which is not installed: pip install matplotlib "
                  "(the table above is complete)")
        print(f"wrote {args.output} ({len(pts)} points, {len({p.topology for p in pts})} topologies)", file=sys.stderr)
    else:
        print("no sweep points: no figure, accuracy table only", file=sys.stderr)
    if args.profile:
        _report_against_profile(args, sources)


def _report_against_profile(args: argparse.Namespace, sources: list[tuple[str, str]]) -> None:
    """``--profile``: the benchmarks' points against a performance profile (qdd perf profile's
    JSON, or its ConfigMap's YAML): a second figure and table. Pure: no aiconfigurator needed."""
    from .perf import report
    from .perf.measured import MeasuredError, measured_points
    from .perf.profile import CONFIGMAP_KEY, calibrate, load_profile

    text = _read(args.profile)
    try:
        doc = yaml.safe_load(text)
        prof = load_profile(doc["data"][CONFIGMAP_KEY] if isinstance(doc, dict) and doc.get("kind") == "ConfigMap"
                            else text)
        measured = [m for src, t in sources for m in measured_points(t, src)[1]]
    except (MeasuredError, ValueError, KeyError, TypeError) as e:
        print(f"error: {args.profile}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    prof = calibrate(prof, measured)
    out = Path(args.output).with_name(Path(args.output).stem + "-vs-predicted.png")
    report.figure(prof, out)
    sys.stdout.write("\n" + report.table(prof))
    print(f"wrote {out} ({len(measured)} measured points against {prof.database})", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> None:
    from .controller.main import run
    from .controller.watching import WatchTimeouts

    run(namespaces=args.namespace, metrics_port=args.metrics_port, liveness_port=args.liveness_port,
        resync_seconds=args.resync_seconds, peering=args.peering, priority=args.priority,
        peering_lifetime=args.peering_lifetime, peer_restart_window=args.peer_restart_window,
        prometheus_url=args.prometheus_url, allowed_prometheus=args.allow_prometheus_url,
        watch=WatchTimeouts(args.watch_server_timeout, args.watch_client_timeout, args.watch_inactivity_timeout))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qdd", description="Prefill/decode disaggregated vLLM on Kubernetes.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print the sizing of a QwenDisaggDeployment")
    p.add_argument("-f", "--filename", action="append", required=True, help="CR file (repeatable; - for stdin)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    perf = p.add_argument_group("performance model (needs the perf extra: NVIDIA aiconfigurator; docs/performance-model.md)")
    perf.add_argument("--predict", action="store_true",
                      help="predict TTFT, TPOT and tokens/s/GPU of the topology at its workload (aiconfigurator's GB200 data)")
    perf.add_argument("--concurrency", type=int, help="predict at this many requests in flight (default: spec.workload.concurrency)")
    perf.add_argument("--rate", type=float, help="predict at this request rate (req/s); with --slo: the rate to size for")
    perf.add_argument("--slo", metavar="ttft=MS,tpot=MS",
                      help="recommend the layout and endpoint counts that meet these targets at --rate with the fewest "
                           "GPUs (or the most req/s within --gpu-budget), starting from the -f deployment")
    perf.add_argument("--gpu-budget", type=int, help="with --slo: at most this many GPUs, serving the most req/s")
    perf.add_argument("--write", metavar="FILE", help="with --slo: write the recommended QwenDisaggDeployment here")
    perf.add_argument("--name", help="with --slo: metadata.name of the recommended deployment (default: <name>-slo)")
    perf.add_argument("--perf-model", metavar="HF_ID",
                      help="the model id to look up in aiconfigurator's database (default: spec.model.name)")
    perf.add_argument("--mtp-accepted", type=float, metavar="N",
                      help="with spec.speculative: mean accepted draft tokens per decode step (aiconfigurator has no default)")
    p.set_defaults(func=cmd_plan)
    r = sub.add_parser("render", help="print every Kubernetes object the operator would apply")
    r.add_argument("-f", "--filename", action="append", required=True, help="CR file (repeatable; - for stdin)")
    r.add_argument("--weight-cache-root", default=None,
                   help="the trays' folder of node-local weight caches, as the operator has it (the chart's "
                        "weightCache.hostPath; default: $QDD_WEIGHT_CACHE_ROOT, else /var/lib/qdd/weights)")
    r.add_argument("--placement", choices=["gang", "affinity"], default="gang",
                   help="gang (default): Workload/PodGroup objects for a cluster that serves the Workload API "
                        "(scheduling.k8s.io/v1alpha2, gang and topology-aware scheduling on); affinity: the fallback "
                        "for a cluster without it, a pod affinity on the NVLink clique (docs/placement.md)")
    r.set_defaults(func=cmd_render)
    w = sub.add_parser("weights", help="the node-local weight cache (spec.model.cache)")
    wsub = w.add_subparsers(dest="weights_command", required=True)
    wd = wsub.add_parser("digest", help="print the digest of a checkpoint folder (spec.model.cache.digest)")
    wd.add_argument("dir", help="the checkpoint folder, as the claim holds it (the subPath)")
    wd.set_defaults(func=cmd_weights_digest)
    c = sub.add_parser("crd", help="print a CustomResourceDefinition")
    c.add_argument("-o", "--output", help="write to this file instead of stdout")
    c.add_argument("--kind", choices=["deployment", "benchmark", "rolescale", "tray-claims-policy"], default="deployment",
                   help="QwenDisaggDeployment (default), QwenDisaggBenchmark or QwenDisaggRoleScale (the per-role "
                        "scale adapter of spec.autoscaling, docs/autoscaling.md); tray-claims-policy: the "
                        "MutatingAdmissionPolicy that gives StatefulSet pods their tray's IMEX claim (docs/placement.md)")
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
    rep.add_argument("--profile", help="a performance profile (qdd perf profile -o json or -o configmap) of the "
                                       "benchmarked deployment: also plot and tabulate measured against predicted, "
                                       "<output>-vs-predicted.png")
    rep.set_defaults(func=cmd_bench_report)
    pf = sub.add_parser("perf", help="performance profiles (needs the perf extra: NVIDIA aiconfigurator)")
    pfsub = pf.add_subparsers(dest="perf_command", required=True)
    prof = pfsub.add_parser("profile", help="per-role latency against load per endpoint (the autoscaler reads it), "
                                            "calibrated by benchmark results")
    prof.add_argument("-f", "--filename", action="append", required=True, help="the QwenDisaggDeployment")
    prof.add_argument("-o", "--output", choices=["json", "configmap"], default="json",
                      help="json: the profile; configmap: the ConfigMap <name>-perf-profile to kubectl apply")
    prof.add_argument("--calibrate", action="append", metavar="RESULTS_JSON",
                      help="a finished QwenDisaggBenchmark's results.json of this deployment (repeatable)")
    prof.add_argument("--calibrate-configmap", action="append", metavar="NS/NAME",
                      help="the same from its <benchmark>-results ConfigMap (repeatable)")
    prof.add_argument("--perf-model", metavar="HF_ID", help="model id in aiconfigurator's database (default: spec.model.name)")
    prof.add_argument("--mtp-accepted", type=float, metavar="N", help="with spec.speculative: mean accepted draft tokens per step")
    prof.set_defaults(func=cmd_perf_profile)
    o = sub.add_parser("run", help="run the operator")
    o.add_argument("-n", "--namespace", action="append", help="watch only these namespaces (default: all)")
    o.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (default 8080)")
    o.add_argument("--liveness-port", type=int, default=8081, help="kopf liveness endpoint /healthz port (default 8081)")
    o.add_argument("--resync-seconds", type=float, default=60.0,
                   help="reconcile every resource at least this often (default 60)")
    o.add_argument("--peer-restart-window", type=float, default=30.0, metavar="SECONDS",
                   help="seconds with every prefill pod back and Ready and none replaced before decode is recycled "
                        "once for a burst of prefill replacements (default 30; docs/reliability.md#peer-restarts)")
    o.add_argument("--prometheus-url", metavar="URL",
                   help="read engine metrics from this Prometheus for deployments without spec.observe.prometheus "
                        "(default: $QDD_PROMETHEUS_URL, else each engine pod's /metrics; docs/observability.md)")
    o.add_argument("--allow-prometheus-url", action="append", metavar="URL",
                   help="a Prometheus spec.observe.prometheus.url may name (repeatable; default: "
                        "$QDD_PROMETHEUS_ALLOWED, space-separated). --prometheus-url is always allowed; any other "
                        "URL a resource names is not queried (docs/security.md)")
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
