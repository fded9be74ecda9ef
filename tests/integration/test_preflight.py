"""KVTransferReady on the real control plane. kwok runs no container, so the preflight fetch pod's
result comes from the GPU test double (hack/fake_preflight_result.py): the recorded H200 NVLink
result by default, or a ConfigMap's result in the test's namespace."""

from __future__ import annotations

import json

from .conftest import REPO
from .test_operator import SEED, condition, cr_of, wait_ready

TCP_RESULT = json.loads((REPO / "bench" / "results" / "nixl-preflight-h200x2.json").read_text())["tcp_only"]


def test_preflight_jobs_gate_ready_and_report_numbers(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    obj = wait_ready(kube, name, namespace)
    kv = condition(obj, "KVTransferReady")
    assert kv["status"] == "True" and kv["reason"] == "KVTransferVerified"
    assert "cuda_ipc" in kv["message"]
    st = obj["status"]["kvTransfer"]
    assert st["passed"] is True and st["transports"] == ["cuda_ipc"] and st["bulkGbps"] > 300
    jobs = kube.get("jobs", namespace=namespace, selector=f"qdd.dev/deployment={name}")["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == [f"{name}-preflight-fetch-0", f"{name}-preflight-serve-0"]
    for j in jobs:
        pod = j["spec"]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == f"{name}-imex-channel"
        assert j["metadata"]["labels"]["qdd.dev/role"] == "preflight"


def test_tcp_fallback_is_reported_not_ready(kube, operator, namespace):
    kube.kubectl("create", "configmap", "qdd-simulated-preflight", "-n", namespace,
                 f"--from-literal=result.json={json.dumps(TCP_RESULT)}")
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)

    def verdict():
        obj = kube.get("qdd", name, namespace)
        kv = condition(obj, "KVTransferReady")
        return kv.get("status") == "False" and kv.get("reason") != "PreflightPending" and obj
    obj = kube.wait_for(verdict, timeout=90, desc="KVTransferReady=False with the preflight's verdict")
    kv = condition(obj, "KVTransferReady")
    assert kv["reason"] == "TCPFallback"
    assert "UCX used tcp at 0.49 GB/s; expected cuda_ipc/NVLink" in kv["message"]
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    kube.wait_for(lambda: condition(kube.get("qdd", name, namespace), "Ready").get("reason") == "KVTransferNotReady",
                  timeout=60, desc="Ready reason KVTransferNotReady")
    assert obj["status"]["kvTransfer"]["passed"] is False


def test_preflight_can_be_turned_off(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    cr["spec"]["kvTransfer"]["preflight"] = {"enabled": False}
    name = cr["metadata"]["name"]
    kube.apply(cr)
    obj = wait_ready(kube, name, namespace)
    kv = condition(obj, "KVTransferReady")
    assert kv["status"] == "True" and kv["reason"] == "PreflightDisabled"
    assert not kube.get("jobs", namespace=namespace)["items"]
