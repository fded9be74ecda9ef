"""Which UCX transports a transfer actually used, read from UCX's own log.

UCX prints what it selected, so the preflight asks it to and reads the answer instead of guessing
(openucx/ucx src/ucp/core/ucp_worker.c ``ucp_worker_print_used_tls``, src/ucp/proto/proto_debug.c
``ucp_proto_select_elem_trace``):
- ``UCX_LOG_LEVEL=info`` logs, per endpoint configuration, the lanes of each feature, e.g.
  ``ucp_context_0 intra-node cfg#2 rma(cuda_ipc/cuda tcp/lo) am(tcp/lo) ka(tcp/lo)``
  (``rma_am(...)`` when RMA is emulated over active messages);
- ``UCX_PROTO_INFO=y`` logs, the first time an operation of a kind is posted, the protocol chosen
  for each message-size range as a table whose title names the operation and memory types
  (``remote memory read by ucp_get*(multi) into cuda/GPU1 from cuda/dev[2]``) and whose last
  column names the transport (``cuda_ipc/cuda``, ``tcp/lo``, ``rc_mlx5/mlx5_0:1``). Seen on two
  H200s with nixl-cu13 1.5.1 (UCX 1.23): ``zero-copy | cuda_ipc/cuda`` over NVLink, and
  ``software emulation | tcp/lo`` with ``UCX_TLS=tcp,cuda_copy``.
The data transports are those of the protocol tables for RMA from and to the moved memory type;
where no such table was printed, the endpoints' ``rma(...)`` lanes. Pure parsing here; :class:`OutputCapture` is the
small bit of I/O that collects what UCX prints (it writes to the process's stdout/stderr).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field

KNOWN_TRANSPORTS = frozenset({
    "cuda_ipc", "cuda_copy", "gdr_copy", "rocm_ipc", "rocm_copy", "tcp", "sysv", "posix", "cma", "knem",
    "xpmem", "self", "rc_mlx5", "rc_verbs", "dc_mlx5", "ud_mlx5", "ud_verbs", "rc_gda", "srd", "efa", "ib",
})
GPU_PATH_TRANSPORTS = frozenset({"cuda_ipc", "gdr_copy", "rc_mlx5", "rc_verbs", "dc_mlx5", "rc_gda", "srd", "efa",
                                 "ib"})
"""Transports that move GPU memory without staging it through host sockets: NVLink/MNNVL
(cuda_ipc) or RDMA. ``cuda_copy`` only stages between GPU and host, so it proves nothing alone."""

ENV_DEFAULTS = {
    "UCX_LOG_LEVEL": "info",
    "UCX_PROTO_INFO": "y",
    # vLLM's NixlConnector sets this before importing nixl (vllm/distributed/kv_transfer/...).
    "UCX_RCACHE_MAX_UNRELEASED": "1024",
}

_TOKEN = re.compile(r"\b([a-z][a-z0-9_]*)/[\w.:\-]+")
_LANES = re.compile(r"\b(rma|rma_am)\(([^)]*)\)")
_RMA_TITLE = re.compile(r"remote memory (read|write)", re.IGNORECASE)
_MEM = re.compile(r"\b(host|cuda|rocm|ze)\b")


def transports_in(text: str) -> list[str]:
    return sorted({m.group(1) for m in _TOKEN.finditer(text) if m.group(1) in KNOWN_TRANSPORTS})


@dataclass
class UsedTransports:
    """``data``: transports of the RMA protocols on GPU memory (or of the rma lanes, see ``source``).
    ``lanes``: every transport named in an endpoint's rma lanes. ``evidence``: the lines read."""

    data: list[str] = field(default_factory=list)
    lanes: list[str] = field(default_factory=list)
    source: str = "none"
    evidence: list[str] = field(default_factory=list)


def _tables(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(title, body rows) of each ``+---+``-bordered table in the log."""
    out: list[tuple[str, list[str]]] = []
    title: list[str] = []
    body: list[str] = []
    state = "out"  # out → title → header → body
    for raw in lines:
        line = raw.strip()
        cell = line[line.find("|"):] if "|" in line else ""
        border = bool(re.search(r"\+-{3,}", line))
        if border:
            if state == "out":
                state, title, body = "title", [], []
            elif state == "title":
                state = "header"
            elif state == "header":
                state = "body"
            elif state == "body":
                out.append((" ".join(title), body))
                state = "out"
            continue
        if not cell:
            if state == "body":
                out.append((" ".join(title), body))
            state = "out" if state != "out" else state
            continue
        if state == "title":
            title.append(cell.strip("| ").strip())
        elif state == "body":
            body.append(cell)
    if state == "body" and body:
        out.append((" ".join(title), body))
    return out


def _strip(line: str) -> str:
    """A log line without its timestamp/host/pid prefix and agent name, for de-duplication."""
    line = re.sub(r"^\[[^]]*\]\s*\[[^]]*\]\s*", "", line.strip())
    return re.sub(r"qdd-preflight-\S+\s*", "", line)[-300:]


def parse(text: str, memory: str = "cuda") -> UsedTransports:
    """``memory``: the memory type of the moved buffers as UCX names it in table titles
    (``cuda`` for GPU memory, ``host`` for the ``--device cpu`` runs)."""
    lines = text.splitlines()
    used = UsedTransports()
    lanes: set[str] = set()
    lane_lines: list[str] = []
    for line in lines:
        for m in _LANES.finditer(line):
            lanes.update(transports_in(m.group(2)))
            s = _strip(line)
            if s not in lane_lines:
                lane_lines.append(s)
    used.lanes = sorted(lanes)
    data: set[str] = set()
    proto_lines: list[str] = []
    for title, rows in _tables(lines):
        # The data path: RMA between two buffers of the moved memory type ("into cuda/GPU1 from
        # cuda/dev[2]"); "from host memory to cuda" tables are UCX's own small control writes.
        mems = _MEM.findall(title.split("ucp_", 1)[-1])
        if _RMA_TITLE.search(title) and len(mems) >= 2 and all(m == memory for m in mems):
            found: set[str] = set()
            for row in rows:
                found.update(transports_in(row.rsplit("|", 2)[-2] if row.count("|") >= 2 else row))
            if found:
                data.update(found)
                s = _strip(f"{title} -> {', '.join(sorted(found))}")
                if s not in proto_lines:
                    proto_lines.append(s)
    used.evidence = proto_lines[:6] + lane_lines[:3]
    if data:
        used.data, used.source = sorted(data), "proto_info"
    elif lanes:
        used.data, used.source = sorted(lanes), "ep_lanes"
    return used


class OutputCapture:
    """Sends this process's fd 1 and 2 (where UCX and NIXL write) into a file until :meth:`stop`;
    :attr:`stdout` stays writable for the one JSON result."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or tempfile.mkstemp(prefix="qdd-preflight-ucx-", suffix=".log")[1]
        self._saved = (os.dup(1), os.dup(2))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self.stdout = os.fdopen(os.dup(self._saved[0]), "w")
        self.stderr = os.fdopen(os.dup(self._saved[1]), "w")

    def text(self) -> str:
        with open(self.path, errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
