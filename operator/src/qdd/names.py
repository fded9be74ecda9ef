"""Deterministic names of every child object (kopf retries must never create duplicates)."""

from __future__ import annotations


def role_set(cr: str, role: str) -> str:
    """StatefulSet and governing headless Service of a role: ``<cr>-<role>``."""
    return f"{cr}-{role}"


def statefulset_pod(cr: str, role: str, endpoint: int) -> str:
    return f"{cr}-{role}-{endpoint}"


def group_pod(cr: str, role: str, endpoint: int, index: int) -> str:
    """Pod ``index`` of a multi-pod endpoint: 0 is the leader, 1.. the headless workers."""
    return f"{cr}-{role}-{endpoint}-leader" if index == 0 else f"{cr}-{role}-{endpoint}-worker-{index}"


def pod_dns(pod: str, cr: str, role: str, namespace: str) -> str:
    """DNS name of a pod with ``hostname``/``subdomain`` set under the role's headless Service."""
    return f"{pod}.{role_set(cr, role)}.{namespace}.svc"


def router(cr: str) -> str:
    return f"{cr}-router"


def compute_domain(cr: str) -> str:
    return f"{cr}-compute-domain"


def imex_claim_template(cr: str) -> str:
    return f"{cr}-imex-channel"


def workload(cr: str) -> str:
    """The deployment's Workload (scheduling.k8s.io): ``<cr>``."""
    return cr


def engines_pod_group(cr: str) -> str:
    """The PodGroup of every engine pod when the deployment stays in one NVLink domain: ``<cr>-engines``."""
    return f"{cr}-engines"


def endpoint_pod_group(cr: str, role: str, endpoint: int) -> str:
    """The PodGroup of one multi-pod endpoint (a leader and its workers): ``<cr>-<role>-<endpoint>``."""
    return f"{cr}-{role}-{endpoint}"
