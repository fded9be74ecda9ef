#!/usr/bin/env python3
"""TEST DOUBLE for the benchmark Jobs' clients (``vllm bench serve``, GSM8K), in the simulated cluster.

kwok runs no container: it marks every Job pod Succeeded with an empty termination message. A real
benchmark container writes its compact result there (qdd.bench.results, qdd.bench.gsm8k). This
double writes one instead, for every completed benchmark pod (label ``qdd.dev/role=benchmark``)
whose ``bench`` container has none:

* key ``<step>.json`` (``sweep-0.json``, ``accuracy.json``) of ConfigMap ``qdd-simulated-benchmark``
  in the pod's namespace, if present (tests use it to simulate a low accuracy or a broken result);
* else a SIMULATED result computed from the Job's own arguments — not a measurement: a sweep point
  with every prompt completed, ISL/OSL tokens per request (``--random-input-len``/``-output-len``),
  TPOT = 10 ms + 0.02 ms × concurrency, TTFT = 150 ms + 1 ms × concurrency, duration = rounds of
  ``concurrency`` requests each taking TTFT + OSL × TPOT; an accuracy of 0.9 on every repeat.

It is a stand-in for the engines, never part of the operator. Level-triggered like
hack/fake_preflight_result.py; exits 0 on SIGTERM/SIGINT.

Usage: fake_bench_result.py [--kubeconfig PATH] [--resync SECONDS]
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator" / "src"))
import pod_double  # noqa: E402  (hack/, next to this script)
from qdd.bench.results import compact  # noqa: E402

SELECTOR = "qdd.dev/role=benchmark"
CONFIGMAP = "qdd-simulated-benchmark"
log = logging.getLogger("fake-bench-result")


def _flag(tokens: list[str], name: str, default: str | None = None) -> str | None:
    return tokens[tokens.index(name) + 1] if name in tokens else default


def simulated_sweep(tokens: list[str]) -> str:
    c = int(_flag(tokens, "--max-concurrency") or 1)
    n = int(_flag(tokens, "--num-prompts") or c)
    isl, osl = int(_flag(tokens, "--random-input-len") or 1), int(_flag(tokens, "--random-output-len") or 1)
    tpot, ttft = 10.0 + 0.02 * c, 150.0 + 1.0 * c
    duration = -(-n // c) * (ttft + osl * tpot) / 1000.0
    raw = {"completed": n, "failed": 0, "total_input_tokens": n * isl, "total_output_tokens": n * osl,
           "duration": duration, "total_token_throughput": n * (isl + osl) / duration,
           "output_throughput": n * osl / duration, "max_concurrency": c, "num_prompts": n}
    for metric, v in (("ttft", ttft), ("tpot", tpot), ("itl", tpot)):
        raw |= {f"mean_{metric}_ms": v, f"median_{metric}_ms": v, f"p50_{metric}_ms": v,
                f"p90_{metric}_ms": v * 1.2, f"p99_{metric}_ms": v * 1.5}
    return compact(raw)


def simulated_accuracy(tokens: list[str]) -> str:
    repeats = int(_flag(tokens, "--repeats") or 1)
    questions = int(_flag(tokens, "--examples") or 1319)
    return '{"repeats":[%s],"questions":%d,"invalid":0,"errors":0}' % (",".join(["0.9"] * repeats), questions)


def wanted(core: client.CoreV1Api, pod: client.V1Pod, step: str) -> str:
    try:
        cm = core.read_namespaced_config_map(CONFIGMAP, pod.metadata.namespace)
        if (cm.data or {}).get(f"{step}.json"):
            return str(cm.data[f"{step}.json"])
    except ApiException as e:
        if e.status != 404:
            raise
    (container,) = [c for c in pod.spec.containers if c.name == "bench"]
    tokens = shlex.split(container.command[-1])
    return simulated_accuracy(tokens) if step == "accuracy" else simulated_sweep(tokens)


def converge(core: client.CoreV1Api, pod: client.V1Pod) -> None:
    if pod.status.phase != "Succeeded" or pod.metadata.deletion_timestamp:
        return
    step = (pod.metadata.labels or {}).get("qdd.dev/step")
    for i, cs in enumerate(pod.status.container_statuses or []):
        term = cs.state.terminated if cs.state else None
        if cs.name != "bench" or term is None or term.message or not step:
            continue
        patch = [{"op": "add", "path": f"/status/containerStatuses/{i}/state/terminated/message",
                  "value": wanted(core, pod, step)}]
        core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, patch)
        log.info("simulated %s result for %s/%s", step, pod.metadata.namespace, pod.metadata.name)


def main() -> None:
    pod_double.run("fake-bench-result", "benchmark results", SELECTOR, converge)


if __name__ == "__main__":
    main()
