"""A fake Kubernetes API server (pods only, read-only) on 127.0.0.1: a test double for the control
plane that lets vllm-router's ``--service-discovery`` run without a cluster.

What vllm-router 0.1.17 asks (seen in tests/contract/test_router.py's logs): it infers its client
config from KUBECONFIG (or in-cluster env), lists ``/api/v1/namespaces/<ns>/pods?limit=500``
— every pod of the namespace: it filters on its selectors itself — and then watches from the
list's resourceVersion. This server answers those two calls from a list of pod objects, holds
watches open for at most ``WATCH_HOLD_S`` and records every request. :meth:`FakeKubeAPI.modify`
changes a pod and sends the change to every open watch as a ``MODIFIED`` event (one JSON object
per line, the API server's watch encoding), with a new resourceVersion, as the API server does
for a label patch.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"
WATCH_HOLD_S = 20.0
RESOURCE_VERSION = "1000"


def _matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selectors (``a=b,c=d``), the only kind a client would send here."""
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.lstrip("=").strip():
            return False
    return True


class FakeKubeAPI:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer((HOST, 0), _handler_for(self))
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._events: list[dict[str, Any]] = []
        self._changed = threading.Condition(self._lock)
        self._rv = int(RESOURCE_VERSION)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._http.server_address[1]}"

    def start(self) -> FakeKubeAPI:
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._http.shutdown()
            self._thread.join(timeout=5)
        self._http.server_close()

    def write_kubeconfig(self, path: Path, namespace: str) -> Path:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }
        path.write_text(json.dumps(cfg))  # JSON is YAML
        return path

    def modify(self, name: str, change: Any) -> None:
        """Apply ``change(pod)`` to the pod named ``name`` and send it to the open watches as MODIFIED."""
        with self._changed:
            pod = next(p for p in self.pods if p["metadata"]["name"] == name)
            change(pod)
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            self._events.append({"type": "MODIFIED", "object": json.loads(json.dumps(pod))})
            self._changed.notify_all()

    def pod_list(self, namespace: str | None, selector: str) -> dict[str, Any]:
        items = [p for p in self.pods
                 if (namespace is None or p["metadata"].get("namespace") == namespace)
                 and _matches(p["metadata"].get("labels", {}), selector)]
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": RESOURCE_VERSION},
                "items": items}


def _handler_for(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
            pass

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 — BaseHTTPRequestHandler's name
            with api._lock:
                api.requests.append(self.path)
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = url.path.strip("/").split("/")
            if parts == ["version"]:
                self._json(200, {"major": "1", "minor": "36", "gitVersion": "v1.36.3"})
                return
            namespace = None
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
                namespace = parts[3]
            elif parts != ["api", "v1", "pods"]:
                self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404, "message": f"{url.path} not served"})
                return
            if q.get("watch") in ("true", "1"):
                # Hold the watch open (chunked), sending each change made from now on (modify), then
                # end it; the client re-watches. Bounded by WATCH_HOLD_S and by stop().
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._stream(namespace)
                with contextlib.suppress(OSError):  # the client hung up first
                    self.wfile.write(b"0\r\n\r\n")
                return
            self._json(200, api.pod_list(namespace, q.get("labelSelector", "")))

        def _stream(self, namespace: str | None) -> None:
            deadline = time.monotonic() + WATCH_HOLD_S
            with api._changed:
                sent = len(api._events)
            while not api._stop.is_set() and time.monotonic() < deadline:
                with api._changed:
                    api._changed.wait(min(0.2, max(deadline - time.monotonic(), 0)))
                    new, sent = api._events[sent:], len(api._events)
                for ev in new:
                    if namespace is not None and ev["object"]["metadata"].get("namespace") != namespace:
                        continue
                    line = json.dumps(ev).encode() + b"\n"
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    except OSError:
                        return

    return Handler
