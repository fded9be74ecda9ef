"""``tuning.all2allBackend`` checked against the engine's backends and the endpoint's topology
(the facts: :mod:`qdd.catalog.all2all`, docs/all2all.md)."""

from __future__ import annotations

from ..api.spec import RoleTuning
from ..catalog import GPUKind
from ..catalog.all2all import ALL2ALL_BACKENDS
from ..errors import FieldError


def all2all_problems(role: str, tuning: RoleTuning, vllm_version: str, gpu: GPUKind,
                     pods_per_endpoint: int) -> tuple[list[FieldError], list[str]]:
    """(errors, warnings) of one role's backend. An endpoint of more than one pod spans nodes: on a
    multi-node NVLink GPU (GB200 trays) the backend must work across its NVLink domain, elsewhere
    across the network. Refused backends are refused everywhere; experimental ones need
    ``allowExperimentalAll2all`` and then give a warning."""
    name = tuning.all2all_backend
    if name is None:
        return [], []
    field = f"spec.{role}.tuning.all2allBackend"
    b = ALL2ALL_BACKENDS.get(name)
    if b is None:
        usable = ", ".join(n for n, x in ALL2ALL_BACKENDS.items() if x.status != "refused")
        return [FieldError(field, f"{name!r} is not an --all2all-backend of vLLM {vllm_version}: use one of {usable}")], []
    if b.status == "refused":
        return [FieldError(field, f"{name!r}: {b.why}; use {b.instead}")], []
    if pods_per_endpoint > 1:
        works, over = ((b.across_mnnvl, f"{gpu.name} trays of one NVLink domain") if gpu.multi_node_nvlink
                       else (b.across_nodes, f"{gpu.name} nodes over the network"))
        if not works:
            return [FieldError(field, f"the {role} endpoint spans {pods_per_endpoint} {over}, and {name!r} does not "
                                      f"work across them ({b.why}): use {b.instead}, or an endpoint that fits one node")], []
    if b.status == "experimental":
        if not tuning.allow_experimental_all2all:
            return [FieldError(field, f"{name!r} is experimental in qdd ({b.why}): set "
                                      f"spec.{role}.tuning.allowExperimentalAll2all: true to try it, or use "
                                      "allgather_reducescatter")], []
        return [], [f"{role} runs the experimental --all2all-backend {name} ({b.why}): check accuracy before serving"]
    return [], []
