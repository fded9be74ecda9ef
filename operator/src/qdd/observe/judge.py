"""A window of reads → ``status.serving`` and the five serving conditions (pure).

Each condition is abnormal-true (as a node's MemoryPressure): True names its cause with the pods
and engines it saw and what to do; False is healthy; Unknown (NoEngineMetrics) when no engine
could be read. The thresholds and their sources: qdd.api.observe.ObserveThresholds and
docs/observability.md. Three kinds of rule:

* counts (KVTransferFailing, KVLeaseExpiring, KVCacheSaturated's Preempting): a counter grew by more
  than the threshold over spec.observe.windowSeconds; raised at the first read that shows it, cleared
  once the window holds no growth (PromQL's ``increase(...[window]) > threshold``);
* levels (KVCacheSaturated's KVCacheFull, RequestsQueueing): raised when one engine's gauge met the
  threshold at every read for at least a whole window; held (hysteresis) while an engine of a role
  raised still meets it at some read of the last window, cleared once every read of a whole window
  is below. What was raised is the judgement's ``held``, given back to the next judgement;
* EngineStalled: an engine with requests running at every read made no token for stallSeconds;
  raised while that lasts, cleared by the first read that shows a token or no request running.
  Other engines of its role making tokens meanwhile is evidence the message gives, not a condition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api import conditions as C
from ..api.conditions import Reason as R
from ..api.observe import ObserveThresholds
from .facts import ROLES, Run, engine_facts, role_serving, run_of, series
from .model import EngineFacts, EngineRead, PodRead, RoleServing
from .window import increase

CONDITION_TYPES = C.SERVING_TYPES
NAMED = 4
"""Pods or engines named in a message at most (the rest are counted)."""
Held = frozenset[tuple[str, str]]
"""(reason, role) of each level condition raised (KVCacheFull, QueueBeyondBound): the state their
hysteresis keeps between two judgements."""


@dataclass(frozen=True)
class Judgement:
    """``roles``: prefill and decode facts; ``engines``: per engine core; ``conditions``: the five
    serving conditions (dicts as metav1.Condition, without lastTransitionTime); ``errors``: pods
    whose newest read failed, and why."""

    roles: dict[str, RoleServing]
    engines: list[EngineFacts]
    conditions: list[dict[str, Any]]
    errors: list[str] = field(default_factory=list)
    held: Held = frozenset()
    """The level conditions raised, per role: pass it as the next judgement's ``held``."""


@dataclass(frozen=True)
class _Level:
    """One level condition: ``raising`` the engines (and their runs) that met it at every read for a
    whole window; ``holding`` those of a role raised before (not raised again now) that still met it
    at some read of the window; ``roles`` the roles raised after this judgement."""

    raising: list[tuple[EngineFacts, Run]]
    holding: list[tuple[EngineFacts, Run]]
    roles: frozenset[str]


def _level(runs: list[tuple[EngineFacts, Run]], reason: str, held: Held, w: int) -> _Level:
    raising = [(e, r) for e, r in runs if r.whole(w)]
    up = {e.role for e, _ in raising}
    holding = [(e, r) for e, r in runs if e.role not in up and (reason, e.role) in held and r.hits > 0]
    return _Level(raising, holding, frozenset(up | {e.role for e, _ in holding}))


def _cond(ctype: str, ok: bool | None, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """As qdd.controller.status._cond: ``ok`` is the condition's status (True = the problem holds)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": ctype, "status": status, "reason": reason, "message": message, "observedGeneration": generation}


def _named(items: list[str]) -> str:
    more = len(items) - NAMED
    return ", ".join(items[:NAMED]) + (f" and {more} more" if more > 0 else "")


def _per_engine(reads: Mapping[str, Sequence[PodRead]], attrs: tuple[str, ...]) -> list[tuple[str, float]]:
    """(``pod engine N``, increase of the sum of ``attrs``) of every engine whose count grew."""
    out = []
    for pod, pod_reads in sorted(reads.items()):
        for engine, points in series(pod_reads).items():
            n = sum(increase([getattr(e, a) for _, e in points]) for a in attrs)
            if n > 0:
                out.append((f"{pod} engine {engine}", n))
    return out


def _transfers(reads: Mapping[str, Sequence[PodRead]], t: ObserveThresholds, w: int, g: int | None,
               roles: dict[str, RoleServing]) -> dict[str, Any]:
    # failed_transfers includes the failed notifications (vLLM 0.33 nixl/stats.py says so).
    failed = _per_engine(reads, ("failed_transfers",))
    total = int(sum(n for _, n in failed))
    if total > t.failed_transfers:
        return _cond(C.KV_TRANSFER_FAILING, True, R.KV_TRANSFERS_FAILING,
                     f"{total} NIXL KV transfers failed in the last {w} s "
                     f"({_named([f'{p}: {int(n)}' for p, n in failed])}; threshold {t.failed_transfers}): each one is a "
                     "request that failed (HTTP 500) or recomputed its prefill. Check that both roles run one "
                     "generation with equal --kv-cache-dtype, --mamba-ssm-cache-dtype and block size, that decode "
                     "reaches prefill's side channel, and the decode pods' logs (NIXL)", g)
    done = int(sum(r.transfers for r in roles.values()))
    return _cond(C.KV_TRANSFER_FAILING, False, R.NO_FAILED_TRANSFERS,
                 f"no failed KV transfer in the last {w} s ({done} done)", g)


def _lease(reads: Mapping[str, Sequence[PodRead]], t: ObserveThresholds, w: int, g: int | None,
           lease_s: int | None) -> dict[str, Any]:
    # Requests (vllm:nixl_num_kv_expired_reqs) and late notifications, one per remote rank
    # (vllm:nixl_num_notifications_after_expiry): either over the threshold raises.
    expired = _per_engine(reads, ("expired",))
    late = _per_engine(reads, ("after_expiry",))
    total, n_late = int(sum(n for _, n in expired)), int(sum(n for _, n in late))
    if total > t.expired_leases or n_late > t.expired_leases:
        lease = f" (spec.kvTransfer.leaseSeconds {lease_s} s)" if lease_s else ""
        where = _named([f'{p}: {int(n)}' for p, n in expired or late])
        return _cond(C.KV_LEASE_EXPIRING, True, R.KV_LEASE_EXPIRED,
                     f"{total} requests' KV leases expired before decode read them, {n_late} read notifications came "
                     f"after expiry, in the last {w} s ({where}; threshold {t.expired_leases}): prefill freed "
                     f"their blocks{lease}, and a read after that answers HTTP 200 with garbage. Raise "
                     "spec.kvTransfer.leaseSeconds above decode's read delay, and see why decode reads late "
                     "(RequestsQueueing, KVCacheSaturated on decode: add decode endpoints)", g)
    return _cond(C.KV_LEASE_EXPIRING, False, R.LEASES_HELD, f"no KV lease expired in the last {w} s", g)


def _saturated(level: _Level, roles: dict[str, RoleServing], t: ObserveThresholds, w: int,
               g: int | None) -> dict[str, Any]:
    act = ("Add endpoints of that role, lower spec.workload.concurrency, or give the cache more memory "
           "(tuning.gpuMemoryUtilization)")
    clears = f"It clears once every read of a whole window ({w} s) is below {t.kv_cache_usage:.0%}"
    if level.raising:
        where = _named([f"{e.role} {e.pod} engine {e.engine} (≥ {r.low:.0%} at every read of the last "
                        f"{r.seconds:.0f} s)" for e, r in level.raising])
        return _cond(C.KV_CACHE_SATURATED, True, R.KV_CACHE_FULL,
                     f"KV cache at or above {t.kv_cache_usage:.0%} at every read for a "
                     f"whole window ({w} s) on {where}: new requests wait and running ones are preempted. {act}. "
                     f"{clears}", g)
    if level.holding:
        where = _named([f"{e.role} {e.pod} engine {e.engine} (at or above at {r.hits} of {r.reads} reads, highest "
                        f"{r.peak:.0%})" for e, r in level.holding])
        return _cond(C.KV_CACHE_SATURATED, True, R.KV_CACHE_FULL,
                     f"KV cache was at or above {t.kv_cache_usage:.0%} at every read for a whole window, and still "
                     f"reached it in the last {w} s on {where}. {clears}. {act}", g)
    preempted = int(sum(r.preemptions for r in roles.values()))
    if preempted > t.preemptions:
        where = ", ".join(f"{r.role}: {int(r.preemptions)}" for r in roles.values() if r.preemptions)
        return _cond(C.KV_CACHE_SATURATED, True, R.PREEMPTING,
                     f"{preempted} requests preempted in the last {w} s ({where}; threshold {t.preemptions}): the KV "
                     "cache ran out of blocks and each preempted request recomputes. Add endpoints of that role or "
                     "lower spec.workload.concurrency", g)
    top = max((r.kv_cache_usage for r in roles.values() if r.kv_cache_usage is not None), default=None)
    return _cond(C.KV_CACHE_SATURATED, False, R.KV_CACHE_AVAILABLE,
                 f"highest KV-cache usage {top:.0%}, no preemption in the last {w} s" if top is not None else
                 f"no preemption in the last {w} s", g)


def _queueing(level: _Level, t: ObserveThresholds, w: int, g: int | None) -> dict[str, Any]:
    act = ("the load is beyond that role's capacity while /health stays green. Add endpoints of that role "
           "(prefill: kubectl scale qdd/NAME --replicas=N) or lower the offered load")
    clears = f"It clears once every read of a whole window ({w} s) is at or below {t.waiting_per_engine}"
    if level.raising:
        where = _named([f"{e.role} {e.pod} engine {e.engine} (≥ {int(r.low)} at every read of the last "
                        f"{r.seconds:.0f} s)" for e, r in level.raising])
        return _cond(C.REQUESTS_QUEUEING, True, R.QUEUE_BEYOND_BOUND,
                     f"requests waiting above {t.waiting_per_engine} per engine at every read for a whole window "
                     f"({w} s) on {where}: {act}. {clears}", g)
    if level.holding:
        where = _named([f"{e.role} {e.pod} engine {e.engine} (above at {r.hits} of {r.reads} reads, highest "
                        f"{int(r.peak)})" for e, r in level.holding])
        return _cond(C.REQUESTS_QUEUEING, True, R.QUEUE_BEYOND_BOUND,
                     f"requests waited above {t.waiting_per_engine} per engine at every read for a whole window, and "
                     f"still did in the last {w} s on {where}. {clears}: {act}", g)
    return _cond(C.REQUESTS_QUEUEING, False, R.QUEUE_WITHIN_BOUND,
                 f"no engine queued above {t.waiting_per_engine} requests at every read of a whole window ({w} s)", g)


def _evidence(role: str, engines: list[EngineFacts], stuck: list[EngineFacts], moved: set[tuple[str, str]],
              stall_s: int) -> str:
    """What the other engines of ``role`` did over the last stallSeconds: supporting evidence."""
    mine = [e for e in engines if e.role == role]
    moving = sum(1 for e in mine if (e.pod, e.engine) in moved)
    if moving:
        return (f"{moving} other {role} engine{'s' if moving > 1 else ''} made tokens in the last {stall_s} s "
                "(this engine is stuck, not the load)")
    if len(mine) == 1:
        return f"it is the only {role} engine read (no peer to compare with; none is needed)"
    quiet = sum(1 for e in stuck if e.role == role)
    return (f"no other {role} engine made a token in the last {stall_s} s either ({quiet} of {len(mine)} "
            "stalled): the whole role or the DP/EP group its engines share is hung, or every engine waits on "
            "something they share (KV transfers, the router)")


def _stalled(engines: list[EngineFacts], moved: set[tuple[str, str]], t: ObserveThresholds,
             g: int | None) -> dict[str, Any]:
    # ``moved``: engines whose tokens grew over the last stallSeconds, a set (a list of peers per
    # engine was quadratic: 5,760 engines, 72 on each of 80 pods, took seconds of every pass; round 4).
    stuck = [e for e in engines if e.quiet_seconds >= t.stall_seconds]
    if stuck:
        evidence = "; ".join(_evidence(role, engines, stuck, moved, t.stall_seconds)
                             for role in ROLES if any(e.role == role for e in stuck))
        return _cond(C.ENGINE_STALLED, True, R.ENGINE_NOT_PROGRESSING,
                     f"{_named([f'{e.role} {e.pod} engine {e.engine} (no token for {e.quiet_seconds:.0f} s)' for e in stuck])} "
                     f"had requests running at every read but made no token for {t.stall_seconds} s or longer "
                     f"(threshold); {evidence}. A hung rank holds its requests and, in a DP/EP group, its peers' "
                     "collectives. Read that pod's log; deleting it makes qdd recreate its whole group. It clears "
                     "at the first read that shows a token or no request running", g)
    return _cond(C.ENGINE_STALLED, False, R.ALL_ENGINES_PROGRESSING,
                 f"every engine with requests running made tokens in the last {t.stall_seconds} s", g)


def _unknown(why: str, g: int | None) -> list[dict[str, Any]]:
    """Every serving condition Unknown (one call per type: tests/unit/test_conditions_doc.py reads them)."""
    return [_cond(C.KV_TRANSFER_FAILING, None, R.NO_ENGINE_METRICS, why, g),
            _cond(C.KV_LEASE_EXPIRING, None, R.NO_ENGINE_METRICS, why, g),
            _cond(C.KV_CACHE_SATURATED, None, R.NO_ENGINE_METRICS, why, g),
            _cond(C.REQUESTS_QUEUEING, None, R.NO_ENGINE_METRICS, why, g),
            _cond(C.ENGINE_STALLED, None, R.NO_ENGINE_METRICS, why, g)]


def _not_allowed(why: str, g: int | None) -> list[dict[str, Any]]:
    """Every serving condition Unknown: the source the spec names may not be read (one call per type)."""
    return [_cond(C.KV_TRANSFER_FAILING, None, R.PROMETHEUS_NOT_ALLOWED, why, g),
            _cond(C.KV_LEASE_EXPIRING, None, R.PROMETHEUS_NOT_ALLOWED, why, g),
            _cond(C.KV_CACHE_SATURATED, None, R.PROMETHEUS_NOT_ALLOWED, why, g),
            _cond(C.REQUESTS_QUEUEING, None, R.PROMETHEUS_NOT_ALLOWED, why, g),
            _cond(C.ENGINE_STALLED, None, R.PROMETHEUS_NOT_ALLOWED, why, g)]


def not_allowed(why: str, generation: int | None = None) -> Judgement:
    """The judgement of a deployment whose spec.observe.prometheus.url the operator may not query:
    nothing read, every serving condition Unknown with ``why`` (the field and its fix)."""
    return Judgement({role: RoleServing(role) for role in ROLES}, [], _not_allowed(why, generation), [why])


def _moved(reads: Mapping[str, Sequence[PodRead]], now: float, seconds: int) -> set[tuple[str, str]]:
    """(pod, engine) of every engine whose tokens grew over the reads of the last ``seconds``."""
    return {(p, engine) for p, rs in reads.items()
            for engine, points in series([r for r in rs if now - r.time <= seconds]).items()
            if increase([e.tokens for _, e in points]) > 0}


def judge(reads: Mapping[str, Sequence[PodRead]], thresholds: ObserveThresholds, window_seconds: int, now: float,
          generation: int | None = None, lease_seconds: int | None = None, held: Held = frozenset()) -> Judgement:
    """``reads``: pod -> its reads, oldest first (the reader keeps max(windowSeconds, stallSeconds)
    and two periods); ``now``: Unix seconds; ``held``: the previous judgement's ``held`` (the level
    conditions raised; empty: none). Counts, rates and the level conditions' windows use the reads
    within ``window_seconds`` of ``now``; a level's run and EngineStalled use every read."""
    recent = {p: [r for r in rs if now - r.time <= window_seconds and r.error is None] for p, rs in reads.items()}
    all_ok = {p: [r for r in rs if r.error is None] for p, rs in reads.items()}
    errors = sorted(f"{p}: {rs[-1].error}" for p, rs in reads.items() if rs and rs[-1].error)
    roles = {role: role_serving(role, recent) for role in ROLES}
    engines = [f for p, rs in sorted(recent.items()) if rs for f in engine_facts(rs[-1], rs, now)]
    quiet = {(f.pod, f.engine): f.quiet_seconds for p, rs in all_ok.items() if rs for f in engine_facts(rs[-1], rs, now)}
    engines = [EngineFacts(e.pod, e.role, e.endpoint, e.engine, e.progressed, e.busy, e.min_waiting,
                           e.min_kv_cache_usage, quiet.get((e.pod, e.engine), 0.0)) for e in engines]
    if not engines:
        why = f"no engine's metrics could be read ({_named(errors)})" if errors else "no engine pod serves metrics yet"
        return Judgement(roles, [], _unknown(why, generation), errors, held)
    w, t = window_seconds, thresholds
    points = {p: series(rs) for p, rs in all_ok.items() if rs}

    def runs(value: Callable[[EngineRead], float], meets: Callable[[float], bool]) -> list[tuple[EngineFacts, Run]]:
        return [(e, run_of(points[e.pod][e.engine], value, meets, now, w)) for e in engines]

    full = _level(runs(lambda e: e.kv_cache_usage, lambda v: v >= t.kv_cache_usage), R.KV_CACHE_FULL, held, w)
    queue = _level(runs(lambda e: e.waiting, lambda v: v > t.waiting_per_engine), R.QUEUE_BEYOND_BOUND, held, w)
    conds = [_transfers(recent, t, w, generation, roles), _lease(recent, t, w, generation, lease_seconds),
             _saturated(full, roles, t, w, generation), _queueing(queue, t, w, generation),
             _stalled(engines, _moved(all_ok, now, t.stall_seconds), t, generation)]
    now_held = frozenset({(R.KV_CACHE_FULL, r) for r in full.roles} | {(R.QUEUE_BEYOND_BOUND, r) for r in queue.roles})
    return Judgement(roles, engines, conds, errors, now_held)
