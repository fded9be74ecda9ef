"""Memory the preflight registers with NIXL, filled with a pattern both sides can recompute.

Two backends with one interface: GPU memory through torch (what runs in a cluster and on the lent
GPUs) and host memory through numpy (``--device cpu``: the protocol on a machine without GPUs;
NIXL moves DRAM through UCX's shared-memory and TCP transports). torch and numpy are imported
only here and only when a buffer is made.

Allocation (``alloc``): ``cudamalloc`` — torch's caching allocator, legacy CUDA IPC handles, which
carry cuda_ipc between GPUs of one node; ``vmm`` — cuMemCreate/cuMemMap through the driver API
(ctypes on libcuda), exportable as a FABRIC handle where the driver grants one (what UCX's cuda_ipc
needs to cross nodes over multi-node NVLink, UCX_CUDA_IPC_ENABLE_MNNVL; openucx/ucx
src/uct/cuda/cuda_ipc/cuda_ipc_md.c) and as a POSIX file descriptor otherwise (one node). The
handle types obtained are reported, so a run that could not get FABRIC says so.

The pattern: int32 element *i* of region *r* holds ``(i·0x9E3779B1 + r·0x85EBCA6B + 0x27D4EB2F)
mod 2³²``. Every page differs from every other page of every region, so a page read from the
wrong block, the wrong tensor or the wrong offset fails verification, not only a torn copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_MUL, _REG, _ADD, _MOD = 0x9E3779B1, 0x85EBCA6B, 0x27D4EB2F, 1 << 32
POISON_BYTE = 0xA5
_CHUNK = 1 << 24  # elements per pattern chunk: bounds the int64 scratch to 128 MiB


@dataclass
class Region:
    """One registered allocation. ``array`` is a torch tensor (int8) or a numpy array (uint8)."""

    region_id: int
    nbytes: int
    array: Any
    device_id: int
    golden: Any = field(default=None, repr=False)

    @property
    def addr(self) -> int:
        a = self.array
        return int(a.data_ptr()) if hasattr(a, "data_ptr") else int(a.ctypes.data)


class _VMM:
    """cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess through ctypes (CUDA driver API)."""

    POSIX_FD, FABRIC = 0x1, 0x8  # CUmemAllocationHandleType
    PINNED, LOC_DEVICE, READWRITE = 1, 1, 3

    def __init__(self, device_index: int) -> None:
        import ctypes

        self.c = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.device_index = device_index
        self.handle_types = "FABRIC+POSIX_FD"
        self.keep: list[Any] = []

        class Loc(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

        class Flags(ctypes.Structure):
            _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                        ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]

        class Prop(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Loc),
                        ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", Flags)]

        class Access(ctypes.Structure):
            _fields_ = [("location", Loc), ("flags", ctypes.c_int)]

        self.Loc, self.Prop, self.Access = Loc, Prop, Access

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUresult {rc}")

    def _prop(self, handles: int) -> Any:
        return self.Prop(type=self.PINNED, requestedHandleTypes=handles,
                         location=self.Loc(self.LOC_DEVICE, self.device_index))

    def _create(self, nbytes: int, handles: int) -> tuple[int, int, int]:
        c = self.c
        gran = c.c_size_t()
        self._check(self.lib.cuMemGetAllocationGranularity(c.byref(gran), c.byref(self._prop(handles)), 0),
                    "cuMemGetAllocationGranularity")
        size = -(-nbytes // gran.value) * gran.value
        h = c.c_ulonglong()
        self._check(self.lib.cuMemCreate(c.byref(h), c.c_size_t(size), c.byref(self._prop(handles)),
                                         c.c_ulonglong(0)), "cuMemCreate")
        return h.value, size, gran.value

    def alloc(self, nbytes: int) -> int:
        c = self.c
        if self.handle_types.startswith("FABRIC"):
            try:
                hv, size, align = self._create(nbytes, self.FABRIC | self.POSIX_FD)
            except RuntimeError as e:  # no fabric (no IMEX channel, or not an NVLink fabric): one node only
                self.handle_types = f"POSIX_FD (FABRIC refused: {e})"
                hv, size, align = self._create(nbytes, self.POSIX_FD)
        else:
            hv, size, align = self._create(nbytes, self.POSIX_FD)
        h = c.c_ulonglong(hv)
        ptr = c.c_ulonglong()
        self._check(self.lib.cuMemAddressReserve(c.byref(ptr), c.c_size_t(size), c.c_size_t(align),
                                                 c.c_ulonglong(0), c.c_ulonglong(0)), "cuMemAddressReserve")
        self._check(self.lib.cuMemMap(ptr, c.c_size_t(size), c.c_size_t(0), h, c.c_ulonglong(0)), "cuMemMap")
        acc = self.Access(self.Loc(self.LOC_DEVICE, self.device_index), self.READWRITE)
        self._check(self.lib.cuMemSetAccess(ptr, c.c_size_t(size), c.byref(acc), c.c_size_t(1)), "cuMemSetAccess")
        self.keep.append((ptr.value, size, h.value))
        return int(ptr.value)


class _CudaArray:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to view raw device memory."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|i1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class Memory:
    """Allocates regions on one device and fills, poisons and verifies byte ranges of them."""

    def __init__(self, device: str, device_index: int = 0, alloc: str = "cudamalloc") -> None:
        self.kind = "VRAM" if device == "cuda" else "DRAM"
        self.device_index = device_index if self.kind == "VRAM" else 0
        self.alloc_kind = alloc if self.kind == "VRAM" else "host"
        self.vmm: _VMM | None = None
        if self.kind == "VRAM":
            import torch

            self.torch = torch
            torch.cuda.set_device(device_index)
            self.dev = torch.device("cuda", device_index)
            torch.zeros(1, device=self.dev)  # the primary context, current on this thread
            if alloc == "vmm":
                self.vmm = _VMM(device_index)
        else:
            import numpy

            self.np = numpy

    # -- allocation and pattern -------------------------------------------------------------
    def alloc(self, region_id: int, nbytes: int) -> Region:
        if nbytes % 4:
            raise ValueError(f"region {region_id}: {nbytes} bytes is not a multiple of 4")
        if self.vmm is not None:
            arr = self.torch.as_tensor(_CudaArray(self.vmm.alloc(nbytes), nbytes), device=self.dev)
        elif self.kind == "VRAM":
            arr = self.torch.empty(nbytes, dtype=self.torch.int8, device=self.dev)
        else:
            arr = self.np.empty(nbytes, dtype=self.np.uint8)
        return Region(region_id, nbytes, arr, self.device_index)

    def fill(self, region: Region, target: Any | None = None) -> None:
        """Write the region's pattern into ``target`` (default: the region itself)."""
        dst = region.array if target is None else target
        n = region.nbytes // 4
        if self.kind == "VRAM":
            t = self.torch
            view = dst.view(t.int32)
            for start in range(0, n, _CHUNK):
                i = t.arange(start, min(n, start + _CHUNK), dtype=t.int64, device=self.dev)
                v = (i * _MUL + region.region_id * _REG + _ADD) % _MOD
                view[start:start + len(i)] = t.where(v >= 1 << 31, v - _MOD, v).to(t.int32)
        else:
            np = self.np
            view = dst.view(np.uint32)
            for start in range(0, n, _CHUNK):
                i = np.arange(start, min(n, start + _CHUNK), dtype=np.uint64)
                view[start:start + len(i)] = ((i * _MUL + region.region_id * _REG + _ADD) % _MOD).astype(np.uint32)

    @property
    def allocation(self) -> str:
        """How regions were allocated: cudamalloc, host, or vmm with the handle types obtained."""
        return f"vmm:{self.vmm.handle_types}" if self.vmm else self.alloc_kind

    def make_golden(self, region: Region) -> None:
        """A second copy of the pattern next to a local region, to compare received bytes with."""
        if self.kind == "VRAM":  # plain device memory: never registered, never exported
            region.golden = self.torch.empty(region.nbytes, dtype=self.torch.int8, device=self.dev)
        else:
            region.golden = self.alloc(region.region_id, region.nbytes).array
        self.fill(region, region.golden)

    def poison(self, region: Region, offset: int, length: int) -> None:
        region.array[offset:offset + length] = POISON_BYTE if self.kind == "DRAM" else POISON_BYTE - 256

    def mismatched_bytes(self, region: Region, offset: int, length: int) -> int:
        """Bytes of ``region[offset:offset+length]`` that differ from the pattern."""
        got, want = region.array[offset:offset + length], region.golden[offset:offset + length]
        if self.kind == "VRAM":
            return int((got != want).sum().item())
        return int((got != want).sum())

    def sync(self) -> None:
        if self.kind == "VRAM":
            self.torch.cuda.synchronize(self.dev)

    def nixl_desc(self, region: Region, offset: int, length: int) -> tuple[int, int, int]:
        return (region.addr + offset, length, region.device_id)

    def reg_desc(self, region: Region) -> tuple[int, int, int, str]:
        return (region.addr, region.nbytes, region.device_id, "")
