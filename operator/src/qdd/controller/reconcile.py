"""One level-triggered reconcile per QwenDisaggDeployment: plan → render → apply → prune → status.

Safe to run at any time and from any trigger (spec change, child event, resync timer, restart):
it reads the custom resource and its children fresh, converges, and writes status only when it
changed. Triggers for a resource already being reconciled coalesce into one more pass.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import labels, names
from ..api import parse_resource
from ..api.conditions import Reason
from ..errors import SpecError
from ..hashing import content_hash
from ..plan import Plan, build_plan
from ..render import render_all
from ..render.trayclaims import POLICY, bind_domain, stale_claims
from .tray_repair import LOOP_FOR_S, RESYNC, claims_to_resync, looping_claims, pods_missed_by_policy
from . import metrics
from ..canary import CanaryState
from ..safetext import safe_value
from .autoscaling import Autoscaler
from .autoscaling.status import autoscaling_events
from .canary import CanaryChecker
from ..canary.accuracy import AccuracyState
from ..canary.registration import Registration
from .gates import start_gates
from .registration import POLL_S, RegistrationChecker, pod_url
from .children import diff, genuine, key, with_owner
from .groups import group_states, groups_to_delete, pods_to_create
from .kube import Kube
from .observer import Observer
from .rollout import (Rollout, decide, keep_unlabelled_templates, legacy_generation, pods_to_label, recorded_serving,
                      router_settled, slot_of, switched)
from .peers import BURST_WINDOW_S, burst, prefill_pod_uids, replaced, settled, stale_decode_groups
from .rendercache import RenderCache
from .events import transition_events
from .stall import seconds_to_check
from .status_inputs import Inputs, status_inputs
from .tray_watch import TrayWatch
from .serving import add_serving, forget_metrics, serving_events
from .status import Observed, compute_status, ready_ignoring_rollout, rollout_status, status_patch
from .status_patch import without_times
from .startup_logs import StartupLogs, add_startup
from .weight_cache import add_weight_cache, labels_to_set, weight_cache_events, weight_cache_root

log = logging.getLogger("qdd.reconcile")
REQUEUE_AFTER_WRITE_S = 2.0
STARTUP_PASS_DELAY_S = 10.0
"""How long after a start-up log read its own pass comes. status.startup is diagnostic: a read is
written by whichever pass comes first, most often the one for the next endpoint turning Ready, and
the reads of the window end in one status patch (issue 23: make bench-scale wrote status.startup
once per pod read, a patch of its own each, 563 status patches for 30 deployments)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(status: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


Rendered = tuple[Plan | None, list[dict[str, Any]], list[str]]
_RENDERED: RenderCache[Rendered] = RenderCache()
"""Plan and children of the last passes, per resource (qdd.controller.rendercache)."""


def _desired_cached(cr: dict[str, Any], gang: bool, slot: str = "a", serving: tuple[str, str] | None = None,
                    counts: tuple[int, int] | None = None) -> Rendered:
    """:func:`_desired`, reused for the same resource, spec, placement, slot, serving generation and
    endpoint counts; the caller gets copies. Render is a pure function of exactly these (the uid for
    the owner reference)."""
    meta = cr["metadata"]
    version = (meta.get("uid"), cr.get("apiVersion"), cr.get("kind"), content_hash(cr.get("spec"), 32))
    plan, desired, errors = _RENDERED.get((meta.get("namespace") or "", meta.get("name") or ""), version,
                                          (gang, slot, serving, counts), lambda: _desired(cr, gang, slot, serving, counts))
    return plan, copy.deepcopy(desired), list(errors)


def _desired(cr: dict[str, Any], gang: bool, slot: str = "a", serving: tuple[str, str] | None = None,
             counts: tuple[int, int] | None = None) -> tuple[Plan | None, list[dict[str, Any]], list[str]]:
    """(plan, the children it wants — exactly what `qdd render` prints, plus ownership — and the
    plan errors). ``gang``: the cluster serves the Workload API (render's gang placement); ``counts``:
    (prefill, decode) endpoints the autoscaler lays out (None: the spec's). Any failure, a bug
    included, is errors and no children, never an exception: one resource must not stop the
    reconciles of the others."""
    try:
        plan = build_plan(parse_resource(cr), slot, counts)
        return plan, [with_owner(o, cr) for o in render_all(plan, gang, serving, weight_cache_root())], []
    except SpecError as e:
        return None, [], [str(x) for x in e.errors]
    except Exception as e:  # noqa: BLE001
        log.exception("%s/%s: planning failed", cr["metadata"].get("namespace"), cr["metadata"].get("name"))
        return None, [], [f"spec: qdd could not plan this resource ({type(e).__name__}: {str(e)[:300]}); nothing was "
                          "applied; this is a qdd bug: report it with the resource"]


class _Steps:
    """``step(name)`` adds the time since the previous call to ``name``'s observation; each step's
    total for the pass is observed once, at the end of the pass (qdd_reconcile_step_seconds)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.totals: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.totals[name] = self.totals.get(name, 0.0) + now - self.last
        self.last = now

    def observe(self) -> None:
        for name, seconds in self.totals.items():
            metrics.RECONCILE_STEP_SECONDS.labels(name).observe(seconds)


class Reconciler:
    def __init__(self, kube: Kube, namespaces: list[str] | None = None, gang: bool | None = None,
                 canary: CanaryChecker | None = None, peer_window_s: float = BURST_WINDOW_S,
                 observer: Observer | None = None, registration: RegistrationChecker | bool = False,
                 startup: StartupLogs | None = None):
        """``gang``: place through the Workload API (PodGroups); None asks the cluster's discovery
        once, here (:meth:`Kube.serves_workload_api`). ``canary``: sends the serving canary
        (default: to the router Services). ``observer``: reads the engines' metrics (default: one
        without threads, which reads nothing: ``qdd run`` passes a running one). ``registration``: reads
        the router's registered endpoints before the canary (True: from each Ready router pod, or the
        canary's test override, in an event loop of its own, as ``qdd run`` does; False, the default: not read, Ready does not wait for it). ``startup``: reads each engine pod's start-up from its
        log (default: one that reads nothing; ``qdd run`` passes one)."""
        self.kube = kube
        self.canary = canary or CanaryChecker()
        if self.canary.notify is None:  # an answer that came in is judged by one more pass
            self.canary.notify = self.reconcile
        self.registration = RegistrationChecker(pod_url(self.canary.override)) if registration is True else (
            registration or None)
        if self.registration is not None and self.registration.notify is None:
            self.registration.notify = self.reconcile  # an answer that came in is judged by one more pass
        self.observer = observer or Observer(workers=0)
        if self.observer.notify is None:  # a serving condition that changed is written by one more pass
            self.observer.notify = self.reconcile
        self.startup = startup or StartupLogs(workers=0)
        if self.startup.notify is None:  # a start-up read is written by one more pass
            self.startup.notify = self._after_startup_read
        self.namespaces = namespaces or []
        self.gang = kube.serves_workload_api() if gang is None else gang
        log.info("placement: %s", "gang scheduling through the Workload API (scheduling.k8s.io/v1alpha2 PodGroup)"
                 if self.gang else "no Workload API: pod affinity on the NVLink clique (partial placement possible)")
        self._guard = threading.Lock()
        self._running: set[tuple[str, str]] = set()
        self._pending: set[tuple[str, str]] = set()
        self.managed: set[tuple[str, str]] = set()
        self._looping: dict[tuple[str, str], dict[str, dt.datetime]] = {}
        """Per resource: its tray claims kube-scheduler was seen looping on, and since when (qdd.controller.tray_repair)."""
        self._written: dict[tuple[str, str], tuple[str | None, dict[str, Any], float]] = {}
        """Per resource: (uid, status without transition times, :attr:`clock` time) of its last status write."""
        self.clock: Callable[[], float] = time.monotonic
        self.requeue: Callable[[tuple[str, str], float], None] | None = None
        """Queue a pass later (the operator's work queue, qdd.controller.handlers); None: never."""
        self.last_pass = time.monotonic()
        self.peer_window_s = peer_window_s
        """qdd.controller.peers.BURST_WINDOW_S, or ``qdd run --peer-restart-window``."""
        self.autoscaler = Autoscaler(kube, self.observer)
        """spec.autoscaling: the counts to lay out, the decisions (qdd.controller.autoscaling)."""
        self.trays = TrayWatch()
        """The nodes the node watch saw and what each deployment waits for of them (qdd.controller.tray_watch)."""

    def _after_startup_read(self, namespace: str, name: str) -> None:
        """One pass for the start-up reads of a window: through the work queue, which collapses the
        asks of :data:`STARTUP_PASS_DELAY_S` into one; a pass now without a queue (unit tests)."""
        if self.requeue is not None:
            self.requeue((namespace, name), STARTUP_PASS_DELAY_S)
        else:
            self.reconcile(namespace, name)

    def reconcile(self, namespace: str, name: str) -> None:
        """Reconcile now, or — if a pass for this resource is running — make it run once more."""
        k = (namespace, name)
        with self._guard:
            if k in self._running:
                self._pending.add(k)
                return
            self._running.add(k)
        try:
            for _ in range(10):
                self._timed(namespace, name)
                with self._guard:
                    if k not in self._pending:
                        break
                    self._pending.discard(k)
        finally:
            with self._guard:
                self._running.discard(k)
                self._pending.discard(k)

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: release everything held for it (its renders, the canary's answer,
        its metrics' label sets). Called by the pass that finds it gone, which the work queue never
        runs beside another pass of it, so no pass of it writes them again afterwards."""
        self.managed.discard((namespace, name))
        self._written.pop((namespace, name), None)
        self._looping.pop((namespace, name), None)
        self.canary.forget(namespace, name)
        if self.registration is not None:
            self.registration.forget(namespace, name)
        _RENDERED.forget((namespace, name))
        self.observer.forget(namespace, name)
        forget_metrics(namespace, name)
        self.autoscaler.forget(namespace, name)
        self.startup.forget(namespace, name)
        self.trays.forget((namespace, name))
        metrics.MANAGED.set(len(self.managed))
        for role in ("prefill", "decode"):
            for g in (metrics.READY_ENDPOINTS, metrics.DESIRED_ENDPOINTS):
                with contextlib.suppress(KeyError):  # never set for this resource
                    g.remove(namespace, name, role)

    def _timed(self, namespace: str, name: str) -> None:
        start, steps = time.perf_counter(), _Steps()
        try:
            result = self.once(namespace, name, steps)
            metrics.RECONCILES.labels(result).inc()
        except Exception:
            metrics.RECONCILES.labels("error").inc()
            metrics.RECONCILE_ERRORS.inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - start)
            steps.observe()
            self.last_pass = time.monotonic()

    def once(self, namespace: str, name: str, step: _Steps | None = None) -> str:
        """One pass for one resource: plan and render, converge the children, write the status.
        Returns the pass's outcome for the metrics: gone, invalid, ready or progressing."""
        kube, step = self.kube, step or _Steps()
        cr = kube.get_cr(namespace, name)
        if cr is None or cr["metadata"].get("deletionTimestamp"):
            self.forget(namespace, name)
            return "gone"  # owner references let the garbage collector remove the children
        self.managed.add((namespace, name))
        metrics.MANAGED.set(len(self.managed))
        step("read")
        plan, desired, errors = _desired_cached(cr, self.gang)
        step("plan")
        observed = genuine(kube.list_children(namespace, name), cr["metadata"]["uid"])
        step("read")
        if plan is None:  # nothing half-applied: children change only for a fully valid plan
            status = self._status(cr, None, errors, [], observed, [], None, None)
            step("status")
            return "invalid"
        legacy = legacy_generation(observed, desired, plan.generation)
        r = self._rollout(cr, plan, observed, legacy)
        counts = self.autoscaler.layout(cr, plan, observed, r.target, r.phase == "Stable" and not r.hold)
        plan, desired, view, states = self._target(cr, r, observed, counts)
        if r.phase == "Surging" and ready_ignoring_rollout(self._status_of(cr, plan, desired, view, states, None, None)):
            r = switched(r, True)
            self.kube.event(cr, "Normal", "GenerationReady",
                            f"generation {r.generation} (slot {r.target}) is Ready: the router now sends traffic "
                            f"to it; generation {r.previous} is deleted once the router has rolled")
            plan, desired, view, states = self._target(cr, r, observed, counts)
        step("plan")
        peer_restart, peer_pending = self._recycle_peers_of_replaced_prefill(cr, plan, view, states)
        wrote = self._converge(cr, desired, view, states) or peer_restart is not None
        if wrote is None:
            return "gone"  # the namespace is being deleted: so is the custom resource
        wrote = self._retire(cr, r, observed, legacy) or wrote
        wrote = self._label_trays(cr, view) or wrote
        step("write")
        if wrote:
            observed = genuine(kube.list_children(namespace, name), cr["metadata"]["uid"])
            _, _, view, states = self._target(cr, r, observed, counts)
            step("read")
        status = self._status(cr, plan, errors, desired, view, states, peer_restart, r, peer_pending)
        step("status")
        if self.requeue is not None and wrote:
            # A pass that wrote is looked at again soon whatever the watches say (controller-runtime's
            # RequeueAfter): its next step may wait on objects whose last event came before its writes
            # were in the cache (tests/integration/test_rollout.py's Recreate stalled until the resync
            # in about half the runs without it). A pass that writes nothing is not requeued: a
            # deployment that waits (a gang without room) costs nothing between events.
            self.requeue((namespace, name), REQUEUE_AFTER_WRITE_S)
        elif self.requeue is not None:
            self._requeue_for_stall(namespace, name, plan, status)
        return "ready" if _cond(status, "Ready").get("status") == "True" else "progressing"

    def _requeue_for_stall(self, namespace: str, name: str, plan: Plan, status: dict[str, Any]) -> None:
        """A deployment that waits (nothing changes, so no watch event comes) is looked at again when its
        progress deadline, then its startup budget, passes: Stalled is then set without waiting for the resync."""
        record = status.get("progress")
        if (self.requeue is None or not record or _cond(status, "Ready").get("status") == "True"
                or _cond(status, "Stalled").get("status") == "True"):
            return
        self.requeue((namespace, name), seconds_to_check(record, _now(), plan.spec.rollout.progress_deadline_seconds,
                                                         plan.spec.cluster.startup_timeout_seconds))

    def _rollout(self, cr: dict[str, Any], plan: Plan, observed: list[dict[str, Any]], legacy: str) -> Rollout:
        """This pass's step of a change of generation (qdd.controller.rollout)."""
        router = names.router(plan.name)
        return decide(plan.generation, plan.spec.rollout.strategy, observed,
                      recorded_serving(observed, router, cr.get("status")), router_settled(observed, router), legacy)

    def _target(self, cr: dict[str, Any], r: Rollout, observed: list[dict[str, Any]],
                counts: tuple[int, int] | None = None) -> tuple[
            Plan, list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
        """(plan, desired children, observed children, group states) of the target slot and the
        shared objects: the other slot's objects are the rollout's business (:meth:`_retire`).
        While the target slot waits (``hold``), its objects are neither created nor pruned."""
        # The router of a plan serves the plan's own generation by default: the same render (cached).
        plan, desired, _ = _desired_cached(cr, self.gang, r.target, None if r.serves_target else r.serving, counts)
        assert plan is not None  # the slot-a plan of the same spec was valid
        desired = keep_unlabelled_templates(desired, observed)
        view = [o for o in observed if slot_of(o) in (None, r.target)]
        if r.hold:
            desired = [d for d in desired if slot_of(d) is None]
            view = [o for o in view if slot_of(o) is None]
        return plan, desired, view, group_states(desired, view)

    def _retire(self, cr: dict[str, Any], r: Rollout, observed: list[dict[str, Any]], legacy: str) -> bool:
        """Delete the per-slot objects of the slots the rollout retires, label the engine pods that
        lack their generation; True when it wrote."""
        namespace, wrote = cr["metadata"]["namespace"], False
        for slot in r.delete:
            mine = [o for o in observed if slot_of(o) == slot and not o["metadata"].get("deletionTimestamp")]
            if mine:
                log.info("%s/%s: deleting slot %s (%d objects) for generation %s", namespace, cr["metadata"]["name"],
                         slot, len(mine), r.generation)
            for o in mine:
                self.kube.delete(o["apiVersion"], o["kind"], namespace, o["metadata"]["name"])
                wrote = True
        todo = [(pod, {labels.GENERATION: gen}) for pod, gen in pods_to_label(observed, {"a": legacy})]
        if todo:
            self.kube.label_pods(namespace, todo)
        return wrote or bool(todo)

    def _label_trays(self, cr: dict[str, Any], observed: list[dict[str, Any]]) -> bool:
        """Put each prefetch pod's state on it (``qdd.dev/weight-cache``: the engines' preferred affinity
        selects ``verified``); True when it wrote (qdd.controller.weight_cache)."""
        todo = labels_to_set(observed)
        if todo:
            self.kube.label_pods(cr["metadata"]["namespace"], todo)
        return bool(todo)

    def _recycle_peers_of_replaced_prefill(self, cr: dict[str, Any], plan: Plan, observed: list[dict[str, Any]],
                                           states: list[Any]) -> tuple[str | None, dict[str, Any] | None]:
        """Delete the decode groups that may hold a replaced prefill engine's stale NIXL agent, where
        the engine profile says decode does not drop it (qdd.controller.peers): once per burst of
        replacements, when it has settled. (The message of a recycle done now, the burst still pending.)"""
        if plan.profile.nixl_recovers_peer_restart:
            return None, None
        status, now = cr.get("status") or {}, _now()
        gone = replaced(status.get("prefillPods") or {}, prefill_pod_uids(observed, plan.generation))
        pending = burst(status.get("peerRestartPending"), gone, now)
        if pending is None:
            return None, None
        wait = settled(pending, observed, plan.prefill.endpoints, now, self.peer_window_s)
        if wait > 0:
            if wait != float("inf") and self.requeue is not None:  # no event may come when the window ends
                self.requeue((cr["metadata"]["namespace"], cr["metadata"]["name"]), wait + 0.5)
            return None, pending
        stale = stale_decode_groups(states, observed, pending["pods"])
        if not stale:
            return None, None
        namespace = cr["metadata"]["namespace"]
        msg = (f"prefill pod {', '.join(pending['pods'])} replaced: recreating decode endpoint "
               f"{', '.join(str(g.endpoint) for g in stale)}, which may hold the old engines' NIXL state (vLLM "
               f"{plan.profile.version} keeps it until engine_ttl; vllm#49238, vllm#58063)")
        self.kube.event(cr, "Warning", Reason.PEER_RESTARTED, msg)
        for g in stale:
            metrics.GROUP_RESTARTS.labels(g.role, "peer-restarted").inc()
            for pod in g.present:
                self.kube.delete("v1", "Pod", namespace, pod)
        return msg, None

    def _converge(self, cr: dict[str, Any], desired: list[dict[str, Any]], observed: list[dict[str, Any]],
                  states: list[Any]) -> bool | None:
        """Recreate the groups that must go, apply what is missing or changed, prune the rest.
        True when it wrote, None when the namespace is going away or the custom resource is gone."""
        kube, namespace, name = self.kube, cr["metadata"]["namespace"], cr["metadata"]["name"]
        wrote = False
        for g in groups_to_delete(states):
            log.info("%s/%s: recreating %s endpoint %d (%s)", namespace, name, g.role, g.endpoint,
                     g.broken or "new revision")
            metrics.GROUP_RESTARTS.labels(g.role, "broken" if g.broken else "outdated").inc()
            if g.broken:
                kube.event(cr, "Warning", "GroupRestart",
                           f"{g.role} endpoint {g.endpoint}: {g.broken}; deleting and recreating all its pods")
            for pod in g.present:
                kube.delete("v1", "Pod", namespace, pod)
            wrote = True
        creatable = pods_to_create(states)
        d = diff(desired, observed, cr["metadata"]["uid"])
        # A PodGroup is admitted only while its Workload exists and is not being deleted.
        workload_replaced = any(kind == "Workload" for _, kind, _ in d.replace)
        todo = [o for o in d.apply if not (o["kind"] == "Pod" and o["metadata"]["name"] not in creatable)
                and not (o["kind"] == "PodGroup" and workload_replaced)]
        # A tray claim names its ComputeDomain by UID: created once the ComputeDomain is observed.
        todo = [b for o in todo if (b := bind_domain(o, observed) if o["kind"] == "ResourceClaim" else o) is not None]
        # ...and is deleted when the ComputeDomain was created again (a new UID): the next pass creates
        # it bound to the new one (a claim in use stays until its pods are gone: delete protection).
        for claim in stale_claims(observed):
            log.warning("%s/%s: tray claim %s names a ComputeDomain that was replaced: deleted", namespace, name, claim)
            kube.delete("resource.k8s.io/v1", "ResourceClaim", namespace, claim)
            wrote = True
        wrote = self._repair_trays(cr, observed) or wrote
        # Two waves, each applied side by side: a PodGroup needs its Workload first (admission); the
        # rest wait for what they need by themselves (pods for their PodGroup and claim template,
        # the router's ReplicaSet for its ServiceAccount), as they would after any restart.
        # A create for a cached custom resource is confirmed first (Kube.confirm_cr): its deletion may
        # be what kopf's watch missed. Steady-state passes create nothing and read nothing.
        have = {key(o) for o in observed}
        if any(key(o) not in have for o in todo) and not kube.confirm_cr(cr):
            log.info("%s/%s: gone or replaced since it was cached: nothing created", namespace, name)
            return None
        first = {"ComputeDomain", "ResourceClaim", "Workload"}  # the kinds before PodGroup in MANAGED_KINDS
        for wave in ([o for o in todo if o["kind"] in first], [o for o in todo if o["kind"] not in first]):
            if not wave:
                continue
            if not all(kube.apply_all(wave)):
                return None
            wrote = True
        for api_version, kind, child in d.prune + d.replace:
            kube.delete(api_version, kind, namespace, child)
            wrote = True
        return wrote

    def _repair_trays(self, cr: dict[str, Any], observed: list[dict[str, Any]]) -> bool:
        """Undo the two ways a pod sharing a tray claim stays Pending for good (qdd.controller.tray_repair):
        a claim kube-scheduler v1.36 loops on gets a newer version; a pod the admission policy missed
        is deleted for its StatefulSet to create again. True when it wrote."""
        kube, namespace = self.kube, cr["metadata"]["namespace"]
        now = dt.datetime.now(dt.timezone.utc)
        ref = (namespace, cr["metadata"]["name"])
        looping = looping_claims(observed)
        seen = {c: self._looping.get(ref, {}).get(c, now) for c in looping}
        if seen:
            self._looping[ref] = seen
            if self.requeue is not None:  # the pod's condition does not change while it loops: no event comes
                self.requeue(ref, LOOP_FOR_S)
        else:
            self._looping.pop(ref, None)
        claims, pods = claims_to_resync(observed, now, seen), pods_missed_by_policy(observed, now)
        for claim in claims:
            log.warning("%s/%s: tray claim %s: kube-scheduler refuses its own allocation in a loop "
                        "(kubernetes#140263): annotated for it to read the claim again", namespace, cr["metadata"]["name"], claim)
            kube.annotate("resource.k8s.io/v1", "ResourceClaim", namespace, claim,
                          {RESYNC: now.strftime("%Y-%m-%dT%H:%M:%SZ")})
        if pods:
            kube.event(cr, "Warning", "TrayClaimPolicyMissed",
                       f"pod {', '.join(pods)} was created without the tray claim of its ordinal: the "
                       f"MutatingAdmissionPolicy {POLICY} (installed with the chart) was not active or is missing "
                       f"(kubectl get mutatingadmissionpolicy {POLICY}); deleted for its StatefulSet to create again")
            for pod in pods:
                kube.delete("v1", "Pod", namespace, pod)
        return bool(claims or pods)

    def _inputs(self, plan: Plan | None, desired: list[dict[str, Any]], observed: list[dict[str, Any]]) -> Inputs:
        return status_inputs(self.kube, self.gang, plan, desired, observed, self.trays)

    def _status_of(self, cr: dict[str, Any], plan: Plan | None, desired: list[dict[str, Any]],
                   observed: list[dict[str, Any]], states: list[Any], peer_restart: str | None,
                   rollout: Rollout | None, errors: list[str] | None = None,
                   canary: CanaryState | None = None, peer_pending: dict[str, Any] | None = None,
                   inputs: Inputs | None = None, registration: Registration | None = None,
                   accuracy: AccuracyState | None = None) -> dict[str, Any]:
        """The status computed from what is observed (not written); ``canary``: its state, None for
        the status without it (qdd.controller.canary); ``inputs``: :meth:`_inputs`, when already known."""
        cd_ready, kv, placed_now, cd_verdict = inputs if inputs is not None else self._inputs(plan, desired, observed)
        now = _now()
        status = compute_status(cr, plan, errors or [], Observed({key(o): o for o in observed}, states), now, cd_ready,
                                kv, peer_restart, placed_now, rollout_status(rollout) if rollout is not None else None,
                                canary, peer_pending, compute_domain=cd_verdict, registration=registration,
                                accuracy=accuracy)
        status = add_serving(status, cr, plan, observed, self.observer, now)
        return add_startup(add_weight_cache(status, cr, plan, observed), cr, plan, observed, self.startup)

    def _status(self, cr: dict[str, Any], plan: Plan | None, errors: list[str], desired: list[dict[str, Any]],
                observed: list[dict[str, Any]], states: list[Any], peer_restart: str | None = None,
                rollout: Rollout | None = None, peer_pending: dict[str, Any] | None = None) -> dict[str, Any]:
        """Compute the status from what is observed, write it when it changed, post the events and
        metrics of its transitions."""
        kube, namespace, name = self.kube, cr["metadata"]["namespace"], cr["metadata"]["name"]
        self.trays.observe((namespace, name), [o for o in observed if o["kind"] == "Pod"],
                           plan is None or plan.spec.cluster.same_nvlink_domain)  # a node's return queues a pass
        inputs = self._inputs(plan, desired, observed)
        status = self._status_of(cr, plan, desired, observed, states, peer_restart, rollout, errors,
                                 peer_pending=peer_pending, inputs=inputs)
        # Registration, canary, accuracy gate: each only when the ones before hold (qdd.controller.gates).
        reg, canary, acc = start_gates(self.registration, self.canary, self.kube, cr, plan, observed,
                                       _cond(status, "Ready").get("status") == "True")
        if canary is not None or reg is not None or acc is not None:
            status = self._status_of(cr, plan, desired, observed, states, peer_restart, rollout, errors, canary,
                                     peer_pending, inputs, reg, acc)
        if reg is not None and not reg.complete and self.requeue is not None:
            self.requeue((namespace, name), POLL_S)  # no watch event says when the router lists them
        status = self.autoscaler.status(status, cr, plan, observed)
        status = safe_value(status)  # what a router or a spec wrote, as the status and events may carry it
        old = cr.get("status") or {}
        patch = status_patch(old, status)
        key, uid = (namespace, name), cr["metadata"].get("uid")
        last = self._written.get(key)
        if patch is not None and last is not None and last[0] == uid:
            if last[1] == without_times(status):
                # What this operator wrote last, not in its cache yet (a pass a moment after its own write
                # reads the status of before it): written again, it would be a patch per pass.
                patch = None
            elif self.requeue is not None and self.clock() - last[2] < STARTUP_PASS_DELAY_S:
                # Only start-up reads are new and the status was just written: they wait for the next
                # write, or for the pass the reads asked for (issue 23: one status patch per pod read).
                held = {k: v for k, v in status.items() if k != "startup"}
                if "startup" in last[1]:
                    held["startup"] = last[1]["startup"]
                if without_times(held) == last[1]:
                    status, patch = held, None
                    self.requeue(key, STARTUP_PASS_DELAY_S)
        if patch is not None:
            kube.patch_status(namespace, name, patch)
            self._written[key] = (uid, without_times(status), self.clock())
        self._events(cr, old, status)
        for role in ("prefill", "decode"):
            metrics.READY_ENDPOINTS.labels(namespace, name, role).set(status[role]["readyEndpoints"])
            metrics.DESIRED_ENDPOINTS.labels(namespace, name, role).set(status[role]["endpoints"])
        return status

    def _events(self, cr: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
        for type_, reason, message in transition_events(old, new) + serving_events(old, new) + autoscaling_events(old, new) + weight_cache_events(old, new):
            self.kube.event(cr, type_, reason, message)
