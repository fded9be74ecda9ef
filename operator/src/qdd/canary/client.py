"""The canary's HTTP client: one OpenAI ``/v1/completions`` request, standard library only.

The request is deterministic by construction: temperature 0 (greedy), seed 0, one choice, no
streaming, and nothing else the engine would sample with. vLLM's OpenAI server takes these fields
(vllm/entrypoints/openai/completion/protocol.py, CompletionRequest) and vllm-router forwards the
body unchanged to the prefill (with ``max_tokens`` 1) and then to the decode engine.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

SAMPLING: dict[str, Any] = {"temperature": 0, "seed": 0, "n": 1, "stream": False}
"""Fixed by qdd, never by the spec: what makes two requests comparable."""
BODY_EXCERPT = 300
"""Characters of an error body kept in a message (a router's error page can be kilobytes)."""
MAX_BODY = 1 << 20
"""Bytes of an answer read at most: 256 tokens of text are a few KiB; a router that sends more is
not answering a completion (and the operator's memory is not its to fill)."""


@dataclass(frozen=True)
class Answer:
    """One request's outcome. ``text``: choices[0].text when the server answered a completion (None
    otherwise); ``error``: why there is no text; ``status``: the HTTP status (None when no response
    came: refused, timed out); ``latency_ms``: send to last byte, ms."""

    text: str | None
    error: str | None
    status: int | None
    latency_ms: float


def request_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The canary's request body: ``model`` is the served model name qdd renders (--served-model-name)."""
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, **SAMPLING}


def completions_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/v1/completions"


def _text_of(raw: bytes) -> str | None:
    try:
        doc = json.loads(raw)
        text = doc["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def complete(base_url: str, body: dict[str, Any], timeout_s: float) -> Answer:
    """POST ``body`` to ``base_url``/v1/completions; never raises. ``timeout_s`` bounds the whole
    request: the connect and every read (urllib's socket timeout) and the body's arrival."""
    req = urllib.request.Request(completions_url(base_url), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    # No proxy: the router Service is in the cluster; an HTTP(S)_PROXY of the operator's pod is for
    # the outside world and would answer for the router.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    start = time.perf_counter()
    try:
        with opener.open(req, timeout=timeout_s) as r:
            raw, status = _read(r, start + timeout_s), r.status
    except urllib.error.HTTPError as e:
        excerpt = e.read(BODY_EXCERPT).decode(errors="replace")
        return Answer(None, f"HTTP {e.code}: {excerpt}", e.code, _ms(start))
    except (TimeoutError, socket.timeout):
        return Answer(None, f"no answer within {timeout_s:g} s", None, _ms(start))
    except _TooLong as e:
        return Answer(None, str(e), None, _ms(start))
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        if isinstance(why, (TimeoutError, socket.timeout)):
            return Answer(None, f"no answer within {timeout_s:g} s", None, _ms(start))
        return Answer(None, f"cannot reach the router: {why}", None, _ms(start))
    text = _text_of(raw)
    if text is None:
        return Answer(None, f"HTTP {status} without choices[0].text: {raw[:BODY_EXCERPT].decode(errors='replace')}",
                      status, _ms(start))
    return Answer(text, None, status, _ms(start))


class _TooLong(Exception):
    pass


def _read(r: Any, deadline: float) -> bytes:
    """The body, until ``deadline`` (perf_counter) and MAX_BODY: the socket timeout alone bounds each
    read, not a router that trickles a byte at a time."""
    chunks: list[bytes] = []
    size = 0
    while chunk := r.read(65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            raise _TooLong(f"an answer longer than {MAX_BODY} bytes: not a completion")
        if time.perf_counter() > deadline:
            raise TimeoutError
    return b"".join(chunks)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)
