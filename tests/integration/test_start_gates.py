"""Start gates on the real control plane: the canary and benchmarks wait until the router lists every
planned endpoint (InferenceX#2549), and the accuracy gate (spec.validation.accuracy) holds Ready
until the current generation has its GSM8K score. kwok runs no router and no benchmark client: the
router TEST DOUBLE hack/fake_canary_router.py answers ``/list_workers`` as vllm-router 0.1.17's
discovery does (contract: tests/contract/test_router.py), ConfigMap ``qdd-simulated-canary``'s
``unregistered`` holding pods back; hack/fake_bench_result.py writes the GSM8K result (0.9, or
ConfigMap ``qdd-simulated-benchmark``'s ``accuracy.json``)."""

from __future__ import annotations

import json
import urllib.request

from .conftest import Kube
from .test_benchmark import bench_cr
from .test_operator import SEED, condition, cr_of, wait_ready

STEP_TIMEOUT = 60


def _requests(kube: Kube, ns: str, name: str) -> list[dict]:
    with urllib.request.urlopen(kube.canary_double_url.format(namespace=ns, name=name) + "/requests", timeout=5) as r:
        return json.loads(r.read())


def _wait(kube: Kube, kind: str, name: str, ns: str, check, desc: str) -> dict:
    return kube.wait_for(lambda: (o := kube.get(kind, name, ns)) and check(o) and o, timeout=STEP_TIMEOUT,
                         interval=0.5, desc=desc)


def test_canary_and_benchmark_wait_for_every_endpoint_registered(kube, operator, namespace):
    dep = cr_of(SEED, namespace)
    name = dep["metadata"]["name"]
    held = f"{name}-prefill-2"
    kube.kubectl("create", "configmap", "qdd-simulated-canary", "-n", namespace, f"--from-literal=unregistered={held}")
    kube.apply(dep)
    kube.apply(bench_cr(namespace, name, accuracy={"examples": 10, "passThreshold": 0.5}))
    # the router's list once read (before that, a pass may say "not read yet" under the same reason)
    obj = _wait(kube, "qdd", name, namespace, lambda o: condition(o, "Ready").get("reason") == "EndpointsNotRegistered"
                and "not listed" in condition(o, "Ready").get("message", ""), "Ready=False (EndpointsNotRegistered)")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and (obj["status"]["prefillReady"], obj["status"]["decodeReady"]) == ("4/4", "1/1")
    # the double answers for the one router pod (kwok runs no router): the message names that pod
    [router] = [p["metadata"]["name"] for p in kube.get("pods", namespace=namespace,
                                                         selector=f"qdd.dev/deployment={name},qdd.dev/role=router")["items"]]
    assert ready["message"].endswith(f"waiting for 4 of 5 endpoints registered with every router pod (not listed by "
                                     f"{router}: {held})")
    canary = condition(obj, "CanaryPassed")
    assert (canary["status"], canary["reason"]) == ("Unknown", "CanaryPending")
    assert canary["message"].startswith("waiting for 4 of 5 endpoints registered with every router pod")
    assert _requests(kube, namespace, name) == []  # no canary sent to a router missing an endpoint
    b = _wait(kube, "qddb", "bench", namespace, lambda o: "endpoints registered" in condition(o, "Complete").get(
        "message", ""), "the benchmark waiting on the registration")
    assert b["status"]["phase"] == "WaitingForDeployment"
    assert "is not Ready (EndpointsNotRegistered: " in condition(b, "Complete")["message"]
    assert kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=bench")["items"] == []

    kube.kubectl("delete", "configmap", "qdd-simulated-canary", "-n", namespace)  # the router reaches it
    obj = wait_ready(kube, name, namespace, timeout=STEP_TIMEOUT)
    assert condition(obj, "CanaryPassed")["status"] == "True" and len(_requests(kube, namespace, name)) >= 1
    _wait(kube, "qddb", "bench", namespace, lambda o: o["status"].get("phase") in ("Running", "Complete"),
          "the benchmark started")


def test_accuracy_gate_holds_ready_until_its_generation_is_scored(kube, operator, namespace):
    dep = cr_of(SEED, namespace)
    name = dep["metadata"]["name"]
    dep["spec"]["validation"] = {"accuracy": {"benchmarkName": "gate", "minScore": 0.85}}
    # CEL: the gate needs a router (the GSM8K run goes through it)
    no_router = json.loads(json.dumps(dep))
    no_router["spec"]["router"] = {"replicas": 0}
    p = kube.kubectl("apply", "-f", "-", input=json.dumps(no_router), check=False)
    assert p.returncode != 0 and "spec.validation.accuracy: Invalid value" in p.stderr
    assert "validation.accuracy needs a router" in p.stderr

    kube.apply(dep)  # its benchmark does not exist yet: the generation serves, Ready waits
    held = _wait(kube, "qdd", name, namespace, lambda o: condition(o, "Ready").get("reason") == "AccuracyBenchmarkInvalid",
                 "Ready=False (AccuracyBenchmarkInvalid)")
    gen = held["status"]["rollout"]["generation"]
    assert held["status"]["rollout"]["serving"].startswith(f"{gen}/")  # the router already serves it
    assert condition(held, "CanaryPassed")["status"] == "True" and condition(held, "Ready")["status"] == "False"
    gate = condition(held, "AccuracyGatePassed")
    assert (gate["status"], gate["reason"]) == ("False", "AccuracyBenchmarkInvalid")
    assert gate["message"].startswith("QwenDisaggBenchmark gate (spec.validation.accuracy.benchmarkName) does not exist")
    assert condition(held, "Degraded")["reason"] == "AccuracyBenchmarkInvalid" and "accuracy" not in held["status"]

    kube.apply(bench_cr(namespace, name, "gate", accuracy={"examples": 10, "passThreshold": 0.5}))
    obj = wait_ready(kube, name, namespace, timeout=STEP_TIMEOUT)
    gate = condition(obj, "AccuracyGatePassed")
    assert (gate["status"], gate["reason"]) == ("True", "AccuracyAboveThreshold")
    acc = obj["status"]["accuracy"]
    assert (acc["generation"], acc["benchmark"], acc["score"], acc["minScore"], acc["passed"]) == (
        gen, "gate", 0.9, 0.85, True)
    (job,) = kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=gate")["items"]
    assert job["metadata"]["labels"]["qdd.dev/generation"] == gen  # the run is bound to what it measured
    assert kube.get("qddb", "gate", namespace)["status"]["accuracy"]["generation"] == gen

    # A new generation (a new engine image): the gate's benchmark runs again for it, and a score
    # under minScore holds Ready there while the router already serves it (vllm#36094: HTTP 200
    # everywhere, wrong answers); the previous generation's pass does not count for it.
    kube.kubectl("create", "configmap", "qdd-simulated-benchmark", "-n", namespace,
                 '--from-literal=accuracy.json={"repeats":[0.4],"questions":10,"invalid":0,"errors":0}')
    kube.kubectl("patch", "qdd", name, "-n", namespace, "--type=merge",
                 "-p", json.dumps({"spec": {"engine": {"image": "qdd/vllm:0.33.0-cu13-arm64-regressed"}}}))
    low = _wait(kube, "qdd", name, namespace,
                lambda o: (o["status"].get("rollout") or {}).get("generation") not in (None, gen)
                and condition(o, "AccuracyGatePassed").get("reason") == "AccuracyBelowThreshold",
                "AccuracyGatePassed=False (AccuracyBelowThreshold) for the new generation")
    new = low["status"]["rollout"]["generation"]
    assert (condition(low, "Ready")["status"], condition(low, "Ready")["reason"]) == ("False", "AccuracyBelowThreshold")
    assert condition(low, "AccuracyGatePassed")["message"].startswith(f"GSM8K 0.400 < minScore 0.850 on generation {new}")
    acc = low["status"]["accuracy"]
    assert (acc["generation"], acc["score"], acc["passed"]) == (new, 0.4, False)
    (job,) = kube.get("jobs", namespace=namespace, selector="qdd.dev/benchmark=gate")["items"]
    assert job["metadata"]["labels"]["qdd.dev/generation"] == new  # re-run for what it measures now
