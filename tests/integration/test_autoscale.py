"""The autoscaler's live loop on the real control plane (compressed in time).

The operator (mode On), the engines' start-up played by kwok Stages from qdd's start-up model
(hack/cluster/engine_stages.py), and the engine TEST DOUBLE hack/fake_engine_metrics.py in its load
mode (hack/fake_engine_load.py): it spreads a request rate over the engine pods the router's
rendered selectors pick, as vllm-router's discovery does, reports their metrics, and counts the
requests a client would see fail (a pod deleted while it held requests, or no pod to send to).
The profile ConfigMap is hand-made for the double (its endpoints' latency against load).

A load step: the prefill target is written within two decision periods (plus one read of the
engines), the new endpoint lands in the deployment's NVLink domain, and the budget (12 GPUs = two
DEP2 prefill + one DEP8 decode) stops prefill at 2 of the 3 the SLO needs (SLOAttainable False).
A load drop: the extra endpoint is drained (out of the router, requests finished) and removed with
no failed request. A watch on the pods checks the budget at every event.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest
from kubernetes import client, watch

from qdd.catalog.startup import LOCAL, engine_startup
from qdd.perf.profile import CONFIGMAP_KEY, PerfProfile, Point, RoleProfile, configmap_name

from .conftest import Kube, install_crds
from .engine_startup import startup_configmap
from .operator_proc import OperatorProcess
from .test_observe import CONFIGMAP, double  # noqa: F401 — the engine double, a module fixture
from .test_operator import SEED, condition, cr_of, wait_ready

SCALE = 30
PHASES = engine_startup(237e9, LOCAL, compile_cache_warm=True).compressed(SCALE)
"""The seed's checkpoint from a node-local copy with a warm compile cache (~127 s), 30 times faster."""
PERIOD = 5
BUDGET = 12
AUTOSCALING = {"mode": "On", "targets": {"ttftMs": 1000, "tpotMs": 50, "percentile": 90},
               "prefill": {"minEndpoints": 1, "maxEndpoints": 3}, "decode": {"minEndpoints": 1, "maxEndpoints": 2},
               "gpuBudget": BUDGET, "periodSeconds": PERIOD, "scaleUpCooldownSeconds": 0,
               "scaleDownCooldownSeconds": 0}
OBSERVE = {"periodSeconds": 5, "windowSeconds": 10}
LOAD = {"isl": "1000", "osl": "100", "prefill-ttft-ms": "200", "decode-ttft-ms": "50", "itl-ms": "20",
        "prefill-capacity-rps": "2", "decode-capacity": "64"}


def profile(name: str) -> dict[str, Any]:
    """The double's endpoints as a profile: prefill TTFT 200 ms up to 1 req/s, 400 ms at 2, 1.5 s at 3
    (2.5 req/s per endpoint under 1 s); decode TPOT 20-60 ms over 16-128 requests."""
    pre = [Point(load=x, latency_ms=y, tokens_per_second=x * 1000, source="measured")
           for x, y in ((1.0, 200.0), (2.0, 400.0), (3.0, 1500.0))]
    dec = [Point(load=x, latency_ms=y, tokens_per_second=x * 1000 / y, source="measured")
           for x, y in ((16.0, 20.0), (64.0, 30.0), (128.0, 60.0))]
    p = PerfProfile(deployment=name, model="nvidia/Qwen3.5-397B-A17B-NVFP4", gpu="GB200", backend="vllm",
                    backend_version="0.33.0", database="TEST: the engine double's latency against load", isl=1000,
                    osl=100, prefill=RoleProfile(role="prefill", topology="DEP2", gpus_per_endpoint=2, points=pre),
                    decode=RoleProfile(role="decode", topology="DEP8", gpus_per_endpoint=8, points=dec))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": configmap_name(name)},
            "data": {CONFIGMAP_KEY: p.to_json()}}


class GpuWatch:
    """Every version of every engine pod of the namespace, from a watch: the GPUs held after each
    event (a pod holds its GPUs from creation until its DELETED event), and where pods were bound.
    Engine pods only, as gpuBudget counts them (the KV-transfer preflight's Job pods are not engines)."""

    def __init__(self, kube: Kube, ns: str):
        self.core = client.CoreV1Api(kube.api_client())
        self.ns, self.w = ns, watch.Watch()
        self.held: dict[str, int] = {}
        self.most, self.events = 0, 0
        self.nodes: dict[str, str] = {}
        self.stopped, self.restarts = False, 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                self._stream()
            except Exception:  # noqa: BLE001 — a dropped stream: list again (the stream's first events)
                self.restarts += 1
                time.sleep(0.2)

    def _stream(self) -> None:
        self.held.clear()
        for ev in self.w.stream(self.core.list_namespaced_pod, self.ns,
                                label_selector="qdd.dev/role in (prefill,decode)", timeout_seconds=600):
            pod = ev["object"]
            gpus = sum(int(((c.resources.limits if c.resources else None) or {}).get("nvidia.com/gpu", 0))
                       for c in pod.spec.containers)
            if ev["type"] == "DELETED":
                self.held.pop(pod.metadata.uid, None)
            else:
                self.held[pod.metadata.uid] = gpus
                if pod.spec.node_name:
                    self.nodes[pod.metadata.name] = pod.spec.node_name
            self.events += 1
            self.most = max(self.most, sum(self.held.values()))

    def stop(self) -> None:
        self.stopped = True
        self.w.stop()


def _load(kube: Kube, ns: str, rps: float) -> None:
    kube.kubectl("patch", "configmap", CONFIGMAP, "-n", ns, "--type=merge", "-p",
                 json.dumps({"data": {"load-rps": str(rps)}}))


def _requests(double_url: str, ns: str) -> dict[str, Any]:
    base = double_url.split("/{namespace}")[0]
    with urllib.request.urlopen(f"{base}/{ns}/requests", timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def scaling_operator(kube: Kube, double: str):  # noqa: F811 — the imported fixture
    install_crds(kube)
    op = OperatorProcess(kube, env={"QDD_ENGINE_METRICS_URL_OVERRIDE": double}, log_name="-autoscale")
    op.start()
    yield op
    op.stop()


def test_load_step_scales_prefill_within_budget_and_the_drop_drains_it_without_failures(
        kube: Kube, scaling_operator: OperatorProcess, double: str, namespace: str):  # noqa: F811
    ns = namespace
    cr = cr_of(SEED, ns, **{"spec.prefill.endpoints": 1, "spec.decode.endpoints": 1, "spec.observe": OBSERVE,
                            "spec.autoscaling": AUTOSCALING, "spec.workload.isl": 1000, "spec.workload.osl": 100})
    name = cr["metadata"]["name"]
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": ns},
                "data": {**LOAD, "load-rps": "0"}})
    kube.apply(startup_configmap(ns, PHASES, SCALE))
    kube.apply(profile(name), namespace=ns)
    gpus = GpuWatch(kube, ns)
    t0 = time.monotonic()
    try:
        kube.apply(cr)
        wait_ready(kube, name, ns)
        adapter = f"{name}-prefill"
        assert kube.get("qwendisaggrolescale", adapter, ns)["spec"]["replicas"] == 1
        ready_s = time.monotonic() - t0

        # Load step: 6 req/s needs 3 prefill endpoints of 2.5 req/s; the budget holds 2 (+ the DEP8 decode).
        _load(kube, ns, 6)
        step = time.monotonic()
        kube.wait_for(lambda: kube.get("qwendisaggrolescale", adapter, ns)["spec"]["replicas"] == 2,
                      timeout=4 * PERIOD, interval=0.25, desc="prefill target 2 written")
        written_s = time.monotonic() - step
        assert written_s <= 2 * PERIOD + OBSERVE["periodSeconds"], written_s
        obj = kube.wait_for(lambda: (o := kube.get("qdd", name, ns))["status"].get("prefillReady") == "2/2" and o,
                            timeout=60, interval=0.5, desc="two prefill endpoints Ready")
        a = obj["status"]["autoscaling"]
        assert (a["prefill"]["target"], a["decode"]["target"]) == (2, 1) and a["prefill"]["needed"] >= 3, a
        slo = condition(obj, "SLOAttainable")
        assert (slo["status"], slo["reason"]) == ("False", "GPUBudgetReached"), slo
        assert a["inputs"]["startupSource"] == "measured" and a["gpusHeld"] == BUDGET, a
        cliques = {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.clique")
                   for n in kube.get("nodes")["items"]}
        placed = {p: cliques[n] for p, n in gpus.nodes.items()}
        assert placed[f"{name}-prefill-1"] == placed[f"{name}-decode-0-leader"], placed
        assert _requests(double, ns)["failed"] == 0

        # Load drop: one prefill endpoint holds it; the second is drained, then removed.
        _load(kube, ns, 0.5)
        drop = time.monotonic()
        kube.wait_for(lambda: kube.get("qwendisaggrolescale", adapter, ns)["spec"]["replicas"] == 1,
                      timeout=8 * PERIOD, interval=0.5, desc="prefill target 1 written")
        down_s = time.monotonic() - drop
        kube.wait_for(lambda: not kube.exists("pod", f"{name}-prefill-1", ns), timeout=60, interval=0.5,
                      desc="the drained prefill endpoint removed")
        removed_s = time.monotonic() - drop
        seen = _requests(double, ns)
        assert seen["sent"] > 0 and seen["failed"] == 0, seen
        reasons = [e["reason"] for e in kube.get("events", namespace=ns)["items"]
                   if e["involvedObject"].get("name") == name]
        assert {"ScalingUp", "ScalingDown", "EndpointDraining", "EndpointRemoved", "SLONotAttainable"} <= set(reasons)
        assert gpus.events > 0 and gpus.most <= BUDGET, (gpus.most, gpus.held)
        print(f"\nready {ready_s:.1f} s; step -> target written {written_s:.1f} s; drop -> target {down_s:.1f} s, "
              f"removed {removed_s:.1f} s; {seen['sent']:.0f} requests, {seen['failed']:.0f} failed; "
              f"most GPUs held {gpus.most}/{BUDGET} over {gpus.events} pod events ({gpus.restarts} watch restarts); total {time.monotonic() - t0:.1f} s")
    finally:
        gpus.stop()
