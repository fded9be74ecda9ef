#!/usr/bin/env python3
"""TEST DOUBLE of the vLLM engines' /metrics, for the operator's engine-metrics reader in the
simulated cluster (kwok runs no engine).

What it stands in for: the OpenAI API server of vLLM 0.33.0 serving ``GET /metrics``
(prometheus_client's text exposition of vllm/v1/metrics/loggers.py's PrometheusStatLogger and the
NIXL connector's NixlPromMetrics, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py),
one ``engine`` label value per DP rank the pod's API server reports (a decode group's leader
reports every rank of its group; its headless workers serve nothing).

How: the text is made from a /metrics body CAPTURED from real vLLM engines (tests/unit/data/
vllm-engine-metrics-{prefill,decode}.txt, captured by tests/realengine/test_observe.py): every
family, help text, type, label set and bucket bound is the captured one, replicated per engine; the
values of the series qdd reads (qdd.observe.metrics) are simulated over time, the others kept as
captured. It is rendered by prometheus_client's own exposition (generate_latest), which is what
vLLM serves. tests/unit/test_fake_engine_metrics.py checks it against the capture and vLLM 0.33's
declared metrics. What it leaves out: everything else vLLM does (no requests are served).

Behaviour per namespace, from ConfigMap ``qdd-simulated-engine-metrics`` (re-read every 2 s):
``scenario`` (default healthy) and ``pods`` (comma-separated pod names it applies to; default all),
or ``pod.<pod name>`` (that pod's scenario, before the others):
  healthy               steady load: tokens, finished requests, transfers move; nothing fails
  kv-transfer-failing   decode: vllm:nixl_num_failed_transfers grows (1/s per engine)
  lease-expiring        prefill: vllm:nixl_num_kv_expired_reqs grows (0.5/s per engine)
  kv-cache-full         vllm:kv_cache_usage_perc 0.99
  preempting            vllm:num_preemptions grows (0.5/s per engine)
  queueing              vllm:num_requests_waiting 100
  rank-stalled          engine 1 of the pod (or 0 if it has one): requests running, no token
  down                  HTTP 503
Engines per pod: ``engines-prefill`` / ``engines-decode`` keys (default 2 and 8: the seed's DEP2
prefill and DEP8 decode leader).
Load mode (``load-rps`` set, for the autoscaler's live loop; hack/fake_engine_load.py says what it
stands in for): a healthy pod's requests, tokens, running gauge, KV-cache usage and latency
histograms follow its share of the router's traffic instead of the fixed steady load, and the
double counts the requests a client would see fail.

HTTP: ``GET /<namespace>/requests`` (load mode: requests sent and failed, JSON);
``GET /<namespace>/<role>/<pod>/metrics`` (the operator's QDD_ENGINE_METRICS_URL_OVERRIDE is
``http://127.0.0.1:PORT/{namespace}/{role}/{pod}/metrics``, written to ``--url-file``; the role is
the pod's qdd.dev/role label). Exits 0 on SIGTERM/SIGINT.

Usage: fake_engine_metrics.py [--kubeconfig PATH] [--url-file PATH] [--port N]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from fake_engine_load import LOAD_KEY, Fleet, _num

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = {role: ROOT / "tests" / "unit" / "data" / f"vllm-engine-metrics-{role}.txt" for role in ("prefill", "decode")}
CONFIGMAP = "qdd-simulated-engine-metrics"
SCENARIOS = ("healthy", "kv-transfer-failing", "lease-expiring", "kv-cache-full", "preempting", "queueing",
             "rank-stalled", "down")
log = logging.getLogger("fake-engine-metrics")
LOAD_POLL_S = 0.25
"""How often the load mode reads the namespace's pods (a deletion is seen within this)."""

# Steady load per engine (healthy), per second: what a busy small engine of the CPU pair does.
RATES = {"prompt_tokens": 800.0, "generation_tokens": 80.0, "finished": 0.5, "transfers": 0.5}
OBSERVED = {"ttft": (0.5, 0.25), "itl": (80.0, 0.03), "tpot": (0.5, 0.03), "queue": (0.5, 0.002),
            "xfer": (0.5, 0.004)}
"""histogram -> (observations per second, value observed, seconds)."""
HIST_NAMES = {"vllm:time_to_first_token_seconds": "ttft", "vllm:inter_token_latency_seconds": "itl",
              "vllm:request_time_per_output_token_seconds": "tpot", "vllm:request_queue_time_seconds": "queue",
              "vllm:nixl_xfer_time_seconds": "xfer"}
COUNTER_NAMES = {"vllm:prompt_tokens": "prompt_tokens", "vllm:generation_tokens": "generation_tokens",
                 "vllm:num_preemptions": "preemptions", "vllm:nixl_num_failed_transfers": "failed_transfers",
                 "vllm:nixl_num_failed_notifications": "failed_notifications",
                 "vllm:nixl_num_kv_expired_reqs": "expired", "vllm:nixl_num_notifications_after_expiry": "after_expiry"}
GAUGE_NAMES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
               "vllm:kv_cache_usage_perc": "kv_cache_usage"}


@dataclass
class Engine:
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        [*COUNTER_NAMES.values(), "finished", "transfers"], 0.0))
    hists: dict[str, dict[float, float]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


class Pod:
    """One simulated HTTP-serving engine pod: ``engines`` engine cores, advanced in wall time."""

    def __init__(self, role: str, engines: int, capture: str, now: float):
        self.role = role
        self.families = list(text_string_to_metric_families(capture))
        self.bounds = {HIST_NAMES[f.name]: sorted({_le(s.labels) for s in f.samples if s.name.endswith("_bucket")})
                       for f in self.families if f.name in HIST_NAMES}
        self.engines = [Engine() for _ in range(engines)]
        self.last = now

    def advance(self, now: float, scenario: str, load: dict[str, float] | None = None, isl: float = 0.0,
                osl: float = 0.0) -> None:
        dt, self.last = max(0.0, now - self.last), now
        if load is not None:
            self._advance_load(dt, load, isl, osl)
            return
        for i, e in enumerate(self.engines):
            stalled = scenario == "rank-stalled" and i == min(1, len(self.engines) - 1)
            e.gauges = {"running": 8.0, "waiting": 100.0 if scenario == "queueing" else 1.0,
                        "kv_cache_usage": 0.99 if scenario == "kv-cache-full" else 0.4}
            if not stalled:
                for k, r in RATES.items():
                    if k != "transfers" or self.role == "decode":
                        e.counters[k] += r * dt
                for h, (rate, value) in OBSERVED.items():
                    if h != "xfer" or self.role == "decode":
                        self._observe(e, h, rate * dt, value)
            if scenario == "kv-transfer-failing" and self.role == "decode":
                e.counters["failed_transfers"] += 1.0 * dt
            if scenario == "lease-expiring" and self.role == "prefill":
                e.counters["expired"] += 0.5 * dt
            if scenario == "preempting":
                e.counters["preemptions"] += 0.5 * dt

    def _advance_load(self, dt: float, load: dict[str, float], isl: float, osl: float) -> None:
        """The load mode (hack/fake_engine_load.py): the pod's share of the router's traffic, spread
        evenly over its engines (vLLM's internal DP load balancing)."""
        n = len(self.engines)
        fin = load["rate"] / n
        out_tokens = osl if self.role == "decode" else 1.0
        running = [math.floor(load["running"] / n) + (1 if i < load["running"] % n else 0) for i in range(n)]
        for i, e in enumerate(self.engines):
            e.gauges = {"running": float(running[i]), "waiting": 0.0, "kv_cache_usage": load["kv"] if running[i] else 0.0}
            e.counters["prompt_tokens"] += fin * isl * dt
            e.counters["generation_tokens"] += fin * out_tokens * dt
            e.counters["finished"] += fin * dt
            if self.role == "decode":
                e.counters["transfers"] += fin * dt
            observed = {"ttft": (fin, load["ttft"]), "queue": (fin, 0.002), "tpot": (fin, load["itl"])}
            if self.role == "decode":
                observed |= {"itl": (fin * osl, load["itl"]), "xfer": (fin, 0.004)}
            for h, (rate, value) in observed.items():
                self._observe(e, h, rate * dt, value)

    def _observe(self, e: Engine, h: str, n: float, value: float) -> None:
        """``n`` observations of ``value`` seconds into histogram ``h`` of engine ``e``."""
        buckets = e.hists.setdefault(h, dict.fromkeys(self.bounds.get(h, [math.inf]), 0.0))
        for le in buckets:
            if value <= le:
                buckets[le] += n
        e.sums[h] = e.sums.get(h, 0.0) + n * value

    def text(self) -> bytes:
        reg = CollectorRegistry()
        reg.register(_Families(self._families))
        return generate_latest(reg)

    def _families(self) -> list[Metric]:
        out = []
        for f in self.families:
            m = Metric(f.name, f.documentation, f.type, getattr(f, "unit", ""))
            engine_samples = [s for s in f.samples if "engine" in s.labels]
            for s in f.samples:
                if "engine" not in s.labels:
                    m.add_sample(s.name, s.labels, s.value, s.timestamp)
            first = engine_samples[0].labels["engine"] if engine_samples else None
            for i, e in enumerate(self.engines):
                for s in engine_samples:
                    if s.labels["engine"] != first:
                        continue  # the capture's other engines: replaced by ours
                    labels = dict(s.labels, engine=str(i))
                    m.add_sample(s.name, labels, self._value(f.name, s.name, s.labels, s.value, e, i), s.timestamp)
            out.append(m)
        return out

    def _value(self, family: str, sample: str, labels: dict[str, str], captured: float, e: Engine, i: int) -> float:
        if family in GAUGE_NAMES:
            return e.gauges.get(GAUGE_NAMES[family], 0.0)
        if family in COUNTER_NAMES and sample.endswith("_total"):
            return math.floor(e.counters[COUNTER_NAMES[family]])
        if family == "vllm:request_success" and sample.endswith("_total"):
            return math.floor(e.counters["finished"]) if labels.get("finished_reason") == "length" else 0.0
        if family in HIST_NAMES:
            h = HIST_NAMES[family]
            buckets = e.hists.get(h, {})
            if sample.endswith("_bucket"):
                return math.floor(buckets.get(_le(labels), 0.0))
            if sample.endswith("_count"):
                return math.floor(buckets.get(math.inf, 0.0))
            if sample.endswith("_sum"):
                return e.sums.get(h, 0.0)
        return captured


class _Families:
    def __init__(self, make: Callable[[], list[Metric]]):
        self.make = make

    def collect(self) -> list[Metric]:
        return self.make()


def _le(labels: dict[str, str]) -> float:
    return math.inf if labels.get("le") == "+Inf" else float(labels["le"])


class Double:
    """Pods by (namespace, name), each advanced on read; ``wanted(namespace)`` gives the ConfigMap;
    ``lister(namespace)`` -> (pods, Deployments) of the namespace, for the load mode (hack/fake_engine_load.py),
    polled every ``LOAD_POLL_S`` by :meth:`poll_loads` once a namespace's ConfigMap has ``load-rps``."""

    def __init__(self, wanted: Callable[[str], dict[str, str]], clock: Callable[[], float] = time.time,
                 lister: Callable[[str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] | None = None):
        self.wanted, self.clock, self.lister = wanted, clock, lister
        self.captures = {role: path.read_text() for role, path in CAPTURE.items()}
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], Pod] = {}
        self.fleets: dict[str, Fleet] = {}
        self.namespaces: set[str] = set()
        self._cm: dict[str, tuple[float, dict[str, str]]] = {}

    def _config(self, namespace: str) -> dict[str, str]:
        now = self.clock()
        hit = self._cm.get(namespace)
        if hit is None or now - hit[0] > 2.0:
            hit = (now, self.wanted(namespace))
            self._cm[namespace] = hit
        return hit[1]

    def refresh(self, namespace: str) -> Fleet | None:
        """Advance the load of ``namespace`` to now (None when it is not in the load mode)."""
        cfg = self._config(namespace)
        if LOAD_KEY not in cfg or self.lister is None:
            return None
        pods, deployments = self.lister(namespace)
        with self.lock:
            fleet = self.fleets.setdefault(namespace, Fleet())
            fleet.cfg = cfg
            fleet.update(self.clock(), pods, deployments)
            return fleet

    def poll_loads(self, stop: threading.Event) -> None:
        while not stop.wait(LOAD_POLL_S):
            for ns in sorted(self.namespaces):
                try:
                    self.refresh(ns)
                except Exception as e:  # noqa: BLE001 — the API server restarting, a namespace gone
                    log.warning("load of %s: %s", ns, e)

    def requests(self, namespace: str) -> dict[str, Any]:
        """The load mode's client view: requests sent and failed (a pod deleted while it held some,
        or no pod of a role to send to), and each serving pod's state."""
        self.namespaces.add(namespace)
        fleet = self.refresh(namespace) or Fleet()
        with self.lock:
            now = self.clock()
            return {"sent": round(fleet.sent, 3), "failed": round(fleet.failed, 3),
                    "pods": {n: {"role": p.role, "routable": p.routable, "inFlight": round(p.in_flight(now), 3)}
                             for n, p in sorted(fleet.pods.items())}}

    def metrics(self, namespace: str, role: str, pod: str) -> tuple[int, bytes]:
        self.namespaces.add(namespace)
        want = self._config(namespace)
        targets = [p.strip() for p in want.get("pods", "").split(",") if p.strip()]
        scenario = want.get(f"pod.{pod}") or (want.get("scenario", "healthy") if not targets or pod in targets
                                               else "healthy")
        if scenario not in SCENARIOS:
            scenario = "healthy"
        if scenario == "down":
            return 503, b"SIMULATED: engine down\n"
        if role not in CAPTURE:
            return 404, b"unknown role\n"
        with self.lock:
            p = self.pods.get((namespace, pod))
            if p is None:
                n = int(want.get(f"engines-{role}", "2" if role == "prefill" else "8"))
                p = self.pods[(namespace, pod)] = Pod(role, n, self.captures[role], self.clock())
            fleet = self.fleets.get(namespace) if LOAD_KEY in want else None
            if fleet is not None:
                p.advance(self.clock(), scenario, fleet.of(pod, self.clock()), _num(want, "isl"), _num(want, "osl"))
            else:
                p.advance(self.clock(), scenario)
            return 200, p.text()


def handler(double: Double) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
            pass

        def do_GET(self) -> None:  # noqa: N802 — stdlib's name
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[1] == "requests":
                status, body = 200, json.dumps(double.requests(parts[0])).encode()
            elif len(parts) != 4 or parts[3] != "metrics":
                self.send_error(404)
                return
            else:
                status, body = double.metrics(parts[0], parts[1], parts[2])
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig")
    ap.add_argument("--url-file")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fake-engine-metrics (TEST DOUBLE): %(message)s")
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    config.load_kube_config(config_file=args.kubeconfig)
    core = client.CoreV1Api()

    def wanted(namespace: str) -> dict[str, str]:
        try:
            return core.read_namespaced_config_map(CONFIGMAP, namespace).data or {}
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

    apps = client.AppsV1Api()

    def lister(namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pods = core.list_namespaced_pod(namespace, label_selector="qdd.dev/deployment", _preload_content=False)
        deps = apps.list_namespaced_deployment(namespace, label_selector="qdd.dev/role=router", _preload_content=False)
        return json.loads(pods.data)["items"], json.loads(deps.data)["items"]

    double = Double(wanted, lister=lister)
    stop = threading.Event()
    threading.Thread(target=double.poll_loads, args=(stop,), daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(double))
    url = f"http://127.0.0.1:{server.server_address[1]}/{{namespace}}/{{role}}/{{pod}}/metrics"
    if args.url_file:
        Path(args.url_file).write_text(url)

    def on_signal(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("started: simulating vLLM engines' /metrics at %s", url)
    server.serve_forever()


if __name__ == "__main__":
    main()
