"""The fetch side: reads requests' worth of pages and the bulk buffer from a serve side, verifies every
byte of every repetition against the pattern, times each move (warm-up first, medians reported),
and measures a torch peer copy between two local GPUs as the ceiling where it can see two.

Moves, one row per measurement, each repeated over the requests in turn:
``bulk`` (the bulk buffer in ``bulk_chunks`` descriptors), ``per_page`` (one descriptor per page,
NIXL's merging off), ``coalesced`` (one descriptor per tensor per request), ``nixl_merge``
(per-page indices with NIXL's own merging on, to show what it does with contiguous ids).

Ops: ``READ`` — the decode side pulls, as vLLM's NixlConnector does (the default). ``PUSH`` — the
serve side WRITEs into this side on request (same direction, the prefill GPU's copy engine
pushes); timed on the serve side. ``WRITE`` — this side writes into the serve side: the reverse
direction, timing only (the bytes land on the other side), to compare push with pull.
"""

from __future__ import annotations

from functools import partial

import os
import socket
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .buffers import Memory, Region
from ..layout import TransferLayout
from .wire import (
    SERVE_AGENT,
    AgentOptions,
    Dlists,
    Inbox,
    Mover,
    Side,
    Stats,
    dlist_entries,
    encode,
    free_port,
    make_agent,
    page_indices,
    run_indices,
)

MOVES = ("bulk", "per_page", "coalesced", "nixl_merge")


@dataclass(frozen=True)
class Variant:
    name: str = "default"
    op: str = "READ"
    streams: int = 1
    bulk_chunks: int = 1
    agent: AgentOptions = field(default_factory=AgentOptions)
    moves: tuple[str, ...] = MOVES

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Variant:
        a = {k: d[k] for k in ("num_threads", "split_batch_size", "num_workers", "telemetry") if k in d}
        return cls(name=d.get("name", "default"), op=d.get("op", "READ").upper(), streams=int(d.get("streams", 1)),
                   bulk_chunks=int(d.get("bulk_chunks", 1)), agent=AgentOptions(**a),
                   moves=tuple(d.get("moves", MOVES)))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "streams": self.streams, "bulk_chunks": self.bulk_chunks,
                **asdict(self.agent), "moves": list(self.moves)}


def resolve(host: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def peer_copy(src: int, dst: int, nbytes: int, reps: int = 10, pull: bool = False) -> dict[str, Any] | None:
    """Median torch copy src→dst GPU (torch issues it on the source device: a push). ``pull`` adds a
    cudaMemcpyPeerAsync issued on a stream of the destination device (through cupy, if present)."""
    import torch

    if torch.cuda.device_count() < 2 or src == dst:
        return None
    a = torch.empty(nbytes, dtype=torch.int8, device=f"cuda:{src}")
    b = torch.empty(nbytes, dtype=torch.int8, device=f"cuda:{dst}")
    a.fill_(7)

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    out: dict[str, Any] = {"src": src, "dst": dst, "bytes": nbytes}
    t = timed(lambda: b.copy_(a))
    out["gbps"] = round(nbytes / t / 1e9, 2)
    out["reverse_gbps"] = round(nbytes / timed(lambda: a.copy_(b)) / 1e9, 2)
    if pull:
        try:
            import cupy

            with cupy.cuda.Device(dst):
                s = cupy.cuda.Stream(non_blocking=True)

                def pull_copy() -> None:
                    cupy.cuda.runtime.memcpyPeerAsync(b.data_ptr(), dst, a.data_ptr(), src, nbytes, s.ptr)
                    s.synchronize()

                out["pull_on_dst_gbps"] = round(nbytes / timed(pull_copy) / 1e9, 2)
        except Exception as e:  # cupy missing or peer copy refused: the push numbers stand
            out["pull_error"] = str(e)[:200]
    torch.cuda.synchronize(src)
    a = b = None  # the copies' buffers go back before the fetch side allocates its own
    torch.cuda.empty_cache()
    return out


class Fetcher:
    def __init__(self, layout: TransferLayout, device: str, gpu: int, requests: int, bulk_bytes: int, log: Any,
                 alloc: str = "cudamalloc") -> None:
        self.layout, self.requests, self.log = layout, requests, log
        self.serve_alloc: str | None = None
        self.mem = Memory(device, gpu, alloc)
        self.regions = [self.mem.alloc(t, layout.tensor_bytes(requests)) for t in range(layout.tensors)]
        self.bulk = self.mem.alloc(1000, bulk_bytes)
        for r in [*self.regions, self.bulk]:
            self.mem.make_golden(r)
        self.mem.sync()
        self.me = Side([(r.addr, r.nbytes) for r in self.regions], (self.bulk.addr, self.bulk.nbytes),
                       self.mem.device_index)
        self.verified_bytes = 0
        self.mismatched = 0
        self.first_mismatch: str | None = None

    # -- destination ranges of a move --------------------------------------------------------
    def ranges(self, move: str, request: int) -> list[tuple[Region, int, int]]:
        if move == "bulk":
            return [(self.bulk, 0, self.bulk.nbytes)]
        run = self.layout.pages_per_request * self.layout.page_bytes
        return [(r, request * run, run) for r in self.regions]

    def poison(self, ranges: list[tuple[Region, int, int]]) -> None:
        for reg, off, n in ranges:
            self.mem.poison(reg, off, n)
        self.mem.sync()

    def verify(self, ranges: list[tuple[Region, int, int]], what: str) -> None:
        for reg, off, n in ranges:
            bad = self.mem.mismatched_bytes(reg, off, n)
            self.verified_bytes += n
            if bad:
                self.mismatched += bad
                self.first_mismatch = self.first_mismatch or f"{what}: region {reg.region_id} bytes {off}..{off + n}"

    def indices(self, move: str, request: int, chunks: int) -> list[int]:
        if move == "bulk":
            return list(range(chunks))
        if move == "coalesced":
            return run_indices(self.layout, self.requests, request)
        return page_indices(self.layout, self.requests, request)

    # -- connection and moves ---------------------------------------------------------------
    def _connect(self, v: Variant, k: int, ip: str, port: int, connect_timeout: float) -> tuple[Any, Inbox, Side]:
        """A new agent for variant ``k``: metadata exchanged with the serve side, the layouts
        compared, the serve side's regions learnt."""
        name = f"qdd-preflight-fetch-{socket.gethostname()}-{os.getpid()}-{k}"
        agent = make_agent(name, free_port(), v.agent)
        agent.register_memory([self.mem.reg_desc(r) for r in [*self.regions, self.bulk]], self.mem.kind)
        _fetch_metadata(agent, ip, port, connect_timeout)
        agent.send_local_metadata(ip, port)
        inbox = Inbox(agent)
        agent.send_notif(SERVE_AGENT, encode("hello", agent=name, bulk_chunks=v.bulk_chunks,
                                             layout=self.layout.to_json(), **self.me.to_json()))
        _, msg = inbox.next("layout", connect_timeout)
        theirs = TransferLayout.from_json(msg["layout"])
        if theirs != self.layout or int(msg["requests"]) != self.requests:
            raise ValueError(f"layout mismatch: serve has {msg['layout']} × {msg['requests']} requests, "
                             f"fetch expects {self.layout.to_json()} × {self.requests}")
        # The serve side's listener answers before its memory is registered: metadata fetched in that
        # window lists no regions, and preparing a transfer fails (NIXL_ERR_NOT_FOUND; seen 2 runs in
        # 9 over host memory). It answers hello only once registered: fetch the metadata again now.
        agent.remove_remote_agent(SERVE_AGENT)
        _fetch_metadata(agent, ip, port, connect_timeout)
        remote = Side.from_json(msg)
        self.serve_alloc = msg.get("alloc")
        if remote.bulk[1] != self.bulk.nbytes:
            raise ValueError(f"bulk size mismatch: serve {remote.bulk[1]} B, fetch {self.bulk.nbytes} B")
        return agent, inbox, remote

    def _move(self, v: Variant, move: str, mover: Mover | None, push: Any, warmup: int, reps: int,
              budget_s: float) -> dict[str, Any]:
        """Time one kind of move (bulk, per_page, coalesced…) ``reps`` times after ``warmup``,
        verifying the bytes of every read; ``push(kind, idx, skip)`` asks the serve side to WRITE."""
        st = Stats(nbytes=self.bulk.nbytes if move == "bulk" else self.layout.bytes_per_request)
        kind = {"bulk": "bulk", "coalesced": "run"}.get(move, "page")
        # per_page: one descriptor per page, as posted. bulk: keep the chunks apart, or NIXL
        # merges the contiguous pieces back into one and nothing is split over threads.
        skip = move in ("per_page", "bulk")
        w = warmup if move == "bulk" else max(warmup, self.requests)
        check = v.op != "WRITE"
        t_start = time.monotonic()
        for rep in range(w + reps):
            ranges = self.ranges(move, rep % self.requests)
            if check:
                self.poison(ranges)
            idx = self.indices(move, rep % self.requests, v.bulk_chunks)
            if mover is not None:
                mv = mover.run(kind, idx, skip)
                sec, descs = mv.seconds, mv.descs
            else:
                sec, descs = push(kind, idx, skip)
            if check:
                self.verify(ranges, f"{v.name}/{move}/rep {rep}")
            st.descs = descs if descs is not None else st.descs
            if rep >= w:
                st.seconds.append(sec)
                if time.monotonic() - t_start > budget_s and len(st.seconds) >= 3:
                    break
        return {**st.summary(), "verified": check}

    # -- one variant --------------------------------------------------------------------------
    def variant(self, v: Variant, k: int, ip: str, port: int, final: bool, warmup: int, reps: int,
                budget_s: float, connect_timeout: float) -> dict[str, Any]:
        """Connect a fresh agent and time every move of variant ``v``; says bye (``final``: the
        serve side may exit) whatever happens."""
        t_setup = time.perf_counter()
        agent, inbox, remote = self._connect(v, k, ip, port, connect_timeout)
        out: dict[str, Any] = {**v.to_json(), "setup_s": round(time.perf_counter() - t_setup, 3)}
        seq = [0]

        def push(kind: str, idx: Any, skip: bool) -> tuple[float, Any]:
            seq[0] += 1
            agent.send_notif(SERVE_AGENT, encode("push", id=seq[0], dlist=kind, indices=idx, skip_merge=skip))
            _, rep_msg = inbox.next("pushed", connect_timeout, match=partial(_has_id, seq[0]))
            if rep_msg.get("error"):
                raise RuntimeError(f"serve-side push failed: {rep_msg['error']}")
            return float(rep_msg["seconds"]), rep_msg.get("descs")

        try:
            mover = None
            if v.op in ("READ", "WRITE"):
                local_e = dlist_entries(self.me, self.layout, self.requests, v.bulk_chunks)
                remote_e = dlist_entries(remote, self.layout, self.requests, v.bulk_chunks)
                agent.make_connection(SERVE_AGENT)
                mover = Mover(agent, v.op, Dlists(agent, SERVE_AGENT, self.mem.kind, local_e, remote_e), v.streams)
            for move in v.moves:
                out[move] = self._move(v, move, mover, push, warmup, reps, budget_s)
            if mover is not None:
                mover.close()
        finally:
            agent.send_notif(SERVE_AGENT, encode("bye", final=final))
            time.sleep(0.05)
        return out


def _has_id(wanted: int, msg: dict[str, Any]) -> bool:
    return msg.get("id") == wanted


def _fetch_metadata(agent: Any, ip: str, port: int, timeout: float) -> None:
    """Ask the serve side's listener for its metadata until it has arrived (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not agent.check_remote_metadata(SERVE_AGENT):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no NIXL metadata from {ip}:{port} within {timeout:.0f} s")
        agent.fetch_remote_metadata(SERVE_AGENT, ip, port)
        t_try = time.monotonic() + 2
        while time.monotonic() < t_try and not agent.check_remote_metadata(SERVE_AGENT):
            time.sleep(0.01)
