#!/usr/bin/env python3
"""Renders the simulated GB200 NVL72 rack(s) as one Kubernetes ``v1/List`` (JSON on stdout).

Used by hack/cluster-up.sh (``... | kubectl apply -f -``); standard library only.

Per rack ``r`` (1-based): 18 kwok-managed compute trays ``gb200-r<r>-n01..n18``, each arm64 with
``nvidia.com/gpu: 4`` and GPU Feature Discovery-style labels, all sharing one NVLink clique label
``nvidia.com/gpu.clique=<clusterUUID>.<cliqueID>``; plus, once, two CPU-only amd64 nodes
``cpu-n01``, ``cpu-n02``.

TEST DOUBLE for what NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu at 95932046)
puts in the API before any ComputeDomain exists (docs/facts/dra-driver.md):
- the DeviceClasses of its Helm chart, as the chart defines them
  (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-compute-domain-*.yaml):
  ``compute-domain-default-channel.nvidia.com`` selects channel **0** only, and
  ``compute-domain-daemon.nvidia.com``;
- per GB200 node, the ResourceSlice its ComputeDomain kubelet plugin publishes
  (cmd/compute-domain-kubelet-plugin/driver.go, deviceinfo.go): one pool named after the node,
  devices ``channel-0`` and ``daemon-0`` with the attributes ``type`` and ``id``, nothing
  multi-allocatable. So the real scheduler gives one channel claim per node, as it would there.
Left out: the gpu.nvidia.com side of the driver (GPUs are the device plugin's
``nvidia.com/gpu`` here), host-managed IMEX, the ResourceSlice's owner reference to the Node.
The ComputeDomain controller and the kubelet plugin's Prepare checks are
hack/fake_compute_domain_driver.py; the contract test is tests/unit/test_dra_double.py.

The clique value of rack ``r`` is deterministic (see :func:`clique`), so tests can compute it.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid

DRIVER = "compute-domain.nvidia.com"
DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_DEVICE_CLASS = "compute-domain-daemon.nvidia.com"
GPUS_PER_NODE = 4
NODES_PER_RACK = 18
GPU_MEMORY_MIB = 189471
# Fixed namespace for the simulated racks' NVLink cluster UUIDs.
_RACK_NS = uuid.UUID("6c1f0a52-6f3e-4d8e-9a57-0b5f1d0c9a72")
CLIQUE_ID = 32766  # what GB200 NVL72 racks commonly report as their clique id


def node_name(rack: int, index: int) -> str:
    return f"gb200-r{rack}-n{index:02d}"


def clique(rack: int) -> str:
    """The ``nvidia.com/gpu.clique`` label value of simulated rack ``rack``."""
    return f"{uuid.uuid5(_RACK_NS, f'rack-{rack}')}.{CLIQUE_ID}"


def _node(name: str, labels: dict, capacity: dict, allocatable: dict, pod_cidr: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "qdd.dev/simulated": "true",
                **labels,
            },
        },
        # A pod range of the node's own, as a CNI's node IPAM gives: kwok allocates pod IPs from it.
        # With kwok's one cluster-wide range, a restarted kwok handed out again the IPs of pods it
        # had placed before it restarted (duplicate pod IPs: etcd's peers unreachable).
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        # kwok fills in conditions, addresses, nodeInfo and keeps capacity/allocatable.
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def gb200_node(rack: int, index: int) -> dict:
    name = node_name(rack, index)
    labels = {
        "kubernetes.io/arch": "arm64",
        "node.kubernetes.io/instance-type": "gb200-nvl72-tray",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        "nvidia.com/gpu.count": str(GPUS_PER_NODE),
        "nvidia.com/gpu.memory": str(GPU_MEMORY_MIB),
        "nvidia.com/gpu.family": "blackwell",
        "nvidia.com/gpu.clique": clique(rack),
        "qdd.dev/sim-rack": f"r{rack}",
    }
    # One tray: 2 Grace CPUs (72 Neoverse V2 cores each), ~960 GiB LPDDR5X.
    capacity = {
        "cpu": "144",
        "memory": "960Gi",
        "pods": "110",
        "ephemeral-storage": "3Ti",
        "nvidia.com/gpu": str(GPUS_PER_NODE),
    }
    allocatable = {
        "cpu": "140",
        "memory": "900Gi",
        "pods": "110",
        "ephemeral-storage": "2900Gi",
        "nvidia.com/gpu": str(GPUS_PER_NODE),
    }
    return _node(name, labels, capacity, allocatable, f"10.{rack}.{index}.0/24")


def cpu_node(index: int) -> dict:
    name = f"cpu-n{index:02d}"
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    allocatable = {"cpu": "31", "memory": "120Gi", "pods": "110", "ephemeral-storage": "450Gi"}
    return _node(name, {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "cpu"},
                 capacity, allocatable, f"10.250.{index}.0/24")


def _class(name: str, expression: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": {"qdd.dev/test-double": "true"}},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device_classes() -> list[dict]:
    """The chart's two ComputeDomain DeviceClasses, their CEL expressions as the chart writes them."""
    attr = f"device.attributes['{DRIVER}']"
    return [
        _class(DEVICE_CLASS, f"device.driver == '{DRIVER}' && {attr}.type == 'channel' && {attr}.id == 0"),
        _class(DAEMON_DEVICE_CLASS, f"device.driver == '{DRIVER}' && {attr}.type == 'daemon'"),
    ]


def _device(kind: str, ident: int) -> dict:
    return {"name": f"{kind}-{ident}", "attributes": {"type": {"string": kind}, "id": {"int": ident}}}


def resource_slice(rack: int, index: int) -> dict:
    """The kubelet plugin's slice of one node: channel 0 and daemon 0 (the plugin skips channels
    other than 0, driver.go computeDomainPublishedDevices)."""
    node = node_name(rack, index)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{DRIVER}",
            "labels": {"qdd.dev/test-double": "true"},
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [_device("channel", 0), _device("daemon", 0)],
        },
    }


def render(racks: int, cpu_nodes: int, what: str) -> dict:
    items: list[dict] = []
    if what in ("all", "nodes"):
        for r in range(1, racks + 1):
            items += [gb200_node(r, i) for i in range(1, NODES_PER_RACK + 1)]
        items += [cpu_node(i) for i in range(1, cpu_nodes + 1)]
    if what in ("all", "dra"):
        items += device_classes()
        for r in range(1, racks + 1):
            items += [resource_slice(r, i) for i in range(1, NODES_PER_RACK + 1)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--racks", type=int, default=1, help="number of GB200 NVL72 racks (default 1)")
    p.add_argument("--cpu-nodes", type=int, default=2, help="CPU-only amd64 nodes (default 2)")
    p.add_argument("--what", choices=("all", "nodes", "dra"), default="all")
    p.add_argument("--clique", type=int, metavar="RACK",
                   help="print the nvidia.com/gpu.clique value of RACK and exit")
    a = p.parse_args(argv)
    if a.clique is not None:
        print(clique(a.clique))
        return 0
    if a.racks < 1:
        p.error("--racks must be >= 1")
    json.dump(render(a.racks, a.cpu_nodes, a.what), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
