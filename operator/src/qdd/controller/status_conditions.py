"""The conditions of a QwenDisaggDeployment's status, from the facts a pass gathered. Pure.

Conditions follow metav1.Condition and kstatus: ``Ready`` is the summary users wait on;
``Reconciling``/``Stalled`` are kstatus's abnormal-true pair (Flux, ``kubectl wait``, Argo CD
agree on them); ``Progressing``/``Degraded`` are the Argo-style pair; ``PlanValid`` and
``ComputeDomainReady`` say why. How each maps to Argo CD's and kstatus's health: docs/rollouts.md
("How tools read it").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import names
from ..api import conditions as C
from ..api.conditions import Reason
from ..canary import CanaryState
from ..canary.accuracy import AccuracyState
from ..canary.registration import Registration
from ..plan import Plan
from ..preflight.verdict import Verdict
from .groups import GroupState
from .nodeloss import LostPod
from .platform import PlatformVerdict
from .stall import Stall, age_text


@dataclass(frozen=True)
class RoleCount:
    endpoints: int
    ready: int
    gpus: int
    pods: int
    present_endpoints: int



def _cond(ctype: str, ok: bool | None, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """A condition; ``ok`` None is status Unknown (e.g. a preflight that has not reported yet)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message, "observedGeneration": generation}



ERRORS_TEXT_LIMIT = 4096


@dataclass(frozen=True)
class _Facts:
    """What the conditions are computed from, gathered once."""

    name: str
    generation: int | None
    plan: Plan | None
    errors: list[str]
    prefill: RoleCount
    decode: RoleCount
    router_ok: bool
    compute_domain_ready: bool | None
    kv: Verdict | None
    broken: list[GroupState]
    unschedulable: str
    peer_restart: str | None = None
    """Decode groups recycled after a prefill replacement, until decode is all Ready again."""
    placed: tuple[bool | None, str, str] | None = None
    """(status, reason, message) of Placed (qdd.controller.placement), None without a plan."""
    rollout: dict[str, Any] | None = None
    """status.rollout (:func:`rollout_status`); None: not known in this pass (Ready ignores it)."""
    canary: CanaryState | None = None
    """The canary (qdd.controller.canary); None: not considered (no CanaryPassed condition)."""
    lost: tuple[tuple[str, LostPod], ...] = ()
    """(role, pod) of the engine pods on a NotReady or unreachable node (qdd.controller.nodeloss)."""
    stall: Stall | None = None
    """No progress past spec.rollout.progressDeadlineSeconds, and why (qdd.controller.stall)."""
    peer_pending: str | None = None
    """A burst of prefill replacements whose one decode recycle is still to come (qdd.controller.peers)."""
    compute_domain: PlatformVerdict | None = None
    """Why the ComputeDomain is (not) Ready, naming the tray (qdd.controller.platform)."""
    registration: Registration | None = None
    """Which serving endpoints the router lists (qdd.controller.registration); None: not considered."""
    accuracy: AccuracyState | None = None
    """The accuracy gate (spec.validation.accuracy, qdd.canary.accuracy); None: no gate (no AccuracyGatePassed)."""

    @property
    def serving_current(self) -> bool:
        """The router serves this spec's generation in the slot the counts are of."""
        r = self.rollout
        return r is None or r["serving"] == f"{r['generation']}/{r['slot']}"

    @property
    def no_domain_fits(self) -> bool:
        return self.placed is not None and self.placed[1] == Reason.INSUFFICIENT_NVLINK_DOMAIN_CAPACITY

    @property
    def valid(self) -> bool:
        return self.plan is not None

    @property
    def errors_text(self) -> str:
        """The plan errors for a condition message, at most ERRORS_TEXT_LIMIT characters: an error
        quotes what the spec has (an extraArgs token may be 8 KiB), and a status must stay small."""
        text = "; ".join(self.errors)
        if len(text) <= ERRORS_TEXT_LIMIT:
            return text
        return text[:ERRORS_TEXT_LIMIT] + f"… ({len(self.errors)} errors in all: `qdd plan -f` lists every one)"

    @property
    def endpoints_ready(self) -> bool:
        return self.prefill.ready == self.prefill.endpoints and self.decode.ready == self.decode.endpoints

    @property
    def cd_ok(self) -> bool:
        return self.compute_domain_ready is not False

    @property
    def canary_ok(self) -> bool:
        return self.canary is None or self.canary.passed is True

    @property
    def all_ready(self) -> bool:
        return self.serving and self.canary_ok and (self.accuracy is None or self.accuracy.passed is True)

    @property
    def ready_unregistered(self) -> bool:
        """Everything but the router's registration and the canary is ready: the state in which the
        router's list of registered endpoints is read (qdd.controller.registration)."""
        return (self.valid and self.cd_ok and self.endpoints_ready and self.router_ok
                and (self.kv is None or self.kv.passed) and self.serving_current and not self.replacing
                and self.peer_pending is None)

    @property
    def registered(self) -> bool:
        return self.registration is None or self.registration.complete

    @property
    def serving(self) -> bool:
        """Everything but the canary is ready, every endpoint registered with every router pod: the state
        in which the canary is sent."""
        return self.ready_unregistered and self.registered

    @property
    def replacing(self) -> bool:
        """A generation being replaced still has objects (Recreate: until its pods are gone)."""
        return self.rollout is not None and self.rollout["phase"] == "Recreating"

    @property
    def counts(self) -> str:
        p, d = self.prefill, self.decode
        lost = (f"; {len(self.lost)} pod{'s' if len(self.lost) > 1 else ''} on a NotReady or unreachable node "
                f"({', '.join(f'{lp.name} on {lp.node}' for _, lp in self.lost)}: see Degraded)") if self.lost else ""
        return (f"prefill {p.ready}/{p.endpoints}, decode {d.ready}/{d.endpoints} endpoints ready"
                + ("" if self.router_ok else ", router not available") + self.unschedulable + lost)


def _plan_valid(f: _Facts) -> dict[str, Any]:
    if f.plan is None:
        return _cond(C.PLAN_VALID, False, Reason.INVALID_SPEC, f.errors_text, f.generation)
    p, d = f.plan.prefill, f.plan.decode
    return _cond(C.PLAN_VALID, True, Reason.PLANNED, f"{f.plan.gpus} GPUs: {p.endpoints} x {p.topology_name} prefill + "
                 f"{d.endpoints} x {d.topology_name} decode", f.generation)


def _compute_domain(f: _Facts) -> dict[str, Any]:
    if f.compute_domain_ready is None:
        return _cond(C.COMPUTE_DOMAIN_READY, True, Reason.NOT_REQUIRED, "", f.generation)
    ok = f.compute_domain_ready
    cdv = f.compute_domain
    if cdv is not None and (cdv.reason != Reason.COMPUTE_DOMAIN_READY or not ok) and cdv.nodes:
        return _cond(C.COMPUTE_DOMAIN_READY, cdv.ready, cdv.reason, cdv.message, f.generation)
    if cdv is not None and cdv.reason not in (Reason.COMPUTE_DOMAIN_READY, Reason.COMPUTE_DOMAIN_NOT_READY):
        return _cond(C.COMPUTE_DOMAIN_READY, cdv.ready, cdv.reason, cdv.message, f.generation)
    return _cond(C.COMPUTE_DOMAIN_READY, ok, Reason.COMPUTE_DOMAIN_READY if ok else Reason.COMPUTE_DOMAIN_NOT_READY,
                 f"ComputeDomain {names.compute_domain(f.name, f.plan.slot if f.plan else 'a')} is "
                 + ("Ready" if ok else "not Ready yet (waiting for the NVIDIA DRA driver)"), f.generation)


def _degraded(f: _Facts) -> dict[str, Any]:
    if f.peer_restart:
        return _cond(C.DEGRADED, True, Reason.PEER_RESTARTED, f.peer_restart, f.generation)
    parts, told = [], set()
    for g in f.broken:
        stuck = next((p for p in g.lost if p.terminating), None)
        if g.broken or stuck is None:
            parts.append(f"{g.role} endpoint {g.endpoint}: {g.broken or 'pods terminating'}; recreating the whole group")
        else:  # only the pod on the lost node is left: nothing to do but wait for it or fence the node
            parts.append(f"{g.role} endpoint {g.endpoint}: {stuck.text}")
        told |= {p.name for p in g.lost if g.broken == p.text or p is stuck}
    parts += [f"{role}: {p.text}" for role, p in f.lost if p.name not in told]
    if not parts and f.canary is not None and f.canary.passed is False:
        return _cond(C.DEGRADED, True, f.canary.reason, f.canary.message, f.generation)
    if not parts and f.accuracy is not None and f.accuracy.passed is False:
        return _cond(C.DEGRADED, True, f.accuracy.reason, f.accuracy.message, f.generation)
    reason = Reason.NODE_NOT_READY if f.lost else (Reason.GROUP_RESTARTING if parts else Reason.AS_EXPECTED)
    return _cond(C.DEGRADED, bool(parts), reason, "; ".join(parts), f.generation)


def _kv_transfer(f: _Facts) -> dict[str, Any]:
    if f.kv is None:
        return _cond(C.KV_TRANSFER_READY, True, Reason.PREFLIGHT_DISABLED, "spec.kvTransfer.preflight.enabled is false",
                     f.generation)
    return _cond(C.KV_TRANSFER_READY, None if f.kv.status == "Unknown" else f.kv.passed, f.kv.reason, f.kv.message,
                 f.generation)


def _ready(f: _Facts) -> dict[str, Any]:
    """Ready, with the first cause that holds it back as the reason."""
    r = f.rollout
    if f.errors:
        reason, msg = Reason.INVALID_SPEC, f.errors_text
    elif r is not None and r["phase"] == "Recreating":
        reason, msg = Reason.RECREATING, (f"generation {r['generation']} replaces {r.get('previous') or 'the previous'} "
                                          f"(spec.rollout.strategy Recreate): the old generation's pods are deleted first, "
                                          f"nothing serves meanwhile; {f.counts}")
    elif r is not None and not f.serving_current:
        prev, serving = r.get("previous"), r["serving"].split("/")
        why = ("the slot still holds pods of a superseded generation, which go first; " if r["phase"] == "Superseding"
               else "")
        reason, msg = Reason.GENERATION_ROLLING_OUT, (
            f"generation {r['generation']} (slot {r['slot']}) is coming up next to generation {prev or serving[0]} "
            f"(slot {serving[1]}), which serves until the new one is Ready; {why}new generation: {f.counts}")
    elif f.peer_pending is not None:
        reason, msg = Reason.PEER_RESTART_PENDING, f"{f.counts}; {f.peer_pending}"
    elif f.no_domain_fits and f.placed is not None:
        reason, msg = Reason.INSUFFICIENT_NVLINK_DOMAIN_CAPACITY, f"{f.counts}; {f.placed[2]}"
    elif not f.cd_ok:
        reason, msg = Reason.READY_COMPUTE_DOMAIN_NOT_READY, f.counts
    elif f.kv is not None and not f.kv.passed and f.endpoints_ready:
        reason, msg = Reason.KV_TRANSFER_NOT_READY, f"{f.counts}; KV transfer: {f.kv.message}"
    elif f.registration is not None and not f.registration.complete and f.ready_unregistered:
        reason, msg = Reason.ENDPOINTS_NOT_REGISTERED, f"{f.counts}; {f.registration.message}"
    elif f.canary is not None and f.canary.passed is not True and not f.all_ready and f.serving:
        reason, msg = f.canary.reason, f"{f.counts}; {f.canary.message}"
    elif f.accuracy is not None and f.accuracy.passed is not True and f.serving and f.canary_ok:
        reason, msg = f.accuracy.reason, f"{f.counts}; the router serves this generation; {f.accuracy.message}"
    else:
        reason, msg = (Reason.ALL_ENDPOINTS_READY if f.all_ready else Reason.ENDPOINTS_NOT_READY), f.counts
    return _cond(C.READY, f.all_ready, reason, msg, f.generation)


def _progress(f: _Facts, ctype: str) -> dict[str, Any]:
    """Progressing (Argo) and Reconciling (kstatus) say the same: converging towards Ready."""
    progressing = f.valid and not f.all_ready
    reason = Reason.ROLLING_OUT if progressing else (Reason.RECONCILE_COMPLETE if f.valid else Reason.INVALID_SPEC)
    return _cond(ctype, progressing, reason, f.counts if progressing else "", f.generation)


def _stalled(f: _Facts) -> dict[str, Any]:
    if not f.valid:
        return _cond(C.STALLED, True, Reason.INVALID_SPEC, f.errors_text, f.generation)
    if f.stall is None or f.plan is None:
        return _cond(C.STALLED, False, Reason.AS_EXPECTED, "", f.generation)
    r = f.rollout
    serving = (f"; generation {r['serving'].split('/')[0]} (slot {r['serving'].split('/')[1]}) keeps serving"
               if r is not None and not f.serving_current and r.get("phase") != "Recreating" else "")
    return _cond(C.STALLED, True, Reason.PROGRESS_DEADLINE_EXCEEDED,
                 f"no progress for {age_text(f.stall.age_s)} (spec.rollout.progressDeadlineSeconds "
                 f"{f.plan.spec.rollout.progress_deadline_seconds}): {f.stall.cause}{serving}; {f.counts}", f.generation)


def _disruption(plan: Plan, generation: int | None) -> dict[str, Any]:
    """DisruptionProtected: a PodDisruptionBudget per role with two or more endpoints (at most one
    endpoint of it evicted at a time, qdd.render pdb.yaml.j2); a role of one endpoint gets none —
    minAvailable 1 would block every drain of its nodes — and this condition says a drain stops it."""
    single = [r for r in (plan.prefill, plan.decode) if r.endpoints == 1]
    if not single:
        return _cond(C.DISRUPTION_PROTECTED, True, Reason.DISRUPTION_BUDGETS,
                     "prefill and decode: a drain evicts at most one endpoint of each at a time", generation)
    roles = " and ".join(r.role for r in single)
    return _cond(C.DISRUPTION_PROTECTED, False, Reason.SINGLE_ENDPOINT_ROLE,
                 f"{roles} {'has' if len(single) == 1 else 'have'} one endpoint: no PodDisruptionBudget protects it, so "
                 f"a drain of its nodes stops {roles} until the endpoint is recreated elsewhere; run two endpoints to "
                 "keep serving through drains", generation)


def conditions(f: _Facts) -> list[dict[str, Any]]:
    """Every condition, in the order they are written (KVTransferReady only for a valid plan)."""
    out = [_plan_valid(f), _compute_domain(f), _degraded(f)]
    if f.valid:
        out.append(_kv_transfer(f))
    if f.placed is not None:
        out.append(_cond(C.PLACED, f.placed[0], f.placed[1], f.placed[2], f.generation))
    if f.canary is not None and f.valid:
        out.append(_cond(C.CANARY_PASSED, f.canary.passed, f.canary.reason, f.canary.message, f.generation))
    if f.accuracy is not None and f.valid:
        out.append(_cond(C.ACCURACY_GATE_PASSED, f.accuracy.passed, f.accuracy.reason, f.accuracy.message, f.generation))
    if f.plan is not None:
        out.append(_disruption(f.plan, f.generation))
    return out + [_ready(f), _progress(f, C.PROGRESSING), _progress(f, C.RECONCILING), _stalled(f)]


