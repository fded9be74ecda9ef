"""The GB200 platform states (qdd.controller.platform), on ComputeDomain statuses shaped as NVIDIA's DRA
driver writes them (kubernetes-sigs/dra-driver-nvidia-gpu, api/nvidia.com/resource/v1beta1/computedomain.go:
status.status Ready|NotReady, status.nodes[] with name, ipAddress, cliqueID, index and the IMEX daemon's
own status) and Nodes as the kubelet and GPU Feature Discovery label them (docs/facts/gb200.md)."""

from __future__ import annotations

import datetime as dt

from qdd.api.conditions import Reason
from qdd.controller.platform import CLIQUE_LABEL, CONVERGE_BOUND_S, judge_compute_domain
from qdd.controller.status import compute_status

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)
CLIQUE = "4a7c2b1e-0b1d-4d3e-9f00-000000000001.1"


def _ts(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(name: str, index: int, status: str = "Ready") -> dict:
    return {"name": name, "ipAddress": f"10.0.0.{index + 10}", "cliqueID": CLIQUE, "index": index, "status": status}


def _cd(status: str, entries: list[dict], age_s: float = 60) -> dict:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": {"name": "qwen35-cd-a", "namespace": "llm", "creationTimestamp": _ts(age_s)},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "qwen35-imex-a"}}},
            "status": {"status": status, "nodes": entries}}


def _node(name: str, ready_for_s: float | None, clique: str | None = CLIQUE) -> dict:
    labels = {"nvidia.com/gpu.product": "NVIDIA-GB200", "kubernetes.io/arch": "arm64"}
    if clique is not None:
        labels[CLIQUE_LABEL] = clique
    ready = {"type": "Ready", "status": "True" if ready_for_s is not None else "False",
             "lastTransitionTime": _ts(ready_for_s or 5)}
    return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": [ready]}}


TRAYS = {"gb200-r0-t0", "gb200-r0-t1", "gb200-r0-t2"}


def test_ready_on_every_tray():
    cd = _cd("Ready", [_entry(n, i) for i, n in enumerate(sorted(TRAYS))])
    v = judge_compute_domain(cd, TRAYS, {n: _node(n, 3600) for n in TRAYS}, CLIQUE, NOW)
    assert (v.ready, v.reason, v.nodes) == (True, Reason.COMPUTE_DOMAIN_READY, ())


def test_imex_failing_on_one_tray_under_a_ready_domain_names_the_tray():
    """dra-driver-nvidia-gpu#1417: the domain said Ready while imports failed on one tray."""
    entries = [_entry("gb200-r0-t0", 0), _entry("gb200-r0-t1", 1, "NotReady"), _entry("gb200-r0-t2", 2)]
    v = judge_compute_domain(_cd("Ready", entries), TRAYS, {}, CLIQUE, NOW)
    assert (v.ready, v.reason, v.nodes) == (False, Reason.IMEX_NODE_NOT_READY, ("gb200-r0-t1",))
    assert "gb200-r0-t1" in v.message and "#1417" in v.message


def test_a_lost_node_entry_waits_then_is_called_stuck_naming_the_node():
    """dra-driver-nvidia-gpu#1050: a domain that lost a node entry never becomes Ready."""
    entries = [_entry("gb200-r0-t0", 0), _entry("gb200-r0-t2", 2)]
    early = judge_compute_domain(_cd("NotReady", entries, age_s=120), TRAYS, {}, CLIQUE, NOW)
    assert (early.ready, early.reason, early.nodes, early.stuck) == (False, Reason.COMPUTE_DOMAIN_NOT_READY,
                                                                       ("gb200-r0-t1",), False)
    late = judge_compute_domain(_cd("NotReady", entries, age_s=CONVERGE_BOUND_S + 1), TRAYS, {}, CLIQUE, NOW)
    assert (late.ready, late.reason, late.nodes, late.stuck) == (False, Reason.COMPUTE_DOMAIN_NOT_CONVERGING,
                                                                   ("gb200-r0-t1",), True)
    assert "no entry for gb200-r0-t1" in late.message and "#1050" in late.message


def test_a_tray_back_after_a_reboot_is_followed_piece_by_piece():
    """NVIDIA/ai-cloud-validation#625: node, clique label, IMEX daemon and domain return one at a time."""
    others = [_entry("gb200-r0-t0", 0), _entry("gb200-r0-t2", 2)]
    nodes = {n: _node(n, 3600) for n in TRAYS}
    # 1. the node is back (Ready 30 s ago) but GPU Feature Discovery has not labelled its clique yet
    nodes["gb200-r0-t1"] = _node("gb200-r0-t1", 30, clique=None)
    v = judge_compute_domain(_cd("NotReady", others, age_s=7200), TRAYS, nodes, CLIQUE, NOW)
    assert (v.ready, v.reason, v.nodes, v.stuck) == (False, Reason.TRAY_REJOINING, ("gb200-r0-t1",), False)
    assert f"no {CLIQUE_LABEL} label" in v.message
    # ... and still unlabelled past the bound: said, with where to look
    nodes["gb200-r0-t1"] = _node("gb200-r0-t1", CONVERGE_BOUND_S + 60, clique=None)
    v = judge_compute_domain(_cd("NotReady", others, age_s=7200), TRAYS, nodes, CLIQUE, NOW)
    assert v.stuck and "GPU Feature Discovery" in v.message
    # 2. labelled; its IMEX daemon has not joined: the wait counts from the tray's return, not the domain's age
    nodes["gb200-r0-t1"] = _node("gb200-r0-t1", 45)
    v = judge_compute_domain(_cd("NotReady", others, age_s=7200), TRAYS, nodes, CLIQUE, NOW)
    assert (v.ready, v.reason, v.nodes) == (False, Reason.COMPUTE_DOMAIN_NOT_READY, ("gb200-r0-t1",))
    # 3. the daemon joined, not Ready yet; the domain still NotReady
    v = judge_compute_domain(_cd("NotReady", [*others, _entry("gb200-r0-t1", 1, "NotReady")], age_s=7200), TRAYS,
                             nodes, CLIQUE, NOW)
    assert (v.ready, v.reason, v.nodes) == (False, Reason.COMPUTE_DOMAIN_NOT_READY, ("gb200-r0-t1",))
    # 4. the domain is Ready again
    v = judge_compute_domain(_cd("Ready", [*others, _entry("gb200-r0-t1", 1)], age_s=7200), TRAYS, nodes, CLIQUE, NOW)
    assert v.ready


def test_a_tray_of_another_clique_is_not_the_deployments():
    nodes = {n: _node(n, 3600) for n in TRAYS}
    nodes["gb200-r0-t2"] = _node("gb200-r0-t2", 100, clique="other.2")
    v = judge_compute_domain(_cd("Ready", [_entry(n, i) for i, n in enumerate(sorted(TRAYS))]), TRAYS, nodes, CLIQUE,
                             NOW)
    assert (v.ready, v.reason, v.nodes) == (False, Reason.TRAY_REJOINING, ("gb200-r0-t2",))
    assert "clique other.2" in v.message


def test_a_notready_node_is_left_to_node_loss():
    nodes = {n: _node(n, 3600) for n in TRAYS}
    nodes["gb200-r0-t1"] = _node("gb200-r0-t1", None, clique=None)
    cd = _cd("Ready", [_entry("gb200-r0-t0", 0), _entry("gb200-r0-t2", 2)])
    assert judge_compute_domain(cd, TRAYS, nodes, CLIQUE, NOW).ready


def test_no_compute_domain_yet():
    v = judge_compute_domain(None, TRAYS, {}, CLIQUE, NOW)
    assert (v.ready, v.reason) == (False, Reason.COMPUTE_DOMAIN_NOT_READY)


def test_the_condition_takes_the_verdicts_reason_and_message(seed_cr):
    from qdd.controller.status import Observed
    from .helpers import plan_of

    plan = plan_of(seed_cr)
    entries = [_entry("gb200-r0-t0", 0), _entry("gb200-r0-t1", 1, "NotReady")]
    v = judge_compute_domain(_cd("Ready", entries), {"gb200-r0-t0", "gb200-r0-t1"}, {}, CLIQUE, NOW)
    cr = {**seed_cr, "metadata": {**seed_cr["metadata"], "generation": 1, "namespace": "llm"}}
    status = compute_status(cr, plan, [], Observed({}, []), _ts(0), v.ready, compute_domain=v)
    cond = next(c for c in status["conditions"] if c["type"] == "ComputeDomainReady")
    assert (cond["status"], cond["reason"]) == ("False", Reason.IMEX_NODE_NOT_READY)
    assert "gb200-r0-t1" in cond["message"]
