"""A tabulated :class:`~qdd.autoscale.types.CapacityProfile`: per-endpoint capacities measured or
modelled at a few input lengths, linearly interpolated (clamped at the ends).

The performance model (qdd.perf.profile) produces such tables from AIConfigurator's data; tests and
the offline closed loop build them directly. Capacities are for the targets they were computed at:
``prefill_tokens_per_s`` ignores ``ttft_ms`` and ``decode_concurrency`` ignores ``tpot_ms`` beyond
checking that the target asked is the one tabulated.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, x)
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + f * (ys[i] - ys[i - 1])


@dataclass(frozen=True)
class TableProfile:
    ttft_ms: float
    tpot_ms: float
    isl_points: tuple[float, ...]
    """Input lengths (tokens), strictly increasing."""
    prefill_tokens_per_s_at: tuple[float, ...]
    """Input tokens/s one prefill endpoint sustains at each ISL point under ttft_ms (> 0)."""
    decode_concurrency_at: tuple[float, ...]
    """Requests one decode endpoint holds under tpot_ms at each ISL point (> 0)."""

    def __post_init__(self) -> None:
        n = len(self.isl_points)
        if n == 0 or len(self.prefill_tokens_per_s_at) != n or len(self.decode_concurrency_at) != n:
            raise ValueError("TableProfile: isl_points and both capacity columns must have the same, non-zero length")
        if any(b <= a for a, b in zip(self.isl_points, self.isl_points[1:], strict=False)):
            raise ValueError("TableProfile: isl_points must be strictly increasing")
        if min(self.prefill_tokens_per_s_at) <= 0 or min(self.decode_concurrency_at) <= 0:
            raise ValueError("TableProfile: capacities must be > 0")

    def _check(self, asked: float, tabulated: float, name: str) -> None:
        if abs(asked - tabulated) > 1e-6:
            raise ValueError(f"TableProfile: tabulated for {name} {tabulated} ms, asked for {asked} ms")

    def prefill_tokens_per_s(self, isl: float, ttft_ms: float) -> float:
        self._check(ttft_ms, self.ttft_ms, "ttft")
        return _interp(self.isl_points, self.prefill_tokens_per_s_at, isl)

    def decode_concurrency(self, isl: float, osl: float, tpot_ms: float) -> float:
        self._check(tpot_ms, self.tpot_ms, "tpot")
        return _interp(self.isl_points, self.decode_concurrency_at, isl)
