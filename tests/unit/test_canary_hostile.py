"""The serving canary against a hostile router (issue 21, class 6): the router's image is the
resource author's, and the request is sent by the operator process itself.

Each test serves a real local TCP server that misbehaves one way: a redirect to another address
(server-side request forgery with read-back), headers or a body trickled a byte at a time (the
socket timeout alone restarts on every byte), deeply nested JSON, control characters in the
answer, and four such routers at once beside a healthy one (a shared pool held hostage)."""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
import time
from typing import Any

import pytest

from qdd.api import parse_resource
from qdd.canary import complete, request_body
from qdd.controller.canary import CanaryChecker
from qdd.controller.reconcile import Reconciler
from qdd.plan import build_plan

from .controller_world import cr_of
from .test_controller_status import NAME, FakeKube

NOW = dt.datetime(2030, 1, 1, 0, 10, tzinfo=dt.timezone.utc)
OK = json.dumps({"choices": [{"text": " Paris."}]}).encode()


class RawServer:
    """A TCP server whose handler gets (path, socket) of each request; it writes what it wants."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.hits: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode()
            self.hits.append(path)
            self.handler(path, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def _answer(conn: socket.socket, body: bytes, status: str = "200 OK", extra: str = "") -> None:
    conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
                 "Connection: close\r\n\r\n".encode() + body)


def _trickle(data: bytes, every: float) -> Any:
    def handler(path: str, conn: socket.socket) -> None:
        for b in data:
            conn.sendall(bytes([b]))
            time.sleep(every)
    return handler


@pytest.fixture
def servers():
    made: list[RawServer] = []
    yield lambda handler: made.append(RawServer(handler)) or made[-1]
    for s in made:
        s.close()


@pytest.mark.parametrize("status", ["301 Moved Permanently", "302 Found", "303 See Other", "307 Temporary Redirect",
                                    "308 Permanent Redirect"])
def test_a_redirect_is_not_followed_and_the_other_address_is_never_contacted(servers, status):
    inside = servers(lambda path, conn: _answer(conn, b'{"choices": [{"text": "SECRET of the other service"}]}'))
    router = servers(lambda path, conn: _answer(conn, b"", status, f"Location: {inside.url}/v1/completions\r\n"))
    a = complete(router.url, request_body("m", "p", 4), 5)
    assert inside.hits == [], "the canary followed the router's redirect to another address"
    assert a.text is None and a.status == int(status[:3]) and "SECRET" not in (a.error or "")
    assert "redirect" in (a.error or "")


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_router_that_trickles_is_cut_at_the_whole_request_deadline(servers, where):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
    data = head + b"X-Pad: " + b"a" * 2000 + b"\r\n\r\n" if where == "headers" else head + b"\r\n" + b" " * 100000
    start = 0 if where == "headers" else len(head) + 2
    router = servers(lambda path, conn: (conn.sendall(data[:start]), _trickle(data[start:], 0.05)(path, conn)))
    t0 = time.monotonic()
    a = complete(router.url, request_body("m", "p", 4), 1.0)
    took = time.monotonic() - t0
    assert a.text is None and "within 1 s" in (a.error or ""), a
    assert took < 1.5, f"the 1 s deadline took {took:.2f} s"


def test_deeply_nested_json_is_a_failed_check_not_an_exception(servers):
    router = servers(lambda path, conn: _answer(conn, b"[" * 200_000 + b"]" * 200_000))
    a = complete(router.url, request_body("m", "p", 4), 5)
    assert a.text is None and a.status == 200 and "choices[0].text" in (a.error or "")


def test_four_hanging_routers_do_not_stop_another_deployments_canary(servers):
    """Four deployments whose routers never answer (each check runs to its 20 s timeout) and one
    healthy one: the healthy one's answer must come in at once, not after the others' timeouts."""
    def route(path: str, conn: socket.socket) -> None:
        if path.startswith("/good/"):
            _answer(conn, OK)
        else:
            time.sleep(25)

    srv = servers(route)
    answered: dict[str, float] = {}
    done = threading.Event()

    def notify(ns: str, name: str) -> None:
        answered[name] = time.monotonic()
        if name == "good":
            done.set()

    checker = CanaryChecker(override=srv.url + "/{name}", notify=notify)
    t0 = time.monotonic()
    for name in ("slow1", "slow2", "slow3", "slow4", "good"):
        cr = cr_of(mutate=lambda c, n=name: (c["metadata"].update(name=n), c["spec"].update(
            validation={"canary": {"timeoutSeconds": 20, "periodSeconds": 60}})))
        checker.state(cr, build_plan(parse_resource(cr)), True, NOW)
    assert done.wait(5), f"the healthy deployment's canary waited behind the hanging routers ({answered})"
    assert answered["good"] - t0 < 5


CONTROL = "\x1b]8;;http://evil\x07 Paris\x1b[2J\r\nFAKE: line\u202e\x00"


def _strings(x: Any) -> list[str]:
    if isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v)] + [k for k in x if isinstance(k, str)]
    if isinstance(x, list):
        return [s for v in x for s in _strings(v)]
    return [x] if isinstance(x, str) else []


def _unsafe(s: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u2028\u2029" for c in s)


def test_control_characters_of_an_answer_never_reach_the_status_or_an_event(monkeypatch):
    sent: list[tuple[str, str, str]] = []
    kube = FakeKube(cr_of(mutate=lambda cr: cr["spec"].update(validation={"canary": {"expected": " Paris."}})))
    monkeypatch.setattr(kube, "event", lambda cr, t, reason, message: sent.append((t, reason, message)), raising=False)

    def router(url: str, body: dict[str, Any], timeout: float):
        from qdd.canary import Answer
        return Answer(CONTROL, None, 200, 5.0)

    r = Reconciler(kube, gang=True, canary=CanaryChecker(router, override="", workers=0))  # type: ignore[arg-type]
    for _ in range(3):
        r.once("default", NAME)
        kube.settle()
    st = kube.cr["status"]
    assert st["canary"]["lastResult"] == "Mismatch"
    bad = [s for s in _strings(st) if _unsafe(s)]
    assert not bad, f"control characters in the status: {bad[:2]!r}"
    assert any(reason == "CanaryMismatch" for _, reason, _ in sent)
    assert not [m for _, _, m in sent if _unsafe(m)], "control characters in an event"
    assert "\\x1b" in st["canary"]["lastAnswer"]  # shown escaped, not dropped


def test_the_real_event_writer_makes_its_message_safe():
    from qdd.controller.kube import Kube

    bodies: list[dict[str, Any]] = []

    class _Events:
        def create(self, body: dict[str, Any], **_: Any) -> None:
            bodies.append(body)

    kube = Kube.__new__(Kube)
    kube._required = lambda api, kind: _Events()  # type: ignore[method-assign]
    cr = {"apiVersion": "qdd.dev/v1alpha1", "kind": "QwenDisaggDeployment",
          "metadata": {"name": "x", "namespace": "default", "uid": "u"}}
    kube.event(cr, "Warning", "CanaryMismatch", "got " + CONTROL + "\ud800")
    msg = bodies[0]["message"]
    assert not _unsafe(msg) and "\ud800" not in msg and msg.startswith("got \\x1b")
    msg.encode("utf-8")  # a lone surrogate could not be sent
