"""Generations and their rollout: which slot the current spec is applied to, which generation the
router serves, which slot's objects go. Pure; docs/rollouts.md.

A deployment's engine objects (the prefill StatefulSet, the bare decode pods, their PodGroups and
the ComputeDomain) live in slot ``a`` or ``b`` (qdd.names) and carry their generation
(``qdd.dev/generation``, qdd.plan.generation). The router serves one generation at a time; its
Deployment records which (annotation ``qdd.dev/serving-generation: <generation>/<slot>``), so the
state of a rollout is read back from the cluster on every pass, level-triggered: a restarted
operator, or one of several replicas taking over, continues where the last pass was.

A pass with the current spec's generation ``G``, serving ``(Gs, S)``:

- ``G == Gs``: nothing to switch; the spec is applied to ``S`` (changes that keep the generation
  roll per role there, qdd.controller.groups) and the other slot, if it holds anything (an
  abandoned rollout, or the old generation after a switch), is deleted once the router has
  finished rolling to ``S``.
- ``G != Gs``, ``Surge``: the spec is applied to the other slot ``T``; the router keeps serving
  ``S`` until every endpoint of ``T`` is Ready and its preflight passed, then switches; after the
  switch the rule above deletes ``S``. If ``T`` still holds a third generation (an edit during a
  rollout) it is deleted first and ``T`` waits until its pods are gone (same names).
- ``G != Gs``, ``Recreate``: ``S`` is deleted, the router points at ``T`` (nothing serves), and
  ``T`` is created once no pod of another generation is left in either slot.

Objects made before generations existed carry neither label: they are slot ``a`` of the current
generation (adopted in place: their pods are labelled, nothing restarts).
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any

from .. import labels
from ..hashing import content_hash
from ..names import SLOTS, other_slot
from ..plan.generation import must_match_values

PER_SLOT_KINDS = frozenset({"StatefulSet", "Pod", "PodGroup", "ComputeDomain", "ResourceClaim"})
ENGINE_ROLES = ("prefill", "decode")


def slot_of(obj: dict[str, Any]) -> str | None:
    """The slot a generation's object lives in; None for objects both slots share (router,
    Services, PodDisruptionBudgets, Workload, preflight Jobs and their pods)."""
    if obj["kind"] not in PER_SLOT_KINDS:
        return None
    lab = obj["metadata"].get("labels") or {}
    if obj["kind"] in ("Pod", "StatefulSet") and lab.get(labels.ROLE) not in ENGINE_ROLES:
        return None
    slot = lab.get(labels.SLOT, "a")
    return slot if slot in SLOTS else None


_GENERATION = re.compile(r"u?[0-9a-f]{7,8}")


def parse_serving(value: str | None) -> tuple[str, str] | None:
    """``<generation>/<slot>`` → (generation, slot); None when absent or malformed. Only a hash
    (qdd.plan.generation, or a ``u`` stand-in) is taken: the value is rendered into the router's
    argv and label selectors, and whoever can annotate the router must not choose them."""
    gen, sep, slot = (value or "").partition("/")
    return (gen, slot) if sep and _GENERATION.fullmatch(gen) and slot in SLOTS else None


def _engine_signature(pod_spec: dict[str, Any]) -> tuple[Any, ...] | None:
    """What an engine pod runs that a generation is made of: the vllm container's image and the
    values of the must-match flags of its argv (qdd.plan.generation)."""
    c = next((c for c in pod_spec.get("containers") or [] if c.get("name") == "vllm"), None)
    if c is None:
        return None
    flags = must_match_values(list(c.get("args") or []))
    return c.get("image"), tuple(sorted((k, tuple(v)) for k, v in flags.items()))


def legacy_generation(observed: list[dict[str, Any]], desired: list[dict[str, Any]], generation: str) -> str:
    """The generation of engine objects made before generations existed (no generation label): the
    current one when every such pod and StatefulSet template runs the image and must-match flags
    the current spec renders (adopted in place), else a stand-in id ``u<7 hex>`` of what they run,
    so that a change made together with the upgrade is still rolled as a new generation."""
    def unlabelled(o: dict[str, Any]) -> bool:
        return slot_of(o) == "a" and labels.GENERATION not in (o["metadata"].get("labels") or {})
    def spec_of(o: dict[str, Any]) -> dict[str, Any]:
        return (o.get("spec") or {}).get("template", {}).get("spec", {}) if o["kind"] == "StatefulSet" else (
            o.get("spec") or {})
    want = {_engine_signature(spec_of(d)) for d in desired if d["kind"] in ("Pod", "StatefulSet") and slot_of(d)}
    have = {_engine_signature(spec_of(o)) for o in observed if o["kind"] in ("Pod", "StatefulSet") and unlabelled(o)
            and not o["metadata"].get("deletionTimestamp")}
    have.discard(None)
    if have <= want:
        return generation
    return "u" + content_hash(sorted(map(repr, have)), 7)


@dataclass(frozen=True)
class SlotView:
    """What one slot holds: its generations (``None``: made before generations), pods and
    whether everything in it is already terminating."""

    generations: frozenset[str | None]
    pods: int
    objects: int
    live: int
    """Objects not yet being deleted."""


def slots(observed: list[dict[str, Any]], legacy: str | None = None) -> dict[str, SlotView]:
    """Both slots as observed (an empty view for a slot with nothing). ``legacy``: the generation of
    unlabelled objects (:func:`legacy_generation`); None leaves them None."""
    out = {}
    for s in SLOTS:
        mine = [o for o in observed if slot_of(o) == s]
        out[s] = SlotView(frozenset((o["metadata"].get("labels") or {}).get(labels.GENERATION, legacy) for o in mine
                                    if o["kind"] != "Pod" or labels.GENERATION in (o["metadata"].get("labels") or {})
                                    or not _sts_owned(o)),
                          sum(1 for o in mine if o["kind"] == "Pod"), len(mine),
                          sum(1 for o in mine if not o["metadata"].get("deletionTimestamp")))
    return out


def _sts_owned(pod: dict[str, Any]) -> bool:
    return any(r.get("kind") == "StatefulSet" for r in pod["metadata"].get("ownerReferences") or [])


@dataclass(frozen=True)
class Rollout:
    """The decision of one pass."""

    generation: str
    """The current spec's generation."""
    target: str
    """Slot the current spec's objects are rendered for."""
    serving: tuple[str, str]
    """(generation, slot) the router is rendered to send traffic to."""
    delete: tuple[str, ...] = ()
    """Slots whose per-slot objects are deleted in this pass."""
    hold: bool = False
    """The target's per-slot objects are not created yet: a slot still holds another generation's pods."""
    phase: str = "Stable"
    """Stable | Surging | Switching | Superseding | Recreating: what the pass is doing."""
    previous: str | None = None
    """The generation being replaced, while it still has objects."""

    @property
    def serves_target(self) -> bool:
        return self.serving == (self.generation, self.target)


def _current_serving(generation: str, views: dict[str, SlotView], recorded: tuple[str, str] | None,
                     ready: dict[str, bool] | None = None) -> tuple[str, str] | None:
    """Where traffic goes now: the router's record when its slot still holds that generation, else
    (the record lost) a slot whose engines are all Ready, else the slot that holds the current
    generation, else a slot that holds anything (``a`` first). None: nothing exists yet."""
    def holds(slot: str, gen: str) -> bool:
        v = views[slot]
        return v.live > 0 and gen in v.generations
    if recorded is not None and holds(recorded[1], recorded[0]):
        return recorded
    for s in SLOTS:  # no record: never take traffic from the slot that serves (a lost status or router)
        gens = sorted(g for g in views[s].generations if g)
        if (ready or {}).get(s) and views[s].live and len(gens) == 1:
            return gens[0], s
    for s in SLOTS:
        if holds(s, generation):
            return generation, s
    for s in SLOTS:
        gens = sorted(g for g in views[s].generations if g)
        if views[s].live and gens:
            return gens[0], s
        if views[s].live:
            return generation, s  # made before generations: adopted as the current one
    # Nothing live: a Recreate (or a deletion by hand) in progress; the router's record says
    # where the next generation goes (its old slot may still hold terminating pods).
    return recorded


def decide(generation: str, strategy: str, observed: list[dict[str, Any]], recorded: tuple[str, str] | None,
           router_settled: bool, legacy: str | None = None) -> Rollout:
    """The rollout step of this pass. ``recorded``: the router's ``serving-generation`` (or the
    status' record when the deployment has no router); ``router_settled``: the router Deployment
    has rolled out its current template (or there is none); ``legacy``: the generation of objects
    made before generations (:func:`legacy_generation`; default: the current one)."""
    views = slots(observed, legacy or generation)
    serving = _current_serving(generation, views, recorded, {s: _all_ready(observed, s) for s in SLOTS})
    if serving is None:
        return Rollout(generation, "a", (generation, "a"))
    gen_s, s = serving
    t = other_slot(s)
    if gen_s == generation:
        left = views[t].objects > 0
        previous = _other_gen(views[t], generation) if left else None
        if left and strategy == "Recreate":
            # Stop, then start: the new generation is created once the old one's pods are gone.
            return Rollout(generation, s, serving, delete=(t,) if views[t].live else (),
                           hold=views[t].pods > 0 and views[s].live == 0, phase="Recreating", previous=previous)
        if left and not router_settled:
            return Rollout(generation, s, serving, phase="Switching", previous=previous)
        return Rollout(generation, s, serving, delete=(t,) if views[t].live else (), previous=previous)
    foreign = any(g != generation for g in views[t].generations)
    if strategy == "Recreate":
        return Rollout(generation, t, (generation, t), delete=tuple(x for x in (s, t) if views[x].live and (
            x == s or foreign)), hold=views[s].pods > 0 or foreign, phase="Recreating", previous=gen_s)
    if foreign:
        # The half-made (or just replaced) generation in t goes first — but not while router pods of
        # the previous selectors may still send traffic to it (an edit during the switch).
        return Rollout(generation, t, serving, delete=(t,) if views[t].live and router_settled else (), hold=True,
                       phase="Superseding", previous=gen_s)
    return Rollout(generation, t, serving, phase="Surging", previous=gen_s)


def _all_ready(observed: list[dict[str, Any]], slot: str) -> bool:
    """Every engine pod of ``slot`` is Running and Ready, and there is at least one."""
    pods = [o for o in observed if o["kind"] == "Pod" and slot_of(o) == slot]
    return bool(pods) and all(not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase")
                              == "Running" and any(c.get("type") == "Ready" and c.get("status") == "True"
                                                   for c in (p.get("status") or {}).get("conditions") or [])
                              for p in pods)


def _other_gen(view: SlotView, generation: str) -> str | None:
    gens = sorted(g for g in view.generations if g and g != generation)
    return gens[0] if gens else None


def switched(r: Rollout, target_ready: bool) -> Rollout:
    """A Surge whose new generation is Ready (every endpoint, its preflight, its ComputeDomain):
    the router now sends traffic to it."""
    if r.phase != "Surging" or not target_ready:
        return r
    return Rollout(r.generation, r.target, (r.generation, r.target), phase="Switching", previous=r.previous)


def pods_to_label(observed: list[dict[str, Any]], generation_of_slot: dict[str, str]) -> list[tuple[str, str]]:
    """(pod name, generation) for every engine pod that lacks its generation label: a StatefulSet's
    pods take their StatefulSet's generation (a template made before it carried the generation,
    :func:`keep_unlabelled_templates`), pods made before generations existed their slot's (``generation_of_slot``: the legacy generation of
    slot ``a``, :func:`legacy_generation`)."""
    sts_gen = {o["metadata"]["name"]: (o["metadata"].get("labels") or {}).get(labels.GENERATION)
               for o in observed if o["kind"] == "StatefulSet"}
    out = []
    for o in observed:
        lab = o["metadata"].get("labels") or {}
        slot = slot_of(o)
        if o["kind"] != "Pod" or slot is None or labels.GENERATION in lab or o["metadata"].get("deletionTimestamp"):
            continue
        owner = next((r.get("name") for r in o["metadata"].get("ownerReferences") or []
                      if r.get("kind") == "StatefulSet"), None)
        gen = sts_gen.get(owner) if owner else None
        gen = gen or generation_of_slot.get(slot)
        if gen:
            out.append((o["metadata"]["name"], gen))
    return out


def keep_unlabelled_templates(desired: list[dict[str, Any]], observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``desired`` with the generation label taken out of the pod template of each StatefulSet whose
    observed namesake's template lacks it (made by an operator that did not render it there): adding
    it would roll every prefill engine; its pods are labelled instead (:func:`pods_to_label`). The
    manifest hash stays the rendered one, so such a StatefulSet is applied once, its template as it
    was. A StatefulSet created now gets it in its template: its pods need no label patch (make
    bench-scale: 6 of a seed deployment's 30 writes)."""
    old = {o["metadata"]["name"] for o in observed if o["kind"] == "StatefulSet" and labels.GENERATION not in (
        ((o.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})}
    for d in desired:
        if d["kind"] == "StatefulSet" and d["metadata"]["name"] in old:
            d["spec"]["template"]["metadata"]["labels"].pop(labels.GENERATION, None)
    return desired


def router_settled(observed: list[dict[str, Any]], router_name: str) -> bool:
    """The router Deployment runs only pods of its current template (no pod of the previous
    selectors left), or the deployment has no router."""
    dep = next((o for o in observed if o["kind"] == "Deployment" and o["metadata"]["name"] == router_name), None)
    if dep is None:
        return True
    st, want = dep.get("status") or {}, (dep.get("spec") or {}).get("replicas", 1)
    return (st.get("observedGeneration") == dep["metadata"].get("generation")
            and st.get("updatedReplicas", 0) == want and st.get("replicas", 0) == want
            and st.get("availableReplicas", 0) == want)


def recorded_serving(observed: list[dict[str, Any]], router_name: str,
                     status: dict[str, Any] | None) -> tuple[str, str] | None:
    """The router Deployment's ``serving-generation``; without a router, the status' record."""
    dep = next((o for o in observed if o["kind"] == "Deployment" and o["metadata"]["name"] == router_name), None)
    if dep is not None:
        return parse_serving((dep["metadata"].get("annotations") or {}).get(labels.SERVING_GENERATION))
    return parse_serving(((status or {}).get("rollout") or {}).get("serving"))
