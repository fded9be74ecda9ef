"""What serve and fetch share: NIXL agents, the notification protocol, descriptor lists, timed moves.

Protocol (NIXL notifications, JSON after the prefix ``qdd1 ``), after the fetch side has loaded the
serve side's metadata from its listener (``fetch_remote_metadata``) and sent its own
(``send_local_metadata``):

    fetch → serve  hello  {agent, regions: [[addr, nbytes]…], bulk: [addr, nbytes], device, bulk_chunks}
    serve → fetch  layout {layout, requests, regions, bulk, device, mem}
    fetch → serve  push   {id, dlist, indices}      (serve WRITEs those descriptors into fetch: "push" mode)
    serve → fetch  pushed {id, seconds, descs, error}
    fetch → serve  bye

Descriptor lists, prepped once per peer (as vLLM's NixlConnector does), indexed per request:
``page``: one entry per (tensor, block id), index ``t × num_blocks + b``; ``run``: one entry per
(tensor, request) spanning the request's contiguous block ids, index ``t × requests + r``;
``bulk``: the bulk buffer in ``bulk_chunks`` equal pieces.
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..layout import TransferLayout, request_block_ids

PREFIX = b"qdd1 "
SERVE_AGENT = "qdd-preflight-serve"


def encode(kind: str, **body: Any) -> bytes:
    return PREFIX + json.dumps({"t": kind, **body}, separators=(",", ":")).encode()


def decode(msg: bytes) -> dict[str, Any] | None:
    return json.loads(msg[len(PREFIX):]) if msg.startswith(PREFIX) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class AgentOptions:
    """UCX backend parameters of one NIXL agent (nixl src/plugins/ucx/ucx_backend.cpp):
    ``num_threads`` dedicated worker threads; a transfer of at least ``split_batch_size`` descriptors
    is split over them. ``num_workers`` shared UCX workers; a Python thread binds to one."""

    num_threads: int = 0
    split_batch_size: int = 0
    num_workers: int = 0
    telemetry: bool = True

    def backend_params(self) -> dict[str, str]:
        p = {}
        if self.num_threads:
            p["num_threads"] = str(self.num_threads)
        if self.split_batch_size:
            p["split_batch_size"] = str(self.split_batch_size)
        if self.num_workers:
            p["num_workers"] = str(self.num_workers)
        return p


def make_agent(name: str, listen_port: int, opts: AgentOptions) -> Any:
    from nixl._api import nixl_agent, nixl_agent_config

    cfg = nixl_agent_config(enable_prog_thread=True, enable_listen_thread=True, listen_port=listen_port,
                            backends=[], capture_telemetry=opts.telemetry)
    agent = nixl_agent(name, cfg)
    agent.create_backend("UCX", opts.backend_params())
    return agent


class Inbox:
    """Notifications of one agent, in arrival order; a caller takes the next of a kind and the rest wait."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.pending: list[tuple[str, dict[str, Any]]] = []

    def next(self, kind: str | None, timeout: float,
             match: Callable[[dict[str, Any]], bool] | None = None) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            for i, (peer, msg) in enumerate(self.pending):
                if (kind is None or msg.get("t") == kind) and (match is None or match(msg)):
                    del self.pending[i]
                    return peer, msg
            for peer, msgs in self.agent.get_new_notifs().items():
                for raw in msgs:
                    decoded = decode(raw)
                    if decoded is not None:
                        self.pending.append((peer, decoded))
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no {kind or 'any'!r} notification within {timeout:.0f} s")
            time.sleep(0.0002)


@dataclass
class Side:
    """Addresses of one side's regions: ``regions`` (one per cache tensor) and the bulk buffer."""

    regions: list[tuple[int, int]]
    bulk: tuple[int, int]
    device: int

    def to_json(self) -> dict[str, Any]:
        return {"regions": self.regions, "bulk": list(self.bulk), "device": self.device}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Side:
        return cls([(int(a), int(n)) for a, n in d["regions"]], (int(d["bulk"][0]), int(d["bulk"][1])), int(d["device"]))


def dlist_entries(side: Side, layout: TransferLayout, requests: int,
                  bulk_chunks: int) -> dict[str, list[tuple[int, int, int]]]:
    nb, page = layout.num_blocks(requests), layout.page_bytes
    run = layout.pages_per_request * page
    chunk = side.bulk[1] // bulk_chunks
    return {
        "page": [(addr + b * page, page, side.device) for addr, _ in side.regions for b in range(nb)],
        "run": [(addr + r * run, run, side.device) for addr, _ in side.regions for r in range(requests)],
        "bulk": [(side.bulk[0] + i * chunk, chunk, side.device) for i in range(bulk_chunks)],
    }


def page_indices(layout: TransferLayout, requests: int, request: int) -> list[int]:
    nb = layout.num_blocks(requests)
    return [t * nb + b for t in range(layout.tensors) for b in request_block_ids(layout, request)]


def run_indices(layout: TransferLayout, requests: int, request: int) -> list[int]:
    return [t * requests + request for t in range(layout.tensors)]


class Dlists:
    """Prepped local and remote descriptor lists for one peer."""

    def __init__(self, agent: Any, peer: str, mem: str, local: dict[str, list[tuple[int, int, int]]],
                 remote: dict[str, list[tuple[int, int, int]]]) -> None:
        self.local = {k: agent.prep_xfer_dlist("NIXL_INIT_AGENT", v, mem) for k, v in local.items()}
        self.remote = {k: agent.prep_xfer_dlist(peer, v, mem) for k, v in remote.items()}
        self.sizes = {k: [e[1] for e in v] for k, v in local.items()}


@dataclass
class Move:
    seconds: float
    descs: int | None  # descriptors NIXL posted (telemetry), None when not reported


def _split(seq: Sequence[int], parts: int) -> list[list[int]]:
    parts = max(1, min(parts, len(seq)))
    k, m = divmod(len(seq), parts)
    out, i = [], 0
    for p in range(parts):
        n = k + (1 if p < m else 0)
        out.append(list(seq[i:i + n]))
        i += n
    return out


class Mover:
    """Posts one transfer (make_prepped_xfer + transfer + poll to DONE), timed, optionally over
    ``streams`` Python threads that each post a share of the descriptors (each thread binds to its
    own shared UCX worker when the agent has several)."""

    def __init__(self, agent: Any, op: str, dl: Dlists, streams: int = 1) -> None:
        self.agent, self.op, self.dl, self.streams = agent, op, dl, streams
        self._pool: list[_Worker] = [_Worker(self) for _ in range(streams)] if streams > 1 else []

    def _one(self, kind: str, idx: list[int], skip_merge: bool) -> tuple[Any, int | None]:
        a = self.agent
        h = a.make_prepped_xfer(self.op, self.dl.local[kind], idx, self.dl.remote[kind], idx,
                                skip_desc_merge=skip_merge)
        st = a.transfer(h)
        while st == "PROC":
            st = a.check_xfer_state(h)
        if st != "DONE":
            h.release()
            raise RuntimeError(f"NIXL {self.op} of {len(idx)} {kind} descriptors ended in state {st}")
        descs = None
        with contextlib.suppress(Exception):  # telemetry off or not in this NIXL build
            descs = int(a.get_xfer_telemetry(h).descCount)
        h.release()
        return h, descs

    def run(self, kind: str, idx: list[int], skip_merge: bool = False) -> Move:
        if not self._pool:
            t0 = time.perf_counter()
            _, descs = self._one(kind, idx, skip_merge)
            return Move(time.perf_counter() - t0, descs)
        shares = _split(idx, len(self._pool))
        t0 = time.perf_counter()
        for w, share in zip(self._pool, shares, strict=False):  # fewer shares than threads: the rest idle
            w.submit(kind, share, skip_merge)
        results = [w.wait() for w in self._pool[:len(shares)]]
        dt = time.perf_counter() - t0
        counts = [d for d in results if d is not None]
        return Move(dt, sum(counts) if len(counts) == len(results) else None)

    def close(self) -> None:
        for w in self._pool:
            w.stop()


class _Worker:
    """A persistent thread (so its UCX worker binding stays put) that runs one share at a time."""

    def __init__(self, mover: Mover) -> None:
        self.mover = mover
        self.go, self.done = threading.Event(), threading.Event()
        self.job: tuple[str, list[int], bool] | None = None
        self.result: int | None = None
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def submit(self, kind: str, idx: list[int], skip_merge: bool) -> None:
        self.job, self.error = (kind, idx, skip_merge), None
        self.done.clear()
        self.go.set()

    def wait(self) -> int | None:
        self.done.wait()
        if self.error:
            raise self.error
        return self.result

    def stop(self) -> None:
        self.job = None
        self.go.set()

    def _loop(self) -> None:
        while True:
            self.go.wait()
            self.go.clear()
            if self.job is None:
                return
            try:
                _, self.result = self.mover._one(*self.job)
            except BaseException as e:  # reported to the caller
                self.error = e
            self.done.set()


@dataclass
class Stats:
    seconds: list[float] = field(default_factory=list)
    descs: int | None = None
    nbytes: int = 0

    def summary(self) -> dict[str, Any]:
        if not self.seconds:
            return {"reps": 0}
        med = statistics.median(self.seconds)
        s = sorted(self.seconds)
        return {"reps": len(s), "median_ms": round(med * 1e3, 4), "min_ms": round(s[0] * 1e3, 4),
                "max_ms": round(s[-1] * 1e3, 4), "gbps": round(self.nbytes / med / 1e9, 2) if med else None,
                "posted_descriptors": self.descs, "bytes": self.nbytes}
