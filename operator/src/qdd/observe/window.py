"""Rates and percentiles over a window of reads: what PromQL's ``increase()`` and
``histogram_quantile()`` compute, on the reads the operator keeps (no Prometheus needed).

A counter that goes down restarted (the engine restarted): the value after the drop is what it
counted since, as PromQL's counter-reset rule takes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .model import Histogram, Percentiles


def increase(values: Sequence[float]) -> float:
    """How much a counter grew over consecutive reads, across restarts; 0 with fewer than two."""
    total = 0.0
    for before, after in zip(values, values[1:], strict=False):
        total += after - before if after >= before else after
    return total


def histogram_increase(reads: Sequence[Histogram]) -> Histogram:
    """The observations a histogram gained over consecutive reads (bucket by bucket, across
    restarts); an empty histogram with fewer than two reads. When every read has the same bounds (an
    engine's bucket layout changes only with its build), bucket by bucket down the reads; else every
    read's bounds (one a read lacks counts 0 there, as after a restart): linear in buckets × reads
    either way (a dict lookup per bound and read). Before, the union of every read's bounds was
    looked up by rebuilding each read's buckets per bound, quadratic in buckets: a hostile engine's
    thousands of buckets held a reconcile pass for minutes (docs/security.md, round 4)."""
    if len(reads) < 2:
        return Histogram()
    bounds = reads[0].bounds
    if all(h.bounds == bounds for h in reads) and list(bounds) == sorted(set(bounds)):
        # The usual case (an engine's buckets never change): bucket by bucket down the reads. Looking
        # each bound up in every read's pairs made judging a deployment over a full window 32 ms
        # (make bench-observe).
        per = [increase(column) for column in zip(*(h.counts for h in reads), strict=True)]
        return Histogram(tuple(zip(bounds, per, strict=True)), increase([h.total for h in reads]),
                         increase([h.count for h in reads]))
    # A layout that changed (a new build): every read's bounds, each looked up once per read.
    maps = [dict(h.buckets) for h in reads]
    every = sorted({le for m in maps for le in m})
    per_bound = {le: increase([m.get(le, 0.0) for m in maps]) for le in every}
    return Histogram(tuple((le, per_bound[le]) for le in every), increase([h.total for h in reads]),
                     increase([h.count for h in reads]))


def merge(hists: Sequence[Histogram]) -> Histogram:
    """The sum of histograms of the same buckets (several engines of one role)."""
    bounds: dict[float, float] = {}
    for h in hists:
        for le, n in h.buckets:
            bounds[le] = bounds.get(le, 0.0) + n
    return Histogram(tuple(sorted(bounds.items())), sum(h.total for h in hists), sum(h.count for h in hists))


def quantile(q: float, h: Histogram) -> float | None:
    """PromQL's histogram_quantile: linear within the bucket that holds rank q × count; a rank in
    the +Inf bucket answers the highest finite bound. None when the histogram is empty."""
    buckets = [(le, n) for le, n in h.buckets]
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if math.isinf(le):
                return lower
            if n == below:
                return le
            return lower + (le - lower) * (rank - below) / (n - below)
        lower, below = le, n
    return lower


def percentiles(h: Histogram) -> Percentiles:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 4)
    return Percentiles(r(quantile(0.5, h)), r(quantile(0.9, h)), r(quantile(0.99, h)))
