"""Control-plane faults on the real control plane (issue: day 2): the operator SIGKILLed at
random points while a deployment scales and rolls. Each run says what it injected; at the end
the deployment is Ready on the last spec, with nothing orphaned or duplicated."""

from __future__ import annotations

import random
import time

from .conftest import Kube
from .test_operator import READY_TIMEOUT, SEED, cr_of, pods, wait_ready

KILLS = 10


def _assert_converged(kube: Kube, name: str, ns: str, prefill: int, capture: str) -> None:
    obj = wait_ready(kube, name, ns)
    assert obj["status"]["prefill"]["endpoints"] == prefill
    all_pods = [p for p in pods(kube, name, ns) if not p["metadata"].get("deletionTimestamp")]
    names = [p["metadata"]["name"] for p in all_pods]
    assert len(names) == len(set(names))
    engine = [p for p in all_pods if p["metadata"]["labels"].get("qdd.dev/role") in ("prefill", "decode")]
    assert len(engine) == prefill + 2
    for p in engine:
        args = p["spec"]["containers"][0]["args"]
        if p["metadata"]["labels"]["qdd.dev/role"] == "decode":
            assert args[args.index("--max-cudagraph-capture-size") + 1] == capture, p["metadata"]["name"]
    for kind in ("statefulsets", "services", "deployments", "poddisruptionbudgets", "jobs"):
        for it in kube.get(kind, namespace=ns, selector=f"qdd.dev/deployment={name}")["items"]:
            refs = [r["name"] for r in it["metadata"].get("ownerReferences") or [] if r.get("controller")]
            assert refs == [name], (kind, it["metadata"]["name"])
    assert len(kube.get("statefulsets", namespace=ns, selector=f"qdd.dev/deployment={name}")["items"]) == 1


def test_operator_sigkilled_ten_times_while_scaling_and_rolling(kube: Kube, operator, namespace):
    rng = random.Random(20261201)  # the kill points are random, and the same on every run
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    prefill, concurrency = 4, 4096
    injected = []
    for i in range(KILLS):
        # A spec change the operator must carry out: scale prefill, or roll decode (a new capture size).
        if i % 2 == 0:
            prefill = 5 if prefill == 4 else 4
            kube.kubectl("scale", f"qdd/{name}", "-n", namespace, f"--replicas={prefill}")
        else:
            concurrency = 3072 if concurrency == 4096 else 4096
            kube.kubectl("patch", "qdd", name, "-n", namespace, "--type=merge",
                         "-p", f'{{"spec": {{"workload": {{"concurrency": {concurrency}}}}}}}')
        delay = rng.uniform(0.0, 2.0)
        time.sleep(delay)
        operator.kill()
        injected.append(f"kill {i + 1} {delay:.2f} s after {'scale' if i % 2 == 0 else 'roll'}")
        operator.start()
    print("injected:", "; ".join(injected))
    # 4096 → capture 640, 3072 → 512 on one DEP8 (qdd.plan.sizing).
    start = time.monotonic()
    _assert_converged(kube, name, namespace, prefill, {4096: "640", 3072: "512"}[concurrency])
    print(f"converged {time.monotonic() - start:.1f} s after the last restart; READY_TIMEOUT {READY_TIMEOUT} s")
