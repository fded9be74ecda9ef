"""Faults of the control plane itself, mid-reconcile: kube-apiserver and etcd crash and come back.

Each test applies a spec change (prefill 4 -> 5 endpoints and a decode roll: concurrency 4096 ->
3072, a new capture size), waits until the operator has sent its first write for it (its
``qdd_api_writes_total`` grows), then SIGKILLs the component, keeps it down for
:data:`DOWN_SECONDS` and starts it again with `kwokctl start cluster`
(tests/integration/control_plane.py). Checked at the end (tests/integration/converged.py): Ready
on the last spec, the children exactly what `qdd render` renders — none lost, none orphaned or
duplicated — and the operator process never restarted. Each prints what it injected and how long
convergence took after the component was back.
"""

from __future__ import annotations

import time

import pytest

from . import control_plane
from .converged import wait_converged
from .conftest import Kube
from .operator_proc import OperatorProcess
from .test_operator import SEED, cr_of, pods, uids

DOWN_SECONDS = 3.0
"""How long the component stays down: longer than the operator's connect timeout (5 s is the
read side; a refused connection fails at once), short enough for a fast test."""
RESYNC_SECONDS = 30.0
"""The chart's default (`operator.resyncSeconds`): convergence must not wait for a faster timer."""


@pytest.fixture(scope="module")
def cp_operator(kube: Kube, operator):
    """The module's operator, with the chart's resync period instead of the tests' 5 s."""
    operator.stop()
    op = OperatorProcess(kube, resync_seconds=RESYNC_SECONDS, log_name="-control-plane")
    op.start()
    yield op
    op.stop()


def _writes(op: OperatorProcess) -> float:
    return op.counter("qdd_api_writes_total")


def _change_and_crash(kube: Kube, op: OperatorProcess, cr: dict, component: str) -> tuple[str, dict, float]:
    """Scale prefill to 5 and roll decode; SIGKILL ``component`` right after the operator's
    first write for that change; start it again. Returns (what was injected, the new spec, the
    monotonic time the control plane was back)."""
    name, ns = cr["metadata"]["name"], cr["metadata"]["namespace"]
    before = _writes(op)
    kube.kubectl("patch", "qdd", name, "-n", ns, "--type=merge",
                 "-p", '{"spec": {"prefill": {"endpoints": 5}, "workload": {"concurrency": 3072}}}')
    t0 = time.monotonic()
    kube.wait_for(lambda: _writes(op) > before, timeout=30, interval=0.01, desc="the operator's first write")
    first_write = time.monotonic() - t0
    pid = control_plane.kill(kube, component)
    writes_at_kill = _writes(op) - before
    time.sleep(DOWN_SECONDS)
    back = control_plane.start(kube)
    cr["spec"]["prefill"]["endpoints"], cr["spec"]["workload"]["concurrency"] = 5, 3072
    return (f"{component} (pid {pid}) SIGKILLed {first_write:.2f} s after the patch, after {writes_at_kill:.0f} "
            f"of the operator's writes for it; down {DOWN_SECONDS:.0f} s; started again by kwokctl, serving "
            f"and the scheduler and controller-manager leading again {back:.1f} s later"), cr, time.monotonic()


@pytest.mark.parametrize("component", [control_plane.APISERVER, control_plane.ETCD])
def test_control_plane_component_crash_mid_reconcile_converges(kube, cp_operator, namespace, component):
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_converged(kube, cr)
    untouched = uids(pods(kube, name, namespace, "prefill"))  # 4 prefill pods: a scale-up keeps them
    op_pid = cp_operator.proc.pid
    try:
        injected, cr, back = _change_and_crash(kube, cp_operator, cr, component)
        print("injected:", injected)
        if component == control_plane.ETCD:
            control_plane.restart_kwok(kube)  # the simulated kubelets, not the operator (restart_kwok says why)
        with control_plane.Supervisor(kube) as kubelet:
            wait_converged(kube, cr, timeout=150)
        took = time.monotonic() - back
    finally:
        control_plane.start(kube)  # leave every component running and leading for the tests that follow
    print(f"converged {took:.1f} s after {component} was serving again (resync {RESYNC_SECONDS:.0f} s); "
          f"components that exited by themselves and were started again: {kubelet.restarts or 'none'}")
    # Nothing lost from etcd: the custom resource's spec and the objects written before the crash.
    live = kube.get("qdd", name, namespace)
    assert live["spec"]["prefill"]["endpoints"] == 5 and live["spec"]["workload"]["concurrency"] == 3072
    now = uids(pods(kube, name, namespace, "prefill"))
    assert {k: now.get(k) for k in untouched} == untouched, "a scale-up replaced a prefill pod"
    decode = pods(kube, name, namespace, "decode")
    capture = {p["spec"]["containers"][0]["args"][p["spec"]["containers"][0]["args"].index(
        "--max-cudagraph-capture-size") + 1] for p in decode}
    assert capture == {"512"}, capture  # 3072 -> 512 on one DEP8 (qdd.plan.sizing)
    # The operator rode it out: the same process, alive, no restart needed.
    assert cp_operator.proc.pid == op_pid and cp_operator.proc.poll() is None and cp_operator.live()
    assert control_plane.dead_doubles(kube) == [], "a test double (hack/fake_*.py) did not survive the restart"
