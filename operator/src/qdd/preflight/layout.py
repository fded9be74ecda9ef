"""What one rank of vLLM's hybrid KV cache looks like to NIXL, and what one request moves.

Part of the preflight's contract (with :mod:`.result`): the GPU program (:mod:`qdd.preflight.gpu`)
and the operator both read it; stdlib only. The numbers come from the planner's
:class:`~qdd.plan.memory.CacheLayout` (vLLM 0.33 formulas, docs/facts/memory-model.md) through
:mod:`.planned`; this module only holds the shape a KV transfer has.

How vLLM lays the hybrid cache out (vllm/v1/core/kv_cache_utils.py, vllm/v1/worker/gpu_model_runner.py):
- the layers are grouped into KV-cache groups of ``layers_per_group`` layers that share one page size
  (397B: 1 full-attention group + 3 GDN groups of 15 layers);
- there are ``layers_per_group`` cache tensors per rank; tensor *i* is shared by layer *i* of every
  group, and holds ``num_blocks`` pages of ``page_bytes``. NIXL registers each tensor as one region;
- a request holds ``ceil(tokens / block_size)`` block ids in each attention group and one block id
  in each GDN group, all drawn from one free list. Block id *b* of a group addresses page *b* of
  every tensor, so a request's cache is (block ids) × (tensors) pages.

Descriptors. The decode side reads a request with one descriptor per page (``per_page`` =
block ids × tensors). Contiguous block ids in one tensor are contiguous bytes, so they can be merged
into one descriptor (``coalesced``). vLLM allocates block ids from a free list, so in a running
engine they are contiguous only by luck; the preflight lays every request's block ids out
contiguously (request *r* holds ids ``r × pages .. (r + 1) × pages − 1``), which makes the
coalesced count ``tensors`` — the floor for a request, since the tensors are separate allocations.
:func:`coalesce` gives the count for any id list. Counts assume one region per page (block-major
KV, as FlashInfer lays it out); a backend whose cache is K/V-major registers K and V as separate
regions and doubles the attention descriptors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


DEFAULT_REQUESTS = 4
"""Requests' worth of pages the serve side registers (and the fetch side reads one by one)."""
DEFAULT_BULK_BYTES = 1 << 30
"""The bulk buffer: one large region that shows the link's bandwidth without per-page overhead."""


@dataclass(frozen=True)
class TransferLayout:
    """The hybrid cache of one rank, as a KV transfer sees it.

    ``tensors``: cache tensors (= NIXL regions) per rank, ``layers_per_group``.
    ``page_bytes``: one block of one tensor. ``pages_per_request``: block ids one request holds at
    ``tokens`` = ISL + OSL (attention blocks of every attention group + one per GDN group).
    """

    model: str
    kv_cache_dtype: str
    mamba_ssm_cache_dtype: str
    tensor_parallel: int
    tokens: int
    block_size: int
    page_bytes: int
    tensors: int
    attn_groups: int
    gdn_groups: int

    @property
    def attn_blocks_per_group(self) -> int:
        return math.ceil(self.tokens / self.block_size)

    @property
    def pages_per_request(self) -> int:
        """Block ids one request holds (each addresses one page in every tensor)."""
        return self.attn_groups * self.attn_blocks_per_group + self.gdn_groups

    @property
    def bytes_per_request(self) -> int:
        return self.pages_per_request * self.tensors * self.page_bytes

    @property
    def descriptors_per_request_per_page(self) -> int:
        return self.pages_per_request * self.tensors

    @property
    def descriptors_per_request_coalesced(self) -> int:
        """With the request's block ids contiguous (the preflight's layout): one run per tensor."""
        return descriptor_count(request_block_ids(self, 0), self.tensors, coalesced=True)

    def num_blocks(self, requests: int = DEFAULT_REQUESTS) -> int:
        """Pages per tensor that hold ``requests`` requests side by side."""
        return requests * self.pages_per_request

    def tensor_bytes(self, requests: int = DEFAULT_REQUESTS) -> int:
        return self.num_blocks(requests) * self.page_bytes

    def to_json(self) -> dict[str, Any]:
        """Fields plus the derived counts (for humans; :meth:`from_json` reads the fields)."""
        return {**asdict(self), "pages_per_request": self.pages_per_request,
                "bytes_per_request": self.bytes_per_request,
                "descriptors_per_request": {"per_page": self.descriptors_per_request_per_page,
                                            "coalesced": self.descriptors_per_request_coalesced}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransferLayout:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def request_block_ids(layout: TransferLayout, request: int) -> range:
    """Block ids of request ``request`` in the preflight's contiguous layout."""
    n = layout.pages_per_request
    return range(request * n, (request + 1) * n)


def coalesce(block_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Runs of consecutive ids, in order, as (first id, count): [3, 4, 5, 9] → [(3, 3), (9, 1)]."""
    runs: list[tuple[int, int]] = []
    for b in block_ids:
        if runs and runs[-1][0] + runs[-1][1] == b:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return runs


def descriptor_count(block_ids: Sequence[int], tensors: int, coalesced: bool) -> int:
    """Descriptors that move ``block_ids`` in each of ``tensors`` tensors."""
    return tensors * (len(coalesce(block_ids)) if coalesced else len(block_ids))


def page_descriptors(layout: TransferLayout, block_ids: Sequence[int]) -> list[tuple[int, int, int]]:
    """(tensor, byte offset, length) of every page, tensor-major: the per-page descriptors."""
    return [(t, b * layout.page_bytes, layout.page_bytes) for t in range(layout.tensors) for b in block_ids]


def coalesced_descriptors(layout: TransferLayout, block_ids: Sequence[int]) -> list[tuple[int, int, int]]:
    """(tensor, byte offset, length) of every run of contiguous block ids in every tensor."""
    return [(t, first * layout.page_bytes, count * layout.page_bytes)
            for t in range(layout.tensors) for first, count in coalesce(block_ids)]
