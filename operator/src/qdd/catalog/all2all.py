"""What each ``--all2all-backend`` of vLLM 0.33 does, and where it works (docs/all2all.md).

The expert-parallel all-to-all of one endpoint runs inside its DP/EP group. When that group spans
nodes — a DEP8 on two 4-GPU GB200 trays — the backend must work between them: over multi-node
NVLink (the trays of one NVL72 rack, ``GPUKind.multi_node_nvlink``) or over the network (other GPU
kinds). A backend that does not fails at start, hangs, or is silently replaced.

Sources, vLLM 0.33.0: ``vllm/config/parallel.py`` (``All2AllBackend``; ``pplx`` and ``naive`` are
"removed" and replaced by ``allgather_reducescatter`` with a warning; ``flashinfer_all2allv`` is a
temporary alias; ``passthrough`` is "not selectable from the CLI"), and
``vllm/distributed/device_communicators/all2all.py`` (FlashInfer's NVLink managers build MNNVL
workspaces; MoonEP is for "single node NVSwitch"; MoRI is AMD's). Field report: ``deepep_low_latency``
failed across GB200 trays (vllm#37931).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["supported", "experimental", "refused"]


@dataclass(frozen=True)
class All2AllBackend:
    """One backend. ``status``: supported (qdd plans with it), experimental (only with
    ``tuning.allowExperimentalAll2all``), refused (never). ``across_nodes``: works when the EP group
    spans nodes joined by the network; ``across_mnnvl``: works when it spans the trays of one
    multi-node NVLink domain (GB200 NVL72). ``why`` is said when the backend is refused; ``instead``
    names the backend to use."""

    name: str
    status: Status
    across_nodes: bool
    across_mnnvl: bool
    why: str
    instead: str = "allgather_reducescatter"


DEFAULT = "allgather_reducescatter"
"""vLLM 0.33's default (ParallelConfig.all2all_backend)."""

_BACKENDS = (
    All2AllBackend("allgather_reducescatter", "supported", True, True,
                   "NCCL allgather/reduce-scatter; vLLM's default, runs over NVLink, MNNVL and the network"),
    All2AllBackend("flashinfer_nvlink_two_sided", "supported", False, True,
                   "FlashInfer kernels on NVLink memory (MNNVL workspaces): one NVLink domain only",
                   instead="allgather_reducescatter"),
    All2AllBackend("flashinfer_nvlink_one_sided", "supported", False, True,
                   "FlashInfer one-sided kernels on NVLink memory (MNNVL handles): one NVLink domain only"),
    All2AllBackend("moonep", "supported", False, False,
                   "MoonEP is for one node's NVSwitch (vLLM 0.33: 'single node NVSwitch'): an endpoint that spans "
                   "nodes or trays cannot use it"),
    All2AllBackend("deepep_high_throughput", "experimental", True, True,
                   "DeepEP needs NVSHMEM over RDMA between nodes; qdd has no evidence for it on GB200 trays"),
    All2AllBackend("deepep_low_latency", "experimental", True, False,
                   "DeepEP low-latency failed across GB200 trays (vllm#37931)"),
    All2AllBackend("deepep_v2", "experimental", True, True,
                   "DeepEP v2 is new in vLLM 0.33; qdd has no evidence for it on GB200"),
    All2AllBackend("nixl_ep", "experimental", True, True,
                   "NIXL EP kernels are new in vLLM 0.33; qdd has no evidence for them on GB200"),
    All2AllBackend("mori_high_throughput", "refused", False, False,
                   "MoRI is AMD's (ROCm) EP library; qdd's GPU kinds are NVIDIA"),
    All2AllBackend("mori_low_latency", "refused", False, False,
                   "MoRI is AMD's (ROCm) EP library; qdd's GPU kinds are NVIDIA"),
    All2AllBackend("pplx", "refused", False, False,
                   "removed in vLLM 0.33: the engine replaces it with allgather_reducescatter and only logs a warning"),
    All2AllBackend("naive", "refused", False, False,
                   "removed in vLLM 0.33: the engine replaces it with allgather_reducescatter and only logs a warning"),
    All2AllBackend("flashinfer_all2allv", "refused", False, True,
                   "a temporary alias in vLLM 0.33 of flashinfer_nvlink_two_sided (one NVLink domain only): write that "
                   "name where the endpoint stays in one NVLink domain"),
    All2AllBackend("passthrough", "refused", False, False,
                   "not selectable from the CLI: vLLM binds it by itself for MoE backends that dispatch on their own"),
)

ALL2ALL_BACKENDS: dict[str, All2AllBackend] = {b.name: b for b in _BACKENDS}
"""Every backend of vLLM 0.33.0's ``All2AllBackend`` (tests/unit/test_all2all.py keeps this equal to
the parser's choices)."""
