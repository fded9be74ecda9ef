"""GPU kinds qdd can place engines on.

Memory is what ``nvidia-smi`` reports (MiB), the value GPU Feature Discovery publishes as the
``nvidia.com/gpu.memory`` node label; vLLM budgets against the same total
(``torch.cuda.mem_get_info``). GB200: docs/facts/gb200.md (189471 MiB, 4 GPUs per compute tray, Grace
arm64 CPUs, NVL72 domain of 18 trays). B200/H200/H100: the HGX baseboards (8 GPUs, x86 hosts).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class GPUKind:
    name: str
    product_label: str
    """``nvidia.com/gpu.product`` written by GPU Feature Discovery."""
    family: str
    memory_mib: int
    gpus_per_node: int
    node_arch: str
    """``kubernetes.io/arch`` of the hosts this GPU ships in."""
    nvlink_domain_nodes: int
    """Nodes in one NVLink domain (GB200 NVL72: 18 trays; HGX: the node itself)."""
    multi_node_nvlink: bool
    """True where an NVLink domain spans nodes (needs a ComputeDomain / IMEX channel)."""

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


GPU_KINDS: dict[str, GPUKind] = {
    g.name: g
    for g in (
        GPUKind("GB200", "NVIDIA-GB200", "blackwell", 189471, 4, "arm64", 18, True),
        GPUKind("B200", "NVIDIA-B200", "blackwell", 183359, 8, "amd64", 1, False),
        GPUKind("H200", "NVIDIA-H200", "hopper", 143771, 8, "amd64", 1, False),
        GPUKind("H100", "NVIDIA-H100-80GB-HBM3", "hopper", 81559, 8, "amd64", 1, False),
    )
}


class UnknownGPUError(LookupError):
    pass


def gpu_kind(name: str) -> GPUKind:
    """Look up a GPU kind by name (case-insensitive). Raises :class:`UnknownGPUError`."""
    for k, g in GPU_KINDS.items():
        if k.lower() == name.lower():
            return g
    raise UnknownGPUError(f"GPU type {name!r} is not supported (supported: {', '.join(GPU_KINDS)})")
