"""The cheapest static split that meets the SLO, found by a sweep in the same simulation (bench/autoscale.py).

Assumption, stated because the search leans on it: SLO attainment never falls when an endpoint is
added to either role (the replay routes round-robin; more endpoints mean shorter queues and
smaller decode batches). Under it, a split that meets the target makes every split above it meet
it, and one that misses makes every split below it miss, so the search need not simulate every
(prefill, decode) pair: per decode count, ascending, it bisects for the fewest prefill endpoints
that meet the target among the splits no dearer (in GPUs) than the best found so far, and
answers from the known results whatever they already imply. The answer is the cheapest split of
the whole grid (bounds and budget), not a greedy walk's first hit.
"""

from __future__ import annotations

from collections.abc import Callable


def cheapest_static(attainment_of: Callable[[int, int], float], target: float, *, gpus_p: int, gpus_d: int, max_p: int,
                    max_d: int, budget: int) -> tuple[int, int] | None:
    """(prefill, decode) of the fewest GPUs whose ``attainment_of(p, d)`` is at least ``target``
    (among splits of equally few GPUs, the higher attainment), or None when no split within
    ``max_p``, ``max_d`` and ``budget`` GPUs meets it. ``attainment_of`` simulates one split (the
    expensive part); it is called only for splits whose outcome the known ones do not imply."""
    known: dict[tuple[int, int], float] = {}

    def feasible(p: int, d: int) -> bool:
        for (p2, d2), att in known.items():
            if att >= target and p >= p2 and d >= d2:
                return True
            if att < target and p <= p2 and d <= d2:
                return False
        known[(p, d)] = att = attainment_of(p, d)
        return att >= target

    def cost(split: tuple[int, int]) -> int:
        return split[0] * gpus_p + split[1] * gpus_d

    best: tuple[int, int] | None = None
    for d in range(1, max_d + 1):
        room = budget - d * gpus_d if best is None else min(budget, cost(best)) - d * gpus_d
        hi = min(max_p, room // gpus_p)
        if hi < 1:
            break
        if not feasible(hi, d):
            continue
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            if feasible(mid, d):
                hi = mid
            else:
                lo = mid + 1
        if best is None or cost((hi, d)) < cost(best) or \
                (cost((hi, d)) == cost(best) and known.get((hi, d), 0.0) > known.get(best, 0.0)):
            best = (hi, d)
    return best
