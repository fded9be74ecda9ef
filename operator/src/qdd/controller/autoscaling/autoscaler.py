"""The autoscaler in the reconcile pass: the counts to lay out (every pass) and the decision (once per
``spec.autoscaling.periodSeconds``), around the pure policy :func:`qdd.autoscale.decide`.

Two calls from qdd.controller.reconcile:

- :meth:`Autoscaler.layout` (mode On), before render: the endpoint counts of both roles from their
  QwenDisaggRoleScale objects, within the bounds and the GPU budget, with scale-down by draining
  (:mod:`.actuate`, :mod:`.drain`). Returns the counts render lays out; writes only pod labels (a
  drain begun or called off) and the adapters' status.
- :meth:`Autoscaler.status` (modes Advise and On), in the status step: when a period has passed, one
  decision from the engines' metrics (qdd.controller.observer), the performance profile and the
  counts; mode On writes each Planner-driven role's target through its ``/scale``. Adds
  status.autoscaling and the SLOAttainable condition.

Memory per deployment: the policy's state (also kept in status.autoscaling.policyState, read back
after a restart), when the next decision is due, and the last snapshot for the status.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import names
from ...api.autoscaling import AutoscalingSpec
from ...api.rolescale import KIND as ROLE_SCALE
from ...autoscale import Counts, PolicyState, RoleCounts, config_from_spec, decide
from ...autoscale.types import ROLES
from ...plan import Plan
from ...plan.router import selector
from ...plan.startup import expected_starts
from ..kube import Kube
from ..observer import Observer
from . import metrics as M
from .actuate import RoleActuation, RoleInput, actuate, starting_on_top
from .drain import DRAIN_TIMEOUT_S, drain_progress
from .endpoints import ENGINE_ROLES, Endpoint, endpoints, held_gpus, started_seconds
from .inputs import observation, predicted_ms, profile_problem, startup_seconds
from .kubeio import ProfileSource, mark_draining, role_scale_status, scale
from .state import dump, load
from .status import RoleView, Snapshot, autoscaling_status, slo_condition

log = logging.getLogger("qdd.autoscaler")
Key = tuple[str, str]
DRAIN_RECHECK_S = 2.0
"""While an endpoint drains, its deployment is looked at again this often (its engines' reads move
on without a watch event)."""


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bounds(a: AutoscalingSpec, role: str) -> Any:
    return a.prefill if role == "prefill" else a.decode


@dataclass
class _Memory:
    state: PolicyState | None = None
    due: float = 0.0
    snapshot: Snapshot | None = None
    roles: dict[str, RoleView] = field(default_factory=dict)


class Autoscaler:
    """``requeue(key, seconds)``: queue a pass later (the operator's work queue; None: never)."""

    def __init__(self, kube: Kube, observer: Observer, clock: Callable[[], float] = time.time,
                 profiles: ProfileSource | None = None):
        self.kube, self.observer, self.clock = kube, observer, clock
        self.profiles = profiles or ProfileSource(kube)
        self.requeue: Callable[[Key, float], None] | None = None
        self._mem: dict[Key, _Memory] = {}

    def forget(self, namespace: str, name: str) -> None:
        self._mem.pop((namespace, name), None)
        self.profiles.forget(namespace, name)
        M.forget(namespace, name)

    # --- every pass: the counts to lay out --------------------------------------------------------------

    def layout(self, cr: dict[str, Any], plan: Plan, observed: list[dict[str, Any]], slot: str,
               stable: bool) -> tuple[int, int] | None:
        """(prefill, decode) endpoints to lay out, or None to lay out the spec's (no autoscaling, Off,
        Advise). ``slot``: the target slot of the rollout; ``stable``: no generation is being
        rolled (drains begin only then)."""
        a, (ns, name) = plan.spec.autoscaling, (cr["metadata"]["namespace"], cr["metadata"]["name"])
        if a is None or a.mode == "Off":
            if (ns, name) in self._mem:
                self.forget(ns, name)
            return None
        mem = self._mem.setdefault((ns, name), _Memory())
        eps = endpoints(observed, plan.generation)
        if a.mode == "Advise":
            mem.roles = {r: self._view(eps[r], plan.role(r).endpoints) for r in ENGINE_ROLES}
            return None
        now = self.clock()
        adapters = {o["metadata"]["name"]: o for o in observed if o.get("kind") == ROLE_SCALE}
        roles = {r: self._input(a, plan, r, adapters.get(names.role_scale(name, r)), eps[r], observed, slot, now)
                 for r in ENGINE_ROLES}
        acts = actuate(roles, held_gpus(observed), self._cap(a, plan), stable)
        for r, act in acts.items():
            self._write(cr, r, act, eps[r], adapters.get(names.role_scale(name, r)), plan, now)
        mem.roles = {r: RoleView(x.effective, x.ready, x.pending, x.draining, cancellable=x.cancellable)
                     for r, x in acts.items()}
        if self.requeue is not None and any(x.draining or x.start_drain for x in acts.values()):
            self.requeue((ns, name), DRAIN_RECHECK_S)
        return acts["prefill"].effective, acts["decode"].effective

    @staticmethod
    def _view(eps: dict[int, Endpoint], n: int) -> RoleView:
        draining = sum(1 for i, e in eps.items() if i < n and e.draining)
        ready = sum(1 for i, e in eps.items() if i < n and e.ready and not e.draining)
        pending = max(n - ready - draining, 0)
        return RoleView(n, ready, pending, draining, cancellable=min(starting_on_top(eps, n, frozenset()), pending))

    @staticmethod
    def _cap(a: AutoscalingSpec, plan: Plan) -> int:
        """gpuBudget, and the NVLink domain when the deployment must stay in one (a plan beyond it is invalid)."""
        if plan.spec.cluster.same_nvlink_domain and plan.gpu.multi_node_nvlink:
            return min(a.gpu_budget, plan.gpu.nvlink_domain_nodes * plan.gpus_per_node)
        return a.gpu_budget

    def _input(self, a: AutoscalingSpec, plan: Plan, role: str, adapter: dict[str, Any] | None,
               eps: dict[int, Endpoint], observed: list[dict[str, Any]], slot: str, now: float) -> RoleInput:
        b, spec_count = _bounds(a, role), (plan.spec.prefill if role == "prefill" else plan.spec.decode).endpoints
        asked = ((adapter or {}).get("spec") or {}).get("replicas", spec_count)
        wanted = min(max(int(asked), b.min_endpoints), b.max_endpoints)
        previous = max(eps, default=-1) + 1
        if plan.role(role).uses_statefulset:
            sts = next((o for o in observed if o.get("kind") == "StatefulSet"
                        and o["metadata"]["name"] == names.statefulset(plan.name, role, slot)), None)
            previous = max(previous, int(((sts or {}).get("spec") or {}).get("replicas") or 0))
        ns, lease = plan.namespace, float(plan.spec.kv_transfer.lease_seconds)
        drained = frozenset(i for i, e in eps.items() if e.draining and e.leader and drain_progress(
            role, e.drain_since or now, now, self.observer.reads_of(ns, plan.name, e.leader), lease).done)
        return RoleInput(wanted, previous, plan.role(role).gpus_per_endpoint, eps, drained, b.min_endpoints)

    def _write(self, cr: dict[str, Any], role: str, act: RoleActuation, eps: dict[int, Endpoint],
               adapter: dict[str, Any] | None, plan: Plan, now: float) -> None:
        ns = cr["metadata"]["namespace"]
        for pod in act.start_drain:
            mark_draining(self.kube, ns, pod, True, now)
            M.DRAINS.labels(role, "started").inc()
            self.kube.event(cr, "Normal", "EndpointDraining", f"{role} endpoint {pod}: out of the router; removed once "
                            "its requests and KV leases are done")
        for pod in act.cancel_drain:
            mark_draining(self.kube, ns, pod, False, now)
            M.DRAINS.labels(role, "cancelled").inc()
            self.kube.event(cr, "Normal", "EndpointDrainCancelled", f"{role} endpoint {pod}: wanted again, back in "
                            "the router")
        for i in act.dropped:
            e = eps[i]
            if e.draining:
                timeout = now - (e.drain_since or now) >= DRAIN_TIMEOUT_S
                M.DRAINS.labels(role, "timeout" if timeout else "removed").inc()
                self.kube.event(cr, "Warning" if timeout else "Normal", "EndpointRemoved",
                                f"{role} endpoint {e.leader}: drained in {now - (e.drain_since or now):.0f} s, removed"
                                + (" after the drain timeout, requests may have been cut" if timeout else ""))
        if adapter is not None:
            role_scale_status(self.kube, adapter, {
                "replicas": len([e for e in eps.values() if e.pods]), "readyReplicas": act.ready,
                "draining": act.draining, "effective": act.effective, "message": act.note,
                "selector": ",".join(selector(plan.name, role, plan.generation))})

    # --- once per period: the decision --------------------------------------------------------------------

    def status(self, status: dict[str, Any], cr: dict[str, Any], plan: Plan | None,
               observed: list[dict[str, Any]]) -> dict[str, Any]:
        """``status`` with status.autoscaling and SLOAttainable (changed in place and returned). A spec
        that does not plan keeps what it had; no autoscaling (or Off) removes both."""
        old = cr.get("status") or {}
        if plan is None:
            keep = [c for c in old.get("conditions") or [] if c.get("type") == "SLOAttainable"]
            status["conditions"] = list(status["conditions"]) + keep
            if old.get("autoscaling") is not None:
                status["autoscaling"] = old["autoscaling"]
            return status
        a = plan.spec.autoscaling
        if a is None or a.mode == "Off":
            return status
        snap = self._decide(cr, plan, observed, a)
        cond = slo_condition(a, snap, cr["metadata"].get("generation"))
        prev = next((c for c in old.get("conditions") or [] if c.get("type") == cond["type"]), None)
        cond["lastTransitionTime"] = (prev["lastTransitionTime"] if prev and prev.get("status") == cond["status"]
                                      and prev.get("lastTransitionTime") else _rfc3339(self.clock()))
        status["conditions"] = list(status["conditions"]) + [cond]
        status["autoscaling"] = autoscaling_status(a, snap)
        return status

    def _decide(self, cr: dict[str, Any], plan: Plan, observed: list[dict[str, Any]], a: AutoscalingSpec) -> Snapshot:
        key = (cr["metadata"]["namespace"], cr["metadata"]["name"])
        mem, now = self._mem.setdefault(key, _Memory()), self.clock()
        last = mem.snapshot
        if last is not None and last.mode == a.mode and now < mem.due:
            # Between decisions: the decision's numbers, this pass's counts.
            roles = {r: dataclasses.replace(v, observed_ms=last.roles.get(r, v).observed_ms,
                                            predicted_ms=last.roles.get(r, v).predicted_ms) for r, v in mem.roles.items()}
            return dataclasses.replace(last, roles=roles, gpus_held=held_gpus(observed))
        mem.due = now + a.period_seconds
        if self.requeue is not None:
            self.requeue(key, a.period_seconds)
        started = time.process_time()
        snap = self._decision(cr, plan, observed, a, mem, now)
        mem.snapshot = snap
        M.DECISION_SECONDS.observe(time.process_time() - started)
        return snap

    def _decision(self, cr: dict[str, Any], plan: Plan, observed: list[dict[str, Any]], a: AutoscalingSpec,
                  mem: _Memory, now: float) -> Snapshot:
        ns, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
        startup, source = startup_seconds(a.startup_seconds, started_seconds(observed),
                                          expected_starts(plan.spec, plan.checkpoint)["restart"].total)
        profile, ptext = self.profiles.get(ns, name)
        base = Snapshot(a.mode, _rfc3339(now), roles=dict(mem.roles), profile=ptext, startup_seconds=startup,
                        startup_source=source, gpus_held=held_gpus(observed),
                        policy_state=(cr.get("status") or {}).get("autoscaling", {}).get("policyState"))
        M.GPUS_HELD.labels(ns, name).set(base.gpus_held or 0)
        M.GPU_BUDGET.labels(ns, name).set(a.gpu_budget)
        judged = self.observer.judgement(ns, name)
        w, isl0, osl0 = plan.spec.observe.window_seconds, plan.spec.workload.isl, plan.spec.workload.osl
        obs = (observation(now, judged[0].roles["prefill"], judged[0].roles["decode"], a.targets.percentile, w,
                           isl0, osl0) if judged is not None else None)
        problem = ptext if profile is None else (
            profile_problem(profile, a.targets.ttft_ms, a.targets.tpot_ms, obs.mean_isl if obs else isl0,
                            obs.mean_osl if obs else osl0))
        if profile is None or problem is not None:
            M.DECISIONS.labels(ns, name, a.mode, "no-profile").inc()
            return dataclasses.replace(base, message=problem or ptext, no_profile=True, observation=obs)
        if obs is None:
            M.DECISIONS.labels(ns, name, a.mode, "no-metrics").inc()
            return dataclasses.replace(base, message="waiting for two reads of the engines' metrics (spec.observe)")
        if mem.state is None:
            mem.state = load(base.policy_state)
        # Pending: laid out, not Ready (pods not created, scheduling, starting, restarting); of them,
        # those a lower count drops at once (on top of every Ready one) are what the policy may
        # cancel without a hold, as Dynamo's replay cancels its starting workers in the offline loop.
        counts = Counts(*(RoleCounts(mem.roles[r].ready, mem.roles[r].pending, mem.roles[r].draining,
                                     mem.roles[r].cancellable)
                          if r in mem.roles else RoleCounts(0) for r in ENGINE_ROLES))
        d = decide(obs, profile, counts, config_from_spec(plan.spec, startup), mem.state)
        mem.state = d.state
        if a.mode == "On":
            self._scale(cr, a, d, observed)
        roles = {}
        for r in ENGINE_ROLES:
            v = mem.roles.get(r, RoleView())
            load_now = (obs.request_rate_rps if r == "prefill" else judged[0].roles["decode"].running)  # type: ignore[index]
            seen = obs.ttft_ms if r == "prefill" else obs.tpot_ms
            roles[r] = dataclasses.replace(v, observed_ms=seen, predicted_ms=predicted_ms(profile, r, load_now / max(v.ready, 1)))
        M.DECISIONS.labels(ns, name, a.mode, "decided").inc()
        snap = dataclasses.replace(base, decision=d, observation=obs, roles=roles, policy_state=dump(d.state))
        self._gauges(ns, name, a, snap)
        return snap

    def _scale(self, cr: dict[str, Any], a: AutoscalingSpec, d: Any, observed: list[dict[str, Any]]) -> None:
        """Write each Planner-driven role's target through its QwenDisaggRoleScale's /scale."""
        ns, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
        adapters = {o["metadata"]["name"]: o for o in observed if o.get("kind") == ROLE_SCALE}
        for r in ROLES:
            obj = adapters.get(names.role_scale(name, r))
            if _bounds(a, r).driver != "Planner" or obj is None:
                continue
            have, want = (obj.get("spec") or {}).get("replicas"), d.of(r).target
            if have != want:
                scale(self.kube, ns, obj["metadata"]["name"], want)
                M.SCALE_WRITES.labels(r, "up" if have is None or want > have else "down").inc()
                log.info("%s/%s: %s %s -> %s (%s)", ns, name, r, have, want, d.of(r).reason)

    @staticmethod
    def _gauges(ns: str, name: str, a: AutoscalingSpec, s: Snapshot) -> None:
        d = s.decision
        assert d is not None and s.observation is not None
        M.SLO_ATTAINABLE.labels(ns, name).set(1 if d.slo_attainable else 0)
        M.REQUEST_RATE.labels(ns, name, "observed").set(s.observation.request_rate_rps)
        M.REQUEST_RATE.labels(ns, name, "forecast").set(d.forecast_rate_rps)
        for r in ROLES:
            v = s.roles.get(r, RoleView())
            M.TARGET.labels(ns, name, r).set(d.of(r).target)
            M.NEEDED.labels(ns, name, r).set(d.of(r).needed)
            M.EFFECTIVE.labels(ns, name, r).set(v.effective)
            M.DRAINING.labels(ns, name, r).set(v.draining)
            target = a.targets.ttft_ms if r == "prefill" else a.targets.tpot_ms
            M.LATENCY.labels(ns, name, r, "target").set(target / 1000.0)
            for kind, ms in (("observed", v.observed_ms), ("predicted", v.predicted_ms)):
                if ms is not None:
                    M.LATENCY.labels(ns, name, r, kind).set(ms / 1000.0)
