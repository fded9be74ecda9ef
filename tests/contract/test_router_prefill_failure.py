"""What the real vllm-router 0.1.17 does, with the args `qdd render` gives it, when prefill fails
(docs/facts/router-pd.md, "When prefill fails"): an HTTP error of prefill reaches the client at once
and decode is never contacted; a prefill that hangs reaches the client as an error after the
rendered ``--request-timeout-secs``, decode never contacted; the same timeout cuts a decode's
stream. The field reports (aibrix#2289, sglang#40606) are of routers that dispatch prefill and
decode together, where decode then waits for KV that never comes and holds its slot.

The deployment is the seed example with ``spec.router.requestTimeoutSeconds: 5`` (the smallest the
API takes: the test waits it out); the router runs in static mode in front of one fake prefill and
one fake decode whose behaviour is chosen by the prompt. The cases run side by side, so the module
takes about one timeout.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from qdd.plan.router import request_timeout
from qdd.api import parse_resource

from .fake_engine import FakeEngine
from .router_harness import EXAMPLE, Router, free_port, render, router_container, split_flags, substitute

TIMEOUT_S = 5
CR = yaml.safe_load(EXAMPLE.read_text())
CR["spec"].setdefault("router", {})["requestTimeoutSeconds"] = TIMEOUT_S
MODEL = CR["spec"]["model"]["servedModelName"]
ERROR_500 = {"object": "error", "message": "SIMULATED engine failure", "type": "InternalServerError", "code": 500}
ERROR_400 = {"object": "error", "message": "SIMULATED: prompt too long", "type": "BadRequestError", "code": 400}
MARGIN_S = 1.5
"""Wall-clock slack for an answer that should be at once (two loopback hops and the router's
bookkeeping take milliseconds; the test machine may be loaded)."""


class FailingPrefill(FakeEngine):
    """A fake prefill that fails as its prompt says: ``fail-500``, ``fail-400``, ``hang`` (answers after
    twice the router's timeout); any other prompt: the P/D protocol as usual."""

    def prefill(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prompt = str(body.get("prompt"))
        if prompt == "fail-500":
            return 500, copy.deepcopy(ERROR_500)
        if prompt == "fail-400":
            return 400, copy.deepcopy(ERROR_400)
        if prompt == "hang":
            time.sleep(2 * TIMEOUT_S)
        return super().prefill(body)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Router, FakeEngine, FakeEngine, list[str]]]:
    args = router_container(render(CR))["args"]
    # "slow" decodes stream one token a second: 2 × the timeout of them outlasts it.
    p = FailingPrefill("prefill", "p0", MODEL).start()
    d = FakeEngine("decode", "d0", MODEL, token_interval_s=1.0).start()
    d._http.handle_error = lambda *_: None  # type: ignore[method-assign]  # the cut stream's broken pipe: expected
    try:
        run, _ = substitute(args, port=free_port(), prometheus_port=free_port(), prefill_urls=[p.url],
                            decode_urls=[d.url])
        with Router(run, tmp_path_factory.mktemp("router-prefill-failure") / "router.log") as router:
            router.wait_ready(1, 1)
            yield router, p, d, args
    finally:
        p.stop()
        d.stop()


def test_the_rendered_timeout_is_the_specs_and_the_default_is_below_the_routers(stack):
    _, _, _, args = stack
    assert dict(split_flags(args))["--request-timeout-secs"] == [str(TIMEOUT_S)]
    seed = yaml.safe_load(EXAMPLE.read_text())
    assert request_timeout(parse_resource(seed).spec) == 60 + 205  # 0.2 s × OSL 1024, rounded up
    assert dict(split_flags(router_container(render(seed))["args"]))["--request-timeout-secs"] == ["265"]


def _send(router: Router, prompt: str, stream: bool, out: dict[str, Any]) -> None:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2 * TIMEOUT_S if prompt == "slow" else 3, "stream": stream}
    t0 = time.monotonic()
    try:
        status, _, raw = router.post("/v1/completions", body)
    except Exception as e:  # noqa: BLE001 — a cut stream surfaces as an incomplete read
        status, raw = None, repr(e).encode()
    out[prompt] = (status, raw, time.monotonic() - t0)


def test_prefill_errors_come_back_at_once_a_hang_after_the_timeout_and_decode_is_never_contacted(stack):
    router, p, d, _ = stack
    p.reset()
    d.reset()
    got: dict[str, Any] = {}
    cases = [("fail-500", False), ("fail-400", False), ("hang", False), ("slow", True)]
    threads = [threading.Thread(target=_send, args=(router, prompt, stream, got)) for prompt, stream in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(4 * TIMEOUT_S)
    assert set(got) == {prompt for prompt, _ in cases}, got

    # prefill's 500: the client's error names it, at once
    status, raw, took = got["fail-500"]
    assert status == 500 and took < MARGIN_S, (status, took)
    assert b"returned 500" in raw and b"SIMULATED engine failure" in raw
    # prefill's 400: passed through as it is, at once
    status, raw, took = got["fail-400"]
    assert status == 400 and took < MARGIN_S, (status, took)
    assert json.loads(raw) == ERROR_400
    # a hung prefill: an error after the rendered timeout, not the router's 1800 s
    status, raw, took = got["hang"]
    assert status == 500 and TIMEOUT_S - 0.5 < took < TIMEOUT_S + MARGIN_S, (status, took)
    assert b"timed out" in raw
    # the same timeout cuts a decode's stream (one total timeout per upstream request)
    status, raw, took = got["slow"]
    assert status is None and TIMEOUT_S - 0.5 < took < TIMEOUT_S + MARGIN_S, (status, raw, took)

    # prefill was asked once per request (no retries), decode only for the one whose prefill answered
    prompts = sorted(str((r.body or {}).get("prompt")) for r in p.completions())
    assert prompts == ["fail-400", "fail-500", "hang", "slow"]
    assert [(r.body or {}).get("prompt") for r in d.completions()] == ["slow"]


def test_the_timeout_field_is_bounded():
    bad = copy.deepcopy(CR)
    bad["spec"]["router"]["requestTimeoutSeconds"] = 4
    with pytest.raises(RuntimeError, match=r"requestTimeoutSeconds"):
        render(bad)

