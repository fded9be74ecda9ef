"""The engine-metrics reader's I/O side without a cluster: the bounded read of one pod (a real local
HTTP server, prometheus-client's exposition and parser), the Prometheus source, which pods are read,
when, what a pass gets from the cache, and the events of the serving conditions' transitions."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from qdd.api.observe import ObserveSpec
from prometheus_client.parser import text_string_to_metric_families

from qdd.controller.engine_metrics import Bounds, SeriesCache, parse_text, prometheus_query, read_pod, read_prometheus
from qdd.controller.observer import Observer, serving_pods
from qdd.controller.serving import add_serving, kept_serving, serving_events
from qdd.observe import EngineRead, PodRead
from qdd.observe.metrics import EXPOSED

from .controller_world import cr_of, plan_of


def vllm_text(engines: int = 2, tokens: float = 100.0, failed: float = 0.0) -> bytes:
    """vLLM-shaped exposition made by prometheus_client, as vLLM makes it (labels model_name, engine)."""
    reg = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "r", ["model_name", "engine"], registry=reg)
    gen = Counter("vllm:generation_tokens", "g", ["model_name", "engine"], registry=reg)
    fail = Counter("vllm:nixl_num_failed_transfers", "f", ["model_name", "engine"], registry=reg)
    ttft = Histogram("vllm:time_to_first_token_seconds", "t", ["model_name", "engine"], buckets=(0.1, 1.0),
                     registry=reg)
    Gauge("python_unrelated", "not read", registry=reg).set(1)
    for e in range(engines):
        running.labels("m", str(e)).set(3)
        gen.labels("m", str(e)).inc(tokens)
        fail.labels("m", str(e)).inc(failed)
        ttft.labels("m", str(e)).observe(0.05)
    return generate_latest(reg)


class Server:
    def __init__(self) -> None:
        self.reply: tuple[int, bytes, float] = (200, vllm_text(), 0.0)
        self.paths: list[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer.paths.append(self.path)
                status, body, delay = outer.reply
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the reader stopped at its byte bound or timeout
                    self.wfile.write(body)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.httpd.shutdown()


def test_read_pod_parses_the_engines_and_keeps_only_the_series_read(server):
    server.reply = (200, vllm_text(engines=3, tokens=42.0), 0.0)
    r = read_pod(server.base + "/metrics", "p", "decode", 2)
    assert r.error is None and (r.pod, r.role, r.endpoint) == ("p", "decode", 2)
    assert [e.engine for e in r.engines] == ["0", "1", "2"]
    assert r.engines[1].running == 3 and r.engines[1].generation_tokens == 42.0
    assert r.engines[0].ttft.count == 1 and r.engines[0].ttft.buckets[0] == (0.1, 1.0)
    assert r.bytes == len(server.reply[1]) and r.series > 3 * 4


def test_series_cache_parses_each_series_once_as_prometheus_client_does_and_reads_every_value():
    cache = SeriesCache()
    first = vllm_text(engines=2, tokens=10.0).decode()
    wanted = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(first) for s in f.samples
              if s.name in EXPOSED]
    got, n = parse_text(first, cache=cache)
    assert [(name, dict(lab), v) for name, lab, v in got] == wanted and len(cache) == len(wanted)
    again, _ = parse_text(vllm_text(engines=2, tokens=25.0).decode(), cache=cache)  # values moved, series did not
    assert len(cache) == len(wanted)
    tokens = [v for name, lab, v in again if name == "vllm:generation_tokens_total"]
    assert tokens == [25.0, 25.0]
    assert n == sum(len(f.samples) for f in text_string_to_metric_families(first))
    # A value prometheus-client refuses is refused from the cache too; a full cache starts again.
    running = next(line for line in first.splitlines() if line.startswith("vllm:num_requests_running{"))
    with pytest.raises(ValueError, match="1_0"):
        parse_text(running.rsplit(" ", 1)[0] + " 1_0\n", cache=cache)
    small = SeriesCache(max_size=2)
    parse_text(first, cache=small)
    assert len(small) <= 2


@pytest.mark.parametrize(("reply", "bounds", "error"), [
    ((500, b"boom", 0.0), Bounds(), "HTTP 500"),
    ((200, vllm_text(engines=40), 0.0), Bounds(max_bytes=2000), "over the read limit: more than 2000 bytes"),
    ((200, vllm_text(engines=40), 0.0), Bounds(max_series=50), "over the read limit: more than 50 series"),
    ((200, b"vllm:num_requests_running{engine=\"0\" 1\n", 0.0), Bounds(), "ValueError"),
])
def test_read_pod_is_bounded_and_never_raises(server, reply, bounds, error):
    server.reply = reply
    r = read_pod(server.base + "/metrics", "p", "prefill", 0, bounds)
    assert r.engines == () and r.error is not None and r.error.startswith(error), r.error


def test_read_pod_timeout(server):
    server.reply = (200, vllm_text(), 1.0)
    t0 = time.monotonic()
    r = read_pod(server.base + "/metrics", "p", "prefill", 0, Bounds(timeout_s=0.2))
    assert r.error is not None and time.monotonic() - t0 < 0.9
    r = read_pod("http://127.0.0.1:9/metrics", "p", "prefill", 0)
    assert r.error is not None and r.error.startswith("unreachable: ")


def test_prometheus_source_one_query_for_every_pod(server):
    assert prometheus_query("llm", ["a-prefill-0", "a.b"]) == (
        '{__name__=~"vllm:(generation_tokens|inter_token_latency_seconds|kv_cache_usage_perc|'
        'nixl_num_failed_notifications|nixl_num_failed_transfers|nixl_num_kv_expired_reqs|'
        'nixl_num_notifications_after_expiry|nixl_xfer_time_seconds|num_preemptions|num_requests_running|'
        'num_requests_waiting|prompt_tokens|request_queue_time_seconds|request_success|'
        'request_time_per_output_token_seconds|time_to_first_token_seconds)(_total|_bucket|_sum|_count)?",'
        'namespace="llm",pod=~"a-prefill-0|a\\\\.b"}')
    result = [{"metric": {"__name__": "vllm:num_requests_running", "pod": "a-prefill-0", "engine": "1"},
               "value": [0, "5"]},
              {"metric": {"__name__": "vllm:generation_tokens_total", "pod": "a-prefill-0", "engine": "1"},
               "value": [0, "7"]}]
    server.reply = (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode(),
                    0.0)
    got = read_prometheus(server.base, "llm", {"a-prefill-0": ("prefill", 0), "a-decode-0-leader": ("decode", 0)})
    assert server.paths[-1].startswith("/api/v1/query?query=")
    assert got["a-prefill-0"].engines == (EngineRead("1", running=5.0, generation_tokens=7.0),)
    assert got["a-decode-0-leader"].error.endswith("has no vLLM series of this pod")
    server.reply = (503, b"", 0.0)
    got = read_prometheus(server.base, "llm", {"a-prefill-0": ("prefill", 0)})
    assert got["a-prefill-0"].error == f"Prometheus {server.base}: HTTP 503"


def _pod(name: str, role: str, group_role: str | None = None, phase: str = "Running", ip: str | None = "10.0.0.9",
         deleting: bool = False) -> dict[str, Any]:
    lab = {"qdd.dev/role": role, "qdd.dev/endpoint": "1"} | ({"qdd.dev/group-role": group_role} if group_role else {})
    meta: dict[str, Any] = {"name": name, "labels": lab} | ({"deletionTimestamp": "x"} if deleting else {})
    return {"metadata": meta, "status": {"phase": phase} | ({"podIP": ip} if ip else {})}


def test_only_running_http_serving_engine_pods_are_read():
    pods = [_pod("p0", "prefill"), _pod("d-leader", "decode", "leader"), _pod("d-worker-1", "decode", "worker"),
            _pod("router", "router"), _pod("p1", "prefill", phase="Pending"), _pod("p2", "prefill", ip=None),
            _pod("p3", "prefill", deleting=True)]
    assert [p["metadata"]["name"] for p in serving_pods(pods)] == ["p0", "d-leader"]
    o = Observer(workers=0, override="")
    assert o.url("llm", _pod("p0", "prefill", ip="fd00::1"), 8000) == "http://[fd00::1]:8000/metrics"
    o = Observer(workers=0, override="http://x/{namespace}/{role}/{pod}/metrics")
    assert o.url("llm", _pod("p0", "prefill"), 8000) == "http://x/llm/prefill/p0/metrics"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_reads_on_the_period_notify_on_a_change_and_a_pass_only_judges():
    clock, seen, notified = Clock(), [], []
    failed = {"n": 0.0}

    def read(url: str, pod: str, role: str, endpoint: int, bounds: Bounds) -> PodRead:
        seen.append(url)
        return PodRead(pod, role, endpoint, clock.t, (EngineRead("0", running=1, generation_tokens=clock.t,
                                                                 failed_transfers=failed["n"]),))
    o = Observer(read=read, workers=0, override="u/{pod}", clock=clock, notify=lambda ns, n: notified.append(n))
    spec = ObserveSpec.model_validate({"periodSeconds": 10, "windowSeconds": 60})
    o.track("llm", "a", spec, [_pod("a-prefill-0", "prefill")], 8000)
    assert o.judgement("llm", "a")[0].conditions[0]["reason"] == "NoEngineMetrics" and seen == []
    o.read_due()
    assert seen == ["u/a-prefill-0"] and notified == ["a"]  # Unknown -> False
    clock.t += 5
    o.read_due()
    assert len(seen) == 1  # not due yet
    for _ in range(3):
        clock.t += 10
        o.read_due()
    assert len(seen) == 4 and notified == ["a"]  # nothing changed
    failed["n"] = 3.0
    clock.t += 10
    o.read_due()
    j, newest = o.judgement("llm", "a")
    assert newest == clock.t and j.conditions[0]["status"] == "True" and notified == ["a", "a"]
    o.track("llm", "a", spec, [], 8000)  # the pod is gone: its reads too
    assert o.judgement("llm", "a")[0].conditions[0]["reason"] == "NoEngineMetrics"
    o.forget("llm", "a")
    assert o.judgement("llm", "a") is None


def test_the_status_part_and_the_events_of_transitions():
    cr = cr_of()
    plan = plan_of(cr)
    o = Observer(workers=0, override="")
    status = add_serving({"conditions": [{"type": "Ready", "status": "True"}]}, cr, plan, [], o, "2030-01-01T00:00:00Z")
    types = [c["type"] for c in status["conditions"]]
    assert types == ["Ready", "KVTransferFailing", "KVLeaseExpiring", "KVCacheSaturated", "RequestsQueueing",
                     "EngineStalled"]
    assert all(c["lastTransitionTime"] == "2030-01-01T00:00:00Z" for c in status["conditions"][1:])
    assert status["serving"] == {"source": "pods", "windowSeconds": 300, "waiting": 0,
                                 "prefill": {"engines": 0, "pods": 0, "running": 0, "waiting": 0, "preemptions": 0,
                                             "failedTransfers": 0, "expiredLeases": 0},
                                 "decode": {"engines": 0, "pods": 0, "running": 0, "waiting": 0, "preemptions": 0,
                                            "failedTransfers": 0, "expiredLeases": 0}}
    off = cr_of(mutate=lambda c: c["spec"].update(observe={"enabled": False}))
    assert add_serving({"conditions": []}, off, plan_of(off), [], o, "t") == {"conditions": []}
    raised = {"conditions": [{"type": "KVLeaseExpiring", "status": "True", "reason": "KVLeaseExpired", "message": "m"}]}
    healthy = {"conditions": [{"type": "KVLeaseExpiring", "status": "False", "reason": "LeasesHeld", "message": "ok"}]}
    unknown = {"conditions": [{"type": "KVLeaseExpiring", "status": "Unknown", "reason": "NoEngineMetrics",
                               "message": "?"}]}
    assert serving_events(healthy, raised) == [("Warning", "KVLeaseExpired", "m")]
    assert serving_events(raised, raised) == []
    assert serving_events(raised, healthy) == [("Normal", "LeasesHeld", "KVLeaseExpiring cleared: ok")]
    assert serving_events(unknown, healthy) == [] and serving_events({}, unknown) == []


def test_serving_values_alone_are_written_at_most_every_four_periods():
    role = {"engines": 8, "pods": 1, "running": 4, "generationTokensPerSecond": 10.0}
    old = {"source": "pods", "windowSeconds": 300, "observedTime": "2030-01-01T00:00:00Z", "prefill": role,
           "decode": role}

    def at(t: str, **changes: object) -> dict:
        return {**old, "observedTime": t, "decode": {**role, **changes}}
    # Only the newest read's time moved: nothing to write, however long since.
    assert kept_serving(old, at("2030-01-01T01:00:00Z"), 15) is old
    # Moving values: kept for 4 periods (60 s at 15 s), written after.
    assert kept_serving(old, at("2030-01-01T00:00:59Z", generationTokensPerSecond=12.0), 15) is old
    new = at("2030-01-01T00:01:00Z", generationTokensPerSecond=12.0)
    assert kept_serving(old, new, 15) is new
    # What was read changed (pods, engines, errors, source): written at once.
    for changed in (at("2030-01-01T00:00:15Z", engines=7), {**at("2030-01-01T00:00:15Z"), "errors": ["p: HTTP 503"]},
                    {**at("2030-01-01T00:00:15Z"), "source": "http://prometheus:9090"},
                    at("2030-01-01T00:00:15Z", promptTokensPerSecond=1.0)):
        assert kept_serving(old, changed, 15) is changed
    assert kept_serving(None, new, 15) is new


def test_the_observer_keeps_the_level_conditions_hysteresis_between_judgements():
    """KVCacheFull raised after a whole window at 97 %, held by the observer through a read at 50 %
    (the judgement alone would clear it), cleared after a whole window below; a pass in between (a
    judgement without a read) changes nothing."""
    clock, usage = Clock(), {"v": 0.97}

    def read(url: str, pod: str, role: str, endpoint: int, bounds: Bounds) -> PodRead:
        return PodRead(pod, role, endpoint, clock.t, (EngineRead("0", running=1, generation_tokens=clock.t,
                                                                 kv_cache_usage=usage["v"]),))
    o = Observer(read=read, workers=0, override="u/{pod}", clock=clock)
    spec = ObserveSpec.model_validate({"periodSeconds": 10, "windowSeconds": 30})
    o.track("llm", "a", spec, [_pod("a-decode-0", "decode", "leader")], 8000)

    def cache() -> tuple[str, str]:
        c = o.judgement("llm", "a")[0].conditions[2]
        return c["status"], c["reason"]
    seen = []
    for v in [0.97] * 4 + [0.5, 0.97, 0.5, 0.5, 0.5, 0.5]:
        usage["v"] = v
        o.read_due()
        seen.append(cache())
        assert cache() == seen[-1]  # a second judgement of the same reads: the same answer
        clock.t += 10
    full, free = ("True", "KVCacheFull"), ("False", "KVCacheAvailable")
    # 1000..1030: a whole 30 s window at 97 % at the 4th read; held through 1040 (50 %), 1050 (97 %),
    # 1060, 1070 (a read of the last 30 s at 97 %); 1060..1090 all below: cleared at 1090.
    assert seen == [free] * 3 + [full] * 6 + [free]
