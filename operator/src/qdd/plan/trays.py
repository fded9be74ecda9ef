"""Trays (nodes) a plan holds, as well as GPUs. Pure.

Under NVIDIA's DRA driver a node serves one IMEX-channel claim (docs/facts/dra-driver.md): each
claim is one whole tray for its ComputeDomain, whatever GPUs its pods ask. So qdd counts trays:

- a StatefulSet role (single-pod endpoints) shares one claim per tray-sized group of ordinals
  (qdd.render.trayclaims): ``ceil(endpoints / k)`` trays, ``k = gpusPerNode // gpusPerPod``;
- a multi-pod endpoint's pods fill whole trays (qdd.plan.build), one claim each;
- the KV-transfer preflight: per decode endpoint a serve and a fetch pod of one GPU each, on two
  trays (the bytes must cross trays as prefill→decode bytes do), one claim each. They hold those
  trays while they run (seconds to minutes), then the trays are free again.

GPUs of a held tray that the deployment's pods do not ask are held but unusable: no other pod of
the ComputeDomain can take the tray's channel, and no other ComputeDomain can use the tray.
Without a ComputeDomain there is no claim: pods pack by GPUs and nothing is stranded by qdd.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import Plan, RolePlan

PREFLIGHT_PODS_PER_PAIR = 2
PREFLIGHT_GPUS_PER_POD = 1


@dataclass(frozen=True)
class TrayUse:
    """What one part of the deployment holds. ``gpus``: what its pods ask; ``held``: trays x GPUs per
    tray; ``claims``: how its pods hold the tray's IMEX channel; ``transient``: held only while it
    runs (the preflight)."""

    part: str
    trays: int
    gpus: int
    held: int
    claims: str
    transient: bool = False

    @property
    def unusable(self) -> int:
        return self.held - self.gpus


def pods_per_tray(plan: Plan, role: RolePlan) -> int:
    """StatefulSet pods of ``role`` on one tray (and one claim): at least 1."""
    return max(1, plan.gpus_per_node // max(1, role.gpus_per_pod))


def role_trays(plan: Plan, role: RolePlan) -> int:
    if role.uses_statefulset:
        return -(-role.endpoints // pods_per_tray(plan, role))
    return role.endpoints * role.pods_per_endpoint * -(-role.gpus_per_pod // plan.gpus_per_node)


def _role(plan: Plan, role: RolePlan) -> TrayUse:
    trays = role_trays(plan, role)
    if role.uses_statefulset:
        k = pods_per_tray(plan, role)
        how = f"one ResourceClaim per tray, shared by up to {k} pods" if k > 1 else "one ResourceClaim per pod"
    else:
        how = "one ResourceClaim per pod (a pod fills its tray)"
    return TrayUse(role.role, trays, role.gpus, trays * plan.gpus_per_node, how)


def tray_uses(plan: Plan) -> list[TrayUse]:
    """Prefill, decode and (when enabled) the preflight, under a ComputeDomain; [] without one."""
    if not plan.compute_domain:
        return []
    out = [_role(plan, plan.prefill), _role(plan, plan.decode)]
    if plan.spec.kv_transfer.preflight.enabled and plan.decode.endpoints:
        pods = PREFLIGHT_PODS_PER_PAIR * plan.decode.endpoints
        out.append(TrayUse("preflight", pods, pods * PREFLIGHT_GPUS_PER_POD, pods * plan.gpus_per_node,
                           "one ResourceClaim per pod (serve and fetch on two trays)", transient=True))
    return out


def trays(plan: Plan, peak: bool = True) -> int:
    """Trays the deployment holds: with the preflight running (``peak``) or once it is done.
    Without a ComputeDomain: the engines' GPUs packed (plan.min_nodes)."""
    uses = tray_uses(plan)
    if not uses:
        return plan.min_nodes
    return sum(u.trays for u in uses if peak or not u.transient)


def describe(plan: Plan) -> list[str]:
    """Lines for ``qdd plan``: trays and GPUs per part, held-but-unusable GPUs, peak and steady."""
    uses = tray_uses(plan)
    if not uses:
        return [f"Trays: no ComputeDomain, no IMEX claim: pods pack by GPUs (at least {plan.min_nodes} nodes)"]
    lines = ["Trays (one IMEX channel claim per tray under NVIDIA's DRA driver, docs/placement.md):"]
    for u in uses:
        lost = f", {u.unusable} held but unusable" if u.unusable else ""
        when = " while it runs" if u.transient else ""
        lines.append(f"  {u.part}: {u.trays} trays{when} = {u.held} GPUs held for {u.gpus} asked{lost}; {u.claims}")
    steady, peak = trays(plan, peak=False), trays(plan)
    gpn = plan.gpus_per_node
    lines.append(f"  in all: {peak} trays ({peak * gpn} GPUs) while the preflight runs, {steady} trays "
                 f"({steady * gpn} GPUs) after; fewest trays for the engines' {plan.gpus} GPUs: {-(-plan.gpus // gpn)}")
    return lines
