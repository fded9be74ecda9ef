"""The one adapter to NVIDIA's aiconfigurator (PyPI ``aiconfigurator`` + ``aiconfigurator-core``
0.12.0; the optional ``perf`` extra). Nothing else in qdd imports the library (import-linter).

What it gives: for one worker shape (an endpoint: attention DP × TP, MoE expert parallel) at one
ISL/OSL, aiconfigurator's static-batching estimate from its measured kernel database
(``InferenceSession.run_static``: ``static_ctx`` for prefill, ``static_gen`` for decode), and its
disaggregated rate matching of prefill and decode workers
(``DisaggInferenceSession.run_disagg``). qdd calls the SDK directly, as aiconfigurator's own
``cli_estimate`` does (aiconfigurator/cli/api.py ``_run_static_estimate``): build and resolve
a ``ModelConfig`` once per shape, then ask for many batch sizes (≈ 20 ms each once the database's
tables are loaded; the first query of a shape loads them, seconds).

GB200 NVL72: aiconfigurator's ``gb200`` system has 4 GPUs per node and models an EP group wider
than a node as cross-node DeepEP, which its vLLM database has no data for (a DEP8 decode endpoint
fails with PerfDataNotAvailableError). On NVL72 all 72 GPUs share one NVLink domain (its own
system file gives the same 900 GB/s for intra- and inter-node) and vLLM's default all2all backend
is NCCL all-gather/reduce-scatter, not DeepEP; so qdd asks about a copy of its ``gb200`` system
whose node is the NVLink domain (72 GPUs), pointing at the package's own GB200 data. The copy is
written to a temporary folder at first use; nothing is downloaded.

Errors: :class:`PerfModelUnavailable` (library absent, with the install command) and
:class:`NotInDatabase` (model, GPU or backend the database lacks, naming what it has).
"""

from __future__ import annotations

import copy
import importlib.metadata
import logging
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..plan.types import topology_name

LIBRARY = "aiconfigurator"
PINNED = "0.12.0"
INSTALL = "pip install 'qdd[perf]' (aiconfigurator==0.12.0), or in a qdd checkout: make perf-venv, then hack/qdd-perf.sh"
PREFILL_CORRECTION = 1.1
DECODE_CORRECTION = 1.08
"""Latency correction scales aiconfigurator's CLI applies to single-point disagg estimates
(aiconfigurator/cli/api.py DEFAULT_PREFILL/DECODE_LATENCY_CORRECTION_SCALE): qdd uses the same."""

SYSTEMS = {"GB200": "gb200", "B200": "b200_sxm", "B300": "b300_sxm", "H200": "h200_sxm", "H100": "h100_sxm",
           "A100": "a100_sxm"}
"""qdd's GPU kinds (qdd.catalog.gpus) → aiconfigurator system names."""
NVLINK_DOMAIN = {"gb200": 72}
"""Systems whose NVLink domain spans nodes: GPUs in it (qdd's copy of the system uses it as the node)."""


class PerfModelUnavailable(RuntimeError):
    """aiconfigurator is not installed (or not the pinned version)."""


class NotInDatabase(LookupError):
    """The model, GPU kind or backend is not in aiconfigurator's database."""


@dataclass(frozen=True)
class Shape:
    """One endpoint: ``dp`` attention-DP ranks × ``tp`` TP, experts over all of them when ``ep``."""

    dp: int
    tp: int
    ep: bool

    @property
    def gpus(self) -> int:
        return self.dp * self.tp


@dataclass(frozen=True)
class StaticPoint:
    """aiconfigurator's static estimate of one endpoint at ``batch`` requests per DP rank.
    ``latency_ms``: TTFT of the batch (prefill) or TPOT (decode), correction applied;
    ``seq_per_s``: requests/s the endpoint completes at this batch (its ``seq/s``, latency
    corrected); ``memory_gb``: its memory estimate per GPU; ``oom``: it says the batch does not fit."""

    batch: int
    latency_ms: float
    seq_per_s: float
    memory_gb: float
    oom: bool


def _quiet() -> None:
    # The library logs every fallback at WARNING; qdd reports what matters itself.
    for name in ("aiconfigurator", "aiconfigurator_core"):
        logging.getLogger(name).setLevel(logging.ERROR)


def library_version() -> str:
    try:
        return importlib.metadata.version(LIBRARY)
    except importlib.metadata.PackageNotFoundError:
        raise PerfModelUnavailable(f"the performance model needs NVIDIA's aiconfigurator, which is not installed: "
                                   f"{INSTALL}") from None


@cache
def _sdk() -> Any:
    """The library's modules, imported on first use (seconds: pandas, pyarrow, scipy)."""
    version = library_version()
    if version != PINNED:
        raise PerfModelUnavailable(f"aiconfigurator {version} is installed; qdd is built and checked against "
                                   f"{PINNED}: {INSTALL}")
    _quiet()
    from aiconfigurator.sdk import inference_session, models, perf_database
    from aiconfigurator.sdk.backends.factory import get_backend
    from aiconfigurator.sdk.config import RuntimeConfig
    from aiconfigurator.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator.sdk.moe_comm_resolver import resolve_model_config_moe_comm
    from aiconfigurator.sdk.perf_database import PerfDataNotAvailableError
    from aiconfigurator.sdk.speculative import SpeculativeDecodingProfile

    return SimpleNamespace(inference_session=inference_session, models=models, perf_database=perf_database,
                           default_paths=perf_database.get_systems_paths(), get_backend=get_backend,
                           RuntimeConfig=RuntimeConfig, apply_nextn=apply_nextn, build_model_config=build_model_config,
                           resolve_moe_comm=resolve_model_config_moe_comm, Speculative=SpeculativeDecodingProfile,
                           Missing=PerfDataNotAvailableError)


@cache
def _systems_dir(system: str) -> str | None:
    """A folder holding qdd's copy of ``system`` with its NVLink domain as the node (module
    docstring), or None to use the packaged systems."""
    if system not in NVLINK_DOMAIN:
        return None
    import yaml

    packaged = Path(_sdk().perf_database.__file__).resolve().parent.parent / "systems"
    spec = yaml.safe_load((packaged / f"{system}.yaml").read_text())
    spec["data_dir"] = str(packaged / spec["data_dir"])
    spec["node"]["num_gpus_per_node"] = NVLINK_DOMAIN[system]
    folder = Path(tempfile.mkdtemp(prefix="qdd-aic-systems-"))
    (folder / f"{system}.yaml").write_text(yaml.safe_dump(spec))
    for extra in packaged.glob("*.yaml"):
        if extra.name != f"{system}.yaml" and not (folder / extra.name).exists():
            (folder / extra.name).write_text(extra.read_text())
    return str(folder)


@dataclass
class Database:
    """aiconfigurator's database for one model on one GPU kind and backend."""

    model: str
    gpu: str
    system: str
    backend: str
    version: str
    db: Any

    @property
    def description(self) -> str:
        nvl = f", node = {NVLINK_DOMAIN[self.system]}-GPU NVLink domain" if self.system in NVLINK_DOMAIN else ""
        return f"aiconfigurator {PINNED}: {self.system} / {self.backend} {self.version} silicon database{nvl}"

    def _config(self, shape: Shape, role: str, nextn: int) -> Any:
        sdk = _sdk()
        moe_tp, moe_ep = (1, shape.gpus) if shape.ep else (shape.gpus, 1)
        mc = sdk.build_model_config(shape.tp, 1, shape.dp, moe_tp, moe_ep, None, None, None, None, None)
        sdk.apply_nextn(mc, nextn)
        try:
            sdk.resolve_moe_comm(mc, model_path=self.model, backend_name=self.backend, database=self.db,
                                 required_phases=("context",) if role == "prefill" else ("context", "generation"))
            if mc.moe_comm_backend is None:
                sdk.models.resolve_context_fmha_by_data(mc, self.model, self.db, self.backend,
                                                        is_context_role=role == "prefill")
            sdk.models.resolve_nvfp4_for_system(mc, self.system, self.model, backend_name=self.backend)
        except Exception as e:  # the library's PerfDataNotAvailableError and ValueError name what is missing
            raise NotInDatabase(f"{self.description}: no data for {role} {topology_name(shape.dp, shape.tp, shape.ep)} of {self.model}: {e}") from None
        return mc

    def static(self, role: str, shape: Shape, isl: int, osl: int, batches: list[int], nextn: int = 0,
               accepted: float | None = None) -> list[StaticPoint]:
        """Static estimates of one endpoint per batch size (requests per DP rank)."""
        sdk = _sdk()
        mc = self._config(shape, role, nextn)
        model = sdk.models.get_model(self.model, mc, self.backend)
        session = sdk.inference_session.InferenceSession(model, self.db, sdk.get_backend(self.backend))
        spec = sdk.Speculative.from_inputs(nextn, accepted) if nextn else None
        mode, corr = ("static_ctx", PREFILL_CORRECTION) if role == "prefill" else ("static_gen", DECODE_CORRECTION)
        out = []
        for b in batches:
            try:
                s = session.run_static(runtime_config=sdk.RuntimeConfig(batch_size=b, isl=isl, osl=osl), mode=mode,
                                       latency_correction_scale=corr)
            except sdk.Missing as e:
                raise NotInDatabase(f"{self.description}: {role} {topology_name(shape.dp, shape.tp, shape.ep)} of "
                                    f"{self.model}: {e}") from None
            if spec is not None:
                s = spec.project_summary(s, role=role)
            d = s.get_result_dict()
            if d is None:
                raise NotInDatabase(f"{self.description}: no estimate for {role} {topology_name(shape.dp, shape.tp, shape.ep)} at batch {b}")
            latency = float(d["ttft"] if role == "prefill" else d["tpot"])
            out.append(StaticPoint(b, latency, float(d["seq/s"]), float(d.get("memory") or 0.0), bool(s.check_oom())))
        return out

    def disagg(self, prefill: Shape, prefill_batch: int, prefill_endpoints: int, decode: Shape, decode_batch: int,
               decode_endpoints: int, isl: int, osl: int, nextn: int = 0, accepted: float | None = None,
               corrected: bool = True) -> dict[str, Any]:
        """aiconfigurator's rate-matched disaggregated estimate (its ``run_disagg``): one row of its
        ``ColumnsDisagg`` (ttft, tpot ms; ``seq/s``; ``tokens/s/gpu`` = OUTPUT tokens; ``oom``).
        ``corrected=False``: without the library's empirical constants (latency corrections 1.1 /
        1.08, rate-matching factors 0.9 / 0.92), kernels alone: how much of a gap they make."""
        sdk = _sdk()
        session = sdk.inference_session.DisaggInferenceSession(self.db, sdk.get_backend(self.backend), self.db,
                                                               sdk.get_backend(self.backend))
        if corrected:
            session.set_latency_correction_scales(PREFILL_CORRECTION, DECODE_CORRECTION)
        else:
            session.set_latency_correction_scales(1.0, 1.0)
            session.set_rate_matching_degradation_factors(1.0, 1.0)
        try:
            s = session.run_disagg(self.model, sdk.RuntimeConfig(isl=isl, osl=osl),
                                   self._config(prefill, "prefill", nextn), prefill_batch, prefill_endpoints,
                                   self._config(decode, "decode", nextn), decode_batch, decode_endpoints,
                                   speculative_profile=sdk.Speculative.from_inputs(nextn, accepted) if nextn else None)
        except sdk.Missing as e:
            raise NotInDatabase(f"{self.description}: {self.model}: {e}") from None
        row = s.get_summary_df().iloc[0].to_dict()
        row["oom"] = bool(s.check_oom())
        return row


def open_database(model: str, gpu: str, backend: str = "vllm") -> Database:
    """The database for ``model`` (an HF id aiconfigurator knows, e.g.
    nvidia/Qwen3.5-397B-A17B-NVFP4) on qdd GPU kind ``gpu`` with ``backend``, at the newest version
    the database holds. Raises PerfModelUnavailable or NotInDatabase."""
    sdk = _sdk()
    system = SYSTEMS.get(gpu.upper())
    if system is None:
        raise NotInDatabase(f"GPU kind {gpu}: aiconfigurator has no system for it (qdd maps {', '.join(SYSTEMS)})")
    pdb = sdk.perf_database
    folder = _systems_dir(system)
    paths = [folder] if folder else sdk.default_paths
    pdb.set_systems_paths(paths)
    version = pdb.get_latest_database_version(system=system, backend=backend, systems_paths=paths)
    if version is None:
        have = pdb.get_supported_databases(systems_paths=paths).get(system, {})
        raise NotInDatabase(f"GPU kind {gpu} ({system}): aiconfigurator {PINNED} has no {backend} data for it "
                            f"(it has: {', '.join(f'{b} {v}' for b, v in sorted(have.items())) or 'none'})")
    db = pdb.get_database_view(system, backend, version, systems_paths=paths)
    if db is None:
        raise NotInDatabase(f"GPU kind {gpu} ({system}): the {backend} {version} database did not load")
    known = known_models()
    if model not in known:
        # Never let the library look further: for an unknown id it downloads config.json from the hub.
        qwen = ", ".join(m for m in known if "Qwen3" in m and "VL" not in m)
        raise NotInDatabase(f"model {model}: not among aiconfigurator {PINNED}'s models; pass one it knows with "
                            f"--perf-model (its Qwen3 ones: {qwen})")
    return Database(model, gpu.upper(), system, backend, version, db)


@cache
def known_models() -> tuple[str, ...]:
    """The HF ids whose config.json aiconfigurator ships (its ``model_configs`` folder)."""
    import aiconfigurator_core

    folder = Path(aiconfigurator_core.__file__).resolve().parent / "model_configs"
    return tuple(sorted(f.name[: -len("_config.json")].replace("--", "/", 1) for f in folder.glob("*_config.json")
                        if not f.name.endswith("_hf_quant_config.json")))


@dataclass(frozen=True)
class RateMatching:
    """aiconfigurator's constants for a deployment of prefill and decode workers
    (aiconfigurator/sdk/picking.py): ``prefill`` and ``decode`` scale each role's throughput
    (pipeline bubbles; decode batch slots not always full), ``ttft_queue`` multiplies a prefill
    batch's latency for the queueing of concurrent prefills at the rate-matched load."""

    prefill: float
    decode: float
    ttft_queue: float


def rate_matching() -> RateMatching:
    _sdk()
    from aiconfigurator.sdk import picking

    return RateMatching(picking._RATE_MATCHING_PREFILL_DEGRADATION_FACTOR, picking._RATE_MATCHING_DECODE_DEGRADATION_FACTOR,
                        picking._AUTOSCALE_TTFT_CORRECTION_FACTOR)


def copy_row(row: dict[str, Any]) -> dict[str, Any]:
    """A plain-JSON copy of a library row (numpy scalars → Python numbers)."""
    out = {}
    for k, v in copy.copy(row).items():
        out[k] = v.item() if hasattr(v, "item") else v
    return out
