"""The serving canary without a cluster: the request qdd sends (to a real local HTTP server), the
baseline and comparison, when a check is due, the generation key, and the conditions and events a
reconcile of the hand-made cluster writes from it."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from qdd.api import parse_resource
from qdd.canary import Answer, canary_generation, complete, due, judge, request_body
from qdd.canary.judge import RETRY_SECONDS, TEXT_LIMIT, answer_hash, request_hash
from qdd.controller.canary import CanaryChecker
from qdd.controller.reconcile import Reconciler
from qdd.errors import SpecError
from qdd.plan import build_plan

from .controller_world import cr_of
from .test_controller_status import NAME, FakeKube, cond

GEN, RH = "0123456789abcdef", "fedcba9876543210"
NOW = dt.datetime(2030, 1, 1, 0, 10, tzinfo=dt.timezone.utc)


# --- the HTTP client, against a real server ----------------------------------------------------------

class _Server:
    """A local HTTP server whose next answer the test sets: (status, body bytes, delay s)."""

    def __init__(self) -> None:
        self.reply: tuple[int, bytes, float] = (200, b"{}", 0.0)
        self.seen: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
                pass

            def do_POST(self) -> None:  # noqa: N802 — stdlib's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, body))
                status, payload, delay = outer.reply
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout case)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()


def test_request_body_is_deterministic_and_names_the_served_model():
    assert request_body("Qwen3.5-397B-A17B-NVFP4", "The capital of France is", 16) == {
        "model": "Qwen3.5-397B-A17B-NVFP4", "prompt": "The capital of France is", "max_tokens": 16,
        "temperature": 0, "seed": 0, "n": 1, "stream": False}


def test_client_posts_the_body_to_v1_completions_and_reads_choices_text(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy of the pod must not answer for the router
    server.reply = (200, json.dumps({"choices": [{"index": 0, "text": " Paris, the city"}]}).encode(), 0.0)
    body = request_body("m", "p", 4)
    a = complete(server.url + "/", body, 5)
    assert (a.text, a.error, a.status) == (" Paris, the city", None, 200)
    assert 0 < a.latency_ms < 5000
    assert server.seen[-1] == ("/v1/completions", body)


@pytest.mark.parametrize(("reply", "error"), [
    ((500, b"engine dead", 0.0), "HTTP 500: engine dead"),
    ((200, b'{"object": "error"}', 0.0), 'HTTP 200 without choices[0].text: {"object": "error"}'),
    ((200, b'{"choices": [{"text": 7}]}', 0.0), 'HTTP 200 without choices[0].text: {"choices": [{"text": 7}]}'),
    ((200, b"{}", 2.0), "no answer within 0.5 s"),
])
def test_client_reports_every_failure_without_raising(server, reply, error):
    server.reply = reply
    a = complete(server.url, request_body("m", "p", 4), 0.5)
    assert a.text is None and a.error == error
    assert a.status == (None if "within" in error else reply[0])


def test_client_bounds_the_whole_request_and_the_answer_size(server):
    server.reply = (200, b" " * 2_000_000, 0.0)
    a = complete(server.url, request_body("m", "p", 4), 5)
    assert a.text is None and a.error == "an answer longer than 1048576 bytes: not a completion"


def test_client_refused_connection():
    a = complete("http://127.0.0.1:9", request_body("m", "p", 4), 2)
    assert a.text is None and a.status is None and a.error.startswith("cannot reach the router:")


def test_a_hostile_prompt_stays_one_json_string(server):
    hostile = 'x"}, "temperature": 2, "z": {"\n\u0000'
    server.reply = (200, b'{"choices": [{"text": "ok"}]}', 0.0)
    complete(server.url, request_body("m", hostile, 4), 5)
    assert server.seen[-1][1]["prompt"] == hostile and server.seen[-1][1]["temperature"] == 0


# --- baseline and comparison ---------------------------------------------------------------------------

def _ok(text: str) -> Answer:
    return Answer(text, None, 200, 40.0)


def test_first_answer_becomes_the_baseline_and_later_answers_are_compared():
    first = judge(None, GEN, RH, _ok(" Paris."), None, "2030-01-01T00:00:00Z")
    assert first == {"generation": GEN, "requestHash": RH, "lastCheckTime": "2030-01-01T00:00:00Z", "latencyMs": 40.0,
                     "answer": " Paris.", "answerHash": answer_hash(" Paris."), "baselineSource": "first-answer",
                     "lastResult": "Passed"}
    same = judge(first, GEN, RH, _ok(" Paris."), None, "2030-01-01T00:05:00Z")
    assert same["lastResult"] == "Passed" and same["lastCheckTime"] == "2030-01-01T00:05:00Z"
    wrong = judge(same, GEN, RH, _ok(" !!!!"), None, "2030-01-01T00:10:00Z")
    assert wrong["lastResult"] == "Mismatch" and wrong["answer"] == " Paris." and wrong["lastAnswer"] == " !!!!"
    assert wrong["message"] == "expected ' Paris.' (first-answer), got ' !!!!'"
    failed = judge(wrong, GEN, RH, Answer(None, "HTTP 503: no decode", 503, 3.0), None, "2030-01-01T00:10:30Z")
    assert failed["lastResult"] == "Failed" and failed["message"] == "HTTP 503: no decode"
    assert failed["answerHash"] == answer_hash(" Paris.")  # the baseline survives a failure
    back = judge(failed, GEN, RH, _ok(" Paris."), None, "2030-01-01T00:11:00Z")
    assert back["lastResult"] == "Passed" and "lastAnswer" not in back and "message" not in back


def test_a_new_generation_or_request_takes_a_new_baseline():
    first = judge(None, GEN, RH, _ok(" Paris."), None, "2030-01-01T00:00:00Z")
    for gen, rh in (("1111111111111111", RH), (GEN, "2222222222222222")):
        new = judge(first, gen, rh, _ok(" Lyon."), None, "2030-01-01T00:01:00Z")
        assert (new["lastResult"], new["answer"], new["generation"], new["requestHash"]) == ("Passed", " Lyon.", gen, rh)


def test_a_failed_first_check_keeps_no_baseline():
    failed = judge(None, GEN, RH, Answer(None, "no answer within 10 s", None, 10000.0), None, "2030-01-01T00:00:00Z")
    assert failed["lastResult"] == "Failed" and "answerHash" not in failed
    assert judge(failed, GEN, RH, _ok(" x"), None, "2030-01-01T00:00:30Z")["answer"] == " x"


def test_a_pinned_expected_answer_is_required_from_the_first_check():
    r = judge(None, GEN, RH, _ok(" Lyon."), " Paris.", "2030-01-01T00:00:00Z")
    assert (r["lastResult"], r["baselineSource"], r["answer"]) == ("Mismatch", "expected", " Paris.")
    assert judge(r, GEN, RH, _ok(" Paris."), " Paris.", "2030-01-01T00:01:00Z")["lastResult"] == "Passed"


def test_removing_the_pinned_expected_answer_lets_the_next_answer_become_the_baseline():
    """A user who pinned a wrong ``expected`` and removes it is Ready again at the next check, in
    the same generation (the pinned baseline went on forever before)."""
    pinned = judge(None, GEN, RH, _ok(" Paris."), " London.", "2030-01-01T00:00:00Z")
    assert (pinned["lastResult"], pinned["baselineSource"]) == ("Mismatch", "expected")
    freed = judge(pinned, GEN, RH, _ok(" Paris."), None, "2030-01-01T00:00:30Z")
    assert (freed["lastResult"], freed["baselineSource"], freed["answer"]) == ("Passed", "first-answer", " Paris.")
    assert judge(freed, GEN, RH, _ok(" Lyon."), None, "2030-01-01T00:01:00Z")["lastResult"] == "Mismatch"


def test_long_answers_are_truncated_in_the_status_but_compared_whole():
    long = "a" * 1000
    r = judge(None, GEN, RH, _ok(long), None, "2030-01-01T00:00:00Z")
    assert r["answer"] == "a" * TEXT_LIMIT + "…" and r["answerHash"] == answer_hash(long)
    assert judge(r, GEN, RH, _ok("a" * 999 + "b"), None, "2030-01-01T00:01:00Z")["lastResult"] == "Mismatch"


@pytest.mark.parametrize(("result", "age", "period", "expected"), [
    ("Passed", 299, 300, False), ("Passed", 300, 300, True),
    ("Failed", RETRY_SECONDS - 1, 300, False), ("Failed", RETRY_SECONDS, 300, True),
    ("Mismatch", 9, 10, False), ("Mismatch", 10, 10, True),
])
def test_due(result, age, period, expected):
    record = {"generation": GEN, "requestHash": RH, "lastResult": result,
              "lastCheckTime": (NOW - dt.timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert due(record, GEN, RH, NOW, period) is expected
    assert due(record, "other", RH, NOW, period) and due(record, GEN, "other", NOW, period)
    assert due(record, GEN, RH, NOW, period, was_pending=True)


# --- the generation key --------------------------------------------------------------------------------

def _gen(mutate=None) -> str:
    cr = cr_of()
    if mutate:
        mutate(cr["spec"])
    return canary_generation(build_plan(parse_resource(cr)))


def test_generation_changes_with_what_computes_the_answer_only():
    base = _gen()
    assert len(base) == 8 and base == build_plan(parse_resource(cr_of())).generation
    assert _gen(lambda s: s["engine"].update(image="qdd/vllm:other")) != base
    assert _gen(lambda s: s["model"].update(revision="abc123")) != base
    assert _gen(lambda s: s["model"].update(servedModelName="other")) != base  # a must-match flag
    assert _gen(lambda s: s["prefill"].update(endpoints=6)) == base
    assert _gen(lambda s: s["workload"].update(concurrency=2048)) == base


# --- the API ------------------------------------------------------------------------------------------

def test_defaults_and_bounds():
    spec = parse_resource(cr_of()).spec.validation.canary
    assert (spec.enabled, spec.prompt, spec.max_tokens, spec.period_seconds, spec.timeout_seconds, spec.expected) == (
        True, "The capital of France is", 16, 300, 10, None)
    for bad, field in (({"maxTokens": 0}, "maxTokens"), ({"periodSeconds": 4}, "periodSeconds"),
                       ({"timeoutSeconds": 121}, "timeoutSeconds"), ({"prompt": ""}, "prompt")):
        with pytest.raises(SpecError) as e:
            parse_resource(cr_of(mutate=lambda cr, b=bad: cr["spec"].update(validation={"canary": b})))
        assert any(f"spec.validation.canary.{field}" in str(x) for x in e.value.errors), e.value.errors


@pytest.mark.parametrize(("canary", "given"), [
    ({"periodSeconds": 10, "timeoutSeconds": 10}, "timeoutSeconds 10, periodSeconds 10"),
    ({"periodSeconds": 30, "timeoutSeconds": 60}, "timeoutSeconds 60, periodSeconds 30"),
    ({"periodSeconds": 8}, "timeoutSeconds 10, periodSeconds 8"),  # the default timeout is compared too
])
def test_a_timeout_not_below_the_period_names_the_timeout_field_and_the_fix(canary, given):
    with pytest.raises(SpecError) as e:
        parse_resource(cr_of(mutate=lambda cr: cr["spec"].update(validation={"canary": canary})))
    assert [str(x) for x in e.value.errors] == [
        "spec.validation.canary.timeoutSeconds: must be below periodSeconds (a check may not outlast its period): "
        "lower spec.validation.canary.timeoutSeconds or raise spec.validation.canary.periodSeconds; the defaults "
        f"are 10 and 300 (given: {given})"]


def test_crd_carries_the_timeout_rule_and_defaults():
    from .test_controller_status import VERSION

    canary = VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["validation"]["properties"][
        "canary"]
    assert canary["x-kubernetes-validations"][0]["rule"] == (
        "(has(self.timeoutSeconds) ? self.timeoutSeconds : 10) < (has(self.periodSeconds) ? self.periodSeconds : 300)")
    props = canary["properties"]
    assert (props["maxTokens"]["default"], props["maxTokens"]["maximum"], props["periodSeconds"]["minimum"]) == (
        16, 256, 5)


# --- conditions, status and events through the reconcile of the hand-made cluster ----------------------

class _Router:
    """The router of the hand-made cluster: answers ``text`` (None: HTTP 503)."""

    def __init__(self) -> None:
        self.text: str | None = " Paris."
        self.sent: list[tuple[str, dict[str, Any], float]] = []

    def __call__(self, url: str, body: dict[str, Any], timeout: float) -> Answer:
        self.sent.append((url, body, timeout))
        if self.text is None:
            return Answer(None, "HTTP 503: no healthy decode", 503, 2.0)
        return Answer(self.text, None, 200, 25.0)


def _pass(kube: FakeKube, router: _Router) -> list[tuple[str, str, str]]:
    Reconciler(kube, gang=True, canary=CanaryChecker(router, override="", workers=0)).once("default", NAME)  # type: ignore[arg-type]
    return kube.take()


def _age_last_check(kube: FakeKube, seconds: int) -> None:
    t = dt.datetime.strptime(kube.cr["status"]["canary"]["lastCheckTime"], "%Y-%m-%dT%H:%M:%SZ")
    kube.cr["status"]["canary"]["lastCheckTime"] = (t - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_ready_waits_for_the_canary_then_degraded_on_mismatch_and_back(monkeypatch):
    kube, router = FakeKube(cr_of(mutate=lambda cr: cr["spec"].update(validation={"canary": {"periodSeconds": 60}}))), _Router()
    _pass(kube, router)
    assert router.sent == [] and cond(kube.cr["status"], "CanaryPassed")["reason"] == "CanaryPending"
    kube.settle()
    _pass(kube, router)
    url, body, timeout = router.sent[-1]
    assert url == f"http://{NAME}-router.default.svc:8000" and timeout == 10.0
    assert body == {"model": "Qwen3.5-397B-A17B-NVFP4", "prompt": "The capital of France is", "max_tokens": 16,
                    "temperature": 0, "seed": 0, "n": 1, "stream": False}
    st = kube.cr["status"]
    assert (cond(st, "Ready")["status"], cond(st, "CanaryPassed")["status"]) == ("True", "True")
    assert st["canary"]["answer"] == " Paris." and st["canary"]["latencyMs"] == 25.0
    assert _pass(kube, router) == [] and len(router.sent) == 1  # not due: nothing sent, nothing written

    router.text = " gibberish gibberish"
    _age_last_check(kube, 60)
    writes = _pass(kube, router)
    st = kube.cr["status"]
    assert ("event", "Warning", "CanaryMismatch") in writes
    assert (cond(st, "Degraded")["status"], cond(st, "Degraded")["reason"]) == ("True", "CanaryMismatch")
    assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "CanaryMismatch")
    assert "expected ' Paris.' (first-answer), got ' gibberish gibberish'" in cond(st, "Degraded")["message"]
    assert st["canary"]["lastAnswer"] == " gibberish gibberish"

    router.text = None
    _age_last_check(kube, RETRY_SECONDS)
    assert ("event", "Warning", "CanaryFailed") in _pass(kube, router)
    assert "HTTP 503: no healthy decode" in cond(kube.cr["status"], "Degraded")["message"]

    router.text = " Paris."
    _age_last_check(kube, RETRY_SECONDS)
    writes = _pass(kube, router)
    st = kube.cr["status"]
    assert ("event", "Normal", "CanaryPassed") in writes and ("event", "Normal", "Ready") in writes
    assert (cond(st, "Degraded")["status"], cond(st, "Ready")["status"]) == ("False", "True")


def test_a_disabled_canary_sends_nothing_and_ready_does_not_wait():
    kube, router = FakeKube(cr_of(mutate=lambda cr: cr["spec"].update(validation={"canary": {"enabled": False}}))), _Router()
    _pass(kube, router)
    kube.settle()
    _pass(kube, router)
    st = kube.cr["status"]
    assert router.sent == [] and "canary" not in st
    assert cond(st, "Ready")["status"] == "True"
    assert (cond(st, "CanaryPassed")["status"], cond(st, "CanaryPassed")["reason"]) == ("True", "CanaryDisabled")


def test_the_test_double_override_names_the_resource():
    plan = build_plan(parse_resource(cr_of()))
    checker = CanaryChecker(_Router(), override="http://127.0.0.1:5/{namespace}/{name}")
    assert checker.base_url(plan) == f"http://127.0.0.1:5/default/{NAME}"
    assert request_hash(request_body("m", "p", 1)) != request_hash(request_body("m", "p", 2))


def test_the_request_runs_off_the_pass_and_the_next_pass_judges_its_answer():
    """A slow router holds no reconcile: the pass returns while the request is still out (the send
    below blocks until released), one request per resource is in flight, and the pass that
    ``notify`` asks for writes the result."""
    release, notified, calls = threading.Event(), threading.Event(), []

    def slow_router(url: str, body: dict[str, Any], timeout: float) -> Answer:
        calls.append(url)
        assert release.wait(30)
        return Answer(" Paris.", None, 200, 5.0)

    kube = FakeKube(cr_of())
    checker = CanaryChecker(slow_router, override="", notify=lambda ns, name: notified.set())
    r = Reconciler(kube, gang=True, canary=checker)  # type: ignore[arg-type]
    r.once("default", NAME)
    kube.settle()
    for _ in range(2):
        r.once("default", NAME)
        st = kube.cr["status"]
        assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "CanaryPending")
        assert cond(st, "CanaryPassed")["message"] == "the canary request is on its way to the router"
    release.set()
    assert notified.wait(30)
    r.once("default", NAME)
    st = kube.cr["status"]
    assert cond(st, "Ready")["status"] == "True" and st["canary"]["lastResult"] == "Passed"
    assert len(calls) == 1


def test_a_client_that_raises_is_a_failed_check():
    def broken(url: str, body: dict[str, Any], timeout: float) -> Answer:
        raise RuntimeError("boom")

    notified = threading.Event()
    kube = FakeKube(cr_of())
    r = Reconciler(kube, gang=True, canary=CanaryChecker(broken, override="", notify=lambda ns, n: notified.set()))  # type: ignore[arg-type]
    r.once("default", NAME)
    kube.settle()
    r.once("default", NAME)
    assert notified.wait(30)
    r.once("default", NAME)
    d = cond(kube.cr["status"], "Degraded")
    assert (d["status"], d["reason"]) == ("True", "CanaryFailed")
    assert "canary client error: RuntimeError: boom" in d["message"]


def test_a_new_generation_takes_a_new_baseline_after_the_surge():
    """A new engine image is a new generation (Surge): the canary waits while the router still
    serves the old one, then keeps the new generation's first answer as its baseline (no mismatch
    against the old generation's answer)."""
    kube, router = FakeKube(cr_of()), _Router()
    for _ in range(3):
        _pass(kube, router)
        kube.settle()
    st = kube.cr["status"]
    old_gen = st["canary"]["generation"]
    assert cond(st, "Ready")["status"] == "True" and old_gen == st["rollout"]["generation"]
    kube.cr["spec"]["engine"]["image"] = "qdd/vllm:other"
    kube.cr["metadata"]["generation"] += 1
    router.text = " Lyon."
    for _ in range(12):
        _pass(kube, router)
        kube.settle()
        st = kube.cr["status"]
        assert cond(st, "Degraded")["status"] == "False", cond(st, "Degraded")
        if cond(st, "Ready")["status"] == "True":
            break
    assert st["rollout"]["generation"] != old_gen and st["canary"]["generation"] == st["rollout"]["generation"]
    assert (st["canary"]["answer"], st["canary"]["lastResult"]) == (" Lyon.", "Passed")
