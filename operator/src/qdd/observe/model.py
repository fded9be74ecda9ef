"""Plain data types of the engine observations: what one read of one engine core says, what a
pod's read returned, and what a role's engines do over a window. Pure data, no I/O; the
controller's reader fills :class:`PodRead`, :func:`qdd.observe.judge.judge` makes
:class:`RoleServing`, and the autoscaler (issue 27) reads both.

Units: seconds, tokens, requests; fractions 0..1. Counters are vLLM's cumulative values as read
(they restart at 0 when the engine restarts; :mod:`qdd.observe.window` handles that).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}
"""Every distinct tuple of bucket bounds seen, shared by the histograms that have it (a handful:
one per histogram family of vLLM)."""
_MAX_BOUNDS = 1024


def _shared(bounds: tuple[float, ...]) -> tuple[float, ...]:
    got = _BOUNDS.get(bounds)
    if got is None:
        if len(_BOUNDS) >= _MAX_BOUNDS:
            _BOUNDS.clear()
        got = _BOUNDS.setdefault(bounds, bounds)
    return got


class Histogram:
    """A cumulative Prometheus histogram as read: ``buckets`` are (upper bound, cumulative count)
    in increasing bound order, the last one +Inf; ``total`` is the _sum (seconds for the latency
    histograms); ``count`` the _count. Immutable; equal when all three are.

    Stored as the bounds (one tuple shared by every histogram with the same bounds) and the counts
    as packed doubles: the observer keeps a window of reads of every engine (22 reads of 4
    histograms of ~20 buckets per engine at the defaults), and as (bound, count) pairs of float
    objects they were 6.6 MiB per round of 200 pods, 145 MiB for the window (make bench-observe)."""

    __slots__ = ("_bounds", "_counts", "count", "total")
    _bounds: tuple[float, ...]
    _counts: array[float]
    total: float
    count: float

    def __init__(self, buckets: Iterable[tuple[float, float]] = (), total: float = 0.0, count: float = 0.0):
        pairs = tuple(buckets)
        object.__setattr__(self, "_bounds", _shared(tuple(float(le) for le, _ in pairs)))
        object.__setattr__(self, "_counts", array("d", (n for _, n in pairs)))
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "count", count)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Histogram is immutable: cannot set {name}")

    @property
    def buckets(self) -> tuple[tuple[float, float], ...]:
        return tuple(zip(self._bounds, self._counts, strict=True))

    @property
    def bounds(self) -> tuple[float, ...]:
        """The buckets' upper bounds."""
        return self._bounds

    @property
    def counts(self) -> array[float]:
        """The buckets' cumulative counts, in the order of :attr:`bounds` (do not modify)."""
        return self._counts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self._bounds == other._bounds and self._counts == other._counts and self.total == other.total
                and self.count == other.count)

    def __hash__(self) -> int:
        return hash((self._bounds, tuple(self._counts), self.total, self.count))

    def __repr__(self) -> str:
        return f"Histogram(buckets={self.buckets!r}, total={self.total!r}, count={self.count!r})"


@dataclass(frozen=True, slots=True)
class EngineRead:
    """One engine core (one DP rank: vLLM's ``engine`` label) at one read.

    Gauges: ``running``, ``waiting`` (requests, vllm:num_requests_running / _waiting),
    ``kv_cache_usage`` (0..1, vllm:kv_cache_usage_perc). Counters (cumulative since the engine
    started): ``preemptions``, ``prompt_tokens``, ``generation_tokens``, ``finished`` (requests,
    every finished_reason), ``failed_transfers`` and ``failed_notifications`` (NIXL, the decode
    side), ``expired`` and ``after_expiry`` (NIXL lease, the prefill side), ``transfers``
    (successful NIXL READs: the vllm:nixl_xfer_time_seconds count). Histograms: ``ttft``, ``itl``,
    ``tpot``, ``queue`` (seconds). Source of every name: qdd.observe.metrics."""

    engine: str
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished: float = 0.0
    failed_transfers: float = 0.0
    failed_notifications: float = 0.0
    expired: float = 0.0
    after_expiry: float = 0.0
    transfers: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)
    queue: Histogram = field(default_factory=Histogram)

    @property
    def tokens(self) -> float:
        """Prompt and generated tokens: what moves when the engine makes progress."""
        return self.prompt_tokens + self.generation_tokens


@dataclass(frozen=True)
class PodRead:
    """One read of one HTTP-serving engine pod. ``time``: Unix seconds when it was taken;
    ``error``: why nothing could be read (then ``engines`` is empty); ``bytes``/``series``: the
    size of what was read (the reader's bounds). ``role`` prefill|decode, ``endpoint`` the
    qdd.dev/endpoint index."""

    pod: str
    role: str
    endpoint: int
    time: float
    engines: tuple[EngineRead, ...] = ()
    error: str | None = None
    bytes: int = 0
    series: int = 0


@dataclass(frozen=True)
class Percentiles:
    """Seconds; None where the window saw no observation."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


@dataclass(frozen=True)
class EngineFacts:
    """One engine core over the window: ``progressed`` tokens made (None: fewer than two reads),
    ``busy`` it had requests running at every read, ``min_waiting`` the fewest requests waiting at
    any read, ``min_kv_cache_usage`` the lowest usage at any read."""

    pod: str
    role: str
    endpoint: int
    engine: str
    progressed: float | None
    busy: bool
    min_waiting: float
    min_kv_cache_usage: float
    quiet_seconds: float
    """Seconds since its token counter last moved while it had requests running (0: moving)."""


@dataclass(frozen=True)
class RoleServing:
    """One role's engines over the window (``status.serving.<role>``). Gauges from the newest read
    of each engine; rates per second and counts over the window; percentiles of the role's merged
    histograms over the window."""

    role: str
    pods: int = 0
    engines: int = 0
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float | None = None
    kv_cache_usage_mean: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    requests_per_second: float | None = None
    ttft: Percentiles = field(default_factory=Percentiles)
    itl: Percentiles = field(default_factory=Percentiles)
    tpot: Percentiles = field(default_factory=Percentiles)
    queue: Percentiles = field(default_factory=Percentiles)
    preemptions: float = 0.0
    failed_transfers: float = 0.0
    expired_leases: float = 0.0
    transfers: float = 0.0
