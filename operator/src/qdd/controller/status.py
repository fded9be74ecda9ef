"""Status of a QwenDisaggDeployment from its plan and its observed children. Pure.

Conditions follow metav1.Condition and kstatus: ``Ready`` is the summary users wait on;
``Reconciling``/``Stalled`` are kstatus's abnormal-true pair (Flux, ``kubectl wait``, Argo CD
agree on them); ``Progressing``/``Degraded`` are the Argo-style pair; ``PlanValid`` and
``ComputeDomainReady`` say why. lastTransitionTime moves only when a condition's status flips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import labels, names
from ..api import conditions as C
from ..api.conditions import Reason
from ..canary import CanaryState
from ..plan import Plan
from ..plan.summary import summary
from ..preflight.verdict import Verdict
from .groups import GroupState, pod_ready
from .nodeloss import LostPod, lost_pods
from .peers import prefill_pod_uids
from .platform import PlatformVerdict
from .rollout import Rollout


@dataclass(frozen=True)
class Observed:
    """What the reconcile saw: children by (kind, name), and the multi-pod groups' states."""

    children: dict[tuple[str, str], dict[str, Any]]
    groups: list[GroupState]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _), o in sorted(self.children.items()) if k == kind]


@dataclass(frozen=True)
class RoleCount:
    endpoints: int
    ready: int
    gpus: int
    pods: int
    present_endpoints: int


def _sts_role(obs: Observed, cr: str, role: str, endpoints: int, gpus_per_pod: int, slot: str) -> RoleCount:
    sts = obs.children.get(("StatefulSet", names.statefulset(cr, role, slot)))
    pods = [p for p in obs.of_kind("Pod") if (p["metadata"].get("labels") or {}).get(labels.ROLE) == role
            and any(r.get("kind") == "StatefulSet" for r in p["metadata"].get("ownerReferences") or [])]
    st = (sts or {}).get("status") or {}
    # Until the StatefulSet controller has seen the latest template, updateRevision names the old
    # one: the old pods would count as current (Ready at the new generation before any roll).
    current = st.get("updateRevision") if st.get("observedGeneration") == (sts or {}).get("metadata", {}).get(
        "generation") else None
    ready = sum(1 for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp")
                and p["metadata"]["labels"].get("controller-revision-hash") == current)
    return RoleCount(endpoints, min(ready, endpoints), endpoints * gpus_per_pod, len(pods), len(pods))


def _group_role(obs: Observed, role: str, endpoints: int, gpus_per_endpoint: int) -> RoleCount:
    mine = [g for g in obs.groups if g.role == role]
    return RoleCount(endpoints, sum(1 for g in mine if g.ready), endpoints * gpus_per_endpoint,
                     sum(len(g.present) for g in mine), sum(1 for g in mine if g.present))


def _cond(ctype: str, ok: bool | None, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """A condition; ``ok`` None is status Unknown (e.g. a preflight that has not reported yet)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def _merge_times(new: list[dict[str, Any]], old: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    before = {c["type"]: c for c in old or []}
    for c in new:
        prev = before.get(c["type"])
        c["lastTransitionTime"] = prev["lastTransitionTime"] if prev and prev.get("status") == c["status"] and prev.get(
            "lastTransitionTime") else now
    return new


def _number(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _transports(v: Any) -> list[str]:
    if isinstance(v, dict):  # the raw result's {"data": [...]} form
        v = v.get("data")
    return [str(x) for x in v] if isinstance(v, list) else []


def _unschedulable(obs: Observed) -> str:
    """``; N pods unschedulable (POD: scheduler message)`` — why a rollout waits, in the condition
    users read, instead of only in ``kubectl describe pod``."""
    stuck = []
    for pod in obs.of_kind("Pod"):
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                stuck.append((pod["metadata"]["name"], (c.get("message") or "").strip()))
    if not stuck:
        return ""
    name, why = stuck[0]
    return f"; {len(stuck)} pod{'s' if len(stuck) > 1 else ''} unschedulable ({name}: {why[:300]})"


def _lost(obs: Observed) -> tuple[tuple[str, LostPod], ...]:
    """(role, pod) of every engine pod (both roles, StatefulSet ones too) on a lost node."""
    engine = {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(labels.ROLE) for p in obs.of_kind("Pod")}
    return tuple((engine[p.name] or "", p) for p in lost_pods(
        [o for o in obs.of_kind("Pod") if engine[o["metadata"]["name"]] in ("prefill", "decode")]))


def _role_counts(cr: dict[str, Any], plan: Plan | None, obs: Observed, role: str) -> RoleCount:
    """Endpoints, ready endpoints, GPUs and pods of one role, as observed (desired only, without a plan)."""
    if plan is None:
        return RoleCount(int(((cr.get("spec") or {}).get(role) or {}).get("endpoints") or 0), 0, 0, 0, 0)
    r = plan.prefill if role == "prefill" else plan.decode
    if r.uses_statefulset:
        return _sts_role(obs, cr["metadata"]["name"], role, r.endpoints, r.gpus_per_pod, plan.slot)
    return _group_role(obs, role, r.endpoints, r.gpus_per_endpoint)


def _router_available(plan: Plan | None, obs: Observed, name: str) -> bool:
    """The router Deployment has caught up with its generation and has its replicas available."""
    if plan is None or plan.router.replicas == 0:
        return True
    dep = obs.children.get(("Deployment", names.router(name)))
    if dep is None:
        return False
    st = dep.get("status") or {}
    return st.get("observedGeneration") == dep["metadata"].get("generation") and \
        (st.get("availableReplicas") or 0) >= plan.router.replicas


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
    compute_domain: PlatformVerdict | None = None
    """Why the ComputeDomain is (not) Ready, naming the tray (qdd.controller.platform)."""

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
    def all_ready(self) -> bool:
        return self.serving and (self.canary is None or self.canary.passed is True)

    @property
    def serving(self) -> bool:
        """Everything but the canary is ready: the state in which the canary is sent."""
        return (self.valid and self.cd_ok and self.endpoints_ready and self.router_ok
                and (self.kv is None or self.kv.passed) and self.serving_current and not self.replacing)

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
    elif f.no_domain_fits and f.placed is not None:
        reason, msg = Reason.INSUFFICIENT_NVLINK_DOMAIN_CAPACITY, f"{f.counts}; {f.placed[2]}"
    elif not f.cd_ok:
        reason, msg = Reason.READY_COMPUTE_DOMAIN_NOT_READY, f.counts
    elif f.kv is not None and not f.kv.passed and f.endpoints_ready:
        reason, msg = Reason.KV_TRANSFER_NOT_READY, f"{f.counts}; KV transfer: {f.kv.message}"
    elif f.canary is not None and f.canary.passed is not True and not f.all_ready and f.serving:
        reason, msg = f.canary.reason, f"{f.counts}; {f.canary.message}"
    else:
        reason, msg = (Reason.ALL_ENDPOINTS_READY if f.all_ready else Reason.ENDPOINTS_NOT_READY), f.counts
    return _cond(C.READY, f.all_ready, reason, msg, f.generation)


def _progress(f: _Facts, ctype: str) -> dict[str, Any]:
    """Progressing (Argo) and Reconciling (kstatus) say the same: converging towards Ready."""
    progressing = f.valid and not f.all_ready
    reason = Reason.ROLLING_OUT if progressing else (Reason.RECONCILE_COMPLETE if f.valid else Reason.INVALID_SPEC)
    return _cond(ctype, progressing, reason, f.counts if progressing else "", f.generation)


def _stalled(f: _Facts) -> dict[str, Any]:
    return _cond(C.STALLED, not f.valid, Reason.AS_EXPECTED if f.valid else Reason.INVALID_SPEC,
                 "" if f.valid else f.errors_text, f.generation)


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
    if f.plan is not None:
        out.append(_disruption(f.plan, f.generation))
    return out + [_ready(f), _progress(f, C.PROGRESSING), _progress(f, C.RECONCILING), _stalled(f)]


def _plan_status(plan: Plan, name: str, ns: str, kv: Verdict | None, obs: Observed) -> dict[str, Any]:
    """status.plan (the effective sizing), the router's URL and status.kvTransfer (the preflight's numbers)."""
    s = summary(plan)
    out: dict[str, Any] = {"plan": {
        "prefillMaxNumBatchedTokens": plan.prefill.max_num_batched_tokens,
        "decodeMaxNumSeqs": plan.decode.max_num_seqs,
        "decodeMaxCudagraphCaptureSize": plan.decode.max_cudagraph_capture_size,
        "decodeCapacity": s["decodeCapacity"]["predicted"],
        "kvBlockSize": s["decodeCapacity"]["cache"]["blockSize"],
        "nodes": plan.min_nodes,
        "kvCacheDtype": plan.kv_cache_dtype,
        "kvCacheDtypeSource": plan.kv_cache_dtype_source,
        "speculativeTokens": plan.spec.speculative.num_speculative_tokens if plan.spec.speculative else 0,
    }}
    if plan.prefill.max_num_seqs is not None:
        out["plan"]["prefillMaxNumSeqs"] = plan.prefill.max_num_seqs
    if plan.warnings:
        out["warnings"] = list(plan.warnings)
    if plan.router.replicas > 0:
        out["routerEndpoint"] = f"http://{names.router(name)}.{ns}.svc:{plan.router.port}"
    if kv is not None:
        res = kv.result or {}
        req: dict[str, Any] = res["request_ms"] if isinstance(res.get("request_ms"), dict) else {}
        # The result is the fetch container's output: only schema-typed values reach the status
        # (one value of a wrong type and the API server refuses every status write).
        out["kvTransfer"] = {
            "passed": kv.passed if kv.status != "Unknown" else None, "reason": kv.reason,
            "bulkGbps": _number(res.get("bulk_gbps")), "requestMs": _number(req.get("coalesced")),
            "transports": _transports(res.get("transports")),
        }
    return out


def _prefill_record(cr: dict[str, Any], plan: Plan | None, obs: Observed) -> dict[str, str]:
    """status.prefillPods: the UIDs seen now, and the last UID of a desired prefill pod that is
    missing at this moment (deleted, not yet recreated): its replacement must still be recognised."""
    recorded = (cr.get("status") or {}).get("prefillPods") or {}
    desired = {p.name for p in plan.prefill.pods} if plan is not None else set(recorded)
    current = prefill_pod_uids(list(obs.children.values()))
    return {n: uid for n, uid in sorted(recorded.items()) if n in desired and n not in current} | current


def rollout_status(r: Rollout) -> dict[str, Any]:
    """status.rollout: the current generation and its slot, what the router serves, the phase."""
    return drop_none({"generation": r.generation, "slot": r.target, "serving": f"{r.serving[0]}/{r.serving[1]}",
                      "phase": r.phase, "previous": r.previous})


def ready_ignoring_rollout(status: dict[str, Any]) -> bool:
    """Ready as computed without a rollout: the target slot's endpoints, preflight and
    ComputeDomain are all there (the Surge's switch condition)."""
    return any(c.get("type") == C.READY and c.get("status") == "True" for c in status.get("conditions") or [])


def compute_status(cr: dict[str, Any], plan: Plan | None, errors: list[str], obs: Observed, now: str,
                   compute_domain_ready: bool | None, kv: Verdict | None = None,
                   peer_restart: str | None = None,
                   placed: tuple[bool | None, str, str] | None = None,
                   rollout: dict[str, Any] | None = None,
                   canary: CanaryState | None = None,
                   compute_domain: PlatformVerdict | None = None) -> dict[str, Any]:
    """The whole ``.status``, a pure function of the resource and what was observed. ``errors``:
    plan errors (empty when the spec is valid). ``compute_domain_ready``: None when no
    ComputeDomain is used. ``kv``: the KV-transfer preflight's verdict, None when it is off.
    ``peer_restart``: why decode groups were recycled in this pass (a replaced prefill pod); kept
    in ``status.peerRestart`` until decode is all Ready again. ``placed``: the Placed condition's
    (status, reason, message), qdd.controller.placement. ``canary``: the canary's state
    (qdd.controller.canary; None: not considered, as for the first computation of a pass).
    ``compute_domain``: the platform verdict behind ``compute_domain_ready`` (qdd.controller.platform),
    whose reason and message ComputeDomainReady takes; None: the plain Ready/NotReady."""
    meta = cr["metadata"]
    name = meta["name"]
    # A planned roll (pods of an older revision terminating) is progress, not degradation.
    broken = [g for g in obs.groups if g.broken or (g.terminating and not g.present and g.restarting)]
    decode = _role_counts(cr, plan, obs, "decode")
    if peer_restart is None and decode.ready < decode.endpoints:
        peer_restart = (cr.get("status") or {}).get("peerRestart")
    f = _Facts(name, meta.get("generation"), plan, errors, _role_counts(cr, plan, obs, "prefill"),
               decode, _router_available(plan, obs, name), compute_domain_ready, kv,
               broken, _unschedulable(obs), peer_restart, placed if plan is not None else None, rollout, canary,
               _lost(obs), compute_domain=compute_domain)
    p, d = f.prefill, f.decode
    status: dict[str, Any] = {
        "observedGeneration": f.generation,
        "conditions": _merge_times(conditions(f), (cr.get("status") or {}).get("conditions") or [], now),
        "prefill": {"endpoints": p.endpoints, "readyEndpoints": p.ready, "gpus": p.gpus, "pods": p.pods},
        "decode": {"endpoints": d.endpoints, "readyEndpoints": d.ready, "gpus": d.gpus, "pods": d.pods},
        "prefillReady": f"{p.ready}/{p.endpoints}",
        "decodeReady": f"{d.ready}/{d.endpoints}",
        "gpus": p.gpus + d.gpus,
        "replicas": p.present_endpoints,
        "selector": f"{labels.DEPLOYMENT}={name},{labels.ROLE}=prefill",
        "peerRestart": peer_restart,
        "prefillPods": _prefill_record(cr, plan, obs) or None,
        "rollout": rollout if rollout is not None else (cr.get("status") or {}).get("rollout"),
    }
    if plan is not None:
        status.update(_plan_status(plan, name, meta.get("namespace") or "default", kv, obs))
        status["canary"] = canary.record if canary is not None else (cr.get("status") or {}).get("canary")
    else:
        # Nothing is applied or pruned for an invalid spec: what described the children still holds.
        for k in ("plan", "routerEndpoint", "kvTransfer", "warnings", "canary"):
            if (cr.get("status") or {}).get(k) is not None:
                status[k] = cr["status"][k]
    return drop_none(status)


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) that turns the stored status ``old`` into ``new``, or None
    when they differ in nothing but transition times. A merge patch keeps every key it does not
    mention, so the keys ``new`` no longer has are sent as null (e.g. ``kvTransfer.bulkGbps`` of
    an earlier preflight): otherwise they would stay, and the re-read status would never equal the
    computed one."""
    if without_times(old) == without_times(new):
        return None
    return _nulls_for_removed(old, new)


def _nulls_for_removed(old: Any, new: Any) -> Any:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out: dict[str, Any] = {k: None for k in old if k not in new}
    out.update({k: _nulls_for_removed(old.get(k), v) for k, v in new.items()})
    return out


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    """For change detection: the status minus transition times."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []]
    return out


def drop_none(value: Any) -> Any:
    """The API server drops null fields; so do we, so that a re-read status compares equal."""
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value
