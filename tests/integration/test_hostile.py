"""Hostile and malformed resources on the real API server and the real operator (issue: security).

- The API server (the generated CRD: schema, patterns, limits, CEL) and ``qdd``'s own parser agree
  on every case below: what ``kubectl apply`` refuses, ``qdd render`` refuses, and the reverse.
- A resource that once took the operator down (a concurrency whose plan built a list of that
  size; an architecture whose numbers divided by zero) is accepted by the API server and now gets
  ``PlanValid=False`` with the reason, fast, while another deployment in the cluster stays Ready.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from qdd.api import parse_resource
from qdd.errors import SpecError

from .conftest import Kube
from .test_operator import SEED, condition, cr_of, wait_ready

BAD_STRINGS = ["img: bad", "x\nhostNetwork: true", "a b", "a#b", "x" * 600, "UPPER", "../etc", "{{ x }}", ""]

# (dotted path under the CR, value): one mutation of the seed each.
CASES: list[tuple[str, Any]] = [
    ("spec.workload.concurrency", 0), ("spec.workload.concurrency", 1 << 20), ("spec.workload.concurrency", (1 << 20) + 1),
    ("spec.workload.concurrency", "4096"), ("spec.workload.concurrency", True), ("spec.workload.isl", (1 << 20) + 1),
    ("spec.workload.randomRangeRatio", 0), ("spec.workload.randomRangeRatio", 1.5), ("spec.workload.randomRangeRatio", "0.8"),
    ("spec.workload.random_range_ratio", 0.8), ("spec.prefill.tuning.max_num_seqs", 8), ("spec.prefill.endpoints", 65),
    ("spec.prefill.endpoints", 64), ("spec.decode.endpoints", 17), ("spec.prefill.topology.dataParallel", 73),
    ("spec.prefill.topology.dataParallel", "2"), ("spec.prefill.topology.expertParallel", "true"),
    ("spec.prefill.topology.expertParallel", 1), ("spec.ports.http", 0), ("spec.ports.http", 65536),
    ("spec.kvTransfer.sideChannelPort", 1023), ("spec.kvTransfer.sideChannelHost", "10.0.0.1"),
    ("spec.kvTransfer.sideChannelHost", "localhost"), ("spec.kvTransfer.sideChannelHost", "::1"),
    ("spec.kvTransfer.sideChannelHost", "bad host"), ("spec.kvTransfer.ucx", {"tls": "cuda_copy,cuda_ipc,tcp"}),
    ("spec.kvTransfer.ucx", {"tls": "tcp;rm -rf"}), ("spec.kvTransfer.ucx", {"tls": "^ib"}),
    ("metadata.name", "1abc"), ("metadata.name", "a.b"), ("metadata.name", "a" * 40), ("metadata.name", "a" * 41),
    ("spec.engine.image", "registry.example:5000/team/qdd-vllm:0.33.0@sha256:abc"),
    ("spec.engine.imagePullSecrets", ["regcred"]), ("spec.engine.imagePullSecrets", ["a.b"]),
    ("spec.engine.imagePullSecrets", ["Bad"]), ("spec.engine.imagePullSecrets", ["x" * 254]),
    ("spec.engine.imagePullSecrets", [f"s{i}" for i in range(9)]), ("spec.engine.vllmVersion", "latest"),
    ("spec.model.source", {"pvc": {"claimName": "models", "subPath": "a/b.c"}}),
    ("spec.model.source", {"pvc": {"claimName": "models", "subPath": "/abs"}}),
    ("spec.model.source", {"pvc": {"claimName": "models", "subPath": "a/../b"}}),
    ("spec.model.source", {"pvc": {"claimName": "../x"}}),
    ("spec.model.servedModelName", "a b"), ("spec.model.name", "nvidia/Qwen3.5-397B-A17B-NVFP4 x"),
    ("spec.cluster.nodeSelector", {"example.com/pool": "gb200"}), ("spec.cluster.nodeSelector", {"bad key!": "v"}),
    ("spec.cluster.nodeSelector", {"k": "bad value!"}), ("spec.cluster.nodeSelector", {f"k{i}": "v" for i in range(33)}),
    ("spec.cluster.tolerations", [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]),
    ("spec.cluster.tolerations", [{"key": "k", "operator": "Bogus"}]), ("spec.cluster.tolerations", [{"foo": 1}]),
    ("spec.cluster.tolerations", [{"operator": "Exists"}] * 17), ("spec.cluster.shmSize", "lots"),
    ("spec.cluster.shmSize", "64Gi"), ("spec.prefill.cpu", "1.2.3"), ("spec.prefill.cpu", "500m"),
    ("spec.prefill.memory", "1e9"), ("spec.prefill.memory", 256),
    ("spec.prefill.extraEnv", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]),
    ("spec.prefill.extraEnv", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]),
    ("spec.prefill.extraEnv", [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"},
                                                           "configMapKeyRef": {"name": "c", "key": "k"}}}]),
    ("spec.prefill.extraEnv", [{"name": "A", "valueFrom": {}}]),
    ("spec.prefill.extraEnv", [{"name": "1A", "value": "x"}]),
    ("spec.prefill.extraArgs", ["x" * 8193]), ("spec.prefill.extraArgs", ["--enable-eplb"] * 65),
    ("spec.prefill.tuning.prefixCaching", True), ("spec.decode.topology.tensorParallel", 2),
    ("spec.model.architecture", {"name": "Qwen3.5-397B-A17B", "numHiddenLayers": 1025}),
    ("spec.model.architecture", {"name": "Qwen3.5-397B-A17B", "fullAttentionInterval": 64}),
    ("spec.cluster.tolerations", [{"key": "k", "operator": "Exists", "value": "v"}]),
    ("spec.cluster.tolerations", [{"operator": "Equal", "value": "v"}]),
    ("spec.cluster.tolerations", [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]),
    ("spec.cluster.tolerations", [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]),
    ("spec.router", {"port": 29000}), ("spec.router", {"port": 9000}),
    ("spec.model.source", {"pvc": {"claimName": "models", "subPath": ".cache/hub/Qwen3.5..v2/"}}),
    ("spec.model.source", {"pvc": {"claimName": "models", "subPath": "a/.."}}),
    ("spec.engine.image", "[fd00::1]:5000/vllm:0.33.0"), ("spec.cluster.nodeSelector", {"a" * 64: "v"}),
    ("spec.cluster.nodeSelector", {"example.com/" + "a" * 63: "v"}),
    ("spec.cluster.nodeAffinity", [{"key": "pool.example/zone", "operator": "In", "values": ["a"]}]),
    ("spec.cluster.nodeAffinity", [{"key": "k", "operator": "In"}]),
    ("spec.cluster.nodeAffinity", [{"key": "k", "operator": "Exists", "values": ["x"]}]),
    ("spec.cluster.nodeAffinity", [{"key": "k", "operator": "Gt", "values": ["12"]}]),
    ("spec.cluster.nodeAffinity", [{"key": "k", "operator": "Lt", "values": ["x"]}]),
    ("spec.cluster.nodeAffinity", [{"key": "k", "operator": "Near", "values": ["x"]}]),
    # engine-correctness rules (refused at apply time by CEL, with the vLLM issue in the message)
    ("spec.kvTransfer.loadFailurePolicy", "recompute"), ("spec.kvTransfer.loadFailurePolicy", "fail"),
    ("spec.prefill.tuning", {"kvCacheDtype": "nvfp4"}), ("spec.kvTransfer.leaseSeconds", 10),
    ("spec.kvTransfer.leaseSeconds", 4000), ("spec.kvTransfer.leaseSeconds", 300),
    ("spec.workload.maxModelLen", 9000), ("spec.workload.maxModelLen", 9216), ("spec.workload.maxModelLen", 32768),
    ("spec.model.revision", "main"), ("spec.model.revision", "0123abcdef"), ("spec.model.revision", "bad rev!"),
    ("spec.decode.tuning", {"all2allBackend": "pplx"}), ("spec.prefill.tuning", {"all2allBackend": "flashinfer_all2allv"}),
    ("spec.decode.tuning", {"all2allBackend": "deepep_high_throughput"}),
    ("spec.decode.tuning", {"all2allBackend": "deepep_high_throughput", "allowExperimentalAll2all": True}),
    ("spec.decode.tuning", {"all2allBackend": "flashinfer_nvlink_two_sided"}),
    ("spec.speculative", {"method": "mtp", "numSpeculativeTokens": 1}), ("spec.speculative", {"numSpeculativeTokens": 9}),
    ("spec.speculative", {"method": "eagle"}),
    # round 4: at most 60 reads per pod in spec.observe's window and stall time
    ("spec.observe", {"periodSeconds": 5, "windowSeconds": 86400}), ("spec.observe", {"periodSeconds": 60, "windowSeconds": 3600}),
    ("spec.observe", {"periodSeconds": 5, "thresholds": {"stallSeconds": 600}}),
    *[("spec.engine.image", s) for s in BAD_STRINGS],
    *[("spec.engine.imagePullSecrets", [s]) for s in BAD_STRINGS],
]


def _mutated(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    cr = copy.deepcopy(base)
    node = cr
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return cr


def _qdd_accepts(cr: dict[str, Any]) -> tuple[bool, str]:
    try:
        parse_resource(cr)
    except SpecError as e:
        return False, str(e)
    return True, ""


def _server_accepts(api, cr: dict[str, Any]) -> tuple[bool, str]:
    from kubernetes.client import ApiException

    try:
        # kubectl apply validates strictly (unknown fields are an error, not silently pruned).
        api.create_namespaced_custom_object("qdd.dev", "v1alpha1", cr["metadata"]["namespace"], "qwendisaggdeployments",
                                            cr, dry_run="All", field_validation="Strict")
    except ApiException as e:
        if e.status not in (400, 422):
            raise
        return False, json.loads(e.body).get("message", "")[:300]
    return True, ""


def test_api_server_and_qdd_refuse_the_same_resources(kube: Kube, operator, namespace):
    from kubernetes import client

    api = client.CustomObjectsApi(kube.api_client())
    base = cr_of(SEED, namespace)
    disagree, refused = [], 0
    for path, value in CASES:
        cr = _mutated(base, path, value)
        server, s_msg = _server_accepts(api, cr)
        ours, q_msg = _qdd_accepts(cr)
        refused += not server
        if server != ours:
            disagree.append(f"{path}={str(value)[:40]!r}: API server {'accepts' if server else 'refuses'} "
                            f"({s_msg[:160]}), qdd {'accepts' if ours else 'refuses'} ({q_msg[:160]})")
    assert not disagree, "\n".join(disagree)
    assert refused >= len(CASES) // 2  # most cases are refusals: the test would see a lax CRD


@pytest.mark.parametrize(("what", "changes", "message"), [
    ("concurrency", {"spec.workload.concurrency": 1 << 20}, "lower the concurrency or add decode endpoints"),
    ("architecture", {"spec.model.architecture": {"name": "Qwen3.5-397B-A17B", "numHiddenLayers": 3,
                                                  "fullAttentionInterval": 4}}, "qdd plans hybrid models"),
])
def test_a_resource_that_took_the_operator_down_is_refused_while_another_stays_ready(
        kube: Kube, operator, namespace, what, changes, message):
    good = cr_of(SEED, namespace)
    kube.apply(good)
    wait_ready(kube, good["metadata"]["name"], namespace)
    bad = cr_of(SEED, namespace, **{"metadata.name": f"hostile-{what}"}, **changes)
    start = time.monotonic()
    kube.apply(bad)  # the API server accepts it: every number is within its bounds
    obj = kube.wait_for(lambda: (o := kube.get("qdd", bad["metadata"]["name"], namespace))
                        and condition(o, "PlanValid").get("status") == "False" and o, timeout=30, interval=0.05,
                        desc="PlanValid=False")
    took = time.monotonic() - start
    print(f"{what}: PlanValid=False {took:.2f} s after kubectl apply returned")
    assert message in condition(obj, "PlanValid")["message"]
    assert condition(obj, "Ready")["status"] == "False"
    assert took < 3, f"{took:.2f} s to refuse"  # polling kubectl adds ~0.3 s; the reconcile itself is ms
    kube.wait_for(lambda: [e for e in kube.get("events", namespace=namespace)["items"]
                           if e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == bad["metadata"]["name"]
                           and e["type"] == "Warning"], timeout=20, desc="a Warning event InvalidSpec")
    children = kube.kubectl("get", "pods,statefulsets,services,jobs", "-n", namespace, "-l",
                            f"qdd.dev/deployment={bad['metadata']['name']}", "-o", "name").stdout.split()
    assert children == []  # nothing half-applied
    still = kube.get("qdd", good["metadata"]["name"], namespace)
    assert condition(still, "Ready")["status"] == "True"
    assert operator.live()
