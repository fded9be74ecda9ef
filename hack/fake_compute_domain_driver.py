#!/usr/bin/env python3
"""TEST DOUBLE for NVIDIA's DRA driver (k8s-dra-driver-gpu), ComputeDomain side only.

This is NOT NVIDIA's driver. It runs next to the simulated GB200 NVL72 cluster
(hack/cluster-up.sh starts it, hack/cluster-down.sh stops it) and does the part of the real
driver's controller that qdd depends on:

* for every ``ComputeDomain`` (``resource.nvidia.com/v1beta1``, all namespaces) it creates, in
  the same namespace, the ``ResourceClaimTemplate`` named by
  ``spec.channel.resourceClaimTemplate.name`` (``resource.k8s.io/v1``, one device request
  ``exactly: {deviceClassName: compute-domain-default-channel.nvidia.com}``), owned by the
  ComputeDomain (controller owner reference) so that the garbage collector deletes it with it;
* it sets ``status.status=Ready`` through the status subresource, and ``status.nodes`` to the
  nodes whose fake IMEX channels were allocated to claims made from that template.

The IMEX channel devices themselves are published as static ResourceSlices by cluster-up
(hack/cluster/objects.py); kwok plays the kubelet, so no kubelet plugin exists.

Level-triggered and idempotent: every pass lists all ComputeDomains and converges each one, so
restarts lose nothing. Between passes it watches ComputeDomains (a watch ends after
``--resync`` seconds, which starts the next full pass). Exits 0 on SIGTERM/SIGINT.

Usage: fake_compute_domain_driver.py [--kubeconfig PATH] [--context NAME] [--resync SECONDS]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

CD_GROUP, CD_VERSION, CD_PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
RC_GROUP, RC_VERSION = "resource.k8s.io", "v1"
DRIVER = "compute-domain.nvidia.com"
DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
CD_LABEL = "resource.nvidia.com/computeDomain"  # carries the ComputeDomain's UID
MANAGED_BY = "fake-compute-domain-driver.qdd.dev"

log = logging.getLogger("fake-compute-domain-driver")


class Stop(Exception):
    """Raised from the signal handler to leave a blocking watch."""


def _on_signal(signum, _frame):
    log.info("TEST DOUBLE: received %s, exiting", signal.Signals(signum).name)
    raise Stop()


def template_body(cd: dict) -> dict:
    meta, spec = cd["metadata"], cd.get("spec") or {}
    channel = spec.get("channel") or {}
    name = channel["resourceClaimTemplate"]["name"]
    labels = {CD_LABEL: meta["uid"], "app.kubernetes.io/managed-by": MANAGED_BY}
    return {
        "apiVersion": f"{RC_GROUP}/{RC_VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
                "kind": "ComputeDomain",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }],
        },
        "spec": {
            # Claims made from this template carry the label, so the driver finds them.
            "metadata": {"labels": dict(labels)},
            "spec": {
                "devices": {
                    "requests": [{
                        "name": "channel",
                        "exactly": {
                            "deviceClassName": DEVICE_CLASS,
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }],
                    "config": [{
                        "requests": ["channel"],
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {
                                "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
                                "kind": "ComputeDomainChannelConfig",
                                "domainID": meta["uid"],
                                "allocationMode": channel.get("allocationMode", "Single"),
                            },
                        },
                    }],
                },
            },
        },
    }


class Driver:
    def __init__(self, api: client.ApiClient, resync: float):
        self.co = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.resync = resync

    # -- one ComputeDomain -----------------------------------------------------------------
    def reconcile(self, cd: dict) -> None:
        meta = cd["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if meta.get("deletionTimestamp"):
            return
        try:
            tname = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
        except (KeyError, TypeError):
            log.warning("TEST DOUBLE: ComputeDomain %s/%s has no channel template name", ns, name)
            return
        ready = self._ensure_template(cd, ns, tname, uid)
        nodes = self._nodes(ns, uid) if ready else []
        want = {"status": "Ready" if ready else "NotReady", "nodes": nodes}
        have = cd.get("status") or {}
        if have.get("status") != want["status"] or (have.get("nodes") or []) != nodes:
            self.co.patch_namespaced_custom_object_status(
                CD_GROUP, CD_VERSION, ns, CD_PLURAL, name, {"status": want})
            log.info("TEST DOUBLE: ComputeDomain %s/%s status=%s nodes=%s",
                     ns, name, want["status"], [n["name"] for n in nodes])

    def _ensure_template(self, cd: dict, ns: str, tname: str, uid: str) -> bool:
        try:
            rct = self.co.get_namespaced_custom_object(
                RC_GROUP, RC_VERSION, ns, "resourceclaimtemplates", tname)
        except ApiException as e:
            if e.status != 404:
                raise
            rct = None
        if rct is not None:
            owners = rct["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                return True
            stale = any(o.get("kind") == "ComputeDomain" and o.get("apiVersion", "").startswith(
                CD_GROUP + "/") for o in owners)
            if not stale:
                log.warning("TEST DOUBLE: ResourceClaimTemplate %s/%s exists and is not owned by "
                            "a ComputeDomain; leaving it alone, domain NotReady", ns, tname)
                return False
            # Left over from an earlier ComputeDomain of the same name: replace it.
            log.info("TEST DOUBLE: replacing stale ResourceClaimTemplate %s/%s", ns, tname)
            try:
                self.co.delete_namespaced_custom_object(
                    RC_GROUP, RC_VERSION, ns, "resourceclaimtemplates", tname,
                    body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                        uid=rct["metadata"]["uid"])))
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
        try:
            self.co.create_namespaced_custom_object(
                RC_GROUP, RC_VERSION, ns, "resourceclaimtemplates", template_body(cd))
            log.info("TEST DOUBLE: created ResourceClaimTemplate %s/%s for ComputeDomain %s",
                     ns, tname, cd["metadata"]["name"])
        except ApiException as e:
            if e.status == 409:  # created meanwhile (or the stale one is still going): next pass
                return False
            raise
        return True

    def _nodes(self, ns: str, uid: str) -> list[dict]:
        claims = self.co.list_namespaced_custom_object(
            RC_GROUP, RC_VERSION, ns, "resourceclaims", label_selector=f"{CD_LABEL}={uid}")
        names = set()
        for c in claims.get("items", []):
            alloc = (c.get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                if r.get("driver") == DRIVER and r.get("pool"):
                    names.add(r["pool"])  # pools are named after their node
        nodes = []
        for i, n in enumerate(sorted(names)):
            entry = {"name": n, "index": i, "status": "Ready"}
            try:
                node = self.core.read_node(n)
                labels = node.metadata.labels or {}
                entry["cliqueID"] = labels.get("nvidia.com/gpu.clique", "")
                ips = [a.address for a in (node.status.addresses or []) if a.type == "InternalIP"]
                if ips:
                    entry["ipAddress"] = ips[0]
            except ApiException as e:
                if e.status != 404:
                    raise
            nodes.append(entry)
        return nodes

    # -- loop ------------------------------------------------------------------------------
    def pass_all(self) -> str:
        lst = self.co.list_cluster_custom_object(CD_GROUP, CD_VERSION, CD_PLURAL)
        for cd in lst.get("items", []):
            try:
                self.reconcile(cd)
            except ApiException as e:
                log.warning("TEST DOUBLE: reconcile %s/%s failed: %s %s", cd["metadata"]["namespace"],
                            cd["metadata"]["name"], e.status, e.reason)
        return lst["metadata"]["resourceVersion"]

    def run(self) -> None:
        log.info("TEST DOUBLE for NVIDIA's DRA driver (ComputeDomain controller) started; resync %ss",
                 self.resync)
        backoff = 1.0
        while True:
            try:
                rv = self.pass_all()
                w = watch.Watch()
                for ev in w.stream(self.co.list_cluster_custom_object, CD_GROUP, CD_VERSION,
                                   CD_PLURAL, resource_version=rv,
                                   timeout_seconds=max(1, int(self.resync)),
                                   _request_timeout=self.resync + 30):
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        try:
                            self.reconcile(ev["object"])
                        except ApiException as e:
                            log.warning("TEST DOUBLE: reconcile failed: %s %s", e.status, e.reason)
                    elif ev["type"] == "ERROR":
                        break  # e.g. 410 Gone: relist
                backoff = 1.0
            except Stop:
                raise
            except Exception as e:  # noqa: BLE001 - keep running; the API may come and go
                log.warning("TEST DOUBLE: %s: %s; retrying in %.0fs", type(e).__name__, e, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="TEST DOUBLE for NVIDIA's ComputeDomain DRA driver")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--context", default=None)
    p.add_argument("--resync", type=float, default=float(os.environ.get("QDD_FAKE_DRIVER_RESYNC", "10")),
                   help="seconds between full passes (default 10)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s fake-compute-domain-driver %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        api = config.new_client_from_config(config_file=a.kubeconfig, context=a.context)
        Driver(api, a.resync).run()
    except Stop:
        pass
    log.info("TEST DOUBLE: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
