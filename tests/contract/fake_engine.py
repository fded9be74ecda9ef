"""Fake vLLM prefill/decode engines that speak the P/D protocol (docs/facts/pd-protocol.md): test doubles for GPUs.

A real router (vllm-router) sits in front of them in tests/contract/test_router.py. What the
fakes do is what vLLM 0.33.0 with the NixlConnector does on the HTTP surface, with the KV
transfer itself replaced by a small TCP "side channel" on loopback:

* Prefill (``kv_transfer_params.do_remote_decode: true``): runs one step (``max_tokens`` must be
  1, ``stream`` false), keeps the request's "KV blocks" under a lease and answers with
  ``kv_transfer_params: {do_remote_prefill: true, do_remote_decode: false, remote_engine_id,
  remote_request_id, remote_block_ids (one list per KV-cache group), remote_host, remote_port,
  tp_size}``. ``remote_host:remote_port`` is its side channel (VLLM_NIXL_SIDE_CHANNEL_HOST and
  base port + DP rank in the real engine).
* Decode (``kv_transfer_params.do_remote_prefill: true``): dials ``remote_host:remote_port``,
  asks for exactly ``remote_request_id`` / ``remote_block_ids`` from ``remote_engine_id`` (the
  NIXL READ), which frees the lease on the prefill side, then generates ``max_tokens`` tokens
  (the original, not 1) and answers, streamed as SSE or not. A decode request without valid
  params, or whose blocks the prefill does not hold, is refused (HTTP 400), like a real engine
  with ``kv_load_failure_policy: fail``.

Every HTTP request is recorded (``engine.requests``) so tests can assert on what the router sent.
Everything binds to 127.0.0.1 on ports the OS picks; ``stop()`` ends every thread.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
KV_CACHE_GROUPS = 4
"""Qwen3.5-397B has 1 full-attention + 3 GDN KV-cache groups (docs/facts/memory-model.md): one block list each."""
SIDE_CHANNEL_TIMEOUT_S = 5.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class Lease:
    block_ids: list[list[int]]
    prompt_digest: str
    expires: float


def prompt_digest(body: dict[str, Any]) -> str:
    """What a prefill 'computes' from a prompt, so the decode's answer proves which prefill it read."""
    prompt = body.get("prompt", body.get("messages"))
    return uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(prompt, sort_keys=True)).hex[:12]


class _SideChannel(socketserver.ThreadingTCPServer):
    """One JSON line in, one JSON line out: the decode's READ of leased blocks (stands in for NIXL)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        super().__init__((engine.host, 0), _SideChannelHandler)


class _SideChannelHandler(socketserver.StreamRequestHandler):
    server: _SideChannel

    def handle(self) -> None:
        self.connection.settimeout(SIDE_CHANNEL_TIMEOUT_S)
        try:
            req = json.loads(self.rfile.readline(1 << 20))
            reply = self.server.engine.serve_read(req)
        except (OSError, ValueError) as e:
            reply = {"ok": False, "error": f"bad side-channel request: {e}"}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class FakeEngine:
    """One fake engine endpoint (one HTTP port), ``role`` ``prefill`` or ``decode``."""

    def __init__(self, role: str, name: str, model: str, *, dp_size: int = 1, host: str = HOST,
                 port: int = 0, lease_s: float = 30.0, token: str | None = None, token_interval_s: float = 0.0,
                 prompt_tokens: int = 8, answer: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        """``token_interval_s``: decode sleeps this long between streamed tokens (a known ITL);
        ``prompt_tokens``: what usage reports as the prompt's length; ``answer``: decode's text for a
        request body (None: the default ``token:prefill:digest t1 t2 …``), e.g. a GSM8K answer."""
        if role not in ("prefill", "decode"):
            raise ValueError(role)
        if not host.startswith("127."):
            raise ValueError(f"fake engines bind to loopback only, not {host}")
        self.role, self.name, self.model, self.dp_size, self.lease_s = role, name, model, dp_size, lease_s
        self.token_interval_s, self.prompt_tokens, self.answer = token_interval_s, prompt_tokens, answer
        self.host = host
        self.token = token or name
        self.engine_id = f"{name}-{uuid.uuid4().hex[:8]}"
        self.requests: list[Recorded] = []
        self.leases: dict[str, Lease] = {}
        self.issued: dict[str, dict[str, Any]] = {}
        """kv_transfer_params this prefill answered with, by its request id."""
        self.reads: list[dict[str, Any]] = []
        """Side-channel READs this engine served (prefill) — what the decode pulled."""
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._next_block = 1
        self._http = ThreadingHTTPServer((host, port), _handler_for(self))
        self._http.daemon_threads = True
        self._side = _SideChannel(self) if role == "prefill" else None
        self._threads: list[threading.Thread] = []

    # lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._http.server_address[1]}"

    @property
    def side_channel_port(self) -> int | None:
        return self._side.server_address[1] if self._side else None

    def start(self) -> FakeEngine:
        for srv in filter(None, (self._http, self._side)):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Idempotent; safe on an engine that was never started (shutdown() would then block)."""
        for srv in filter(None, (self._http, self._side)):
            if self._threads:
                srv.shutdown()
            srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> FakeEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # what the tests read -----------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.issued.clear()
            self.reads.clear()
            self.errors.clear()

    def completions(self) -> list[Recorded]:
        """The inference requests this engine received (POST /v1/...)."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.startswith("/v1/")]

    # prefill -----------------------------------------------------------------------------------
    def prefill(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        ktp = body.get("kv_transfer_params") or {}
        problems = []
        if ktp.get("do_remote_decode") is not True:
            problems.append(f"kv_transfer_params.do_remote_decode is {ktp.get('do_remote_decode')!r}, not true")
        if ktp.get("do_remote_prefill"):
            problems.append("kv_transfer_params.do_remote_prefill is set on a prefill request")
        if _max_tokens(body) != 1:
            problems.append(f"max_tokens is {_max_tokens(body)!r}, not 1")
        if body.get("stream"):
            problems.append("stream is true on a prefill request")
        if body.get("stream_options") and not body.get("stream"):
            # vLLM's request models refuse this ("Stream options can only be defined when stream=True").
            problems.append("stream_options without stream")
        if problems:
            return self._refuse(problems)
        rid = f"cmpl-{uuid.uuid4().hex}"
        with self._lock:
            blocks = [[self._next_block + g * 1000 + i for i in range(3)] for g in range(KV_CACHE_GROUPS)]
            self._next_block += 3
            self.leases[rid] = Lease(blocks, prompt_digest(body), time.monotonic() + self.lease_s)
        # The keys of vLLM 0.33.0's NixlConnector answer on a prefill node
        # (vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py, request_finished).
        params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": blocks,
            "remote_engine_id": self.engine_id,
            "remote_request_id": rid,
            "remote_host": self.host,
            "remote_port": self.side_channel_port,
            "tp_size": 1,
            "dcp_size": 1,
            "pp_size": 1,
            "remote_num_tokens": 8,
            "remote_blocks_expiry_time": None,
            "remote_registration_generation": 0,
            "transfer_mode": "pull",
        }
        with self._lock:
            self.issued[rid] = params
        out = _response(body, rid, self.model, "\u2581", "length", params)
        out["usage"] = _usage(1, self.prompt_tokens)
        return 200, out

    def serve_read(self, req: dict[str, Any]) -> dict[str, Any]:
        """Side channel: a decode pulls leased blocks; the lease is freed (vLLM frees on notify)."""
        with self._lock:
            if req.get("engine_id") != self.engine_id:
                return {"ok": False, "error": f"engine id {req.get('engine_id')!r} is not {self.engine_id!r}"}
            rid = str(req.get("request_id"))
            lease = self.leases.get(rid)
            if lease is None:
                return {"ok": False, "error": f"no blocks held for {rid!r}"}
            if req.get("block_ids") != lease.block_ids:
                return {"ok": False, "error": f"block ids {req.get('block_ids')} are not {lease.block_ids}"}
            del self.leases[rid]
            if lease.expires < time.monotonic():
                return {"ok": False, "error": "lease expired"}
            self.reads.append(req)
            return {"ok": True, "digest": lease.prompt_digest, "prefill": self.name}

    # decode ------------------------------------------------------------------------------------
    def decode(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | list[str]]:
        ktp = body.get("kv_transfer_params") or {}
        if ktp.get("do_remote_prefill") is not True:
            return self._refuse([f"kv_transfer_params.do_remote_prefill is {ktp.get('do_remote_prefill')!r}"])
        missing = [k for k in ("remote_engine_id", "remote_request_id", "remote_block_ids",
                               "remote_host", "remote_port") if ktp.get(k) in (None, "", [])]
        if missing:
            return self._refuse([f"kv_transfer_params lacks {', '.join(missing)}"])
        read = _side_channel_read(ktp)
        if not read.get("ok"):
            return self._refuse([f"KV read from {ktp['remote_host']}:{ktp['remote_port']} failed: {read.get('error')}"])
        n = _max_tokens(body) or 16
        pieces = [f"{self.token}:{read['prefill']}:{read['digest']}"] + [f" t{i}" for i in range(1, n)]
        text = self.answer(body) if self.answer else None
        pieces = pieces if text is None else [text]
        rid = f"cmpl-{uuid.uuid4().hex}"
        if body.get("stream"):
            usage = (body.get("stream_options") or {}).get("include_usage")
            return 200, _sse(body, rid, self.model, pieces, _usage(len(pieces), self.prompt_tokens) if usage else None)
        out = _response(body, rid, self.model, "".join(pieces), "length", None)
        out["usage"] = _usage(len(pieces), self.prompt_tokens)
        return 200, out

    def _refuse(self, problems: list[str]) -> tuple[int, dict[str, Any]]:
        msg = f"{self.name}: " + "; ".join(problems)
        with self._lock:
            self.errors.append(msg)
        return 400, {"object": "error", "message": msg, "type": "BadRequestError", "code": 400}

    def metrics_text(self) -> str:
        """A few of vLLM's own gauges, one series per DP engine, like a DP-internal-LB API server."""
        lines = ["# TYPE vllm:num_requests_running gauge"]
        lines += [f'vllm:num_requests_running{{engine="{i}",model_name="{self.model}"}} 0.0'
                  for i in range(self.dp_size)]
        return "\n".join(lines) + "\n"


def _max_tokens(body: dict[str, Any]) -> int | None:
    v = body.get("max_tokens", body.get("max_completion_tokens"))
    return int(v) if v is not None else None


def _side_channel_read(ktp: dict[str, Any]) -> dict[str, Any]:
    req = {"engine_id": ktp["remote_engine_id"], "request_id": ktp["remote_request_id"],
           "block_ids": ktp["remote_block_ids"]}
    try:
        with socket.create_connection((ktp["remote_host"], int(ktp["remote_port"])),
                                      timeout=SIDE_CHANNEL_TIMEOUT_S) as s:
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        return json.loads(buf)
    except (OSError, ValueError) as e:
        return {"ok": False, "error": str(e)}


def _is_chat(body: dict[str, Any]) -> bool:
    return "messages" in body


def _response(body: dict[str, Any], rid: str, model: str, text: str, finish: str,
              kv_transfer_params: dict[str, Any] | None) -> dict[str, Any]:
    n = _max_tokens(body) or 16
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    if _is_chat(body):
        out: dict[str, Any] = {
            "id": f"chat{rid}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        }
    else:
        out = {
            "id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        }
    out["kv_transfer_params"] = kv_transfer_params
    return out


def _usage(completion: int, prompt: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(body: dict[str, Any], rid: str, model: str, pieces: list[str],
         usage: dict[str, int] | None = None) -> list[str]:
    """SSE events as vLLM's OpenAI server writes them, ending with ``data: [DONE]``."""
    created = int(time.time())
    events = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        if _is_chat(body):
            delta: dict[str, Any] = {"content": piece}
            if i == 0:
                delta["role"] = "assistant"
            chunk = {"id": f"chat{rid}", "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": "length" if last else None,
                                  "logprobs": None}]}
        else:
            chunk = {"id": rid, "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": 0, "text": piece, "finish_reason": "length" if last else None,
                                  "logprobs": None}]}
        events.append(f"data: {json.dumps(chunk)}\n\n")
    if usage is not None:  # vLLM's last chunk with stream_options.include_usage: no choices, the usage
        events.append(f"data: {json.dumps({'id': rid, 'object': 'text_completion', 'created': created, 'model': model, 'choices': [], 'usage': usage})}\n\n")
    events.append("data: [DONE]\n\n")
    return events


def _handler_for(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
            pass

        def _record(self, body: dict[str, Any] | None) -> None:
            with engine._lock:
                engine.requests.append(Recorded(self.command, self.path, dict(self.headers), body))

        def _send(self, code: int, payload: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, code: int, obj: Any) -> None:
            self._send(code, json.dumps(obj).encode(), "application/json")

        def _stream(self, events: list[str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, ev in enumerate(events):
                if i and engine.token_interval_s and '"choices": []' not in ev and "[DONE]" not in ev:
                    time.sleep(engine.token_interval_s)  # a known token interval (ITL) between tokens
                data = ev.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802 — BaseHTTPRequestHandler's name
            self._record(None)
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"", "application/json")
            elif path == "/metrics":
                self._send(200, engine.metrics_text().encode(), "text/plain; version=0.0.4")
            elif path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": engine.model, "object": "model",
                                                             "owned_by": "vllm"}]})
            else:
                self._json(404, {"object": "error", "message": f"no route {path}", "code": 404})

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._record(None)
                self._json(400, {"object": "error", "message": "body is not JSON", "code": 400})
                return
            self._record(body)
            path = self.path.split("?", 1)[0]
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self._json(404, {"object": "error", "message": f"no route {path}", "code": 404})
                return
            code, out = engine.prefill(body) if engine.role == "prefill" else engine.decode(body)
            if isinstance(out, list):
                self._stream(out)
            else:
                self._json(code, out)

    return Handler


@dataclass
class FakeFleet:
    """Prefill and decode fakes started together; ``stop()`` stops them all."""

    prefill: list[FakeEngine] = field(default_factory=list)
    decode: list[FakeEngine] = field(default_factory=list)

    @property
    def all(self) -> list[FakeEngine]:
        return self.prefill + self.decode

    def start(self) -> FakeFleet:
        for e in self.all:
            e.start()
        return self

    def stop(self) -> None:
        for e in self.all:
            e.stop()


class Tripwire:
    """Listens where nothing should be called (a headless worker pod, another deployment's pod):
    answers 503 to everything and records what came."""

    def __init__(self, host: str, port: int) -> None:
        if not host.startswith("127."):
            raise ValueError(f"tripwires bind to loopback only, not {host}")
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib's name
                pass

            def _any(self) -> None:
                hits.append(f"{self.command} {self.path}")
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _any  # noqa: N815 — BaseHTTPRequestHandler's names

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)

    def start(self) -> Tripwire:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.ident is not None:
            self._http.shutdown()
            self._thread.join(timeout=5)
        self._http.server_close()
