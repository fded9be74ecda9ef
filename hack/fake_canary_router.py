#!/usr/bin/env python3
"""TEST DOUBLE for the router Service of every deployment, for the operator's canary, in the simulated cluster.

kwok runs no container, so no router answers the canary (qdd.controller.canary). The operator of
the simulated cluster is started with ``QDD_CANARY_URL_OVERRIDE`` set to this double's URL
template (``http://127.0.0.1:PORT/{namespace}/{name}``, written to ``--url-file``; hack/operator.sh
and tests/integration/operator_proc.py read it), and this double answers
``POST /<namespace>/<name>/v1/completions`` the way vllm-router in front of real engines answers a
non-streamed completion, with the text:

* the ``answer`` key of ConfigMap ``qdd-simulated-canary`` in that namespace, if present, with
  ``status`` (an HTTP status to answer instead, e.g. 503) and ``delaySeconds`` (wait before
  answering: a hung router) — tests use it to simulate engines that return garbage or fail —, else
* :data:`SIMULATED_ANSWER`.

``GET /<namespace>/<name>/list_workers`` answers as vllm-router 0.1.17 does for the router
Deployment ``<name>-router`` in that namespace (its admin route, src/server.rs): ``{"urls": [...]}``
with ``http://<pod IP>:<--service-discovery-port>`` for every pod its Kubernetes service discovery
has registered (src/service_discovery.rs, :func:`discovered`): a pod that matches all the labels of
``--prefill-selector`` or ``--decode-selector`` is added once it is Running with condition Ready
and has an IP, and stays until it is deleted (the real router never removes a pod that only turns
not Ready). The selectors and port are read from the Deployment's args, as the router reads its
own. ``unregistered`` in the ConfigMap (pod names, comma-separated) keeps those pods out of the
list, like a router whose discovery has not reached them yet. What it leaves out: the router's
health check of a new worker before adding it, and its DP-rank entries (``URL@rank``), which the
operator reads as the same endpoint. tests/contract/test_router.py compares :func:`discovered`
with the real router's answer for the same pods.

``GET /<namespace>/<name>/requests`` returns the request bodies it received for that deployment
(the last 100), so tests assert what the operator sent. It is a stand-in for real engines, never
part of the operator. Exits 0 on SIGTERM/SIGINT.

Usage: fake_canary_router.py [--kubeconfig PATH] [--url-file PATH] [--port N]
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

CONFIGMAP = "qdd-simulated-canary"
SIMULATED_ANSWER = " Paris. (SIMULATED answer of hack/fake_canary_router.py)"
log = logging.getLogger("fake-canary-router")


def _selector_args(args: list[str], flag: str) -> dict[str, str]:
    """``--flag k=v k=v …`` of an argv (the values up to the next ``--``), as the router parses them."""
    if flag not in args:
        return {}
    out: dict[str, str] = {}
    for tok in args[args.index(flag) + 1:]:
        if tok.startswith("--"):
            break
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def _matches(pod: dict[str, Any], selector: dict[str, str]) -> bool:
    lab = (pod.get("metadata") or {}).get("labels") or {}
    return bool(selector) and all(lab.get(k) == v for k, v in selector.items())


def _healthy(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _url(ip: str, port: int) -> str:
    return f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}"


def discovered(args: list[str], pods: list[dict[str, Any]], tracked: dict[str, str],
               unregistered: frozenset[str] = frozenset()) -> tuple[list[str], dict[str, str]]:
    """vllm-router 0.1.17's Kubernetes discovery in P/D mode, for the router args ``args`` and the
    namespace's ``pods`` (API dicts, camelCase): (the URLs ``/list_workers`` lists, prefill pods
    first then decode, each by name; the new ``tracked`` {pod uid: URL}). ``tracked``: what the
    previous call registered: a pod stays registered while it exists and is not being deleted; a
    new one is added when it is Running, Ready and has an IP. ``unregistered``: pod names held back."""
    prefill = _selector_args(args, "--prefill-selector")
    decode = _selector_args(args, "--decode-selector")
    port = int(args[args.index("--service-discovery-port") + 1]) if "--service-discovery-port" in args else 80
    now: dict[str, str] = {}
    order: list[tuple[int, str, str]] = []
    for p in pods:
        meta = p.get("metadata") or {}
        kind = 0 if _matches(p, prefill) else 1 if _matches(p, decode) else None
        ip = (p.get("status") or {}).get("podIP")
        if kind is None or not ip or meta.get("deletionTimestamp") or meta.get("name") in unregistered:
            continue
        uid = str(meta.get("uid"))
        if uid in tracked or _healthy(p):
            now[uid] = tracked.get(uid) or _url(str(ip), port)
            order.append((kind, str(meta.get("name")), now[uid]))
    return [u for _, _, u in sorted(order)], now


class Double:
    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, str], deque[dict[str, Any]]] = defaultdict(lambda: deque(maxlen=100))
        self.apps = client.AppsV1Api(core.api_client)
        self.tracked: dict[tuple[str, str], dict[str, str]] = {}
        """Per router: the pods its discovery registered, {uid: URL} (:func:`discovered`)."""

    def wanted(self, namespace: str) -> dict[str, str]:
        try:
            return self.core.read_namespaced_config_map(CONFIGMAP, namespace).data or {}
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

    def list_workers(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        """The router's ``GET /list_workers``: its Deployment's args, the namespace's pods."""
        try:
            dep = self.apps.read_namespaced_deployment(f"{name}-router", namespace)
        except ApiException as e:
            if e.status == 404:
                return 404, {"error": f"no router Deployment {name}-router in {namespace}"}
            raise
        (c,) = [c for c in dep.spec.template.spec.containers if c.name == "router"]
        # Only the pods both selectors could match, as the router's own watch selects them: listing
        # the whole namespace for every read overloaded the double at make bench-scale (30
        # deployments in one namespace, 300 pods, a read every 2 s each: reads past 5 s).
        args = list(c.args or [])
        prefill, decode = _selector_args(args, "--prefill-selector"), _selector_args(args, "--decode-selector")
        common = ",".join(f"{k}={v}" for k, v in sorted(prefill.items()) if decode.get(k) == v)
        pods = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(namespace, label_selector=common or None).items)
        held = frozenset(x.strip() for x in self.wanted(namespace).get("unregistered", "").split(",") if x.strip())
        with self.lock:
            urls, self.tracked[(namespace, name)] = discovered(args, pods,
                                                               self.tracked.get((namespace, name), {}), held)
        return 200, {"urls": urls}

    def complete(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests[(namespace, name)].append(body)
        want = self.wanted(namespace)
        time.sleep(float(want.get("delaySeconds", "0")))
        status = int(want.get("status", "200"))
        if status != 200:
            return status, {"error": {"message": f"SIMULATED HTTP {status} (ConfigMap {CONFIGMAP})"}}
        text = want.get("answer", SIMULATED_ANSWER)
        return 200, {"id": f"cmpl-simulated-{len(self.requests[(namespace, name)])}", "object": "text_completion",
                     "created": int(time.time()), "model": body.get("model"),
                     "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
                     "usage": {"prompt_tokens": len(str(body.get("prompt", "")).split()),
                               "completion_tokens": body.get("max_tokens"), "total_tokens": None}}


def handler(double: Double) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
            log.info("%s %s", self.address_string(), format % args)

        def _json(self, status: int, obj: Any) -> None:
            payload = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _parts(self) -> list[str]:
            return [p for p in self.path.split("/") if p]

        def do_GET(self) -> None:  # noqa: N802 — stdlib's name
            parts = self._parts()
            if len(parts) == 3 and parts[2] == "requests":
                with double.lock:
                    self._json(200, list(double.requests.get((parts[0], parts[1]), [])))
                return
            if len(parts) == 3 and parts[2] == "list_workers":
                try:
                    self._json(*double.list_workers(parts[0], parts[1]))
                except (ApiException, OSError) as e:
                    self._json(500, {"error": f"test double cannot read the cluster: {e}"})
                return
            self._json(404, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 — stdlib's name
            parts = self._parts()
            if len(parts) != 4 or parts[2:] != ["v1", "completions"]:
                self._json(404, {"error": f"no such path {self.path}"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            except ValueError:
                self._json(400, {"error": "body is not JSON"})
                return
            try:
                self._json(*double.complete(parts[0], parts[1], body))
            except (ApiException, OSError) as e:
                self._json(500, {"error": f"test double cannot read its ConfigMap: {e}"})

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig")
    ap.add_argument("--url-file", help="write the URL template for QDD_CANARY_URL_OVERRIDE here")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: one the OS picks)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fake-canary-router (TEST DOUBLE): %(message)s")
    config.load_kube_config(config_file=args.kubeconfig)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Double(client.CoreV1Api())))
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{{namespace}}/{{name}}"
    if args.url_file:
        Path(args.url_file).write_text(url + "\n")

    def on_signal(*_: Any) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("started: answering the canary of every deployment at %s", url)
    httpd.serve_forever()
    if args.url_file:
        Path(args.url_file).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
