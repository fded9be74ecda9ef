"""The engines' start-up against the startup probe's budget (docs/reliability.md#engine-start-up).

The kubelet restarts a container whose startup probe has not passed within ``periodSeconds x
failureThreshold`` (qdd renders ``spec.cluster.startupTimeoutSeconds`` as that budget): a budget
shorter than the engine's start kills every engine while it loads, over and over."""

from __future__ import annotations

import math

from ..api.spec import QwenDisaggDeploymentSpec
from ..catalog.checkpoints import Checkpoint
from ..catalog.startup import LOCAL, REMOTE, PhaseSeconds, StartupPhases, Storage, engine_phases, worst_case


def checkpoint_bytes(ckpt: Checkpoint) -> int:
    """Bytes of the checkpoint's weights as stored (experts and the rest)."""
    return ckpt.expert_weight_bytes() + ckpt.non_expert_weight_bytes()


def startup_warnings(spec: QwenDisaggDeploymentSpec, ckpt: Checkpoint) -> list[str]:
    """A warning when the startup probe's budget is shorter than the slowest start the start-up
    model expects for this checkpoint (:func:`qdd.catalog.startup.worst_case`)."""
    slow: StartupPhases = worst_case(checkpoint_bytes(ckpt))
    budget = spec.cluster.startup_timeout_seconds
    if budget >= slow.total:
        return []
    return [f"spec.cluster.startupTimeoutSeconds {budget} is shorter than the slowest start expected for this "
            f"checkpoint ({slow.total:.0f} s: {checkpoint_bytes(ckpt) / 1e9:.0f} GB from remote storage at 2 GB/s, cold "
            f"compile cache; docs/facts/engine-startup.md): the kubelet would restart engines still loading; raise it "
            f"to at least {math.ceil(slow.total * 1.25 / 60) * 60} (a quarter over it, in whole minutes)"]


def expected_starts(spec: QwenDisaggDeploymentSpec, ckpt: Checkpoint, weights: Storage = REMOTE) -> dict[str, PhaseSeconds]:
    """The start-up model's phases of one engine of this deployment, by cache state: ``first`` (no
    cache of this key yet: a cold compile) and ``restart`` (a later start of the same key: warm
    compile and JIT caches and the persisted KV-cache size where spec.engine.compileCache keeps
    them, cold again without it, since the container's own file system goes with the container) and,
    with spec.model.cache, ``restartOnWarmTray`` (the same on a tray holding a verified copy: the
    weights from the node-local disk). ``weights``: where the other two read the weights from
    (qdd.catalog.startup: remote, local or peer; the claim, remote, by default). Seconds by the
    phases of docs/cold-start.md's budget table; sources in docs/facts/engine-startup.md."""
    size, cached = checkpoint_bytes(ckpt), spec.engine.compile_cache is not None
    out = {"first": engine_phases(size, weights, compile_cache_warm=False),
           "restart": engine_phases(size, weights, compile_cache_warm=cached, memory_plan_cached=cached)}
    if spec.model.cache is not None:
        # On a tray holding a verified copy (spec.model.cache): the weights at the node-local rate.
        out["restartOnWarmTray"] = engine_phases(size, LOCAL, compile_cache_warm=cached, memory_plan_cached=cached)
    return out
