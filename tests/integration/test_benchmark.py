"""QwenDisaggBenchmark on the real control plane. kwok runs no container, so the benchmark Jobs'
results come from the test double hack/fake_bench_result.py (a SIMULATED result computed from each
Job's own arguments, or a ConfigMap's result in the test's namespace); what is asserted is what the
operator made of them: the Jobs it ran and in which order, status, the results ConfigMap,
conditions, printer columns, the deployment left as it was, and `qdd bench report` on the results."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import REPO, Kube
from .test_operator import SEED, condition, cr_of, wait_ready

TIMEOUT = 180


def bench_cr(namespace: str, deployment: str, name: str = "bench", **spec) -> dict:
    return {"apiVersion": "qdd.dev/v1alpha1", "kind": "QwenDisaggBenchmark",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"deploymentName": deployment, **spec}}


SWEEP = {"isl": 8192, "osl": 1024, "randomRangeRatio": 0.8, "concurrencies": [64, 128], "promptsPerConcurrency": 2,
         "warmupsPerConcurrency": 0}


def wait_cond(kube: Kube, name: str, ns: str, ctype: str, status: str) -> dict:
    def done():
        obj = kube.get("qddb", name, ns)
        return condition(obj, ctype).get("status") == status and obj
    return kube.wait_for(done, timeout=TIMEOUT, interval=1, desc=f"{ctype}={status} on qddb/{name}")


def simulated(c: int, n: int, isl: int, osl: int) -> dict:
    """What hack/fake_bench_result.py writes for one sweep point (its documented formula)."""
    tpot, ttft = 10.0 + 0.02 * c, 150.0 + 1.0 * c
    duration = -(-n // c) * (ttft + osl * tpot) / 1000.0
    return {"total": n * (isl + osl) / duration, "tpot": tpot, "ttft": ttft}


def test_sweep_and_accuracy_results_in_status_configmap_and_report(kube, operator, namespace, tmp_path):
    dep = cr_of(SEED, namespace)
    name = dep["metadata"]["name"]
    kube.apply(dep)
    before = wait_ready(kube, name, namespace)
    kube.apply(bench_cr(namespace, name, sweep=SWEEP, accuracy={"repeats": 2, "examples": 100, "passThreshold": 0.85}))
    obj = wait_cond(kube, "bench", namespace, "Complete", "True")
    st = obj["status"]
    assert condition(obj, "Failed")["status"] == "False"
    acc = condition(obj, "AccuracyPassed")
    assert acc["status"] == "True" and acc["reason"] == "AboveThreshold" and "mean 0.900" in acc["message"]
    assert st["phase"] == "Complete" and st["topology"] == "4xDEP2-1xDEP8" and st["gpus"] == 16
    assert st["accuracy"] == {"repeats": [0.9, 0.9], "mean": 0.9, "questions": 100, "invalid": 0}
    # sa-bench [0.8 L, L] → vLLM L' = 0.9 L: 7373 / 922 tokens per request (qdd.render.benchmark.sweep_argv)
    assert [p["concurrency"] for p in st["sweep"]] == [64, 128]
    for p in st["sweep"]:
        c, n = p["concurrency"], 2 * p["concurrency"]
        want = simulated(c, n, 7373, 922)
        assert (p["completed"], p["failed"], p["inputTokens"], p["outputTokens"]) == (n, 0, n * 7373, n * 922)
        assert abs(p["totalTokensPerSecond"] - want["total"]) < 0.01
        assert abs(p["totalTokensPerSecondPerGpu"] - want["total"] / 16) < 0.01
        assert abs(p["outputTokensPerSecondPerUser"] - 1000 / want["tpot"]) < 0.01
        assert p["ttftMs"]["p50"] == want["ttft"] and abs(p["ttftMs"]["p99"] - 1.5 * want["ttft"]) < 0.01
    assert st["bestTotalTokensPerSecondPerGpu"] == max(p["totalTokensPerSecondPerGpu"] for p in st["sweep"])
    # The Jobs, one per step, owned by the benchmark, none running now; the engine image's own client.
    jobs = kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=bench")["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == ["bench-accuracy", "bench-sweep-0", "bench-sweep-1"]
    for j in jobs:
        assert j["metadata"]["ownerReferences"][0]["kind"] == "QwenDisaggBenchmark"
        c = j["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == dep["spec"]["engine"]["image"]
    sweep0 = next(j for j in jobs if j["metadata"]["name"] == "bench-sweep-0")
    cmd = sweep0["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"--base-url http://{name}-router.{namespace}.svc:8000" in cmd and "--max-concurrency 64" in cmd
    assert "--num-prompts 128" in cmd and "vllm bench serve" in cmd
    # results ConfigMap = status
    cm = kube.get("configmap", "bench-results", namespace)
    doc = json.loads(cm["data"]["results.json"])
    assert doc["sweep"] == st["sweep"] and doc["topology"] == "4xDEP2-1xDEP8" and doc["complete"] is True
    assert st["resultsConfigMap"] == "bench-results"
    # the deployment is untouched: same spec and generation
    after = kube.get("qdd", name, namespace)
    assert after["spec"] == before["spec"] and after["metadata"]["generation"] == before["metadata"]["generation"]
    # printer columns
    row = kube.kubectl("get", "qddb", "bench", "-n", namespace).stdout
    assert "4xDEP2-1xDEP8" in row and "Complete" in row and "0.9" in row
    # qdd bench report from the ConfigMap in the cluster
    png, md = tmp_path / "pareto.png", tmp_path / "table.md"
    rep = subprocess.run([sys.executable, "-m", "qdd.cli", "bench", "report", "--configmap", f"{namespace}/bench-results",
                          "-o", str(png), "--table", str(md)], capture_output=True, text=True, env=kube.env, cwd=REPO,
                         timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    table = md.read_text()
    assert table.count("| 4xDEP2-1xDEP8 | ") == 3  # two sweep rows and one accuracy row
    assert "| 0.900 | 0.900, 0.900 |" in table


def test_low_accuracy_fails_the_gate_and_a_bad_result_fails_the_benchmark(kube, operator, namespace):
    dep = cr_of(SEED, namespace)
    name = dep["metadata"]["name"]
    kube.kubectl("create", "configmap", "qdd-simulated-benchmark", "-n", namespace,
                 '--from-literal=accuracy.json={"repeats":[0.5,0.7],"questions":10,"invalid":1,"errors":0}',
                 "--from-literal=sweep-0.json=not a result")
    kube.apply(bench_cr(namespace, name, "early", accuracy={"passThreshold": 0.88}))
    waiting = kube.wait_for(lambda: (o := kube.get("qddb", "early", namespace)).get("status", {}).get("phase")
                            == "WaitingForDeployment" and o, timeout=60, desc="WaitingForDeployment")
    assert condition(waiting, "Complete")["reason"] == "WaitingForDeployment"
    assert not kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=early")["items"]
    kube.apply(dep)
    wait_ready(kube, name, namespace)
    obj = wait_cond(kube, "early", namespace, "Complete", "True")
    acc = condition(obj, "AccuracyPassed")
    assert acc["status"] == "False" and acc["reason"] == "BelowThreshold"
    assert "mean 0.600" in acc["message"] and "threshold 0.880" in acc["message"]
    # A sweep whose first result is unreadable: Failed, and the second step never starts.
    kube.apply(bench_cr(namespace, name, "broken", sweep=SWEEP))
    obj = wait_cond(kube, "broken", namespace, "Failed", "True")
    failed = condition(obj, "Failed")
    assert failed["reason"] == "JobFailed" and "Job broken-sweep-0: its result cannot be read" in failed["message"]
    assert condition(obj, "Complete")["status"] == "False" and obj["status"]["phase"] == "Failed"
    jobs = kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=broken")["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["broken-sweep-0"]
    # Deleting a benchmark removes its Jobs and ConfigMaps (owner references), not the deployment.
    kube.kubectl("delete", "qddb", "early", "-n", namespace, "--wait=true")
    kube.wait_for(lambda: not kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=early")["items"]
                  and not kube.exists("configmap", "early-results", namespace), timeout=60, desc="children of early gone")
    assert kube.exists("qdd", name, namespace)
