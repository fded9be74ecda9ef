"""Contract test of the DRA driver TEST DOUBLE (hack/cluster/objects.py, hack/dra_double.py)
against NVIDIA's driver, kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046
(docs/facts/dra-driver.md gives the files). The expected values below are the driver's, read in
its source; a double that drifts from them (a kinder class, more channels, labels on claims, a
second claim prepared on a node) fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


objects = _load("qdd_sim_objects", "hack/cluster/objects.py")
dra = _load("dra_double", "hack/dra_double.py")

# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-compute-domain-default-channel.yaml
CHANNEL_CEL = ("device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com']"
               ".type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0")
# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-compute-domain-daemon.yaml
DAEMON_CEL = ("device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com']"
              ".type == 'daemon'")


def _items(kind: str) -> list[dict]:
    return [i for i in objects.render(1, 2, "dra")["items"] if i["kind"] == kind]


def test_device_classes_are_the_charts():
    classes = {c["metadata"]["name"]: c for c in _items("DeviceClass")}
    assert sorted(classes) == ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"]
    for name, cel in (("compute-domain-default-channel.nvidia.com", CHANNEL_CEL),
                      ("compute-domain-daemon.nvidia.com", DAEMON_CEL)):
        assert classes[name]["apiVersion"] == "resource.k8s.io/v1"
        assert classes[name]["spec"] == {"selectors": [{"cel": {"expression": cel}}]}


def test_slices_are_the_kubelet_plugins():
    slices = _items("ResourceSlice")
    assert [s["spec"]["nodeName"] for s in slices] == [objects.node_name(1, i) for i in range(1, 19)]
    for s in slices:
        spec = s["spec"]
        # driver.go: one pool per node named after it, one slice; DriverName of the plugin.
        assert spec["driver"] == "compute-domain.nvidia.com"
        assert spec["pool"] == {"name": spec["nodeName"], "generation": 1, "resourceSliceCount": 1}
        # computeDomainPublishedDevices: channel 0 only (2048 known, the rest not published) and
        # the daemon device; deviceinfo.go: names <type>-<id>, attributes type and id, nothing else.
        assert spec["devices"] == [
            {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
            {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
        ]


CD = {"metadata": {"name": "cd", "namespace": "ns", "uid": "u-1"},
      "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": "Single"}}}


def test_workload_template_is_the_controllers():
    t = dra.workload_template(CD)
    # templates/compute-domain-workload-claim-template.tmpl.yaml + resourceclaimtemplate.go
    assert t["metadata"] == {"name": "cd-channel", "namespace": "ns", "labels": {
        "resource.nvidia.com/computeDomain": "u-1", "resource.nvidia.com/computeDomainTarget": "Workload"}}
    assert "ownerReferences" not in t["metadata"]
    assert "metadata" not in t["spec"]  # claims made from it carry no labels
    assert t["spec"]["spec"]["devices"] == {
        "requests": [{"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
        "config": [{"requests": ["channel"], "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
            "domainID": "u-1", "allocationMode": "Single"}}}]}


def _claim(uid: str, domain: str, ns: str = "ns", node: str = "n1", reserved: bool = True) -> dict:
    c = dra.workload_template({**CD, "metadata": {**CD["metadata"], "uid": domain}})["spec"]["spec"]
    status = {"allocation": {"devices": {"results": [
        {"request": "channel", "driver": "compute-domain.nvidia.com", "pool": node, "device": "channel-0"}]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"pod-{uid}", "uid": f"p-{uid}"}]
    return {"metadata": {"uid": uid, "name": f"c-{uid}", "namespace": ns}, "spec": c, "status": status}


DOMAINS = {"u-1": CD, "u-2": {**CD, "metadata": {"name": "cd2", "namespace": "ns", "uid": "u-2"}},
           "u-3": {**CD, "metadata": {"name": "cd3", "namespace": "other", "uid": "u-3"}}}


def _bound(name: str, node: str, claim: str, uid: str | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"p-{name}"},
            "spec": {"nodeName": node, "resourceClaims": [{"name": "imex", "resourceClaimName": claim}]}}


def _reserved_for(claim: dict, *pods: dict) -> dict:
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                                      for p in pods]
    return claim


def test_claims_are_prepared_on_the_nodes_of_the_pods_that_hold_them():
    """The kubelet prepares the claims of the pods on its node; the plugin looks the allocated
    device up by name only (device_state.go getConfigResultsMap: s.allocatable[result.Device]), so a
    claim allocated on n1's channel-0 but held by a pod on n2 is prepared on n2 as well."""
    on1, on2 = _bound("on1", "n1", "c-a"), _bound("on2", "n2", "c-a")
    a = _reserved_for(_claim("a", "u-1", node="n1"), on1, on2)
    assert dra.claims_by_node([a], [on1, on2]) == {"n1": [a], "n2": [a]}
    # no reservation for the pod (yet): nothing to prepare; an unallocated claim neither
    assert dra.claims_by_node([_claim("a", "u-1", reserved=False)], [on1]) == {}
    assert dra.claims_by_node([a], [_bound("other", "n3", "c-a")]) == {}
    assert dra.channel_domain(_claim("a", "u-2")) == "u-2"


def test_a_claim_allocated_elsewhere_meets_the_local_claim_at_prepare():
    """Two tray claims' pods on one tray (a claim whose allocation names another tray, as the
    v1.36.3 scheduler may bind it, docs/placement.md): the tray's plugin refuses the second."""
    local, stray = _bound("local", "n2", "c-b"), _bound("stray", "n2", "c-a")
    a = _reserved_for(_claim("a", "u-1", node="n1"), stray)
    b = _reserved_for(_claim("b", "u-1", node="n2"), local)
    by_node = dra.claims_by_node([b, a], [local, stray])
    s = dra.prepare_node(dra.NodeState(), by_node["n2"], DOMAINS)
    assert s.holder == "b" and list(s.errors) == ["a"]


def test_prepare_labels_the_node_and_holds_the_channel():
    s = dra.prepare_node(dra.NodeState(), [_claim("a", "u-1")], DOMAINS)
    assert (s.holder, s.label, s.errors) == ("a", "u-1", {})


def test_second_claim_of_one_domain_on_a_node_is_refused():
    # Prepare: validateNoOverlappingPreparedDevices compares device names (every claim's device is
    # channel-0) before assertImexChannelNotAllocated(0) would.
    s = dra.prepare_node(dra.NodeState(), [_claim("a", "u-1"), _claim("b", "u-1")], DOMAINS)
    assert s.holder == "a"
    assert s.errors == {"b": "unable to prepare claim b: requested device channel-0 is already allocated to "
                             "different claim a"}


def test_claim_of_another_domain_on_a_labelled_node_is_refused():
    # The channel is free (a's claim released) but the label is another domain's: AddNodeLabel refuses.
    s = dra.prepare_node(dra.NodeState(label="u-1"), [_claim("b", "u-2")], DOMAINS)
    assert s.holder is None and s.label == "u-1"
    assert s.errors == {"b": "prepare devices failed: error applying config: error adding Node label for "
                             "ComputeDomain: label already exists for a different ComputeDomain"}


def test_claim_in_another_namespace_than_its_domain_is_refused():
    s = dra.prepare_node(dra.NodeState(), [_claim("c", "u-3", ns="ns")], DOMAINS)
    assert "namespace is different" in s.errors["c"] and s.holder is None


def test_unprepare_frees_channel_and_label():
    held = dra.prepare_node(dra.NodeState(), [_claim("a", "u-1")], DOMAINS)
    freed = dra.prepare_node(held, [], DOMAINS)
    assert (freed.holder, freed.label) == (None, None)
    # ... after which another domain may take the node.
    s = dra.prepare_node(freed, [_claim("b", "u-2")], DOMAINS)
    assert (s.holder, s.label, s.errors) == ("b", "u-2", {})


def _node(name: str, label: str | None) -> dict:
    labels = {"nvidia.com/gpu.clique": "cl.1", **({"resource.nvidia.com/computeDomain": label} if label else {})}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def test_status_nodes_are_the_labelled_nodes():
    entries = dra.node_entries("u-1", [_node("n2", "u-1"), _node("n1", "u-1"), _node("n3", "u-2"), _node("n4", None)])
    assert [(e["name"], e["index"], e["status"], e["cliqueID"], e["ipAddress"]) for e in entries] == [
        ("n1", 0, "Ready", "cl.1", "10.0.0.1"), ("n2", 1, "Ready", "cl.1", "10.0.0.1")]


@pytest.mark.parametrize(("num_nodes", "nodes", "want"), [
    (0, [], "Ready"),  # a new domain with numNodes 0 is Ready at once
    (2, [{"status": "Ready"}], "NotReady"),
    (0, [{"status": "Ready"}, {"status": "NotReady"}], "NotReady"),
    (1, [{"status": "Ready"}], "Ready"),
])
def test_global_status_is_calculate_global_status(num_nodes, nodes, want):
    assert dra.global_status({"spec": {"numNodes": num_nodes}}, nodes) == want


def test_gb200_trays_carry_what_gpu_feature_discovery_and_the_device_plugin_publish():
    """The simulated trays (the other half of hack/cluster/objects.py) against docs/facts/gb200.md:
    18 trays per NVL72 rack, 4 GPUs each, GPU Feature Discovery's labels, one clique per rack."""
    nodes = [i for i in objects.render(2, 2, "nodes")["items"] if i["metadata"]["name"].startswith("gb200-")]
    assert len(nodes) == 36
    for n in nodes:
        lab = n["metadata"]["labels"]
        rack = int(lab["qdd.dev/sim-rack"][1:])
        assert (lab["kubernetes.io/arch"], lab["nvidia.com/gpu.product"], lab["nvidia.com/gpu.count"],
                lab["nvidia.com/gpu.memory"], lab["nvidia.com/gpu.family"]) == (
            "arm64", "NVIDIA-GB200", "4", "189471", "blackwell")
        assert lab["nvidia.com/gpu.clique"] == objects.clique(rack) and lab["nvidia.com/gpu.clique"].endswith(".32766")
        assert n["status"]["capacity"]["nvidia.com/gpu"] == n["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert objects.clique(1) != objects.clique(2)
