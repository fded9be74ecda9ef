"""kopf's leadership rule as qdd's resync thread reads it (qdd.controller.peering)."""

from __future__ import annotations

import datetime

from qdd.controller.peering import Leadership, default_priority, is_leader, live_peers

NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _seen(seconds_ago: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()


STATUS = {
    "op-a": {"priority": 200, "lifetime": 15, "lastseen": _seen(3)},
    "op-b": {"priority": 100, "lifetime": 15, "lastseen": _seen(1)},
    "op-old": {"priority": 900, "lifetime": 15, "lastseen": _seen(16)},  # expired: a SIGKILLed leader
}


def test_live_peers_drop_expired_keep_alives():
    assert live_peers(STATUS, NOW) == {"op-a": 200, "op-b": 100}


def test_the_highest_live_priority_leads():
    assert is_leader(STATUS, "op-a", 200, NOW)
    assert not is_leader(STATUS, "op-b", 100, NOW)
    # 14 s earlier the old leader was still live: nobody else led.
    assert not is_leader(STATUS, "op-a", 200, NOW - datetime.timedelta(seconds=14))


def test_equal_priorities_pause_both_as_kopf_does():
    status = {"x": {"priority": 5, "lifetime": 60, "lastseen": _seen(0)},
              "y": {"priority": 5, "lifetime": 60, "lastseen": _seen(0)}}
    assert not is_leader(status, "x", 5, NOW) and not is_leader(status, "y", 5, NOW)


def test_no_peering_object_means_no_leadership():
    assert Leadership(lambda: None, "op-a", 200)() is False
    assert Leadership(lambda: {}, "op-a", 200)() is True  # alone in an existing peering object


def test_default_priority_is_stable_and_spreads():
    assert default_priority("qdd-qdd-operator-7c9f-abcde") == default_priority("qdd-qdd-operator-7c9f-abcde")
    prios = {default_priority(f"qdd-qdd-operator-7c9f-{i:05d}") for i in range(1000)}
    assert len(prios) == 1000 and all(0 <= p < 2**24 for p in prios)
