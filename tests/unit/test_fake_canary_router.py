"""The router TEST DOUBLE's ``/list_workers`` (hack/fake_canary_router.py :func:`discovered`): what
vllm-router 0.1.17's Kubernetes discovery registers over time. The same function's answer for the
rendered pods equals the real router's in tests/contract/test_router.py; here, the states a single
answer cannot show: a pod stays registered until it is deleted, and the test knob holds pods back."""

from __future__ import annotations

import importlib.util
from typing import Any

from ..conftest import ROOT

_spec = importlib.util.spec_from_file_location("fake_canary_router", ROOT / "hack" / "fake_canary_router.py")
assert _spec is not None and _spec.loader is not None
double = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(double)

ARGS = ["--vllm-pd-disaggregation", "--service-discovery", "--service-discovery-port", "8000",
        "--prefill-selector", "qdd.dev/deployment=d", "qdd.dev/role=prefill",
        "--decode-selector", "qdd.dev/deployment=d", "qdd.dev/role=decode", "--prefill-policy", "round_robin"]


def pod(name: str, role: str, ip: str | None, ready: bool = True, uid: str | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid or f"uid-{name}",
                            "labels": {"qdd.dev/deployment": "d", "qdd.dev/role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "podIP": ip,
                                         "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_discovery_over_time():
    pods = [pod("d-p-0", "prefill", "10.0.0.1"), pod("d-p-1", "prefill", "10.0.0.2", ready=False),
            pod("d-d-0", "decode", "10.0.0.3"), pod("x", "router", "10.0.0.4")]
    urls, tracked = double.discovered(ARGS, pods, {})
    assert urls == ["http://10.0.0.1:8000", "http://10.0.0.3:8000"]  # prefill first, not the unready one
    pods[1] = pod("d-p-1", "prefill", "10.0.0.2")
    urls, tracked = double.discovered(ARGS, pods, tracked)
    assert urls == ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"]
    # turning not Ready does not remove a registered pod (only its deletion does), as in the router
    pods[0] = pod("d-p-0", "prefill", "10.0.0.1", ready=False)
    urls, tracked = double.discovered(ARGS, pods, tracked)
    assert "http://10.0.0.1:8000" in urls
    pods[0] = pod("d-p-0", "prefill", "10.0.0.1", deleting=True)
    urls, tracked = double.discovered(ARGS, pods, tracked)
    assert urls == ["http://10.0.0.2:8000", "http://10.0.0.3:8000"] and len(tracked) == 2
    # the test knob: a pod the router has not reached yet
    held, _ = double.discovered(ARGS, pods, tracked, frozenset({"d-d-0"}))
    assert held == ["http://10.0.0.2:8000"]
    v6, _ = double.discovered(ARGS, [pod("d-p-9", "prefill", "fd00::9")], {})
    assert v6 == ["http://[fd00::9]:8000"]
