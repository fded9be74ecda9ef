"""The canary's HTTP client: one OpenAI ``/v1/completions`` request to a router Service.

The request is deterministic by construction: temperature 0 (greedy), seed 0, one choice, no
streaming, and nothing else the engine would sample with. vLLM's OpenAI server takes these fields
(vllm/entrypoints/openai/completion/protocol.py, CompletionRequest) and vllm-router forwards the
body unchanged to the prefill (with ``max_tokens`` 1) and then to the decode engine.

The router's image is the resource author's, and the operator sends the request itself, so the
client is built against a hostile server (issue 21; docs/security.md):

- it contacts the URL it is given and nothing else: redirects are never followed (aiohttp's
  ``allow_redirects=False``; a 3xx is a failed check that names the status, its body unread), no
  proxy of the operator's environment is used (``trust_env=False``), only ``http://``;
- one deadline bounds the whole exchange, connect to last byte (``asyncio.timeout``): a router that
  trickles its headers or body a byte at a time is cut at ``timeout_s``, which a per-read socket
  timeout alone would not do; aiohttp's own limits bound a header line and field (8 KiB);
- at most :data:`MAX_BODY` bytes are read and the JSON is read by qdd's bounded reader
  (:func:`qdd.yamlinput.load_json`: depth and size limits, no NaN), so no answer raises.

aiohttp is kopf's own HTTP library (always installed with the operator). :func:`complete_async`
runs in the canary's event loop (qdd.controller.canary), where a slow router costs a coroutine,
not a thread; :func:`complete` runs it to the end from synchronous code.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from ..yamlinput import InputError, load_json

SAMPLING: dict[str, Any] = {"temperature": 0, "seed": 0, "n": 1, "stream": False}
"""Fixed by qdd, never by the spec: what makes two requests comparable."""
BODY_EXCERPT = 300
"""Characters of an error body kept in a message (a router's error page can be kilobytes)."""
MAX_BODY = 1 << 20
"""Bytes of an answer read at most: 256 tokens of text are a few KiB; a router that sends more is
not answering a completion (and the operator's memory is not its to fill)."""
MAX_DEPTH = 32
"""Nesting of an answer's JSON: a completion is 4 deep (choices[0].text, logprobs 6)."""


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
        doc = load_json(raw.decode("utf-8"), max_bytes=MAX_BODY, max_depth=MAX_DEPTH)
        text = doc["choices"][0]["text"]
    except (InputError, UnicodeDecodeError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


class _TooLong(Exception):
    pass


async def _read(resp: aiohttp.ClientResponse) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            raise _TooLong(f"an answer longer than {MAX_BODY} bytes: not a completion")
    return b"".join(chunks)


async def complete_async(base_url: str, body: dict[str, Any], timeout_s: float) -> Answer:
    """POST ``body`` to ``base_url``/v1/completions; never raises (but for cancellation).
    ``timeout_s`` bounds the whole exchange."""
    start = time.perf_counter()
    url = completions_url(base_url)
    if urlsplit(url).scheme != "http":
        return Answer(None, f"not an http:// URL: {url}", None, 0.0)
    try:
        async with asyncio.timeout(timeout_s), aiohttp.ClientSession(
                trust_env=False, timeout=aiohttp.ClientTimeout(total=None),
                connector=aiohttp.TCPConnector(force_close=True, limit=1)) as session, session.post(
                url, json=body, allow_redirects=False, max_redirects=0) as resp:
            status = resp.status
            if 300 <= status < 400:
                return Answer(None, f"HTTP {status}: the router answered with a redirect, which the canary does not "
                                    "follow (it sends to the router Service only)", status, _ms(start))
            raw = await _read(resp)
    except TimeoutError:
        return Answer(None, f"no answer within {timeout_s:g} s", None, _ms(start))
    except _TooLong as e:
        return Answer(None, str(e), None, _ms(start))
    except (aiohttp.ClientError, OSError, ValueError) as e:
        return Answer(None, f"cannot reach the router: {type(e).__name__}: {str(e)[:BODY_EXCERPT]}", None, _ms(start))
    if status >= 400:
        return Answer(None, f"HTTP {status}: {raw[:BODY_EXCERPT].decode(errors='replace')}", status, _ms(start))
    text = _text_of(raw)
    if text is None:
        return Answer(None, f"HTTP {status} without choices[0].text: {raw[:BODY_EXCERPT].decode(errors='replace')}",
                      status, _ms(start))
    return Answer(text, None, status, _ms(start))


async def get_json_async(base_url: str, path: str, timeout_s: float) -> tuple[Any, str | None]:
    """GET ``base_url`` + ``path`` (the router's list of registered workers, qdd.canary.registration)
    under the same rules as :func:`complete_async`: one deadline, no redirect, no proxy, at most
    :data:`MAX_BODY` bytes, the bounded JSON reader. Returns (the parsed JSON, None) or (None, why
    not); never raises (but for cancellation)."""
    url = base_url.rstrip("/") + path
    if urlsplit(url).scheme != "http":
        return None, f"not an http:// URL: {url}"
    try:
        async with asyncio.timeout(timeout_s), aiohttp.ClientSession(
                trust_env=False, timeout=aiohttp.ClientTimeout(total=None),
                connector=aiohttp.TCPConnector(force_close=True, limit=1)) as session, session.get(
                url, allow_redirects=False, max_redirects=0) as resp:
            status = resp.status
            raw = b"" if 300 <= status < 400 else await _read(resp)
    except TimeoutError:
        return None, f"GET {path}: no answer within {timeout_s:g} s"
    except _TooLong as e:
        return None, f"GET {path}: {e}"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        return None, f"GET {path}: cannot reach the router: {type(e).__name__}: {str(e)[:BODY_EXCERPT]}"
    if status != 200:
        return None, f"GET {path}: HTTP {status}: {raw[:BODY_EXCERPT].decode(errors='replace')}"
    try:
        return load_json(raw.decode("utf-8"), max_bytes=MAX_BODY, max_depth=MAX_DEPTH), None
    except (InputError, UnicodeDecodeError) as e:
        return None, f"GET {path}: HTTP 200 without JSON: {str(e)[:BODY_EXCERPT]}"


def complete(base_url: str, body: dict[str, Any], timeout_s: float) -> Answer:
    """:func:`complete_async` from synchronous code (a loop of its own)."""
    return asyncio.run(complete_async(base_url, body, timeout_s))


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)
