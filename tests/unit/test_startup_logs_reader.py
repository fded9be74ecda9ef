"""The operator's reader of engine start-ups (qdd.controller.startup_logs): once per container start,
only once the engine serves, bounded, retried, never raising; status.startup from what was read."""

from __future__ import annotations

from pathlib import Path

from qdd.controller.startup_logs import ATTEMPTS, LIMIT_BYTES, StartupLogs, pod_times, serving_engines, startup_status

DATA = Path(__file__).resolve().parent / "data"
LOG = (DATA / "vllm-0.32.0-cpu-start-cold.log").read_text()


def _pod(name: str, role: str = "prefill", ready: bool = True, uid: str | None = None, restarts: int = 0,
         group_role: str | None = None, endpoint: str = "0") -> dict:
    lab = {"qdd.dev/role": role, "qdd.dev/endpoint": endpoint}
    if group_role:
        lab["qdd.dev/group-role"] = group_role
    return {"kind": "Pod", "metadata": {"name": name, "uid": uid or name, "labels": lab}, "spec": {"nodeName": "n1"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-02T10:00:00Z"},
                                      {"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": "2026-12-02T10:01:30Z"}],
                       "containerStatuses": [{"name": "vllm", "restartCount": restarts,
                                              "state": {"running": {"startedAt": "2026-12-02T10:00:12Z"}}}]}}


class Reads:
    def __init__(self, text: str = LOG, fail: int = 0):
        self.text, self.fail, self.calls = text, fail, []

    def __call__(self, ns: str, pod: str, container: str, limit: int, timeout: float) -> str:
        self.calls.append((ns, pod, container, limit, timeout))
        if len(self.calls) <= self.fail:
            raise ConnectionRefusedError("refused")
        return self.text


def test_read_once_per_container_start_when_it_serves():
    reads, clock = Reads(), [0.0]
    s = StartupLogs(read=reads, workers=0, clock=lambda: clock[0])
    s.track("ns", "d", [_pod("p0", ready=False)])
    assert reads.calls == []  # not serving yet: its start-up is not written out
    s.track("ns", "d", [_pod("p0")])
    s.track("ns", "d", [_pod("p0")])
    assert reads.calls == [("ns", "p0", "vllm", LIMIT_BYTES, 5.0)]
    s.track("ns", "d", [_pod("p0", restarts=1)])  # the container started again: read again
    s.track("ns", "d", [_pod("p0", uid="other")])  # a new pod of the same name: again
    assert len(reads.calls) == 3
    [e] = s.entries("ns", "d")
    assert e.parsed is not None and e.parsed.serving and e.error is None


def test_workers_wait_for_their_leader():
    reads = Reads()
    s = StartupLogs(read=reads, workers=0)
    pods = [_pod("l", "decode", ready=False, group_role="leader"), _pod("w", "decode", ready=True, group_role="worker")]
    assert serving_engines(pods) == []
    s.track("ns", "d", pods)
    assert reads.calls == []
    pods[0] = _pod("l", "decode", group_role="leader")
    assert [p["metadata"]["name"] for p in serving_engines(pods)] == ["l", "w"]


def test_failures_are_retried_a_few_times_apart_then_reported():
    reads, clock = Reads(fail=10), [0.0]
    s = StartupLogs(read=reads, workers=0, clock=lambda: clock[0])
    for _ in range(5):
        s.track("ns", "d", [_pod("p0")])  # no retry before RETRY_S
    assert len(reads.calls) == 1
    for _ in range(10):
        clock[0] += 31
        s.track("ns", "d", [_pod("p0")])
    assert len(reads.calls) == ATTEMPTS
    st = startup_status(s.entries("ns", "d"), [_pod("p0")])
    assert st["errors"] == ["p0: ConnectionRefusedError: refused"] and st["read"] == 0
    assert st["pods"] == [{"pod": "p0", "restarts": 0, "node": "n1", "beforeStartSeconds": 12.0, "toReadySeconds": 78.0}]


def test_a_log_without_a_start_up_is_read_again_later():
    reads, clock = Reads(text="hello\n"), [0.0]
    s = StartupLogs(read=reads, workers=0, clock=lambda: clock[0])
    s.track("ns", "d", [_pod("p0")])
    [e] = s.entries("ns", "d")
    assert e.error and "no complete start-up" in e.error
    clock[0] += 31
    reads.text = LOG
    s.track("ns", "d", [_pod("p0")])
    [e] = s.entries("ns", "d")
    assert e.error is None and e.parsed.serving


def test_without_a_reader_nothing_is_read_or_written():
    s = StartupLogs(read=None, workers=0)
    s.track("ns", "d", [_pod("p0")])
    assert s.entries("ns", "d") == [] and startup_status([], []) is None


def test_pod_times_are_the_pod_s_own():
    assert pod_times(_pod("p0")) == {"beforeStartSeconds": 12.0, "toReadySeconds": 78.0}
    assert pod_times(_pod("p0", ready=False)) == {"beforeStartSeconds": 12.0}


def test_status_is_bounded_and_slowest_first():
    reads = Reads()
    s = StartupLogs(read=reads, workers=0)
    pods = [_pod(f"p{i:03d}") for i in range(100)]
    s.track("ns", "d", pods)
    st = startup_status(s.entries("ns", "d"), pods)
    assert st["read"] == 100 and len(st["pods"]) == 64


def test_the_reads_of_one_track_ask_for_one_pass_even_when_the_last_one_fails():
    """Issue 23: make bench-scale wrote status.startup once per pod read (563 status patches for 30
    deployments); the reads in flight together now end in one ask, by the last to finish."""
    asked: list[tuple[str, str]] = []

    class FailLast(Reads):
        def __call__(self, ns, pod, container, limit, timeout):
            self.calls.append(pod)
            if pod == "p7":
                raise TimeoutError("read timed out")
            return self.text
    s = StartupLogs(read=FailLast(), workers=0, notify=lambda ns, n: asked.append((ns, n)))
    s.track("ns", "d", [_pod(f"p{i}", endpoint=str(i)) for i in range(8)])
    assert asked == [("ns", "d")]
    assert sum(e.parsed is not None for e in s.entries("ns", "d")) == 7
    s.track("ns", "d", [_pod(f"p{i}", endpoint=str(i)) for i in range(8)])  # p7 not due again yet
    assert asked == [("ns", "d")]
    s.track("ns", "other", [_pod("q0")])
    assert asked == [("ns", "d"), ("ns", "other")]

