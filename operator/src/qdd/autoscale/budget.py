"""Fitting both roles' wanted endpoint counts under the GPU budget.

When the wanted counts fit, they are the targets. When they do not, ``Rebalance`` picks the pair
(prefill, decode) inside the bounds and the budget that serves the worse-off role best (the largest
min(count / needed) over both roles; then the most GPUs), so GPUs move to the role that misses its
target by more; ``Hold`` keeps the active counts and gives what is left of the budget to the role
worse off first, one endpoint at a time. A role owned by another writer (RoleLimits.external)
keeps its count in both.
"""

from __future__ import annotations

from .types import Counts, PolicyConfig


def _ratio(count: int, need: int) -> float:
    return count / need if need > 0 else float("inf")


def fit_budget(want_p: int, want_d: int, need_p: int, need_d: int, counts: Counts,
               cfg: PolicyConfig) -> tuple[int, int]:
    """Targets (prefill, decode) within [min, max] per role and ``gpu_budget`` in GPUs.
    ``want_*``: counts the load asks for, already within bounds; ``need_*``: the SLO's counts
    before bounds (the denominators of the shortfall ratio)."""
    gp, gd, budget = cfg.prefill.gpus_per_endpoint, cfg.decode.gpus_per_endpoint, cfg.gpu_budget
    if want_p * gp + want_d * gd <= budget:
        return want_p, want_d
    lo_p = want_p if cfg.prefill.external else cfg.prefill.min_endpoints
    lo_d = want_d if cfg.decode.external else cfg.decode.min_endpoints
    if cfg.at_budget == "Hold":
        p, d = min(counts.prefill.active, want_p), min(counts.decode.active, want_d)
        p, d = max(p, lo_p), max(d, lo_d)
        while True:
            grow = [(r, role) for role, r, can in (("p", _ratio(p, need_p), p < want_p and (p + 1) * gp + d * gd <= budget),
                                                   ("d", _ratio(d, need_d), d < want_d and p * gp + (d + 1) * gd <= budget))
                    if can]
            if not grow:
                return p, d
            if min(grow)[1] == "p":
                p += 1
            else:
                d += 1
    best: tuple[float, int, int, int] | None = None
    for p in range(lo_p, want_p + 1):
        room = budget - p * gp
        if room < lo_d * gd:
            break
        d = min(want_d, room // gd)
        key = (min(_ratio(p, need_p), _ratio(d, need_d)), p * gp + d * gd, p, d)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:  # the CEL rule keeps the minimum inside the budget; an external role may not
        return lo_p, lo_d
    return best[2], best[3]
