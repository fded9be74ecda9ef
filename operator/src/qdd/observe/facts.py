"""A window of reads → facts per engine core and per role (pure). The conditions are judged from
these (:mod:`qdd.observe.judge`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .model import EngineFacts, EngineRead, PodRead, RoleServing
from .window import histogram_increase, increase, merge, percentiles

ROLES = ("prefill", "decode")


def series(reads: Sequence[PodRead]) -> dict[str, list[tuple[float, EngineRead]]]:
    """engine label -> (time, read) of each successful read of one pod, oldest first."""
    out: dict[str, list[tuple[float, EngineRead]]] = {}
    for r in sorted(reads, key=lambda r: r.time):
        for e in r.engines:
            out.setdefault(e.engine, []).append((r.time, e))
    return out


def _quiet_seconds(points: list[tuple[float, EngineRead]], now: float) -> float:
    """Seconds since the engine's tokens last moved, counted only while it had requests running
    at every read since (an idle engine is not quiet, it has nothing to do)."""
    last_move = None
    for (_, a), (t1, b) in zip(points, points[1:], strict=False):
        if b.tokens != a.tokens or b.running == 0 or a.running == 0:
            last_move = t1
    start = last_move if last_move is not None else points[0][0]
    if any(e.running == 0 for t, e in points if t >= start):
        return 0.0
    return max(0.0, min(now, points[-1][0]) - start)


@dataclass(frozen=True)
class Run:
    """How one engine's reads met a level rule (a gauge at or above, or above, a threshold).

    ``seconds``: the newest read's time minus the first read of the unbroken run of reads that meet
    the rule and end at the newest read (0 when the newest read does not meet it): "at every read of
    the last ``seconds``", over every read kept (the window and a little more). ``low`` the lowest
    value over that run. ``hits`` and ``reads``: reads within the window that meet it, and all the
    reads within the window; ``peak`` the highest value within the window."""

    seconds: float = 0.0
    low: float = 0.0
    hits: int = 0
    reads: int = 0
    peak: float = 0.0

    def whole(self, window_seconds: float) -> bool:
        """Met at every read for at least a whole window (the raise rule of the level conditions)."""
        return self.seconds >= window_seconds


def run_of(points: Sequence[tuple[float, EngineRead]], value: Callable[[EngineRead], float],
           meets: Callable[[float], bool], now: float, window_seconds: float) -> Run:
    """The :class:`Run` of one engine's ``points`` (time, read), oldest first."""
    if not points:
        return Run()
    start = None
    for t, e in reversed(points):
        if not meets(value(e)):
            break
        start = t
    run = [value(e) for t, e in points if start is not None and t >= start]
    inside = [value(e) for t, e in points if now - t <= window_seconds]
    return Run(seconds=points[-1][0] - start if start is not None else 0.0, low=min(run, default=0.0),
               hits=sum(1 for v in inside if meets(v)), reads=len(inside), peak=max(inside, default=0.0))


def engine_facts(pod: PodRead, reads: Sequence[PodRead], now: float) -> list[EngineFacts]:
    out = []
    for engine, points in series(reads).items():
        values = [e for _, e in points]
        out.append(EngineFacts(
            pod.pod, pod.role, pod.endpoint, engine,
            progressed=increase([e.tokens for e in values]) if len(values) > 1 else None,
            busy=all(e.running > 0 for e in values),
            min_waiting=min(e.waiting for e in values),
            min_kv_cache_usage=min(e.kv_cache_usage for e in values),
            quiet_seconds=_quiet_seconds(points, now) if len(points) > 1 else 0.0))
    return out


def _rate(amount: float, seconds: float) -> float | None:
    return round(amount / seconds, 3) if seconds > 0 else None


def role_serving(role: str, reads: Mapping[str, Sequence[PodRead]]) -> RoleServing:
    """The role's facts from the reads of its pods (``reads``: pod -> its reads in the window)."""
    newest, spans = [], []
    counters = {"prompt": 0.0, "gen": 0.0, "finished": 0.0, "preempt": 0.0, "failed": 0.0, "expired": 0.0,
                "transfers": 0.0}
    hists: dict[str, list] = {"ttft": [], "itl": [], "tpot": [], "queue": []}
    pods = 0
    for pod_reads in reads.values():
        if not pod_reads or pod_reads[0].role != role:
            continue
        s = series(pod_reads)
        pods += bool(s)
        for points in s.values():
            values = [e for _, e in points]
            newest.append(values[-1])
            if len(points) > 1:
                spans.append(points[-1][0] - points[0][0])
            counters["prompt"] += increase([e.prompt_tokens for e in values])
            counters["gen"] += increase([e.generation_tokens for e in values])
            counters["finished"] += increase([e.finished for e in values])
            counters["preempt"] += increase([e.preemptions for e in values])
            # vLLM 0.33 counts failed notifications in failed_transfers too (nixl/stats.py): not added.
            counters["failed"] += increase([e.failed_transfers for e in values])
            counters["expired"] += increase([e.expired for e in values])
            counters["transfers"] += increase([e.transfers for e in values])
            for k in hists:
                hists[k].append(histogram_increase([getattr(e, k) for e in values]))
    if not newest:
        return RoleServing(role)
    span = max(spans) if spans else 0.0
    usage = [e.kv_cache_usage for e in newest]
    return RoleServing(
        role, pods=pods, engines=len(newest), running=sum(e.running for e in newest),
        waiting=sum(e.waiting for e in newest), kv_cache_usage=round(max(usage), 4),
        kv_cache_usage_mean=round(sum(usage) / len(usage), 4),
        prompt_tokens_per_second=_rate(counters["prompt"], span),
        generation_tokens_per_second=_rate(counters["gen"], span),
        requests_per_second=_rate(counters["finished"], span),
        ttft=percentiles(merge(hists["ttft"])), itl=percentiles(merge(hists["itl"])),
        tpot=percentiles(merge(hists["tpot"])), queue=percentiles(merge(hists["queue"])),
        preemptions=counters["preempt"], failed_transfers=counters["failed"], expired_leases=counters["expired"],
        transfers=counters["transfers"])
