"""The serve side: registers a rank's hybrid cache (laid out as vLLM lays it out) plus a bulk buffer,
fills them with the pattern, and answers fetch sides on NIXL's own metadata listener at the
side-channel port until they say bye (or the deadline passes)."""

from __future__ import annotations

import time
from typing import Any

from .buffers import Memory
from ..layout import TransferLayout
from .wire import SERVE_AGENT, AgentOptions, Dlists, Inbox, Mover, Side, dlist_entries, encode, make_agent


def serve(layout: TransferLayout, *, device: str, gpu: int, alloc: str, port: int, requests: int, bulk_bytes: int,
          opts: AgentOptions, timeout: float, exit_after: int, log: Any) -> dict[str, Any]:
    mem = Memory(device, gpu, alloc)
    regions = [mem.alloc(t, layout.tensor_bytes(requests)) for t in range(layout.tensors)]
    bulk = mem.alloc(1000, bulk_bytes)
    for r in [*regions, bulk]:
        mem.fill(r)
    mem.sync()
    agent = make_agent(SERVE_AGENT, port, opts)
    agent.register_memory([mem.reg_desc(r) for r in [*regions, bulk]], mem.kind)
    me = Side([(r.addr, r.nbytes) for r in regions], (bulk.addr, bulk.nbytes), mem.device_index)
    log(f"serve: {layout.tensors} regions × {layout.tensor_bytes(requests)} B + bulk {bulk_bytes} B on "
        f"{mem.kind} {mem.device_index}, listening on :{port}")

    peers: dict[str, tuple[Dlists, Mover]] = {}
    stats: dict[str, Any] = {"role": "serve", "alloc": mem.allocation, "hellos": 0, "pushes": 0, "byes": 0, "errors": []}
    inbox = Inbox(agent)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and stats["byes"] < exit_after:
        try:
            peer, msg = inbox.next(None, min(5.0, max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            continue
        kind = msg.get("t")
        try:
            if kind == "hello":
                stats["hellos"] += 1
                t_end = time.monotonic() + 60
                while not agent.check_remote_metadata(peer):
                    if time.monotonic() > t_end:
                        raise TimeoutError(f"metadata of {peer} did not arrive")
                    time.sleep(0.01)
                agent.send_notif(peer, encode("layout", layout=layout.to_json(), requests=requests,
                                              mem=mem.kind, alloc=mem.allocation, **me.to_json()))
                them = Side.from_json(msg)
                chunks = int(msg.get("bulk_chunks", 1))
                dl = Dlists(agent, peer, mem.kind, dlist_entries(me, layout, requests, chunks),
                            dlist_entries(them, layout, requests, chunks))
                peers[peer] = (dl, Mover(agent, "WRITE", dl))
            elif kind == "push":
                stats["pushes"] += 1
                dl, mover = peers[peer]
                try:
                    mv = mover.run(msg["dlist"], msg["indices"], skip_merge=bool(msg.get("skip_merge")))
                    agent.send_notif(peer, encode("pushed", id=msg["id"], seconds=mv.seconds, descs=mv.descs))
                except Exception as e:
                    agent.send_notif(peer, encode("pushed", id=msg["id"], error=str(e)))
            elif kind == "bye":
                stats["byes"] += 1 if msg.get("final", True) else 0
                if peer in peers:
                    peers.pop(peer)[1].close()
        except Exception as e:  # one bad peer must not take the server down
            stats["errors"].append(f"{kind} from {peer}: {e}")
            log(f"serve: {kind} from {peer} failed: {e}")
    return stats
