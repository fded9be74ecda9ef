"""Deterministic names of every child object (kopf retries must never create duplicates).

Engine objects live in one of two slots, ``a`` and ``b`` (qdd.controller.rollout): a change of
generation (what prefill and decode must agree on) brings the new generation up in the other slot
next to the serving one, so the objects of a slot carry its marker. Slot ``a`` names are the names
qdd has always used (an operator upgrade renames nothing); slot ``b`` adds ``-b`` after the role or
kind word. A slot-``b`` name never equals a slot-``a`` name of another resource: slot-``a`` names
end in a role or kind word or ``-<digits>`` after one, slot-``b`` names in ``-b`` or ``-b-<digits>``
after one. The Workload, the Services, the PodDisruptionBudgets, the router and the preflight
are shared by both slots.
"""

from __future__ import annotations

SLOTS = ("a", "b")


def _in(slot: str) -> str:
    """The slot marker inserted into a name: nothing for ``a``, ``-b`` for ``b``."""
    if slot not in SLOTS:
        raise ValueError(f"slot must be one of {SLOTS}, not {slot!r}")
    return "" if slot == "a" else f"-{slot}"


def other_slot(slot: str) -> str:
    return "b" if slot == "a" else "a"


def role_set(cr: str, role: str) -> str:
    """The governing headless Service of a role (both slots): ``<cr>-<role>``."""
    return f"{cr}-{role}"


def statefulset(cr: str, role: str, slot: str = "a") -> str:
    """The StatefulSet of a role's single-pod endpoints in ``slot``: ``<cr>-<role>``, ``<cr>-<role>-b``."""
    return f"{cr}-{role}{_in(slot)}"


def statefulset_pod(cr: str, role: str, endpoint: int, slot: str = "a") -> str:
    return f"{statefulset(cr, role, slot)}-{endpoint}"


def group_pod(cr: str, role: str, endpoint: int, index: int, slot: str = "a") -> str:
    """Pod ``index`` of a multi-pod endpoint: 0 is the leader, 1.. the headless workers."""
    base = f"{cr}-{role}{_in(slot)}-{endpoint}"
    return f"{base}-leader" if index == 0 else f"{base}-worker-{index}"


def pod_dns(pod: str, cr: str, role: str, namespace: str) -> str:
    """DNS name of a pod with ``hostname``/``subdomain`` set under the role's headless Service."""
    return f"{pod}.{role_set(cr, role)}.{namespace}.svc"


def router(cr: str) -> str:
    return f"{cr}-router"


def compute_domain(cr: str, slot: str = "a") -> str:
    """One ComputeDomain per slot: the generations of a Surge may sit in different NVLink domains,
    and a ComputeDomain never spans two."""
    return f"{cr}-compute-domain{_in(slot)}"


def tray_claim(cr: str, role: str, group: int, slot: str = "a") -> str:
    """The IMEX-channel ResourceClaim shared by the StatefulSet pods of ``role`` on one tray
    (qdd.render.trayclaims): ``<cr>-<role>-tray-<group>``, ``<cr>-<role>-tray-b-<group>``."""
    return f"{cr}-{role}-tray{_in(slot)}-{group}"


def imex_claim_template(cr: str, slot: str = "a") -> str:
    return f"{cr}-imex-channel{_in(slot)}"


def workload(cr: str) -> str:
    """The deployment's Workload (scheduling.k8s.io): ``<cr>``."""
    return cr


def engines_pod_group(cr: str, slot: str = "a") -> str:
    """The PodGroup of every engine pod when the deployment stays in one NVLink domain: ``<cr>-engines``."""
    return f"{cr}-engines{_in(slot)}"


def endpoint_pod_group(cr: str, role: str, endpoint: int, slot: str = "a") -> str:
    """The PodGroup of one multi-pod endpoint (a leader and its workers): ``<cr>-<role>-<endpoint>``."""
    return f"{cr}-{role}{_in(slot)}-{endpoint}"


def role_scale(cr: str, role: str) -> str:
    """The QwenDisaggRoleScale of a role (spec.autoscaling.mode On): ``<cr>-<role>``, a kind of its own."""
    return f"{cr}-{role}"
