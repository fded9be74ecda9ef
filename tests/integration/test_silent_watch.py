"""A watch that goes silent: the connection stays open, no event arrives (tests/integration/apiproxy.py).

Injected: the operator reaches kube-apiserver only through a proxy; once the deployment is Ready
every watch stream open at that moment stops forwarding (connections kept open, events dropped),
then the deployment is scaled (prefill 4 -> 5). The operator's resync timer is set to an hour, so
only its watches can tell it. Checked: with a watch inactivity timeout (kopf's
``settings.watching.inactivity_timeout``, ``qdd run --watch-inactivity-timeout``) the operator
watches again, sees the change and converges, nothing orphaned or duplicated
(tests/integration/converged.py); without one (the control) it does not, which proves the fault
really cuts the operator off.
"""

from __future__ import annotations

import time

import pytest

from . import control_plane
from .apiproxy import ApiProxy
from .converged import wait_converged
from .conftest import Kube
from .operator_proc import OperatorProcess
from .test_operator import SEED, cr_of

INACTIVITY = 4.0
"""Seconds: short for a fast test; the default is 70 (qdd.controller.watching says why)."""
QUIET = 12.0
"""How long the control waits to be sure a silenced operator misses the change."""


@pytest.fixture
def proxied_operator(kube: Kube, operator, tmp_path, request):
    """(proxy, operator behind it): the module's operator stopped for this one, whose watch
    inactivity timeout is ``request.param`` seconds, resync an hour, server and client timeouts
    an hour (so that only the inactivity timeout can end a silent stream)."""
    operator.stop()
    with ApiProxy(control_plane.cluster_dir(kube) / "kubeconfig.yaml") as proxy:
        op = OperatorProcess(kube, resync_seconds=3600, log_name=f"-silent-watch-{request.param:.0f}",
                             env={"KUBECONFIG": str(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"))},
                             args=("--watch-inactivity-timeout", str(request.param),
                                   "--watch-server-timeout", "3600", "--watch-client-timeout", "3700"))
        op.start()
        try:
            yield proxy, op
        finally:
            op.stop()


def _silence_and_scale(kube: Kube, proxy: ApiProxy, cr: dict) -> float:
    name, ns = cr["metadata"]["name"], cr["metadata"]["namespace"]
    kube.apply(cr)
    wait_converged(kube, cr)
    silenced = proxy.silence()
    t0 = time.monotonic()
    assert any("qwendisaggdeployments" in s.path for s in silenced), [s.path for s in silenced]
    kube.kubectl("scale", f"qdd/{name}", "-n", ns, "--replicas=5")  # straight to the API server, not proxied
    cr["spec"]["prefill"]["endpoints"] = 5
    print(f"injected: {len(silenced)} watch streams silenced "
          f"({', '.join(sorted({s.path.rsplit('/', 1)[-1] for s in silenced}))}), then prefill scaled 4 -> 5")
    return t0


@pytest.mark.parametrize("proxied_operator", [INACTIVITY], indirect=True)
def test_silent_watch_is_dropped_after_the_inactivity_timeout_and_the_operator_converges(kube, proxied_operator,
                                                                                          namespace):
    proxy, _ = proxied_operator
    cr = cr_of(SEED, namespace)
    t0 = _silence_and_scale(kube, proxy, cr)
    wait_converged(kube, cr, timeout=60)
    took = time.monotonic() - t0
    # The change reached the operator through a new watch, opened after the silence, continuing
    # from the last resourceVersion kopf had seen; the silenced stream withheld the event.
    again = proxy.watches_since(t0, "qwendisaggdeployments")
    assert again and all("resourceVersion=" in s.query for s in again), [(s.path, s.query) for s in again]
    [old] = [s for s in proxy.streams if s.silenced and s.path.endswith("qwendisaggdeployments")]
    assert old.dropped_chunks >= 1, "the silenced stream had nothing to withhold: the fault was not injected"
    print(f"converged {took:.1f} s after the silence (inactivity timeout {INACTIVITY:.0f} s); "
          f"{old.dropped_chunks} chunks withheld from the silenced CR stream; {len(again)} new CR watch(es)")
    assert took < INACTIVITY + 30


@pytest.mark.parametrize("proxied_operator", [3600.0], indirect=True)
def test_control_without_an_inactivity_timeout_the_silenced_operator_misses_the_change(kube, proxied_operator,
                                                                                        namespace):
    proxy, _ = proxied_operator
    cr = cr_of(SEED, namespace)
    t0 = _silence_and_scale(kube, proxy, cr)
    time.sleep(QUIET)
    live = kube.get("qdd", cr["metadata"]["name"], namespace)
    assert live["status"]["observedGeneration"] < live["metadata"]["generation"], "the operator saw the change"
    assert live["status"]["prefill"]["endpoints"] == 4
    assert proxy.watches_since(t0, "qwendisaggdeployments") == []
    print(f"control: {QUIET:.0f} s after the silence the change was still unseen (observedGeneration "
          f"{live['status']['observedGeneration']} < {live['metadata']['generation']})")
