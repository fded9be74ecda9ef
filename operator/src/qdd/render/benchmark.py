"""A QwenDisaggBenchmark and its deployment's plan → the benchmark's Jobs and ConfigMaps. Pure.

What is rendered, for benchmark *b* of deployment *d* (namespace of both):

- ConfigMap ``<b>-scripts``: ``results.py`` and ``gsm8k.py`` of :mod:`qdd.bench` (standard library
  only), mounted at ``/qdd-bench`` in every Job;
- per sweep concurrency *i* (in spec order) Job ``<b>-sweep-<i>``: ``vllm bench serve`` from the
  engine image against the router Service ``http://<d>-router.<ns>.svc:<router port>``
  (:func:`sweep_argv`), then ``results.py compact`` of its saved result into the termination message;
- Job ``<b>-accuracy``: ``gsm8k.py`` (:func:`accuracy_argv`), its JSON line into the termination message.

The Jobs use the deployment's engine image (or ``spec.image``), its pull secrets, the model volume
(the tokenizer: ``vllm bench serve`` builds the random prompts with it) and HF env; no GPU, no
ServiceAccount token. They run one at a time, in the order returned (the controller creates the next
when the previous finished): two would share the router and spoil both measurements.
Labels: ``qdd.dev/benchmark: <b>``, ``qdd.dev/benchmark-of: <d>``, ``qdd.dev/role: benchmark`` (never
prefill/decode: no engine selector may pick these pods), ``qdd.dev/step: sweep-<i> | accuracy``.
Placement: nodes of the engine image's architecture (``kubernetes.io/arch`` of the GPU kind: a GB200
node's Grace CPUs run it), tolerating the GPU taint and the deployment's tolerations; no GPU asked.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from .. import labels, names
from ..api.benchmark import AccuracySpec, BenchmarkSpec, SweepSpec
from ..plan import Plan

BENCHMARK = f"{labels.GROUP}/benchmark"
STEP = f"{labels.GROUP}/step"
ROLE = "benchmark"
SCRIPTS_DIR = "/qdd-bench"
DATA_DIR = "/gsm8k"
RESULT_DIR = "/tmp/qdd-bench"
TERMINATION_LOG = "/dev/termination-log"
_BENCH_SRC = Path(__file__).resolve().parent.parent / "bench"


def scripts_name(bench: str) -> str:
    return f"{bench}-scripts"


def results_name(bench: str) -> str:
    return f"{bench}-results"


def step_names(spec: BenchmarkSpec) -> list[str]:
    """Steps in run order: ``sweep-0`` … then ``accuracy``."""
    return [f"sweep-{i}" for i in range(len(spec.sweep.concurrencies) if spec.sweep else 0)] + (
        ["accuracy"] if spec.accuracy else [])


def router_url(plan: Plan) -> str:
    return f"http://{names.router(plan.name)}.{plan.namespace}.svc:{plan.spec.router.port}"


def sweep_argv(sweep: SweepSpec, concurrency: int, base_url: str, served: str, tokenizer: str) -> list[str]:
    """``vllm bench serve`` for one concurrency. sa-bench's [ratio × L, L] range → vLLM's
    L' (1 ± r'): L' = L (1 + ratio) / 2, r' = (1 - ratio) / (1 + ratio) (vllm/benchmarks/datasets)."""
    ratio = sweep.random_range_ratio
    mid = lambda length: max(1, round(length * (1 + ratio) / 2))  # noqa: E731 — two uses, one line
    argv = ["vllm", "bench", "serve", "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", served, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(mid(sweep.isl)), "--random-output-len", str(mid(sweep.osl)),
            "--random-range-ratio", f"{(1 - ratio) / (1 + ratio):.6g}",
            "--num-prompts", str(sweep.prompts_per_concurrency * concurrency),
            "--num-warmups", str(sweep.warmups_per_concurrency * concurrency),
            "--max-concurrency", str(concurrency),
            "--request-rate", "inf" if sweep.request_rate is None else f"{sweep.request_rate:g}",
            "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", RESULT_DIR, "--result-filename", "result.json"]
    return argv + (["--ignore-eos"] if sweep.ignore_eos else [])


def accuracy_argv(acc: AccuracySpec, base_url: str, served: str, data: str | None) -> list[str]:
    """``gsm8k.py`` (:mod:`qdd.bench.gsm8k`); ``data`` None: the hub."""
    argv = ["python3", f"{SCRIPTS_DIR}/gsm8k.py", "--base-url", base_url, "--model", served,
            *(["--data", data] if data else ["--hub"]), "--shots", str(acc.shots), "--repeats", str(acc.repeats),
            "--max-tokens", str(acc.max_tokens)]
    return argv + (["--examples", str(acc.examples)] if acc.examples else [])


BENCHMARK_OF = f"{labels.GROUP}/benchmark-of"
"""The deployment a benchmark's objects measure. Not ``qdd.dev/deployment``: the deployment's own
reconcile lists (and would count) what carries that label."""


def _labels(bench: str, plan: Plan, step: str | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "qdd", "app.kubernetes.io/instance": bench, labels.MANAGED_BY: labels.FIELD_MANAGER,
           labels.PART_OF: "qdd", BENCHMARK: bench, BENCHMARK_OF: plan.name, labels.ROLE: ROLE}
    return out | ({STEP: step} if step else {})


PINNED_TOKENIZER = ("import sys; from huggingface_hub import snapshot_download as d; "
                    "print(d(sys.argv[1], revision=sys.argv[2], allow_patterns=['*.json', '*.txt', '*.model', '*.tiktoken']))")
"""Fetches the tokenizer files of one revision and prints their folder. ``vllm bench serve`` has no
``--tokenizer-revision`` (it calls get_tokenizer without a revision: docs/facts/bench-tokenizer.md),
so a pinned spec.model.revision is honoured by handing it this folder as ``--tokenizer``;
huggingface_hub is in every vLLM image (transformers needs it) and reads HF_TOKEN/HF_HOME as the
engines do."""


def _sweep_run(argv: list[str], model: str, revision: str | None) -> str:
    """The sweep's shell command; with a revision, ``--tokenizer`` is the folder of that revision."""
    if revision is None:
        return shlex.join(argv)
    i = argv.index("--tokenizer") + 1
    fetch = shlex.join(["python3", "-c", PINNED_TOKENIZER, model, revision])
    return f'tok=$({fetch}); {shlex.join(argv[:i])} "$tok" {shlex.join(argv[i + 1:])}'


def _script(step: str, spec: BenchmarkSpec, plan: Plan, served: str, tokenizer: str) -> str:
    if step == "accuracy":
        assert spec.accuracy is not None
        data = DATA_DIR if spec.accuracy.source else None
        return f"{shlex.join(accuracy_argv(spec.accuracy, router_url(plan), served, data))} > {TERMINATION_LOG}"
    assert spec.sweep is not None
    c = spec.sweep.concurrencies[int(step.split("-")[1])]
    src = plan.spec.model.source
    revision = None if src is not None and src.pvc is not None else plan.spec.model.revision  # a PVC has one revision
    run = _sweep_run(sweep_argv(spec.sweep, c, router_url(plan), served, tokenizer), tokenizer, revision)
    return (f"set -e; mkdir -p {RESULT_DIR}; {run}; "
            f"python3 {SCRIPTS_DIR}/results.py compact {RESULT_DIR}/result.json > {TERMINATION_LOG}")


def _volumes(spec: BenchmarkSpec, plan: Plan, scripts: str,
             step: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): the scripts, the model's PVC or HF cache as the engines mount them, and the
    GSM8K data in the accuracy step only (a sweep pod mounting it could not start without it)."""
    vols: list[dict[str, Any]] = [{"name": "scripts", "configMap": {"name": scripts}}]
    mounts: list[dict[str, Any]] = [{"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}]
    src = plan.spec.model.source
    if src and src.pvc:
        vols.append({"name": "models", "persistentVolumeClaim": {"claimName": src.pvc.claim_name, "readOnly": True}})
        mounts.append({"name": "models", "mountPath": "/models", "readOnly": True}
                      | ({"subPath": src.pvc.sub_path} if src.pvc.sub_path else {}))
    if src and src.hugging_face and src.hugging_face.cache_pvc:
        vols.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": src.hugging_face.cache_pvc}})
        mounts.append({"name": "hf-cache", "mountPath": "/hf-cache"})
    if step == "accuracy" and spec.accuracy and spec.accuracy.source:
        vols.append({"name": "gsm8k", "persistentVolumeClaim": {"claimName": spec.accuracy.source.claim_name,
                                                                "readOnly": True}})
        mounts.append({"name": "gsm8k", "mountPath": DATA_DIR, "subPath": spec.accuracy.source.path, "readOnly": True})
    return vols, mounts


def benchmark_job(bench: str, spec: BenchmarkSpec, plan: Plan, step: str, generation: str | None = None) -> dict[str, Any]:
    """The Job of one step (``sweep-<i>`` or ``accuracy``). ``generation``: the deployment's generation
    the run measures, when the benchmark is the deployment's accuracy gate (spec.validation.accuracy):
    labelled on the Job, so a new generation changes the manifest (the steps run again) and the result
    names the generation it measured (qdd.bench.observe)."""
    leader = plan.prefill.pods[0]
    argv = list(leader.argv)
    served = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else plan.served_model_name
    vols, mounts = _volumes(spec, plan, scripts_name(bench), step)
    env = [e.to_k8s() for e in leader.env if e.name.startswith("HF_")]
    container = {"name": "bench", "image": spec.image or plan.spec.engine.image,
                 "imagePullPolicy": plan.spec.engine.image_pull_policy,
                 "command": ["/bin/sh", "-c", _script(step, spec, plan, served, argv[0])],
                 "env": env + [{"name": "VLLM_LOGGING_COLOR", "value": "0"}], "volumeMounts": mounts,
                 # The compact result is written here; the operator reads it from the pod's status.
                 "terminationMessagePath": TERMINATION_LOG, "terminationMessagePolicy": "File",
                 "resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": plan.gpu.node_arch},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        *(t.to_k8s() for t in plan.spec.cluster.tolerations)],
        "containers": [container], "volumes": vols}
    if plan.spec.engine.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in plan.spec.engine.image_pull_secrets]
    lb = _labels(bench, plan, step) | ({labels.GENERATION: generation} if generation else {})
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{bench}-{step}", "namespace": plan.namespace, "labels": lb},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": spec.active_deadline_seconds,
                     "template": {"metadata": {"labels": dict(lb)}, "spec": pod_spec}}}


def scripts_configmap(bench: str, plan: Plan) -> dict[str, Any]:
    data = {f: (_BENCH_SRC / f).read_text(encoding="utf-8") for f in ("results.py", "gsm8k.py")}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": scripts_name(bench), "namespace": plan.namespace, "labels": _labels(bench, plan)},
            "data": data}


def results_configmap(bench: str, plan: Plan, results_json: str) -> dict[str, Any]:
    """``results.json``: the input of ``qdd bench report`` (see :mod:`qdd.bench.report`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": results_name(bench), "namespace": plan.namespace, "labels": _labels(bench, plan)},
            "data": {"results.json": results_json}}
