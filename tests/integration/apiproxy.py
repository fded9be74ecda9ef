"""A reverse proxy between the operator and kube-apiserver that can make watches go silent.

The operator talks plain HTTP to 127.0.0.1:<port> (a kubeconfig without credentials,
:meth:`ApiProxy.kubeconfig`); the proxy forwards every request to the test cluster's API server
over TLS with the cluster's admin client certificate and streams the answer back chunk by chunk.
:meth:`ApiProxy.silence` is the fault: from then on every watch stream open at that moment
forwards nothing more — its connection stays open, the events the API server sends on it are
dropped — as when a NAT or load balancer forgets a long-lived flow. Watches opened later are
forwarded as usual. A TCP proxy cannot tell a watch from other requests inside TLS; this one
terminates it, so it can (``watch=true`` in the query).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from .operator_proc import free_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
              "content-length", "proxy-authorization", "proxy-connection"}


@dataclass
class Stream:
    """One watch request seen by the proxy."""

    path: str
    query: str
    opened: float
    silenced: bool = False
    dropped_chunks: int = 0


@dataclass
class ApiProxy:
    upstream_kubeconfig: Path
    port: int = field(default_factory=free_port)
    streams: list[Stream] = field(default_factory=list)

    def __post_init__(self) -> None:
        cfg = yaml.safe_load(self.upstream_kubeconfig.read_text())
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        self.upstream = cluster["server"]
        self._ssl = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self._ssl.load_cert_chain(user["client-certificate"], user["client-key"])
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="api-proxy", daemon=True)

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig pointing at the proxy (plain HTTP, no credentials: the proxy adds them)."""
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "proxy",
               "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
               "users": [{"name": "proxy", "user": {}}],
               "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}]}
        path.write_text(yaml.safe_dump(cfg))
        return path

    def silence(self) -> list[Stream]:
        """The fault: every watch stream open now forwards nothing more. Returns them."""
        open_now = [s for s in self.streams if not s.silenced]
        for s in open_now:
            s.silenced = True
        return open_now

    def watches_since(self, t: float, path_part: str) -> list[Stream]:
        return [s for s in self.streams if s.opened >= t and path_part in s.path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            return await self._forward(request)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
            return web.Response(status=499)  # the client went away (e.g. kopf dropped a silent stream)
        finally:
            self._tasks.discard(task)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        watch = request.query.get("watch") in ("true", "1")
        stream = Stream(request.path, request.query_string, time.monotonic()) if watch else None
        if stream:
            self.streams.append(stream)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.request(request.method, self.upstream + request.rel_url.raw_path_qs,
                                         headers=headers, data=body or None, ssl=self._ssl,
                                         timeout=timeout) as up:
            resp = web.StreamResponse(status=up.status, headers={
                k: v for k, v in up.headers.items() if k.lower() not in HOP_BY_HOP})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                if stream is not None and stream.silenced:
                    stream.dropped_chunks += 1  # the connection stays open; nothing reaches the client
                    continue
                await resp.write(chunk)
            if stream is not None and stream.silenced:
                await self._closed.wait()  # the server ended the stream: the client is not told either
            await resp.write_eof()
            return resp

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._session = aiohttp.ClientSession()
            self._closed = asyncio.Event()
            self._tasks: set[asyncio.Task] = set()
            app = web.Application(client_max_size=64 << 20)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, handle_signals=False)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self._ready.set()

        self._loop.run_until_complete(main())
        self._loop.run_forever()

    def __enter__(self) -> ApiProxy:
        self._thread.start()
        assert self._ready.wait(10), "the API proxy did not start"
        return self

    def __exit__(self, *_: object) -> None:
        async def close() -> None:
            self._closed.set()
            for t in list(self._tasks):
                t.cancel()
            await self._runner.cleanup()
            await self._session.close()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
