"""A deployment's :class:`~qdd.perf.profile.PerfProfile` from aiconfigurator, and its ConfigMap.

Prefill (per endpoint, requests/s against TTFT): :func:`qdd.perf.predict.prefill_points`, the
library's light-load and rate-matched anchors; between them the profile interpolates linearly,
beyond them it promises nothing.

Decode (per endpoint, concurrent requests against TPOT): ``static_gen`` at batch sizes per DP
rank from 1 to qdd's decode capacity (``qdd plan``'s memory model), so a query never answers
with more requests than fit.
"""

from __future__ import annotations

import math
from typing import Any

from .. import labels
from ..plan.types import Plan
from .aic import Database
from .predict import NOT_CAPTURED, prefill_points, topology
from .profile import CONFIGMAP_KEY, PerfProfile, Point, RoleProfile, configmap_name, monotone

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 448, 512, 576, 640, 768, 896, 1024,
                  1280, 1536, 2048)
"""Decode batch sizes per DP rank asked for (vLLM's CUDA-graph sizes are finer; the latency curve
is smooth between these)."""


def decode_role(plan: Plan, db: Database, accepted: float | None = None) -> RoleProfile:
    t = topology(plan)
    top = max(1, math.ceil(t.decode_max_per_endpoint / t.decode.dp))
    batches = sorted({b for b in DECODE_BATCHES if b < top} | {top})
    pts = [Point(load=s.batch * t.decode.dp, latency_ms=round(s.latency_ms, 3),
                 tokens_per_second=round(s.seq_per_s * t.osl, 1))
           for s in db.static("decode", t.decode, t.isl, t.osl, batches, t.nextn, accepted)]
    pts = monotone(pts)
    return RoleProfile(role="decode", topology=plan.decode.topology_name, gpus_per_endpoint=t.decode.gpus,
                       max_load=t.decode_max_per_endpoint, points=pts, predicted=pts)


def prefill_role(plan: Plan, db: Database) -> RoleProfile:
    t = topology(plan)
    pts = prefill_points(db, t)
    return RoleProfile(role="prefill", topology=plan.prefill.topology_name, gpus_per_endpoint=t.prefill.gpus,
                       points=pts, predicted=pts)


def build_profile(plan: Plan, db: Database, accepted: float | None = None) -> PerfProfile:
    """The profile of ``plan`` at its workload's mean ISL/OSL."""
    t = topology(plan)
    notes = list(NOT_CAPTURED)
    if plan.profile.version != db.version:
        notes.append(f"engine vLLM {plan.profile.version}; the database was measured on vLLM {db.version}")
    return PerfProfile(deployment=plan.name, model=db.model, gpu=db.gpu, backend=db.backend,
                       backend_version=db.version, database=db.description, isl=t.isl, osl=t.osl,
                       prefill=prefill_role(plan, db), decode=decode_role(plan, db, accepted), not_captured=notes)


def configmap(profile: PerfProfile, namespace: str) -> dict[str, Any]:
    """The ConfigMap a running operator reads the profile from (``qdd perf profile -o configmap``;
    ``kubectl apply`` it beside the deployment)."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": configmap_name(profile.deployment), "namespace": namespace,
                     "labels": {labels.DEPLOYMENT: profile.deployment, f"{labels.GROUP}/perf-profile": "true"},
                     "annotations": {f"{labels.GROUP}/perf-database": profile.database}},
        "data": {CONFIGMAP_KEY: profile.to_json()},
    }
