"""The Plan: everything render needs, as plain frozen data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api import QwenDisaggDeploymentSpec
from ..catalog import Checkpoint, EngineProfile, GPUKind
from .memory import DecodeCapacity


@dataclass(frozen=True)
class EnvEntry:
    """One container env var: a literal ``value``, a downward-API ``field_path``, or a raw ``value_from``."""

    name: str
    value: str | None = None
    field_path: str | None = None
    value_from: dict[str, Any] | None = None

    def to_k8s(self) -> dict[str, Any]:
        if self.field_path:
            return {"name": self.name, "valueFrom": {"fieldRef": {"fieldPath": self.field_path}}}
        if self.value_from is not None:
            return {"name": self.name, "valueFrom": self.value_from}
        return {"name": self.name, "value": self.value or ""}


def topology_name(dp: int, tp: int, expert_parallel: bool) -> str:
    """DEP8, DEP2, TEP4, DP2TP2EP ... (the field's short names for one endpoint's layout)."""
    if tp == 1:
        return f"{'DEP' if expert_parallel else 'DP'}{dp}"
    if dp == 1:
        return f"{'TEP' if expert_parallel else 'TP'}{tp}"
    return f"DP{dp}TP{tp}{'EP' if expert_parallel else ''}"


@dataclass(frozen=True)
class PodPlan:
    """One engine pod of one endpoint.

    ``argv``: what follows ``vllm serve`` (the model first). ``dp_ranks``: the global DP ranks this
    pod's engine cores hold (``dp_start_rank`` .. + ``dp_size_local``). ``side_channel_ports``:
    the NIXL side-channel ports it listens on (base + each global DP rank).
    """

    name: str
    role: str
    endpoint: int
    group_role: str
    """``leader`` (DP rank 0 of the endpoint, serves HTTP) or ``worker`` (``--headless``)."""
    argv: tuple[str, ...]
    env: tuple[EnvEntry, ...]
    gpus: int
    dp_size_local: int
    dp_start_rank: int
    side_channel_ports: tuple[int, ...]
    serves_http: bool

    @property
    def dp_ranks(self) -> range:
        return range(self.dp_start_rank, self.dp_start_rank + self.dp_size_local)


@dataclass(frozen=True)
class RolePlan:
    """One role (prefill or decode).

    ``pods_per_endpoint`` pods of ``gpus_per_pod`` GPUs make one endpoint. Single-pod endpoints
    are rendered as a StatefulSet (stable names, scaled by replicas); multi-pod endpoints as
    operator-owned pod groups (a leader and headless workers, restarted together).
    ``pods`` lists the pods of endpoint 0..endpoints-1 in order.
    """

    role: str
    endpoints: int
    dp: int
    tp: int
    expert_parallel: bool
    pods_per_endpoint: int
    gpus_per_pod: int
    max_num_batched_tokens: int
    max_num_seqs: int | None
    max_cudagraph_capture_size: int | None
    gpu_memory_utilization: float
    async_scheduling: bool
    kv_role: str
    pods: tuple[PodPlan, ...]
    warnings: tuple[str, ...] = ()
    compile_cache_key: str | None = None
    """The folder of this role's compilation caches below /compile-cache (qdd.plan.compile_cache);
    None without spec.engine.compileCache."""

    @property
    def gpus_per_endpoint(self) -> int:
        return self.pods_per_endpoint * self.gpus_per_pod

    @property
    def gpus(self) -> int:
        return self.endpoints * self.gpus_per_endpoint

    @property
    def uses_statefulset(self) -> bool:
        return self.pods_per_endpoint == 1

    @property
    def topology_name(self) -> str:
        """DEP8, DEP2, TEP4, DP2TP2 ... (the field's short names)."""
        return topology_name(self.dp, self.tp, self.expert_parallel)


@dataclass(frozen=True)
class RouterPlan:
    replicas: int
    image: str
    port: int
    args: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The whole deployment. ``name``/``namespace`` of the custom resource; ``spec`` as parsed."""

    name: str
    namespace: str
    spec: QwenDisaggDeploymentSpec
    checkpoint: Checkpoint
    gpu: GPUKind
    profile: EngineProfile
    served_model_name: str
    kv_cache_dtype: str
    """--kv-cache-dtype of every engine pod, resolved at plan time (never auto)."""
    kv_cache_dtype_source: str
    """Where it comes from: the spec, or the checkpoint's record in the catalog."""
    prefill: RolePlan
    decode: RolePlan
    router: RouterPlan
    capacity: DecodeCapacity
    compute_domain: bool
    gpus_per_node: int
    warnings: tuple[str, ...] = field(default=())
    generation: str = ""
    """What prefill and decode must agree on, hashed (qdd.plan.generation): ``qdd.dev/generation``."""
    slot: str = "a"
    """Which of the two slots (qdd.names) the engine objects of this plan are named for."""

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def min_nodes(self) -> int:
        """Nodes the engine pods need at least (pods packed by GPUs)."""
        per = self.gpus_per_node
        return -(-self.gpus // per)

    def role(self, name: str) -> RolePlan:
        return {"prefill": self.prefill, "decode": self.decode}[name]
