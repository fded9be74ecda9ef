"""The loop shared by the test doubles that answer for pods kwok cannot run (the preflight's fetch
pods, the benchmark Jobs' pods): level-triggered — a full list of the selected pods, then a watch
until ``--resync`` seconds pass, again — surviving API server restarts, exiting 0 on SIGTERM/SIGINT.

Usage from a double: ``run("fake-bench-result", "benchmark results", SELECTOR, converge)`` with
``converge(core, pod)`` idempotent. Command line: ``[--kubeconfig PATH] [--resync SECONDS]``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from collections.abc import Callable

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException


def run(name: str, what: str, selector: str, converge: Callable[[client.CoreV1Api, client.V1Pod], None],
        setup: Callable[[], None] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig")
    ap.add_argument("--resync", type=int, default=30)
    args, _ = ap.parse_known_args()  # a double's own options are its own
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} (TEST DOUBLE): %(message)s")
    log = logging.getLogger(name)
    config.load_kube_config(config_file=args.kubeconfig)
    core = client.CoreV1Api()
    if setup is not None:
        setup()
    log.info("started: simulating %s for pods (%s)", what, selector)

    def on_signal(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        try:
            for pod in core.list_pod_for_all_namespaces(label_selector=selector).items:
                converge(core, pod)
            for ev in watch.Watch().stream(core.list_pod_for_all_namespaces, label_selector=selector,
                                           timeout_seconds=args.resync):
                converge(core, ev["object"])
        except ApiException as e:
            log.warning("API error: %s", e.reason)
        except (OSError, urllib3.exceptions.HTTPError) as e:  # the API server restarting: refused, cut off
            log.warning("connection error: %s", e)
            time.sleep(1)
