"""Generations and their rollout (qdd.controller.rollout) through the reconcile, against the
in-memory API server and controllers of test_controller_status.FakeKube.

At every step of every rollout: the router's prefill and decode selectors name one generation,
and no object of a third generation or of a deleted slot is left at the end."""

from __future__ import annotations

import copy
from typing import Any

from qdd import labels
from qdd.controller.children import APPLIED_HASH
from qdd.controller.reconcile import Reconciler
from qdd.controller.rollout import decide, parse_serving, slot_of

from .controller_world import cr_of, with_spec
from .helpers import plan_of
from .test_controller_status import NAME, FakeKube, cond, router_canary

ROUTER = f"{NAME}-router"


def _pass(kube: FakeKube) -> list[tuple[str, str, str]]:
    Reconciler(kube, gang=True, canary=router_canary()).once("default", NAME)  # type: ignore[arg-type]
    return kube.take()


def _router_generations(kube: FakeKube) -> set[str]:
    """The generations the router's --prefill-selector and --decode-selector name (must be one)."""
    args = kube.objs[("Deployment", ROUTER)]["spec"]["template"]["spec"]["containers"][0]["args"]
    gens = {a.split("=", 1)[1] for a in args if a.startswith(f"{labels.GENERATION}=")}
    assert len(gens) == 1, f"the router pairs two generations: {gens}"
    assert args.count(f"{labels.GENERATION}={next(iter(gens))}") == 2, "prefill and decode select one generation"
    return gens


def _engine_objects(kube: FakeKube) -> dict[str, set[str]]:
    """Per-slot objects (live), by slot: their generations."""
    out: dict[str, set[str]] = {}
    for o in kube.objs.values():
        s = slot_of(o)
        if s is not None and not o["metadata"].get("deletionTimestamp"):
            out.setdefault(s, set()).add((o["metadata"].get("labels") or {}).get(labels.GENERATION, "?"))
    return out


def _ready(kube: FakeKube) -> dict[str, Any]:
    return cond(kube.cr["status"], "Ready")


def _up(strategy: str = "Surge") -> tuple[FakeKube, str]:
    cr = with_spec(cr_of(), lambda s: s.setdefault("rollout", {}).update(strategy=strategy))
    kube = FakeKube(cr)
    for _ in range(3):
        _pass(kube)
        kube.settle()
    _pass(kube)
    assert _ready(kube)["status"] == "True"
    gen = plan_of(cr).generation
    assert _engine_objects(kube) == {"a": {gen}}
    return kube, gen


def _new_image(kube: FakeKube, image: str) -> str:
    kube.cr = with_spec(kube.cr, lambda s: s["engine"].update(image=image))
    return plan_of(kube.cr).generation


def _settle_until(kube: FakeKube, done, steps: int = 12) -> list[dict[str, Any]]:
    """Alternate reconcile passes and the cluster's controllers until ``done()``; checks the router
    invariant after each pass; returns the rollout status of every pass."""
    seen = []
    for _ in range(steps):
        _pass(kube)
        _router_generations(kube)
        seen.append(dict(kube.cr["status"].get("rollout") or {}))
        if done():
            return seen
        kube.settle()
    raise AssertionError(f"did not converge: {seen[-3:]}")


def test_a_generation_hash_ignores_what_rolls_per_role_and_sees_what_must_match():
    base = cr_of()
    gen = plan_of(base).generation
    same = [lambda s: s["workload"].update(concurrency=5120), lambda s: s["prefill"].update(endpoints=6),
            lambda s: s["decode"].setdefault("tuning", {}).update(maxCudagraphCaptureSize=512)]
    for m in same:
        assert plan_of(with_spec(base, m)).generation == gen
    other = [lambda s: s["engine"].update(image="qdd/vllm:other"), lambda s: s["model"].update(revision="abc123"),
             lambda s: s["model"].update(servedModelName="qwen")]
    gens = {plan_of(with_spec(base, m)).generation for m in other}
    assert gen not in gens and len(gens) == 3
    assert plan_of(base).generation == plan_of(base, slot="b").generation, "the slot is no part of it"


def test_surge_brings_up_the_new_generation_next_to_the_old_then_switches_then_deletes_the_old():
    kube, old = _up()
    new = _new_image(kube, "qdd/vllm:0.33.0-rebuilt")
    writes = _pass(kube)
    # pass 1: the whole new generation in slot b, slot a untouched, the router still on the old one
    assert not [w for w in writes if w[0] == "delete" and w[1] != "Job"], writes
    assert _engine_objects(kube) == {"a": {old}, "b": {new}}
    assert ("Pod", f"{NAME}-decode-b-0-leader") in kube.objs and ("StatefulSet", f"{NAME}-prefill-b") in kube.objs
    assert ("ComputeDomain", f"{NAME}-compute-domain-b") in kube.objs
    assert ("PodGroup", f"{NAME}-engines-b") in kube.objs
    assert _router_generations(kube) == {old}
    st = kube.cr["status"]
    assert st["rollout"] == {"generation": new, "slot": "b", "serving": f"{old}/a", "phase": "Surging",
                             "previous": old}
    assert _ready(kube)["status"] == "False" and _ready(kube)["reason"] == "NewGenerationRollingOut"
    assert "serves until the new one is Ready" in _ready(kube)["message"]
    # the new generation comes up: the router switches, then the old one goes
    phases = _settle_until(kube, lambda: _engine_objects(kube) == {"b": {new}} and _ready(kube)["status"] == "True")
    assert [p["phase"] for p in phases] == ["Surging", "Switching", "Stable"], phases
    assert _router_generations(kube) == {new}
    assert kube.objs[("Deployment", ROUTER)]["metadata"]["annotations"][labels.SERVING_GENERATION] == f"{new}/b"
    # its pods still terminate: the status names the generation they are of, until they are gone
    assert kube.cr["status"]["rollout"] == {"generation": new, "slot": "b", "serving": f"{new}/b", "phase": "Stable",
                                            "previous": old}
    kube.settle()
    _pass(kube)
    assert kube.cr["status"]["rollout"] == {"generation": new, "slot": "b", "serving": f"{new}/b", "phase": "Stable"}
    assert not [k for k in kube.objs if k[1].startswith(f"{NAME}-prefill-") and "-b" not in k[1]
                and k[0] in ("Pod", "StatefulSet")], "no pod of the old generation left"
    # the next change of generation goes back to slot a
    newer = _new_image(kube, "qdd/vllm:0.33.1")
    _pass(kube)
    assert _engine_objects(kube) == {"a": {newer}, "b": {new}}


def test_the_switch_waits_for_the_whole_new_generation():
    """One decode pod of the new generation not Ready: the router stays on the old one."""
    kube, old = _up()
    new = _new_image(kube, "qdd/vllm:other")
    _pass(kube)
    kube.settle()
    kube.objs[("Pod", f"{NAME}-decode-b-0-worker-1")]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    _pass(kube)
    assert _router_generations(kube) == {old}
    assert kube.cr["status"]["rollout"]["phase"] == "Surging"
    assert _engine_objects(kube) == {"a": {old}, "b": {new}}


def test_recreate_deletes_the_old_generation_first_and_starts_the_new_one_when_its_pods_are_gone():
    kube, old = _up("Recreate")
    new = _new_image(kube, "qdd/vllm:other")
    writes = _pass(kube)
    deleted = {w[2] for w in writes if w[0] == "delete"}
    assert {f"{NAME}-prefill", f"{NAME}-decode-0-leader", f"{NAME}-decode-0-worker-1", f"{NAME}-engines",
            f"{NAME}-compute-domain"} <= deleted
    assert "b" not in _engine_objects(kube), "started before the old generation stopped"
    assert _router_generations(kube) == {new}
    assert _ready(kube)["reason"] == "Recreating"
    # the old pods terminate; only then is the new generation created
    _pass(kube)
    assert "b" not in _engine_objects(kube)
    _settle_until(kube, lambda: _ready(kube)["status"] == "True")
    assert _engine_objects(kube) == {"b": {new}}


def test_an_edit_during_a_surge_supersedes_the_half_made_generation():
    kube, old = _up()
    g1 = _new_image(kube, "qdd/vllm:one")
    _pass(kube)
    g2 = _new_image(kube, "qdd/vllm:two")
    writes = _pass(kube)
    # the half-made generation g1 goes first (same names in slot b); the old one keeps serving
    assert {w[2] for w in writes if w[0] == "delete"} >= {f"{NAME}-prefill-b", f"{NAME}-decode-b-0-leader"}
    assert kube.cr["status"]["rollout"]["phase"] == "Superseding"
    assert _router_generations(kube) == {old}
    _settle_until(kube, lambda: _ready(kube)["status"] == "True")
    assert _engine_objects(kube) == {"b": {g2}}
    assert _router_generations(kube) == {g2}
    assert g1 not in {g for gens in _engine_objects(kube).values() for g in gens}


def test_an_edit_back_to_the_serving_generation_cancels_the_surge():
    kube, old = _up()
    image = kube.cr["spec"]["engine"]["image"]
    _new_image(kube, "qdd/vllm:other")
    _pass(kube)
    _new_image(kube, image)
    _settle_until(kube, lambda: _ready(kube)["status"] == "True" and "b" not in _engine_objects(kube))
    assert _engine_objects(kube) == {"a": {old}}
    assert _router_generations(kube) == {old}


def test_a_change_that_keeps_the_generation_rolls_in_place():
    kube, gen = _up()
    kube.cr = with_spec(kube.cr, lambda s: s["workload"].update(concurrency=5120))
    _settle_until(kube, lambda: _ready(kube)["status"] == "True")
    assert _engine_objects(kube) == {"a": {gen}}


def test_objects_made_before_generations_are_adopted_without_a_restart():
    """Injected: every label qdd.dev/generation and qdd.dev/slot removed from a Ready deployment
    (what an operator before generations made), and the router's selectors of that version."""
    kube, gen = _up()
    for o in kube.objs.values():
        for k in (labels.GENERATION, labels.SLOT):
            (o["metadata"].get("labels") or {}).pop(k, None)
    uids = {k: o["metadata"].get("uid") for k, o in kube.objs.items() if k[0] == "Pod"}
    writes = _pass(kube)
    assert not [w for w in writes if w[0] == "delete" and w[1] == "Pod"], "an engine pod was restarted"
    labelled = {w[2] for w in writes if w[0] == "label"}
    assert {f"{NAME}-decode-0-leader", f"{NAME}-decode-0-worker-1"} | {f"{NAME}-prefill-{i}" for i in range(4)} \
        <= labelled
    assert all(kube.objs[("Pod", p)]["metadata"]["labels"][labels.GENERATION] == gen for p in labelled)
    assert {k: o["metadata"].get("uid") for k, o in kube.objs.items() if k[0] == "Pod" and k in uids} == uids


def test_a_statefulset_whose_template_lacks_the_generation_keeps_its_template_and_its_pods_are_labelled():
    """Injected: the prefill StatefulSet and its pods as the operator before this one left them (the
    generation on the StatefulSet, not in its template, nor on its pods)."""
    kube, gen = _up()
    sts = kube.objs[("StatefulSet", f"{NAME}-prefill")]
    template = sts["spec"]["template"]
    template["metadata"]["labels"].pop(labels.GENERATION)
    sts["metadata"]["annotations"][APPLIED_HASH] = "before-this-operator"
    for k, o in kube.objs.items():
        if k[0] == "Pod" and k[1].startswith(f"{NAME}-prefill-"):
            o["metadata"]["labels"].pop(labels.GENERATION)
    before = copy.deepcopy(template)
    writes = _pass(kube)
    # applied once (its hash), its template as it was: no prefill engine rolls; the pods get the label
    assert ("apply", "StatefulSet", f"{NAME}-prefill") in writes
    assert kube.objs[("StatefulSet", f"{NAME}-prefill")]["spec"]["template"] == before
    assert {w[2] for w in writes if w[0] == "label"} == {f"{NAME}-prefill-{i}" for i in range(4)}
    assert all(kube.objs[("Pod", f"{NAME}-prefill-{i}")]["metadata"]["labels"][labels.GENERATION] == gen
               for i in range(4))
    kube.settle()
    assert [w for w in _pass(kube) if w[0] in ("apply", "label", "delete")] == []
    # a StatefulSet created now carries it in its template (its pods need no label patch)
    fresh = FakeKube(cr_of())
    _pass(fresh)
    assert fresh.objs[("StatefulSet", f"{NAME}-prefill")]["spec"]["template"]["metadata"]["labels"][
        labels.GENERATION] == plan_of(cr_of()).generation


def test_decide_reads_the_state_back_from_the_cluster():
    assert parse_serving("abcd1234/b") == ("abcd1234", "b")
    assert parse_serving("abcd1234/c") is None and parse_serving(None) is None
    assert parse_serving("ua9b2b48/a") == ("ua9b2b48", "a")
    # a hand-made annotation cannot put another selector into the router's argv
    assert parse_serving("x,qdd.dev/role=decode/a") is None and parse_serving("abcd1234 --x/a") is None
    fresh = decide("g1", "Surge", [], None, True)
    assert (fresh.target, fresh.serving, fresh.phase) == ("a", ("g1", "a"), "Stable")


def _strip_generations(kube: FakeKube) -> None:
    """What an operator before generations left: no generation or slot labels, no serving annotation."""
    for o in kube.objs.values():
        for k in (labels.GENERATION, labels.SLOT):
            (o["metadata"].get("labels") or {}).pop(k, None)
        (o["metadata"].get("annotations") or {}).pop(labels.SERVING_GENERATION, None)
    kube.cr["status"].pop("rollout", None)


def test_pre_generation_objects_with_an_image_change_are_rolled_as_a_new_generation():
    """Injected: the upgrade from before generations and an engine image change seen in the same
    first pass. The old pods run the old image: they are not adopted as the new generation (they
    would pair with it) but labelled with a stand-in of what they run, and the change Surges."""
    kube, _ = _up()
    _strip_generations(kube)
    new = _new_image(kube, "qdd/vllm:other")
    _pass(kube)
    r = kube.cr["status"]["rollout"]
    old = r["previous"]
    assert old.startswith("u") and old != new and r == {"generation": new, "slot": "b", "serving": f"{old}/a",
                                                         "phase": "Surging", "previous": old}
    assert _router_generations(kube) == {old}
    for (kind, _name), o in kube.objs.items():
        if kind == "Pod" and slot_of(o) == "a":
            assert o["metadata"]["labels"][labels.GENERATION] == old
    _settle_until(kube, lambda: _engine_objects(kube) == {"b": {new}} and _ready(kube)["status"] == "True")


def _pending(kube: FakeKube, slot: str) -> None:
    for (kind, _), o in kube.objs.items():
        if kind == "Pod" and slot_of(o) == slot:
            o["status"] = {"phase": "Pending"}


def test_without_a_record_of_what_serves_the_ready_generation_keeps_serving():
    """Injected: no router (replicas 0: the status is the only record), a Surge whose new
    generation is Pending, then the status wiped. The Ready old generation is not deleted."""
    kube, old = _up()
    kube.cr = with_spec(kube.cr, lambda s: s.setdefault("router", {}).update(replicas=0))
    for _ in range(2):
        _pass(kube)
        kube.settle()
    _new_image(kube, "qdd/vllm:other")
    _pass(kube)
    kube.settle()
    _pending(kube, "b")
    _pass(kube)
    kube.cr["status"] = {}
    _pass(kube)
    assert kube.cr["status"]["rollout"]["serving"] == f"{old}/a"
    assert "a" in _engine_objects(kube)


def test_an_edit_while_the_router_switches_waits_for_it_before_deleting():
    """Injected: a third image while the router Deployment still rolls to the second generation.
    The first generation's slot (the router's old pods may still send to it) is not deleted until
    the router has rolled."""
    kube, first = _up()
    _new_image(kube, "qdd/vllm:two")
    for _ in range(4):
        _pass(kube)
        if kube.cr["status"]["rollout"]["phase"] == "Switching":
            break
        kube.settle()
    assert kube.cr["status"]["rollout"]["phase"] == "Switching"
    _new_image(kube, "qdd/vllm:three")
    writes = _pass(kube)
    assert not [w for w in writes if w[0] == "delete" and w[1] in ("StatefulSet", "Pod") and "-b" not in w[2]], writes
    assert first in _engine_objects(kube).get("a", set())
    third = plan_of(kube.cr).generation
    _settle_until(kube, lambda: _ready(kube)["status"] == "True" and len(_engine_objects(kube)) == 1)
    assert _engine_objects(kube) == {"a": {third}}
