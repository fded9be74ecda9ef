#!/usr/bin/env python3
"""TEST DOUBLE for NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu), ComputeDomain side.

This is NOT NVIDIA's driver. It runs next to the simulated GB200 NVL72 cluster (hack/cluster-up.sh
starts it, hack/cluster-down.sh stops it) and does what the real driver does around IMEX
channels, as read in its source at commit 95932046 (docs/facts/dra-driver.md; the rules are in
hack/dra_double.py, checked by tests/unit/test_dra_double.py):

* the ComputeDomain controller: for every ``ComputeDomain`` (``resource.nvidia.com/v1beta1``, all
  namespaces) the workload ResourceClaimTemplate named by ``spec.channel.resourceClaimTemplate.name``
  (one ``channel`` request of class ``compute-domain-default-channel.nvidia.com`` with the
  ComputeDomainChannelConfig; labels on the template, none on its claims; no owner reference),
  and the deletion of templates whose ComputeDomain is gone (its cleanup manager);
* the kubelet plugin on every node (kwok plays the kubelet and prepares nothing): every 2 s, for
  each channel claim of a pod bound to the node (the kubelet's view: the claim's allocation may
  name another node, the plugin does not compare it), the Prepare checks in the driver's order —
  one channel claim per node, the claim in the ComputeDomain's namespace, the node label
  ``resource.nvidia.com/computeDomain=<UID>`` set (refused when another ComputeDomain holds the
  node) — and Unprepare (label removed) when the claim is released. A refusal is a Warning event
  ``FailedPrepareDynamicResources`` on the claim's pods, as the kubelet reports it;
* the daemons and the status sync: ``status.nodes`` lists the labelled nodes (Ready), and
  ``status.status`` is computed as the controller does (Ready with no nodes and numNodes 0).

What the real driver does that this leaves out (the same list is in docs/facts/dra-driver.md):
IMEX daemons, CDI, checkpoint files, ComputeDomainCliques, finalizers, daemon claims; kwok
still runs a pod whose Prepare was refused (the scheduler never gets there: one channel device
per node, hack/cluster/objects.py).

Level-triggered and idempotent: restarts lose nothing but the Prepare state, rebuilt from the
claims (oldest first) on the first pass. Exits 0 on SIGTERM/SIGINT.

Usage: fake_compute_domain_driver.py [--kubeconfig PATH] [--context NAME] [--resync SECONDS]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from datetime import datetime, timezone

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from dra_double import (CD_LABEL, TARGET_LABEL, TARGET_WORKLOAD, NodeState, claims_by_node,
                        global_status, node_entries, prepare_node, workload_template)

CD_GROUP, CD_VERSION, CD_PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
RC_GROUP, RC_VERSION = "resource.k8s.io", "v1"
STATUS_SYNC_SECONDS = 2.0  # cdStatusSyncInterval (cmd/compute-domain-controller/cdstatus.go)

log = logging.getLogger("fake-compute-domain-driver")


class Stop(Exception):
    """Raised from the signal handler to leave a blocking watch."""


def _on_signal(signum, _frame):
    log.info("TEST DOUBLE: received %s, exiting", signal.Signals(signum).name)
    raise Stop()


class Driver:
    def __init__(self, api: client.ApiClient, resync: float):
        self.co = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.resync = resync
        self.nodes: dict[str, NodeState] = {}  # the kubelet plugins' checkpoints
        self.reported: set[tuple[str, str, str]] = set()  # (claim uid, node, error) already posted as events
        self.pod_nodes: set[tuple[str | None, str]] = set()  # (node, pod uid) of the last pass

    # -- the controller: one ComputeDomain's template --------------------------------------
    def reconcile(self, cd: dict) -> None:
        meta = cd["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp"):
            return
        try:
            tname = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
        except (KeyError, TypeError):
            log.warning("TEST DOUBLE: ComputeDomain %s/%s has no channel template name", ns, name)
            return
        try:
            rct = self.co.get_namespaced_custom_object(RC_GROUP, RC_VERSION, ns, "resourceclaimtemplates", tname)
        except ApiException as e:
            if e.status != 404:
                raise
            rct = None
        if rct is not None:
            owner = (rct["metadata"].get("labels") or {}).get(CD_LABEL)
            if owner == meta["uid"]:
                return
            if owner is None:
                log.warning("TEST DOUBLE: ResourceClaimTemplate %s/%s exists and is not a ComputeDomain's; "
                            "leaving it alone", ns, tname)
                return
            self._delete_template(rct)  # an earlier ComputeDomain's of the same name: replace it
        try:
            self.co.create_namespaced_custom_object(RC_GROUP, RC_VERSION, ns, "resourceclaimtemplates",
                                                    workload_template(cd))
            log.info("TEST DOUBLE: created ResourceClaimTemplate %s/%s for ComputeDomain %s", ns, tname, name)
        except ApiException as e:
            if e.status != 409:  # created meanwhile, or the stale one still going: next pass
                raise

    def _delete_template(self, rct: dict) -> None:
        meta = rct["metadata"]
        log.info("TEST DOUBLE: deleting stale ResourceClaimTemplate %s/%s", meta["namespace"], meta["name"])
        try:
            self.co.delete_namespaced_custom_object(
                RC_GROUP, RC_VERSION, meta["namespace"], "resourceclaimtemplates", meta["name"],
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"])))
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    # -- the kubelet plugins, the daemons and the status sync -------------------------------
    def sync(self) -> None:
        """One status-sync period: Prepare/Unprepare on every node, node labels, events, every
        ComputeDomain's status, stale templates."""
        cds = self.co.list_cluster_custom_object(CD_GROUP, CD_VERSION, CD_PLURAL).get("items", [])
        domains = {cd["metadata"]["uid"]: cd for cd in cds}
        claims = self.co.list_cluster_custom_object(RC_GROUP, RC_VERSION, "resourceclaims").get("items", [])
        nodes = self.core.api_client.sanitize_for_serialization(self.core.list_node()).get("items", [])
        pods = self.core.api_client.sanitize_for_serialization(self.core.list_pod_for_all_namespaces()).get("items", [])
        # The kubelet prepares the claims of the pods on its node, wherever the claim's allocation
        # points (dra_double.claims_by_node).
        by_node = claims_by_node(sorted(claims, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                                               c["metadata"]["name"])), pods)
        by_uid = {c["metadata"]["uid"]: c for c in claims}
        self.pod_nodes = {(p["spec"].get("nodeName"), p["metadata"]["uid"]) for p in pods}
        for n in nodes:
            name = n["metadata"]["name"]
            label = (n["metadata"].get("labels") or {}).get(CD_LABEL)
            before = self.nodes.get(name) or NodeState(label=label)
            before.label = label
            after = prepare_node(before, by_node.get(name, []), domains)
            if after.label != label:
                self.core.patch_node(name, {"metadata": {"labels": {CD_LABEL: after.label}}})
                (n["metadata"].setdefault("labels", {}))[CD_LABEL] = after.label
                log.info("TEST DOUBLE: node %s label %s=%s", name, CD_LABEL, after.label)
            for uid, err in after.errors.items():
                self._report(by_uid[uid], name, err)
            after.errors = {}
            self.nodes[name] = after
        for cd in cds:
            self._status(cd, nodes)
        for rct in self.co.list_cluster_custom_object(
                RC_GROUP, RC_VERSION, "resourceclaimtemplates",
                label_selector=f"{TARGET_LABEL}={TARGET_WORKLOAD}").get("items", []):
            if rct["metadata"]["labels"].get(CD_LABEL) not in domains:
                self._delete_template(rct)

    def _report(self, claim: dict, node: str, err: str) -> None:
        if (claim["metadata"]["uid"], node, err) in self.reported:
            return
        self.reported.add((claim["metadata"]["uid"], node, err))
        ns = claim["metadata"]["namespace"]
        msg = f"Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources: " \
              f"error preparing devices for claim '{ns}/{claim['metadata']['name']}:{claim['metadata']['uid']}': {err}"
        log.warning("TEST DOUBLE: node %s: %s", node, msg)
        now = datetime.now(timezone.utc)
        for r in (claim.get("status") or {}).get("reservedFor") or []:
            if r.get("resource") != "pods" or (node, r.get("uid")) not in self.pod_nodes:
                continue  # the kubelet of this node reports for its own pods
            try:
                self.core.create_namespaced_event(ns, client.CoreV1Event(
                    metadata=client.V1ObjectMeta(generate_name=f"{r['name']}."),
                    involved_object=client.V1ObjectReference(kind="Pod", namespace=ns, name=r["name"], uid=r["uid"]),
                    reason="FailedPrepareDynamicResources", message=msg, type="Warning",
                    source=client.V1EventSource(component="kubelet", host=node),
                    reporting_component="kubelet", reporting_instance=node,
                    first_timestamp=now, last_timestamp=now, count=1))
            except ApiException as e:
                log.warning("TEST DOUBLE: event for pod %s/%s: %s %s", ns, r["name"], e.status, e.reason)

    def _status(self, cd: dict, nodes: list[dict]) -> None:
        meta = cd["metadata"]
        if meta.get("deletionTimestamp"):
            return
        entries = node_entries(meta["uid"], nodes)
        want = {"status": global_status(cd, entries), "nodes": entries}
        have = cd.get("status") or {}
        if have.get("status") != want["status"] or (have.get("nodes") or []) != entries:
            try:
                self.co.patch_namespaced_custom_object_status(
                    CD_GROUP, CD_VERSION, meta["namespace"], CD_PLURAL, meta["name"], {"status": want})
            except ApiException as e:
                if e.status != 404:
                    raise
                return
            log.info("TEST DOUBLE: ComputeDomain %s/%s status=%s nodes=%s", meta["namespace"], meta["name"],
                     want["status"], [n["name"] for n in entries])

    def sync_forever(self) -> None:
        while True:
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - keep running; the API may come and go
                log.warning("TEST DOUBLE: status sync: %s: %s", type(e).__name__, e)
            time.sleep(STATUS_SYNC_SECONDS)

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
        syncer = Driver(config.new_client_from_config(config_file=a.kubeconfig, context=a.context), a.resync)
        threading.Thread(target=syncer.sync_forever, name="status-sync", daemon=True).start()
        Driver(api, a.resync).run()
    except Stop:
        pass
    log.info("TEST DOUBLE: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
