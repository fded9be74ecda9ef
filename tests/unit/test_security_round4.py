"""Round 4 of the break-it review (docs/security.md): the surfaces of the fourth phase — the engine
metrics reader and its parser (the engine image is the resource author's, so its /metrics is
hostile), spec.observe (its Prometheus URL and its window), status.serving, the performance
profile ConfigMap and `qdd plan --slo`. Each test failed before its fix."""

from __future__ import annotations

import math
import socket
import time
import types

import pytest

from qdd.api.observe import ObserveSpec
from qdd.controller.engine_metrics import Bounds, read_pod, read_prometheus
from qdd.controller.observer import Observer
from qdd.controller.serving import add_serving, serving_events
from qdd.observe import EngineRead, Histogram, PodRead, engines_of, judge
from qdd.observe.model import RoleServing
from qdd.observe.status import role_status, serving_status
from qdd.observe.window import histogram_increase

from .controller_world import cr_of, plan_of
from .test_canary_hostile import RawServer, _answer
from .test_observer import _pod

T = ObserveSpec().thresholds


def _text(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


# --- the reader: an engine image answers /metrics -------------------------------------------------

def test_a_metrics_redirect_is_not_followed():
    """Before: urllib followed a 302 to any address the operator reaches, and the error (HTTP 401,
    refused, timeout) told the author whether it answered: a scanner of the operator's network."""
    target = RawServer(lambda path, conn: _answer(conn, b"secret 1\n"))
    engine = RawServer(lambda path, conn: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {target.url}/internal\r\nContent-Length: 0\r\n\r\n".encode()))
    try:
        r = read_pod(engine.url + "/metrics", "p", "prefill", 0)
        assert r.error == "HTTP 302: a redirect, which the reader does not follow" and r.engines == ()
        assert target.hits == []
    finally:
        engine.close()
        target.close()


def _trickle(head: bytes, body: bytes, gap: float):
    def handler(path: str, conn: socket.socket) -> None:
        for b in head + body:
            conn.sendall(bytes([b]))
            time.sleep(gap)
    return handler


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickled_metrics_answer_is_cut_at_one_deadline(where):
    """Before: urllib's timeout restarted on every byte, so a /metrics sent a byte every 0.1 s held
    one of the observer's 8 threads for as long as the body (8 such pods: no deployment observed)."""
    body = b"vllm:num_requests_running{engine=\"0\"} 1\n" * 4
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nX-Pad: {'x' * 40}\r\n\r\n".encode()
    server = RawServer(_trickle(head, body, 0.05) if where == "headers" else
                       lambda path, conn: (conn.sendall(head), _trickle(b"", body, 0.05)(path, conn)))
    try:
        t0 = time.monotonic()
        r = read_pod(server.url + "/metrics", "p", "prefill", 0, Bounds(timeout_s=0.5))
        took = time.monotonic() - t0
        assert r.error == "no answer within 0.5 s" and took < 2.0, (r.error, took)
    finally:
        server.close()


# --- the parser: what one read may hold ---------------------------------------------------------

def test_values_no_vllm_series_takes_are_left_out_and_the_status_stays_writable():
    """Before: +Inf (or 1e308, which sums to inf) reached int() in status.serving: OverflowError in
    every pass of that deployment, whose status was never written again."""
    hostile = _text('vllm:num_requests_running{engine="0"} +Inf', 'vllm:num_requests_waiting{engine="0"} -5',
                    'vllm:kv_cache_usage_perc{engine="0"} NaN', 'vllm:generation_tokens_total{engine="0"} 1e308',
                    'vllm:num_preemptions_total{engine="0"} 3', 'vllm:nixl_num_failed_transfers_total{engine="0"} -Inf')
    server = RawServer(lambda path, conn: _answer(conn, hostile))
    try:
        reads = [read_pod(server.url + "/metrics", "p", "decode", 0) for _ in range(2)]
    finally:
        server.close()
    assert reads[0].error is None
    assert reads[0].engines == (EngineRead("0", preemptions=3.0),)
    reads = [PodRead("p", "decode", 0, 1000.0 + 15 * i, r.engines) for i, r in enumerate(reads)]
    j = judge({"p": reads}, T, 300, 1015.0)
    s = serving_status(j, "pods", 300, None)
    assert (s["decode"]["running"], s["decode"]["waiting"], s["decode"]["generationTokensPerSecond"]) == (0, 0, 0.0)


def test_counts_in_the_status_are_integers_an_api_server_takes():
    """A sum of increases beyond int64 made the whole status patch fail."""
    out = role_status(RoleServing("decode", preemptions=1e20, running=math.inf, waiting=-3.0))
    assert (out["preemptions"], out["running"], out["waiting"]) == (2**53, 0, 0)


def _bucket_lines(n: int, engine: str = "0") -> list[str]:
    return [f'vllm:time_to_first_token_seconds_bucket{{engine="{engine}",le="{i / 1000}"}} {i}' for i in range(n)]


def test_a_histogram_of_thousands_of_buckets_is_refused_and_the_window_is_linear():
    """Before: histogram_increase rebuilt every read's buckets for every bound (quadratic): one
    engine's 3,000 buckets held the reconcile pass that judged them for minutes, under the GIL."""
    bomb = _text(*_bucket_lines(3000))
    server = RawServer(lambda path, conn: _answer(conn, bomb))
    try:
        r = read_pod(server.url + "/metrics", "p", "prefill", 0)
    finally:
        server.close()
    assert r.error == "over the read limit: more than 64 buckets in vllm:time_to_first_token_seconds of engine 0"
    # The window itself, on reads that would hold that many (another source, an older reader):
    hists = [Histogram(tuple((i / 1000, float(i * k)) for i in range(3000)), 0.0, 3000.0 * k) for k in range(1, 4)]
    t0 = time.process_time()
    h = histogram_increase(hists)
    assert time.process_time() - t0 < 2.0 and h.buckets[5] == (0.005, 10.0)


def test_engine_label_bombs_are_refused():
    """Before: 50,000 engine label values (within the 4 MiB and series bounds) became 50,000
    EngineReads per read, kept for the window and judged in every pass; a 1 MB label value went
    into condition messages and events."""
    many = [f'vllm:num_requests_running{{engine="{i}"}} 1' for i in range(73)]
    with pytest.raises(ValueError, match="more than 72 engines"):
        engines_of(("vllm:num_requests_running", {"engine": str(i)}, 1.0) for i in range(73))
    with pytest.raises(ValueError, match="an engine label of 17 characters"):
        engines_of([("vllm:num_requests_running", {"engine": "9" * 17}, 1.0)])
    server = RawServer(lambda path, conn: _answer(conn, _text(*many)))
    try:
        r = read_pod(server.url + "/metrics", "p", "prefill", 0)
    finally:
        server.close()
    assert r.error == "over the read limit: more than 72 engines"
    assert [e.engine for e in engines_of([("vllm:num_requests_running", {"engine": e}, 1.0)
                                          for e in ("10", "²", "2")])] == ["2", "10", "²"]


def test_one_pods_bad_series_in_a_prometheus_answer_do_not_blank_the_others():
    """Before: a label that did not parse (le="x", engine "²") raised out of read_prometheus, past its
    'never raises': the whole round was lost for every pod of the deployment."""
    import json
    result = [{"metric": {"__name__": "vllm:num_requests_running", "pod": "a", "engine": "0"}, "value": [0, "2"]},
              {"metric": {"__name__": "vllm:time_to_first_token_seconds_bucket", "pod": "b", "engine": "0", "le": "x"},
               "value": [0, "1"]},
              {"metric": {"__name__": "vllm:num_requests_running", "pod": "c", "engine": "²"}, "value": [0, "1"]}]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    server = RawServer(lambda path, conn: _answer(conn, body))
    try:
        got = read_prometheus(server.url, "llm", {"a": ("prefill", 0), "b": ("prefill", 1), "c": ("decode", 0)})
    finally:
        server.close()
    assert got["a"].engines == (EngineRead("0", running=2.0),)
    assert got["b"].error is None and got["b"].engines == (EngineRead("0"),)  # the bucket without a bound: left out
    assert got["c"].engines == (EngineRead("²", running=1.0),)


# --- spec.observe.prometheus.url: the resource names a URL the operator GETs -------------------

def test_a_prometheus_url_the_admin_did_not_allow_is_never_queried():
    """Before: the operator GET the spec's URL with its own network identity (any namespace's user
    could reach what only the operator may reach) and wrote the answer's error text back."""
    hits: list[str] = []
    server = RawServer(lambda path, conn: (hits.append(path), _answer(conn, b"{}")))
    try:
        cr = cr_of(mutate=lambda c: c["spec"].update(observe={"prometheus": {"url": server.url}}))
        plan = plan_of(cr)
        pods = [{"kind": "Pod", **_pod("a-prefill-0", "prefill")}]
        o = Observer(workers=0, override="", prometheus=None, allowed_prometheus=[])
        status = add_serving({"conditions": []}, cr, plan, pods, o, "2030-01-01T00:00:00Z")
        o.read_due()
        status = add_serving({"conditions": []}, cr | {"status": status}, plan, pods, o, "2030-01-01T00:00:15Z")
        assert hits == [] and o.judgement("default", cr["metadata"]["name"]) is not None
        reasons = {c["reason"] for c in status["conditions"]}
        msg = status["conditions"][0]["message"]
        assert reasons == {"PrometheusNotAllowed"} and status["serving"]["source"] == "none"
        assert msg.startswith(f"spec.observe.prometheus.url {server.url} is not a Prometheus the operator may query")
        assert "remove spec.observe.prometheus to read the engine pods' /metrics" in msg
        assert serving_events({}, status) == [("Warning", "PrometheusNotAllowed", msg)]
        assert serving_events(status, status) == []
        # The cluster admin's URLs are read (the operator's own --prometheus-url always is).
        for allowed in (Observer(workers=0, override="", prometheus=None, allowed_prometheus=[server.url + "/"]),
                        Observer(workers=0, override="", prometheus=server.url, allowed_prometheus=[])):
            add_serving({"conditions": []}, cr, plan, pods, allowed, "t")
            allowed.read_due()
        assert len(hits) == 2 and all(h.startswith("/api/v1/query?") for h in hits)
    finally:
        server.close()


def test_the_chart_passes_the_admins_prometheus_urls_to_the_operator():
    from .test_chart import _run_args, template
    parsed = _run_args(template(set_json=('observe={"prometheusUrl": "http://prom.monitoring.svc:9090", '
                                          '"allowedPrometheusUrls": ["https://thanos.monitoring.svc:10902"]}',)))
    assert (parsed.prometheus_url, parsed.allow_prometheus_url) == (
        "http://prom.monitoring.svc:9090", ["https://thanos.monitoring.svc:10902"])
    assert _run_args(template()).allow_prometheus_url is None
    assert "allowedPrometheusUrls" in str(template(set_json=('observe={"allowedPrometheusUrls": ["file:///x"]}',),
                                                 check=False))


def test_a_pod_on_the_hosts_network_labelled_as_an_engine_is_not_read():
    """Children are found by label, and an engine's namespace must admit privileged pods (IPC_LOCK):
    the author's own hostNetwork pod labelled qdd.dev/role=prefill had the operator GET
    <node IP>:<spec.ports.http>/metrics — any port of a node, from the operator's network identity."""
    from qdd.controller.observer import serving_pods
    host = {**_pod("a-prefill-9", "prefill", ip="192.0.2.7"), "spec": {"hostNetwork": True}}
    assert serving_pods([host, _pod("a-prefill-0", "prefill")]) == [_pod("a-prefill-0", "prefill")]


# --- spec.observe: a valid window that kept gigabytes ------------------------------------------

@pytest.mark.parametrize(("observe", "field"), [
    ({"periodSeconds": 5, "windowSeconds": 86400}, "windowSeconds"),
    ({"periodSeconds": 5, "windowSeconds": 300, "thresholds": {"stallSeconds": 86400}}, "thresholds.stallSeconds"),
])
def test_a_window_of_more_reads_than_the_observer_keeps_is_refused(observe, field):
    """Before: windowSeconds 86400 with periodSeconds 5 was valid: 17,280 reads kept per pod (about
    3 GiB for the largest deployment) and all of them judged in every pass."""
    from pydantic import ValidationError
    with pytest.raises(ValidationError) as e:
        ObserveSpec.model_validate(observe)
    assert ".".join(str(x) for x in e.value.errors()[0]["loc"]) == field
    assert "must be at most 60 × " in str(e.value) and "raise spec.observe.periodSeconds" in str(e.value)
    ObserveSpec.model_validate({"periodSeconds": 60, "windowSeconds": 3600})  # one hour, a read a minute


def test_the_crd_carries_the_window_bounds():
    from qdd.api.crd import crd
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [(v["fieldPath"], v["rule"]) for v in spec["properties"]["observe"]["x-kubernetes-validations"]]
    assert (".windowSeconds", "(has(self.windowSeconds) ? self.windowSeconds : 300) <= "
            "60 * (has(self.periodSeconds) ? self.periodSeconds : 15)") in rules
    assert [p for p, _ in rules].count(".thresholds.stallSeconds") == 1


# --- qdd plan --predict / --slo: numbers from the command line ------------------------------------

def _slo_cli(monkeypatch, capsys, *flags: str):
    """``qdd plan --slo`` on the seed with the committed profile standing in for aiconfigurator's
    (every layout gets it; prefill 2 req/s per endpoint, so a large budget wants many endpoints)."""
    from qdd import cli
    from qdd.perf import commands, sizing
    from qdd.perf.profile import load_profile, max_decode_concurrency

    from ..conftest import EXAMPLES, ROOT

    prof = load_profile((ROOT / "tests" / "unit" / "data" / "perf-profile-qwen35-397b-4xdep2-1xdep8.json").read_text())

    def evaluate(base, db, pre, dec, slo, accepted):
        o = sizing.Option(sizing._shape_name(pre), sizing._shape_name(dec), pre[0] * pre[1], dec[0] * dec[1],
                          profile=prof, prefill_rate=2.0, decode_concurrency=max_decode_concurrency(prof, slo.tpot_ms))
        o.decode_rate = sizing.decode_rate(prof, o.decode_concurrency, 0.92)
        return o
    monkeypatch.setattr(commands, "_db", lambda plan, model: None)
    monkeypatch.setattr(sizing, "evaluate", evaluate)
    monkeypatch.setattr(sizing, "rate_matching", lambda: types.SimpleNamespace(decode=0.92))
    argv = ["plan", "-f", str(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"), "--slo", "ttft=1000,tpot=40", *flags]
    try:
        cli.main(argv + ["-o", "json"])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("flags", "error"), [
    (["--rate", "inf"], "error: --rate: inf is not a request rate above 0 and at most 1e+06 requests/s"),
    (["--rate", "nan"], "error: --rate: nan is not a request rate above 0 and at most 1e+06 requests/s"),
    (["--gpu-budget", "1000000000"], "error: --gpu-budget: 1000000000 is not between 1 and 100000 GPUs"),
    (["--rate", "10", "--mtp-accepted", "-1"],
     "error: --mtp-accepted: -1 is not a mean of accepted draft tokens per step between 0 and "
     "spec.speculative.numSpeculativeTokens (0)"),
])
def test_perf_flags_out_of_range_are_one_error_line(monkeypatch, capsys, flags, error):
    """Before: --rate inf ended in a traceback (OverflowError in math.ceil), nan in 'cannot convert
    float NaN to integer', a budget of 10^9 GPUs in a loop of half a billion steps."""
    code, _, err = _slo_cli(monkeypatch, capsys, *flags)
    assert (code, err.strip()) == (2, error)


def test_slo_targets_have_the_autoscaling_bounds():
    from qdd.perf import sizing
    with pytest.raises(ValueError, match="--slo: ttft 99999999999999999999 ms is above 600,000 ms"):
        sizing.parse_slo("ttft=" + "9" * 400 + ",tpot=40")  # was float('9' * 400) == inf


def test_a_gpu_budget_never_recommends_more_endpoints_than_qdd_allows(monkeypatch, capsys):
    """Before: the budget loop ran to budget / GPUs per endpoint and recommended 600 prefill
    endpoints for 2,000 GPUs, a deployment qdd refuses (at most 64)."""
    import json
    code, out, err = _slo_cli(monkeypatch, capsys, "--gpu-budget", "2000")
    assert code == 0, err
    dep = json.loads(out)["deployment"]["spec"]
    assert dep["prefill"]["endpoints"] <= 64 and dep["decode"]["endpoints"] <= 16


# --- the performance profile ConfigMap: written by whoever may write ConfigMaps there ------------

def _profile():
    from qdd.perf.profile import load_profile

    from ..conftest import ROOT
    return load_profile((ROOT / "tests" / "unit" / "data" / "perf-profile-qwen35-397b-4xdep2-1xdep8.json").read_text())


def test_a_profile_of_thousands_of_points_is_refused_naming_the_field():
    """Before: a 1 MiB profile of 8,000 points was read, and calibrated (points × measurements) in
    every pass of every completed benchmark of the deployment."""
    from pydantic import ValidationError

    from qdd.perf.profile import Point, load_profile
    prof = _profile()
    pts = [Point(load=i + 1.0, latency_ms=10.0 + i, tokens_per_second=1.0) for i in range(4000)]
    big = prof.model_copy(update={"decode": prof.decode.model_copy(update={"points": pts, "predicted": pts})})
    with pytest.raises(ValidationError, match=r"decode.points\n  List should have at most 768 items"):
        load_profile(big.model_dump_json(by_alias=True))


def test_calibration_never_writes_a_profile_that_does_not_read_back():
    """Before: calibration wrote whatever its arithmetic gave, unchecked (model_copy does not validate):
    latencies beyond any bound, up to an overflowed inf written as null, which every later read of
    the ConfigMap refused."""
    from qdd.perf.profile import MeasuredPoint, calibrate, load_profile
    prof = _profile()
    slow = MeasuredPoint(benchmark="b", concurrency=512, request_rate=1.0, ttft_ms=1e9, tpot_ms=1e9,
                         total_tokens_per_second_per_gpu=0.0, prefill_endpoints=4, decode_endpoints=1)
    with pytest.raises(ValueError, match="less than or equal to 1000000000"):
        load_profile(calibrate(prof, [slow]).to_json())  # the check is in calibrate itself
    many = [MeasuredPoint(benchmark="b", concurrency=c, request_rate=1.0, ttft_ms=500.0, tpot_ms=40.0,
                          total_tokens_per_second_per_gpu=1.0, prefill_endpoints=4, decode_endpoints=1)
            for c in range(1, 600)]
    kept = calibrate(prof, many).measured
    assert len(kept) == 512 and kept[-1].concurrency == 599  # the newest


# --- the simulated engine start-up (kwok Stages): test-only, never in what production applies -------

def test_the_simulated_startup_configmap_reaches_nothing_qdd_ships():
    """hack/cluster/engine_stages.py's admission policy copies ConfigMap qdd-sim-engine-startup of a
    namespace onto engine pods (a TEST DOUBLE of the kubelet's engine start): neither the operator,
    its chart, its CRDs nor any rendered golden names it or its annotations."""
    from ..conftest import ROOT
    shipped = [*(ROOT / "operator" / "src").rglob("*.py"), *(ROOT / "operator" / "src").rglob("*.j2"),
               *(ROOT / "charts").rglob("*.yaml"), *(ROOT / "charts").rglob("*.tpl"), *(ROOT / "crds").glob("*.yaml"),
               *(ROOT / "tests" / "golden").glob("*.yaml")]
    assert len(shipped) > 50
    named = [p for p in shipped if "engine.sim.qdd.dev" in p.read_text() or "qdd-sim-engine-startup" in p.read_text()]
    assert named == []


# --- children are found by label: a pod anyone in the namespace may create ------------------------

def _intruder(bad: dict[str, str], owner_uid: str = "u") -> dict:
    from qdd import labels

    from .controller_world import live, running
    from .test_controller_status import NAME
    pod = live({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "x", "image": "x"}]},
                "metadata": {"name": "intruder", "namespace": "default",
                             "ownerReferences": [{"kind": "ReplicaSet", "name": "x", "uid": owner_uid, "controller": True}],
                             "labels": {labels.DEPLOYMENT: NAME, labels.ROLE: "prefill", **bad}}}, 99)
    pod["status"] = running()
    return pod


@pytest.mark.parametrize("bad", [{"qdd.dev/endpoint": "x"},
                                 {"qdd.dev/role": "decode", "qdd.dev/endpoint": "0", "qdd.dev/group-size": "x"},
                                 {"qdd.dev/role": "decode", "qdd.dev/endpoint": "0", "qdd.dev/revision": "other"}])
def test_a_foreign_pod_labelled_as_an_engine_neither_stops_nor_recycles_the_deployment(bad):
    """Before: a pod anyone who may create pods in the namespace labelled as an engine of the
    deployment was taken for one: a non-numeric endpoint (or group-size) label raised in every pass
    (no reconcile, no status), and one labelled as decode endpoint 0 of another revision made the
    operator delete that endpoint's real leader and worker (the group 'outdated'), on every pass."""
    from .test_controller_status import SEED, FakeKube, _reconcile, cond
    kube = FakeKube(SEED)
    _reconcile(kube)
    kube.settle()
    _reconcile(kube)
    assert cond(kube.cr["status"], "Ready")["status"] == "True"
    kube.objs[("Pod", "intruder")] = _intruder(bad)
    assert [w for w in _reconcile(kube) if w[0] == "delete"] == []
    assert cond(kube.cr["status"], "Ready")["status"] == "True"


def test_numeric_labels_qdd_reads_are_parsed_without_raising():
    """The same labels on a pod whose controller reference names the deployment (forged, or an older
    operator's): read as absent, never an exception."""
    from qdd import labels
    from qdd.controller.groups import group_states

    from .controller_world import desired_of
    from .test_controller_status import SEED
    assert [labels.index(v) for v in ("0", "12", "x", "²", "1234567", "", None)] == [0, 12, None, None, None, None, None]
    desired = desired_of(SEED)
    forged = _intruder({"qdd.dev/role": "decode", "qdd.dev/endpoint": "x"}, SEED["metadata"]["uid"])
    assert len(group_states(desired, [*desired, forged])) == len(group_states(desired, desired))


def test_engine_stalled_is_linear_in_engines():
    """Before: each engine listed its role's progressing peers, quadratic: 72 engines on each of 80
    pods (what the bounds admit) took seconds of every pass. One quiet engine among moving ones is
    stalled; the only moving engine is not its own peer."""
    def reads(pod: str, quiet: set[str], n: int = 72) -> list[PodRead]:
        return [PodRead(pod, "decode", 0, 1000.0 + 60 * i, tuple(
            EngineRead(str(e), running=1, generation_tokens=0.0 if str(e) in quiet else i * 10.0) for e in range(n)))
            for i in range(4)]
    def cpu(pods: int) -> float:  # the least of three runs: CPU seconds, not wall time
        some = {f"p{p}": reads(f"p{p}", {"3"} if p == 0 else set()) for p in range(pods)}
        out = []
        for _ in range(3):
            t0 = time.process_time()
            judge(some, T, 300, 1180.0)
            out.append(time.process_time() - t0)
        return min(out)
    # Four times the engines: about four times the CPU when linear, sixteen when quadratic. A ratio,
    # not a bound in seconds, so that a loaded machine does not fail it (an absolute 1 s did, at 1.05 s).
    small, large = cpu(20), cpu(80)
    assert large < 8 * small, (small, large)
    many = {f"p{p}": reads(f"p{p}", {"3"} if p == 0 else set()) for p in range(80)}
    j = judge(many, T, 300, 1180.0)
    assert len(j.engines) == 80 * 72
    stalled = next(c for c in j.conditions if c["type"] == "EngineStalled")
    assert stalled["status"] == "True" and stalled["message"].startswith("decode p0 engine 3 (no token for 180 s)")
    alone = judge({"p": reads("p", {str(e) for e in range(1, 72)})}, T, 300, 1180.0)
    assert next(c for c in alone.conditions if c["type"] == "EngineStalled")["message"].startswith("decode p engine 1 ")
    one = judge({"p": reads("p", set(), n=1)}, T, 300, 1180.0)
    assert next(c for c in one.conditions if c["type"] == "EngineStalled")["status"] == "False"
