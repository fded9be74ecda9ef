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


class Double:
    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, str], deque[dict[str, Any]]] = defaultdict(lambda: deque(maxlen=100))

    def wanted(self, namespace: str) -> dict[str, str]:
        try:
            return self.core.read_namespaced_config_map(CONFIGMAP, namespace).data or {}
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

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
