#!/usr/bin/env python3
"""TEST DOUBLE for the GPUs of the KV-transfer preflight, in the simulated cluster.

kwok runs no container: it marks every Job pod Succeeded with an empty termination message. On
real GPUs the preflight's fetch container writes its JSON result there
(qdd.preflight.result). This double writes that result instead, for every completed fetch pod
(labels ``qdd.dev/role=preflight``, ``qdd.dev/preflight=fetch``) that has none:

* the ``result.json`` key of ConfigMap ``qdd-simulated-preflight`` in the pod's namespace, if
  present (tests use it to simulate a TCP fallback or a failure), else
* the ``nvlink`` result recorded on two H200s (bench/results/nixl-preflight-h200x2.json),
  compacted as the real fetch does.

It is a stand-in for hardware, never part of the operator. Level-triggered (a full pass per
``--resync`` seconds, a pod watch in between); exits 0 on SIGTERM/SIGINT.

Usage: fake_preflight_result.py [--kubeconfig PATH] [--resync SECONDS]
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator" / "src"))
import pod_double  # noqa: E402  (hack/, next to this script)
from qdd.preflight.result import compact  # noqa: E402

SELECTOR = "qdd.dev/role=preflight,qdd.dev/preflight=fetch"
CONFIGMAP = "qdd-simulated-preflight"
log = logging.getLogger("fake-preflight-result")


def recorded() -> str:
    data = json.loads((ROOT / "bench" / "results" / "nixl-preflight-h200x2.json").read_text())
    return compact(data["nvlink"])


def wanted(core: client.CoreV1Api, namespace: str, default: str) -> str:
    try:
        cm = core.read_namespaced_config_map(CONFIGMAP, namespace)
        return (cm.data or {}).get("result.json") or default
    except ApiException as e:
        if e.status == 404:
            return default
        raise


def converge(core: client.CoreV1Api, pod: client.V1Pod, default: str) -> None:
    if pod.status.phase != "Succeeded" or pod.metadata.deletion_timestamp:
        return
    for i, cs in enumerate(pod.status.container_statuses or []):
        term = cs.state.terminated if cs.state else None
        if cs.name != "fetch" or term is None or term.message:
            continue
        message = wanted(core, pod.metadata.namespace, default)
        patch = [{"op": "add", "path": f"/status/containerStatuses/{i}/state/terminated/message", "value": message}]
        # A list body makes the client send application/json-patch+json.
        core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, patch)
        log.info("simulated preflight result for %s/%s", pod.metadata.namespace, pod.metadata.name)


def main() -> None:
    default = recorded()
    pod_double.run("fake-preflight-result", "preflight results", SELECTOR,
                   lambda core, pod: converge(core, pod, default))


if __name__ == "__main__":
    main()
