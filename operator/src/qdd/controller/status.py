"""Status of a QwenDisaggDeployment from its plan and its observed children. Pure.

Conditions follow metav1.Condition and kstatus: ``Ready`` is the summary users wait on;
``Reconciling``/``Stalled`` are kstatus's abnormal-true pair (Flux, ``kubectl wait``, Argo CD
agree on them); ``Progressing``/``Degraded`` are the Argo-style pair; ``PlanValid`` and
``ComputeDomainReady`` say why. lastTransitionTime moves only when a condition's status flips.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import labels, names
from ..api import conditions as C
from ..canary import CanaryState
from ..canary.accuracy import AccuracyState
from ..canary.registration import Registration
from ..plan import Plan
from ..plan.summary import summary
from ..preflight.verdict import Verdict
from .groups import GroupState, pod_ready
from .nodeloss import LostPod, lost_pods
from .peers import pending_text, prefill_pod_uids
from .platform import PlatformVerdict
from .rollout import Rollout
from .schedfacts import causes_of
from .stall import progress, progress_key, stalled
from .status_conditions import RoleCount, _Facts, conditions
from .status_patch import drop_none, status_patch, without_times

__all__ = ["Observed", "compute_status", "drop_none", "ready_ignoring_rollout", "rollout_status", "status_patch",
           "without_times"]


@dataclass(frozen=True)
class Observed:
    """What the reconcile saw: children by (kind, name), and the multi-pod groups' states."""

    children: dict[tuple[str, str], dict[str, Any]]
    groups: list[GroupState]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _), o in sorted(self.children.items()) if k == kind]


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


GANG_WAIT = "waiting for minCount pods from a gang"
"""The GangScheduling plugin's permit message (k8s.io/kubernetes v1.36.3): a member that fits, waiting
for the rest of its gang. It states no cause of its own (qdd.controller.schedfacts)."""


def _engine_pods(obs: Observed) -> list[dict[str, Any]]:
    """Every pod but the weight cache's prefetch pods: a tray whose prefetch waits or fails leaves
    the engines serving from the claim, and is reported in status.weightCache, not as a stall."""
    return [p for p in obs.of_kind("Pod") if (p["metadata"].get("labels") or {}).get(labels.ROLE) != "weight-cache"]


def _unschedulable(obs: Observed) -> str:
    """``; N pods unschedulable (POD: scheduler message)`` — why a rollout waits, in the condition
    users read, instead of only in ``kubectl describe pod``; the pod named is one whose message says
    why, if any does. Nothing while every such pod only waits for the rest of its gang: every gang
    says so for a moment while it forms (two status writes per deployment in make bench-scale, for a
    message that named no problem); when a gang cannot be placed, one of its pods carries the
    scheduler's reason (the others wait for it)."""
    stuck = []
    for pod in _engine_pods(obs):
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                stuck.append((pod["metadata"]["name"], (c.get("message") or "").strip()))
    if all(GANG_WAIT in why and not causes_of(why) for _, why in stuck):
        return ""
    name, why = next(((n, w) for n, w in stuck if GANG_WAIT not in w), stuck[0])
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
    for r in (plan.prefill, plan.decode):
        if r.compile_cache_key is not None:
            out["plan"][f"{r.role}CompileCacheKey"] = r.compile_cache_key
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
    if plan is not None and ((cr.get("status") or {}).get("rollout") or {}).get("generation",
                                                                            plan.generation) != plan.generation:
        recorded = {}  # a new target generation: its pods replace no peer (qdd.controller.peers.prefill_pod_uids)
    desired = {p.name for p in plan.prefill.pods} if plan is not None else set(recorded)
    current = prefill_pod_uids(list(obs.children.values()), plan.generation if plan is not None else None)
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
                   canary: CanaryState | None = None, peer_pending: dict[str, Any] | None = None,
                   compute_domain: PlatformVerdict | None = None,
                   registration: Registration | None = None,
                   accuracy: AccuracyState | None = None) -> dict[str, Any]:
    """The whole ``.status``, a pure function of the resource and what was observed. ``errors``:
    plan errors (empty when the spec is valid). ``compute_domain_ready``: None when no
    ComputeDomain is used. ``kv``: the KV-transfer preflight's verdict, None when it is off.
    ``peer_restart``: why decode groups were recycled in this pass (a replaced prefill pod); kept
    in ``status.peerRestart`` until decode is all Ready again. ``placed``: the Placed condition's
    (status, reason, message), qdd.controller.placement. ``canary``: the canary's state
    (qdd.controller.canary; None: not considered, as for the first computation of a pass).
    ``peer_pending``: a burst of prefill replacements whose decode recycle waits (qdd.controller.peers.burst),
    kept in ``status.peerRestartPending``; Ready is False meanwhile. ``compute_domain``: the platform verdict
    behind ``compute_domain_ready`` (qdd.controller.platform), whose reason and message ComputeDomainReady
    takes; None: the plain Ready/NotReady. ``registration``: which serving endpoints the router lists
    (qdd.controller.registration); None: not considered (Ready does not wait for it). ``accuracy``: the
    accuracy gate's state (qdd.canary.accuracy); None: no gate."""
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
               _lost(obs), peer_pending=pending_text(peer_pending) if peer_pending else None,
               compute_domain=compute_domain, registration=registration, accuracy=accuracy)
    record = None
    if plan is not None:
        r = rollout or {}
        record = progress((cr.get("status") or {}).get("progress"), progress_key(
            str(r.get("generation") or plan.generation), str(r.get("phase") or ""), (f.prefill.ready, f.decode.ready),
            kv.status if kv is not None else "off", f.cd_ok, f.router_ok), now)
        if not f.serving:
            f = replace(f, stall=stalled(record, now, plan.spec.rollout.progress_deadline_seconds,
                                         plan.spec.cluster.startup_timeout_seconds, _engine_pods(obs),
                                         kv.message if kv is not None and kv.status == "False" else None))
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
        "peerRestartPending": peer_pending,
        "prefillPods": _prefill_record(cr, plan, obs) or None,
        "rollout": rollout if rollout is not None else (cr.get("status") or {}).get("rollout"),
        "progress": record,
    }
    if plan is not None:
        status.update(_plan_status(plan, name, meta.get("namespace") or "default", kv, obs))
        status["canary"] = canary.record if canary is not None else (cr.get("status") or {}).get("canary")
        status["accuracy"] = accuracy.record if accuracy is not None else (cr.get("status") or {}).get("accuracy")
    else:
        # Nothing is applied or pruned for an invalid spec: what described the children still holds.
        for k in ("plan", "routerEndpoint", "kvTransfer", "warnings", "canary", "accuracy"):
            if (cr.get("status") or {}).get(k) is not None:
                status[k] = cr["status"][k]
    return drop_none(status)


