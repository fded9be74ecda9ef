"""qdd.plan.trays: trays held, GPUs held but unusable, with and without the preflight."""

from __future__ import annotations

from pathlib import Path

import yaml

from qdd.plan.summary import summary, table
from qdd.plan.trays import trays, tray_uses

from .helpers import plan_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cr(name: str, mutate=None) -> dict:
    cr = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    if mutate:
        mutate(cr["spec"])
    return cr


def _uses(plan) -> dict:
    return {u.part: (u.trays, u.gpus, u.held, u.unusable, u.transient) for u in tray_uses(plan)}


def test_seed_engines_on_four_full_trays_preflight_on_two_more_while_it_runs():
    plan = plan_of(_cr("qwen35-397b-4xdep2-1xdep8"))
    assert _uses(plan) == {"prefill": (2, 8, 8, 0, False), "decode": (2, 8, 8, 0, False),
                           "preflight": (2, 2, 8, 6, True)}
    assert (trays(plan), trays(plan, peak=False)) == (6, 4)
    s = summary(plan)["trays"]
    assert (s["peak"], s["steady"]) == (6, 4)
    text = table(plan)
    assert "prefill: 2 trays = 8 GPUs held for 8 asked; one ResourceClaim per tray, shared by up to 2 pods" in text
    assert "preflight: 2 trays while it runs = 8 GPUs held for 2 asked, 6 held but unusable" in text


def test_odd_prefill_count_strands_half_a_tray():
    plan = plan_of(_cr("qwen35-397b-5xdep2-1xdep8"))
    assert _uses(plan)["prefill"] == (3, 10, 12, 2, False)
    assert trays(plan, peak=False) == 5


def test_multi_pod_endpoints_fill_their_trays():
    plan = plan_of(_cr("qwen38-a95b-fp8-1xdp8tp4-1xdp8tp4"))
    uses = _uses(plan)
    assert uses["prefill"][3] == uses["decode"][3] == 0
    assert trays(plan) == 18 and trays(plan, peak=False) == 16  # one rack, exactly


def test_preflight_off_and_no_compute_domain():
    off = plan_of(_cr("qwen35-397b-4xdep2-1xdep8", lambda s: s["kvTransfer"].update(preflight={"enabled": False})))
    assert "preflight" not in _uses(off) and trays(off) == trays(off, peak=False) == 4
    nocd = plan_of(_cr("qwen35-397b-4xdep2-1xdep8", lambda s: s["cluster"].update(computeDomain=False)))
    assert tray_uses(nocd) == [] and trays(nocd) == nocd.min_nodes == 4
    assert "no ComputeDomain, no IMEX claim" in table(nocd)


# --- the pin of a tray claim's pods under gang scheduling (qdd.render.trayclaims.pod_affinity) ---

def _prefill_template(cr: dict, gang: bool) -> dict:
    from qdd.render import render

    objs = render(plan_of(cr), gang=gang)
    return next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"].endswith("-prefill"))["spec"]["template"]


def test_gang_pins_the_pods_of_one_tray_claim_to_one_node():
    """kube-scheduler v1.36.3 does not hold a gang's second pod of a claim to the claim's pending
    allocation (docs/placement.md, "The gang and shared claims"): the pods say it themselves."""
    cr = _cr("qwen35-397b-4xdep2-1xdep8")
    spec = _prefill_template(cr, gang=True)["spec"]
    assert spec["affinity"]["podAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {"qdd.dev/deployment": cr["metadata"]["name"]}},
        "matchLabelKeys": ["qdd.dev/tray-claim"]}]}
    assert "podAntiAffinity" not in spec["affinity"]


def test_no_pin_without_gang_scheduling_nor_on_pods_with_their_own_claim():
    cr = _cr("qwen35-397b-4xdep2-1xdep8")
    # pod by pod the scheduler waits for the first pod's allocation and holds the next one to it;
    # the clique pod affinity stays the only pod affinity term
    aff = _prefill_template(cr, gang=False)["spec"]["affinity"]["podAffinity"]
    assert [t["topologyKey"] for t in aff["requiredDuringSchedulingIgnoredDuringExecution"]] == ["nvidia.com/gpu.clique"]
    from qdd.render import render

    decode = [o for o in render(plan_of(cr), gang=True) if o["kind"] == "Pod"]
    assert decode and all("podAffinity" not in p["spec"]["affinity"] for p in decode)


def test_policy_labels_each_pod_with_the_claim_it_gives_it():
    from qdd.render.trayclaims import admission_policy

    policy = admission_policy()[0]["spec"]
    assert policy["variables"] == [{"name": "claim", "expression": (
        "object.metadata.annotations['qdd.dev/tray-claim-prefix'] + '-' + "
        "string(int(object.metadata.labels['apps.kubernetes.io/pod-index']) / "
        "int(object.metadata.annotations['qdd.dev/pods-per-tray']))")}]
    expr = policy["mutations"][0]["applyConfiguration"]["expression"]
    assert "labels: {'qdd.dev/tray-claim': variables.claim}" in expr
    assert "resourceClaimName: variables.claim" in expr


def test_only_pods_that_share_a_tray_get_tray_claims():
    """DEP2 prefill (two pods per 4-GPU tray) shares one claim per tray; a DEP4 prefill pod fills its
    tray and keeps one claim of its own from the template (no restart when the operator is upgraded)."""
    from qdd.render.trayclaims import pod_annotations, tray_claims, uses_tray_claims

    dep2 = plan_of(_cr("qwen35-397b-4xdep2-1xdep8"))
    assert uses_tray_claims(dep2, dep2.prefill)
    assert [c["metadata"]["name"] for c in tray_claims(dep2, dep2.prefill)] == [
        "qwen35-397b-4xdep2-1xdep8-prefill-tray-0", "qwen35-397b-4xdep2-1xdep8-prefill-tray-1"]
    assert pod_annotations(dep2, dep2.prefill)["qdd.dev/pods-per-tray"] == "2"
    dep4 = plan_of(_cr("qwen35-397b-4xdep2-1xdep8", lambda s: s["prefill"].update(
        endpoints=2, topology={"dataParallel": 4, "tensorParallel": 1, "expertParallel": True})))
    assert dep4.prefill.gpus_per_pod == 4
    assert not uses_tray_claims(dep4, dep4.prefill)
    assert tray_claims(dep4, dep4.prefill) == [] and pod_annotations(dep4, dep4.prefill) == {}
    assert _uses(dep4)["prefill"] == (2, 8, 8, 0, False)


def test_a_tray_claim_of_a_replaced_compute_domain_is_stale():
    """A ComputeDomain deleted and created again has a new UID; the tray claims bound to the old one
    are immutable and would never give a pod the new domain's channel: they are deleted (and created
    again bound to the new UID on the next pass). Claims being deleted, or whose domain is not
    observed yet, are left alone."""
    from qdd.render.trayclaims import bind_domain, stale_claims, tray_claims

    plan = plan_of(_cr("qwen35-397b-4xdep2-1xdep8"))
    claims = tray_claims(plan, plan.prefill)
    cd_name = claims[0]["metadata"]["annotations"]["qdd.dev/compute-domain"]
    old = {"kind": "ComputeDomain", "metadata": {"name": cd_name, "uid": "uid-old"}}
    new = {"kind": "ComputeDomain", "metadata": {"name": cd_name, "uid": "uid-new"}}
    bound = [bind_domain(c, [old]) for c in claims]
    assert stale_claims([old, *bound]) == []
    assert stale_claims([new, *bound]) == [c["metadata"]["name"] for c in claims]
    assert stale_claims(bound) == []  # the domain not observed (being created): nothing to compare
    bound[0]["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    assert stale_claims([new, *bound]) == [claims[1]["metadata"]["name"]]
    assert stale_claims([new, *(bind_domain(c, [new]) for c in claims)]) == []
