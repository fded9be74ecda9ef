"""qdd.observe: reads → rates, percentiles, facts and the five serving conditions, with exact values."""

from __future__ import annotations

import math

import pytest

from qdd.api.observe import ObserveThresholds
from qdd.observe import EngineRead, Histogram, PodRead, judge
from qdd.observe.model import Percentiles
from qdd.observe.status import serving_status
from qdd.observe.window import histogram_increase, increase, merge, quantile

T = ObserveThresholds()
W = 60
BOUNDS = (0.01, 0.1, 1.0, math.inf)


def hist(*counts: float, total: float = 0.0) -> Histogram:
    """Cumulative counts per bound of BOUNDS."""
    return Histogram(tuple(zip(BOUNDS, counts, strict=True)), total, counts[-1])


def pod(name: str, role: str, t: float, *engines: EngineRead, endpoint: int = 0) -> PodRead:
    return PodRead(name, role, endpoint, t, engines)


def steady(name: str, role: str, reads: int = 5, period: float = 15.0, **over: float) -> list[PodRead]:
    """A healthy engine: 100 tokens and 1 request per second, 4 running, 1 waiting, cache 30%."""
    out = []
    for i in range(reads):
        values = {"running": 4.0, "waiting": 1.0, "kv_cache_usage": 0.3, "prompt_tokens": 50.0 * i * period,
                  "generation_tokens": 50.0 * i * period, "finished": 1.0 * i * period, "transfers": 1.0 * i * period}
        values.update({k: (v(i) if callable(v) else v) for k, v in over.items()})
        out.append(pod(name, role, 1000.0 + i * period, EngineRead("0", ttft=hist(0, 10 * i, 20 * i, 20 * i),
                                                                  **values)))
    return out


NOW = 1000.0 + 4 * 15.0


def conds(j) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in j.conditions}


def test_counter_increase_across_a_restart_and_histogram_quantile_as_promql():
    assert increase([5, 7, 9]) == 4
    assert increase([5, 7, 2, 3]) == 2 + 2 + 1  # 7 -> 2: restarted, counted 2 since
    assert increase([3]) == 0
    h = histogram_increase([hist(0, 0, 0, 0), hist(10, 30, 40, 40)])
    assert h.buckets == ((0.01, 10), (0.1, 30), (1.0, 40), (math.inf, 40)) and h.count == 40
    # rank 20 of 40 lies in (0.01, 0.1], 10 of its 20 observations: halfway.
    assert quantile(0.5, h) == pytest.approx(0.055)
    assert quantile(0.99, h) == pytest.approx(0.1 + 0.9 * (39.6 - 30) / 10)
    assert quantile(0.5, merge([h, h])) == pytest.approx(0.055)
    assert quantile(0.5, Histogram()) is None
    assert quantile(0.99, hist(0, 0, 1, 10)) == 1.0  # in +Inf: the highest finite bound


def test_histogram_increase_bucket_by_bucket_across_a_restart_and_a_change_of_bounds():
    # Same bounds in every read (the path the reader takes): a restart counts what came after it.
    h = histogram_increase([hist(1, 2, 3, 3, total=1.0), hist(5, 8, 9, 9, total=2.0), hist(1, 1, 2, 2, total=0.5)])
    assert h.buckets == ((0.01, 4 + 1), (0.1, 6 + 1), (1.0, 6 + 2), (math.inf, 6 + 2))
    assert (h.total, h.count) == (1.0 + 0.5, 6 + 2)
    # The bounds changed between reads (a new engine build): every bound, a missing one read as 0.
    other = Histogram(((0.05, 4), (math.inf, 6)), 1.0, 6)
    h = histogram_increase([hist(1, 2, 3, 3), other])
    assert h.buckets == ((0.01, 0), (0.05, 4), (0.1, 0), (1.0, 0), (math.inf, 6 - 3))


def test_histogram_is_immutable_and_compares_by_value():
    a, b = hist(1, 2, 3, 3, total=1.5), hist(1, 2, 3, 3, total=1.5)
    assert a == b and hash(a) == hash(b) and a != hist(1, 2, 3, 4, total=1.5)
    assert a.bounds is b.bounds  # one tuple of bounds for every histogram that has them
    assert list(a.counts) == [1, 2, 3, 3] and a.buckets[2] == (1.0, 3.0)
    with pytest.raises(AttributeError):
        a.total = 2.0  # type: ignore[misc]


def test_healthy_deployment_raises_nothing_and_reports_rates_and_percentiles():
    reads = {"p-0": steady("p-0", "prefill"), "d-0": steady("d-0", "decode")}
    j = judge(reads, T, W, NOW, generation=3)
    assert conds(j) == {"KVTransferFailing": ("False", "NoFailedTransfers"), "KVLeaseExpiring": ("False", "LeasesHeld"),
                        "KVCacheSaturated": ("False", "KVCacheAvailable"),
                        "RequestsQueueing": ("False", "QueueWithinBound"),
                        "EngineStalled": ("False", "AllEnginesProgressing")}
    assert all(c["observedGeneration"] == 3 for c in j.conditions)
    d = j.roles["decode"]
    assert (d.engines, d.pods, d.running, d.waiting, d.kv_cache_usage) == (1, 1, 4.0, 1.0, 0.3)
    assert (d.prompt_tokens_per_second, d.generation_tokens_per_second, d.requests_per_second) == (50.0, 50.0, 1.0)
    # ttft gained 80 observations in the window: 40 in (0.01, 0.1], 40 in (0.1, 1]; p50 is the 40th.
    assert d.ttft == Percentiles(p50=0.1, p90=0.82, p99=0.982)
    s = serving_status(j, "pods", W, "2026-12-02T00:00:00Z")
    assert s["decode"]["ttftSeconds"] == {"p50": 0.1, "p90": 0.82, "p99": 0.982}
    assert (s["waiting"], s["decode"]["running"], s["decode"]["kvCacheUsage"]) == (2, 4, 0.3)


def test_failed_transfers_raise_then_clear_after_a_window_without():
    failing = steady("d-0", "decode", failed_transfers=lambda i: 0 if i < 3 else 7)
    reads = {"p-0": steady("p-0", "prefill"), "d-0": failing}
    c = next(c for c in judge(reads, T, W, NOW).conditions if c["type"] == "KVTransferFailing")
    assert (c["status"], c["reason"]) == ("True", "KVTransfersFailing")
    assert c["message"].startswith("7 NIXL KV transfers failed in the last 60 s (d-0 engine 0: 7;")
    # Later: the counter stays at 7 for a whole window: cleared.
    later = [PodRead("d-0", "decode", 0, 1120.0 + 15 * i, failing[-1].engines) for i in range(5)]
    j = judge({"p-0": steady("p-0", "prefill"), "d-0": failing + later}, T, W, 1180.0)
    assert conds(j)["KVTransferFailing"] == ("False", "NoFailedTransfers")


def test_expired_leases_on_prefill_raise_the_lease_condition_with_the_lease():
    reads = {"p-0": steady("p-0", "prefill", expired=lambda i: 2.0 * (i >= 4)), "d-0": steady("d-0", "decode")}
    c = next(c for c in judge(reads, T, W, NOW, lease_seconds=2).conditions if c["type"] == "KVLeaseExpiring")
    assert (c["status"], c["reason"]) == ("True", "KVLeaseExpired")
    assert "2 requests' KV leases expired before decode read them, 0 read notifications" in c["message"] and "p-0 engine 0: 2" in c["message"]
    assert "(spec.kvTransfer.leaseSeconds 2 s)" in c["message"]
    assert judge(reads, ObserveThresholds(expiredLeases=2), W, NOW).conditions[1]["status"] == "False"


def gauge_reads(name: str, role: str, values: list[float], attr: str, start: float = 1000.0,
                period: float = 15.0) -> list[PodRead]:
    """One engine read every ``period`` from ``start``, ``attr`` taking ``values`` in turn, tokens moving."""
    return [pod(name, role, start + i * period, EngineRead("0", running=4.0, generation_tokens=100.0 * i,
                                                          **{attr: v})) for i, v in enumerate(values)]


def cache_reads(values: list[float]) -> list[PodRead]:
    return gauge_reads("d-0", "decode", values, "kv_cache_usage")


def test_full_cache_raises_only_after_a_whole_window_and_says_how_long():
    # Two reads at 97 % (15 s): the old rule raised here, saying "for the whole last 60 s".
    assert conds(judge({"d-0": cache_reads([0.97, 0.97])}, T, W, 1015.0))["KVCacheSaturated"] == (
        "False", "KVCacheAvailable")
    # 45 s at 97 % after a read at 50 %: not a whole window yet.
    j = judge({"d-0": cache_reads([0.5, 0.97, 0.97, 0.97, 0.97])}, T, W, NOW)
    assert conds(j)["KVCacheSaturated"] == ("False", "KVCacheAvailable") and j.held == frozenset()
    # At every read for 60 s (five reads, a whole 60 s window): raised, with the duration seen.
    j = judge({"d-0": cache_reads([0.97] * 5)}, T, W, NOW)
    c = j.conditions[2]
    assert (c["status"], c["reason"]) == ("True", "KVCacheFull") and j.held == {("KVCacheFull", "decode")}
    assert c["message"].startswith("KV cache at or above 95% at every read for a whole window (60 s) on decode d-0 "
                                   "engine 0 (≥ 97% at every read of the last 60 s): ")
    assert c["message"].endswith("It clears once every read of a whole window (60 s) is below 95%")
    # Longer than the window: the message says how long (every read kept), its lowest value too.
    c = judge({"d-0": cache_reads([0.96, 0.99] * 4 + [0.98])}, T, W, 1120.0).conditions[2]
    assert "(≥ 96% at every read of the last 120 s)" in c["message"]


def test_full_cache_is_held_through_a_dip_and_cleared_by_a_whole_window_below():
    """Raise after a whole window at or above; a dip (or a spike) of a read changes nothing; cleared
    once every read of a whole window is below, each judgement handed the previous one's ``held``."""
    values = [0.97] * 5 + [0.5, 0.97, 0.5, 0.5, 0.5, 0.5, 0.5]
    reads = cache_reads(values)
    held: frozenset = frozenset()
    seen = []
    for i in range(len(values)):
        now = 1000.0 + 15 * i
        j = judge({"d-0": reads[: i + 1]}, T, W, now, held=held)
        held = j.held
        seen.append(conds(j)["KVCacheSaturated"][0])
        if now == 1075.0:  # the dip: held, and the message says what the window still saw
            c = j.conditions[2]
            assert c["message"].startswith("KV cache was at or above 95% at every read for a whole window, and still "
                                           "reached it in the last 60 s on decode d-0 engine 0 (at or above at 4 of 5 "
                                           "reads, highest 97%). It clears once every read of a whole window (60 s) is "
                                           "below 95%.")
            # The same reads without the state: one read below never raised it.
            assert conds(judge({"d-0": reads[: i + 1]}, T, W, now))["KVCacheSaturated"][0] == "False"
    # Raised at the 5th read (1060 s); held through 1075 (dip), 1090 (back up), 1105–1150 while a read of
    # the last 60 s reached 95 %; the reads of 1105..1165 are all below: cleared at 1165.
    assert seen == ["False"] * 4 + ["True"] * 7 + ["False"]
    assert held == frozenset()


def test_queue_beyond_bound_only_after_a_whole_window_and_held_until_a_whole_window_within():
    def q(values: list[float]) -> list[PodRead]:
        return gauge_reads("p-0", "prefill", values, "waiting")
    assert conds(judge({"p-0": q([40.0, 40.0, 10.0, 40.0, 40.0])}, T, W, NOW))["RequestsQueueing"] == (
        "False", "QueueWithinBound")
    assert conds(judge({"p-0": q([40.0] * 4)}, T, W, 1045.0))["RequestsQueueing"] == ("False", "QueueWithinBound")
    j = judge({"p-0": q([41.0, 40.0, 45.0, 40.0, 50.0])}, T, W, NOW)
    c = j.conditions[3]
    assert (c["status"], c["reason"]) == ("True", "QueueBeyondBound") and j.held == {("QueueBeyondBound", "prefill")}
    assert "prefill p-0 engine 0 (≥ 40 at every read of the last 60 s)" in c["message"]
    # Drained to 32 (the bound: "above" no more) at one read: held, the message counts the window.
    reads = q([41.0, 40.0, 45.0, 40.0, 50.0, 32.0])
    c = judge({"p-0": reads}, T, W, 1075.0, held=j.held).conditions[3]
    assert c["status"] == "True" and "prefill p-0 engine 0 (above at 4 of 5 reads, highest 50)" in c["message"]
    # A whole window at or below the bound: cleared.
    reads = q([41.0, 40.0, 45.0, 40.0, 50.0, 32.0, 3.0, 0.0, 0.0, 1.0])
    j2 = judge({"p-0": reads}, T, W, 1135.0, held=j.held)
    assert conds(j2)["RequestsQueueing"] == ("False", "QueueWithinBound") and j2.held == frozenset()


def test_preemptions_raise_the_cache_condition():
    pre = steady("d-0", "decode", preemptions=lambda i: 3.0 * i)
    c = judge({"d-0": pre}, T, W, NOW).conditions[2]
    assert (c["status"], c["reason"]) == ("True", "Preempting") and c["message"].startswith("12 requests preempted")


STALL = ObserveThresholds(stallSeconds=45)


def leader(i: int, *engines: EngineRead, start: float = 1000.0) -> PodRead:
    return pod("d-0", "decode", start + 15 * i, *engines)


def test_one_rank_not_progressing_while_its_peers_do():
    reads = {"d-0": [leader(i, EngineRead("0", running=4, prompt_tokens=100.0 * i, generation_tokens=100.0 * i),
                            EngineRead("1", running=4, prompt_tokens=500.0, generation_tokens=500.0))
                     for i in range(5)]}
    c = judge(reads, STALL, W, NOW).conditions[4]
    assert (c["status"], c["reason"]) == ("True", "EngineNotProgressing")
    assert c["message"].startswith("decode d-0 engine 1 (no token for 60 s) had requests running at every read but "
                                   "made no token for 45 s or longer (threshold); 1 other decode engine made tokens "
                                   "in the last 45 s (this engine is stuck, not the load).")
    # An engine with nothing running is idle, not stalled.
    idle1 = {"d-0": [leader(i, EngineRead("0", running=4, generation_tokens=9.0 * i), EngineRead("1", running=0))
                     for i in range(5)]}
    assert conds(judge(idle1, STALL, W, NOW))["EngineStalled"] == ("False", "AllEnginesProgressing")


def test_a_single_engine_is_seen_stalled_without_a_peer():
    """A deployment with one decode engine: no peer, and the stall is still raised (the old rule needed one)."""
    reads = {"d-0": [leader(i, EngineRead("0", running=2, generation_tokens=700.0)) for i in range(4)]}
    c = judge(reads, STALL, W, 1045.0).conditions[4]
    assert (c["status"], c["reason"]) == ("True", "EngineNotProgressing")
    assert c["message"].startswith("decode d-0 engine 0 (no token for 45 s) had requests running at every read but "
                                   "made no token for 45 s or longer (threshold); it is the only decode engine read "
                                   "(no peer to compare with; none is needed).")
    # 30 s quiet (under stallSeconds): not yet.
    assert conds(judge({"d-0": reads["d-0"][:3]}, STALL, W, 1030.0))["EngineStalled"][0] == "False"


def test_a_hung_group_stays_stalled_past_the_window_and_clears_when_tokens_move():
    """A DEP2 group that hangs whole: both ranks stop at 1030 s. The old rule cleared it once the
    peers' progress before the hang left the window (their "progress" was the window's); it stays
    raised for as long as the hang lasts, from the reads the observer keeps (window + two periods)."""
    def rank(e: str, i: int, hung_from: int | None) -> EngineRead:
        n = float(min(i, hung_from) if hung_from is not None else i)
        return EngineRead(e, running=8, generation_tokens=100.0 * n)
    reads = [leader(i, rank("0", i, 2), rank("1", i, 2)) for i in range(40)]  # 1000..1585 s
    kept = 60 + 2 * 15
    for now in (1075.0, 1180.0, 1300.0, 1585.0):
        window = [r for r in reads if now - kept <= r.time <= now]
        c = judge({"d-0": window}, STALL, W, now).conditions[4]
        assert (c["status"], c["reason"]) == ("True", "EngineNotProgressing"), now
        assert "no other decode engine made a token in the last 45 s either (2 of 2 stalled): the whole role" in c[
            "message"]
    quiet = judge({"d-0": [r for r in reads if r.time >= 1585.0 - kept]}, STALL, W, 1585.0).engines
    assert [e.quiet_seconds for e in quiet] == [90.0, 90.0]  # as long as the reads kept show
    # Tokens move again on both ranks: cleared at that read.
    moving = reads + [leader(40, rank("0", 50, None), rank("1", 50, None))]
    j = judge({"d-0": [r for r in moving if r.time >= 1600.0 - kept]}, STALL, W, 1600.0)
    assert conds(j)["EngineStalled"] == ("False", "AllEnginesProgressing")
    # Or the requests are gone (nothing running): cleared too.
    done = reads + [leader(40, EngineRead("0", running=0, generation_tokens=200.0),
                           EngineRead("1", running=0, generation_tokens=200.0))]
    j = judge({"d-0": [r for r in done if r.time >= 1600.0 - kept]}, STALL, W, 1600.0)
    assert conds(j)["EngineStalled"] == ("False", "AllEnginesProgressing")


def test_no_metrics_is_unknown_with_the_errors():
    reads = {"d-0": [PodRead("d-0", "decode", 0, NOW, error="unreachable: connection refused")], "p-0": []}
    j = judge(reads, T, W, NOW)
    assert {c["status"] for c in j.conditions} == {"Unknown"}
    assert {c["reason"] for c in j.conditions} == {"NoEngineMetrics"}
    assert j.conditions[0]["message"] == "no engine's metrics could be read (d-0: unreachable: connection refused)"
    assert serving_status(j, "pods", W, None)["errors"] == ["d-0: unreachable: connection refused"]
