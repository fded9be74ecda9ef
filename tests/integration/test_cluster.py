"""End-to-end checks of the simulated GB200 NVL72 cluster (hack/cluster-up.sh).

Real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from Go
modules), kwok playing the kubelets, DRA (resource.k8s.io/v1) with fake IMEX channels, and the
ComputeDomain driver test double.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import time

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("qdd_sim_objects", REPO / "hack/cluster/objects.py")
objects = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(objects)

GB200 = [f"gb200-r1-n{i:02d}" for i in range(1, 19)]
CD_TEMPLATE_DRIVER = "compute-domain.nvidia.com"
DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"


def _ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in node.get("status", {}).get("conditions", []))


def test_control_plane_is_real_and_pinned(kube):
    out = kube.kubectl("get", "--raw", "/version").stdout
    assert '"gitVersion": "v1.36.3"' in out
    # DRA is GA in 1.36: resource.k8s.io/v1 is served.
    res = kube.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout.split()
    for r in ("deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io",
              "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io"):
        assert r in res
    assert "resource.k8s.io/v1" in kube.kubectl("api-versions").stdout.split()
    # The real scheduler and controller-manager hold their leases.
    leases = {lease["metadata"]["name"]: lease["spec"].get("holderIdentity", "")
              for lease in kube.get("leases", namespace="kube-system")["items"]}
    assert leases.get("kube-scheduler")
    assert leases.get("kube-controller-manager")


def test_gb200_rack_nodes_ready_with_labels(kube):
    nodes = {n["metadata"]["name"]: n
             for n in kube.get("nodes", selector="nvidia.com/gpu.present=true")["items"]}
    assert sorted(nodes) == GB200
    clique = objects.clique(1)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.\d+", clique)
    for name, n in nodes.items():
        assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        labels = n["metadata"]["labels"]
        assert labels["kubernetes.io/arch"] == "arm64"
        assert labels["kubernetes.io/os"] == "linux"
        assert labels["kubernetes.io/hostname"] == name
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
        assert labels["nvidia.com/gpu.count"] == "4"
        assert labels["nvidia.com/gpu.memory"] == "189471"
        assert labels["nvidia.com/gpu.family"] == "blackwell"
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.clique"] == clique
        assert n["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert n["status"]["allocatable"]["cpu"] == "140"
        assert n["status"]["allocatable"]["pods"] == "110"
        assert _ready(n), f"{name} not Ready"
        assert not n["spec"].get("taints")


def test_cpu_nodes_have_no_gpus(kube):
    for name in ("cpu-n01", "cpu-n02"):
        n = kube.get("node", name)
        assert n["metadata"]["labels"]["kubernetes.io/arch"] == "amd64"
        assert "nvidia.com/gpu.present" not in n["metadata"]["labels"]
        assert "nvidia.com/gpu" not in n["status"]["allocatable"]
        assert _ready(n)
    # 18 GB200 + 2 CPU nodes, nothing else.
    assert len(kube.get("nodes")["items"]) == 20


def test_dra_objects_published(kube):
    dc = kube.get("deviceclass", DEVICE_CLASS)
    expr = dc["spec"]["selectors"][0]["cel"]["expression"]
    # The chart's class: channel 0 only (docs/facts/dra-driver.md).
    assert expr.endswith("device.attributes['compute-domain.nvidia.com'].id == 0")
    assert kube.exists("deviceclass", "compute-domain-daemon.nvidia.com")
    slices = [s for s in kube.get("resourceslices")["items"]
              if s["spec"]["driver"] == CD_TEMPLATE_DRIVER]
    assert sorted(s["spec"]["nodeName"] for s in slices) == GB200
    for s in slices:
        assert s["spec"]["pool"]["name"] == s["spec"]["nodeName"]
        # What the kubelet plugin publishes: channel 0 and the daemon device, nothing else.
        assert [d["name"] for d in s["spec"]["devices"]] == ["channel-0", "daemon-0"]
        assert [d["attributes"]["type"]["string"] for d in s["spec"]["devices"]] == ["channel", "daemon"]
    crd = kube.get("crd", "computedomains.resource.nvidia.com")
    assert crd["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta1"]


def _compute_domain(name: str, template: str, mode: str = "Single") -> dict:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0,
                 "channel": {"resourceClaimTemplate": {"name": template}, "allocationMode": mode}},
    }


def _gpu_pod(name: str, template: str | None, gpus: int = 4) -> dict:
    container = {
        "name": "engine",
        "image": "vllm-openai:test",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                      "requests": {"cpu": "1", "memory": "1Gi"}},
    }
    spec = {"nodeSelector": {"kubernetes.io/arch": "arm64"}, "containers": [container]}
    if template:
        container["resources"]["claims"] = [{"name": "imex"}]
        spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": template}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_compute_domain_pod_scheduling_and_gc(kube, namespace: str):
    ns = namespace
    kube.apply(_compute_domain("cd-seed", "cd-seed-channel"), namespace=ns)
    cd = kube.get("computedomain", "cd-seed", namespace=ns)

    # The driver double creates the ResourceClaimTemplate as the driver does: labelled with the
    # ComputeDomain's UID, no owner reference (its cleanup deletes it with the ComputeDomain) ...
    rct = kube.wait_for(lambda: kube.exists("resourceclaimtemplate", "cd-seed-channel", ns)
                        and kube.get("resourceclaimtemplate", "cd-seed-channel", ns),
                        timeout=30, desc="ResourceClaimTemplate cd-seed-channel")
    assert rct["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == cd["metadata"]["uid"]
    assert "ownerReferences" not in rct["metadata"]
    req = rct["spec"]["spec"]["devices"]["requests"]
    assert len(req) == 1 and req[0]["exactly"]["deviceClassName"] == DEVICE_CLASS
    # ... and reports the domain Ready through the status subresource.
    kube.wait_for(lambda: kube.get("computedomain", "cd-seed", ns).get("status", {}).get("status")
                  == "Ready", timeout=30, desc="ComputeDomain Ready")

    # A GB200 pod that asks 4 GPUs and joins the domain is placed by the real scheduler.
    kube.apply(_gpu_pod("engine-0", "cd-seed-channel"), namespace=ns)
    pod = kube.wait_for(lambda: (p := kube.get("pod", "engine-0", ns))["status"].get("phase")
                        == "Running" and p["status"].get("podIP") and p,
                        timeout=60, desc="pod engine-0 Running with an IP")
    node = pod["spec"]["nodeName"]
    assert node in GB200
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", pod["status"]["podIP"])
    sched = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"][0]
    assert sched["status"] == "True"
    events = kube.get("events", namespace=ns)["items"]
    assert any(e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "engine-0"
               and e.get("reportingComponent", e.get("source", {}).get("component")) in
               ("default-scheduler",) for e in events)

    # Its ResourceClaim was made from the template, allocated on that node and reserved for it.
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = kube.get("resourceclaim", claim_name, ns)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1
    assert results[0]["driver"] == CD_TEMPLATE_DRIVER
    assert results[0]["pool"] == node
    assert results[0]["device"] == "channel-0"
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["engine-0"]
    config = claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert (config["kind"], config["domainID"]) == ("ComputeDomainChannelConfig", cd["metadata"]["uid"])

    # The double reports the node that joined the domain.
    status = kube.wait_for(
        lambda: (s := kube.get("computedomain", "cd-seed", ns).get("status", {})).get("nodes")
        and s, timeout=30, desc="ComputeDomain status.nodes")
    assert [n["name"] for n in status["nodes"]] == [node]
    assert status["nodes"][0]["cliqueID"] == objects.clique(1)

    # Deleting the ComputeDomain: the driver (double) deletes its stale template.
    kube.kubectl("delete", "computedomain", "cd-seed", "-n", ns)
    kube.wait_for(lambda: not kube.exists("resourceclaimtemplate", "cd-seed-channel", ns),
                  timeout=60, desc="ResourceClaimTemplate deleted")
    kube.kubectl("delete", "pod", "engine-0", "-n", ns, "--wait=false")


def test_scheduler_counts_gpus(kube, namespace: str):
    # 5 GPUs fit on no 4-GPU tray: the real scheduler leaves the pod Pending.
    kube.apply(_gpu_pod("too-big", None, gpus=5), namespace=namespace)

    def unschedulable():
        p = kube.get("pod", "too-big", namespace)
        conds = [c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return conds and conds[0]["status"] == "False" and conds[0]["reason"] == "Unschedulable" and conds[0]

    cond = kube.wait_for(unschedulable, timeout=30, desc="too-big Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    assert kube.get("pod", "too-big", namespace)["status"]["phase"] == "Pending"

    # Four 4-GPU pods without a claim land on four distinct trays.
    for i in range(4):
        kube.apply(_gpu_pod(f"full-{i}", None), namespace=namespace)
    def placed():
        ps = [kube.get("pod", f"full-{i}", namespace) for i in range(4)]
        return all(p["spec"].get("nodeName") for p in ps) and ps
    ps = kube.wait_for(placed, timeout=60, desc="4 full-tray pods scheduled")
    assert len({p["spec"]["nodeName"] for p in ps}) == 4


def test_driver_recreates_deleted_template(kube, namespace: str):
    kube.apply(_compute_domain("cd-r", "cd-r-channel", mode="All"), namespace=namespace)
    kube.wait_for(lambda: kube.exists("resourceclaimtemplate", "cd-r-channel", namespace),
                  timeout=30, desc="template created")
    rct = kube.get("resourceclaimtemplate", "cd-r-channel", namespace)
    assert rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"] == "All"
    uid = rct["metadata"]["uid"]
    kube.kubectl("delete", "resourceclaimtemplate", "cd-r-channel", "-n", namespace)
    # Level-triggered: the next resync pass (10 s) recreates it.
    new = kube.wait_for(
        lambda: kube.exists("resourceclaimtemplate", "cd-r-channel", namespace)
        and kube.get("resourceclaimtemplate", "cd-r-channel", namespace)["metadata"]["uid"] != uid,
        timeout=40, desc="template recreated")
    assert new


def test_compute_domain_spec_is_immutable_and_validated(kube, namespace: str):
    kube.apply(_compute_domain("cd-i", "cd-i-channel"), namespace=namespace)
    p = kube.kubectl("patch", "computedomain", "cd-i", "-n", namespace, "--type=merge", "-p",
                     '{"spec":{"channel":{"allocationMode":"All"}}}', check=False)
    assert p.returncode != 0 and "immutable" in p.stderr
    bad = _compute_domain("cd-bad", "x", mode="Many")
    p = kube.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(bad),
                     check=False)
    assert p.returncode != 0 and "Unsupported value" in p.stderr


def test_cluster_up_is_idempotent(kube):
    pid_file = REPO / ".qdd" / "clusters" / kube.cluster / "fake-compute-domain-driver.pid"
    pid = pid_file.read_text().strip()
    uid = kube.get("node", "gb200-r1-n01")["metadata"]["uid"]
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(REPO / "hack/cluster-up.sh")], env=kube.env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cluster already up" in p.stdout
    assert "already running" in p.stdout
    assert pid_file.read_text().strip() == pid
    assert kube.get("node", "gb200-r1-n01")["metadata"]["uid"] == uid
    assert took < 60
