"""PodDisruptionBudgets: one per role with two or more endpoints (render/templates/pdb.yaml.j2)."""

from __future__ import annotations

from .helpers import objects_of, plan_of


def _pdbs(cr):
    return {o["metadata"]["name"]: o for o in objects_of(cr) if o["kind"] == "PodDisruptionBudget"}


def test_seed_protects_prefill_and_says_decode_is_unprotected(seed_cr):
    name = seed_cr["metadata"]["name"]
    pdbs = _pdbs(seed_cr)
    assert list(pdbs) == [f"{name}-prefill"]
    spec = pdbs[f"{name}-prefill"]["spec"]
    # Only the current generation's pods: a generation that a rollout replaces holds no drain back.
    # The two DEP2 pods of a tray share its IMEX claim and leave it together (pdb.yaml.j2).
    assert spec == {"maxUnavailable": 2, "selector": {"matchLabels": {
        "qdd.dev/deployment": name, "qdd.dev/role": "prefill", "qdd.dev/generation": plan_of(seed_cr).generation}}}
    [w] = [w for w in plan_of(seed_cr).warnings if "PodDisruptionBudget" in w]
    assert w.startswith("decode has one endpoint")


def test_two_decode_groups_get_a_budget_of_one_pod(seed_cr):
    seed_cr["spec"]["decode"]["endpoints"] = 2
    name = seed_cr["metadata"]["name"]
    pdbs = _pdbs(seed_cr)
    assert sorted(pdbs) == [f"{name}-decode", f"{name}-prefill"]
    # One evicted decode pod breaks its group, which qdd recreates whole: one group at a time.
    assert pdbs[f"{name}-decode"]["spec"]["maxUnavailable"] == 1
    assert not [w for w in plan_of(seed_cr).warnings if "PodDisruptionBudget" in w]
