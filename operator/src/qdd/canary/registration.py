"""Whether the router has registered every planned endpoint: the start gate of the canary and of
benchmarks. Pure.

A router that answers its health check with one endpoint of several registered serves, and a
benchmark started then measures that one endpoint (SemiAnalysisAI/InferenceX#2549;
docs/facts/router-pd.md, "Start gates"). vllm-router 0.1.17 finds qdd's engine pods by
Kubernetes service discovery and lists the workers it registered at ``GET /list_workers``:
``{"urls": [URL, ...]}``, one URL per engine it routes to, ``http://<pod IP>:<port>`` (its admin
routes, ``src/server.rs``; the answer for qdd's rendered args is checked against the real binary
in tests/contract/test_router.py). With DP-aware routing an engine appears once per DP rank as
``URL@<rank>``; the endpoint is registered when its base URL is listed.

An endpoint is one serving pod of the target generation: each prefill endpoint's pod and each
decode endpoint's leader (headless workers serve no HTTP and are never registered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import labels

LIST_PATH = "/list_workers"
"""vllm-router's list of registered workers (admin route; no authentication unless the router was
started with API-key validation URLs, which qdd never renders)."""
MISSING_SHOWN = 5
"""Endpoints named in a message at most (a 16-endpoint deployment would fill the condition)."""
_RANK = re.compile(r"@\d+$")


def endpoint_url(pod_ip: str, port: int) -> str:
    """The URL vllm-router registers for a discovered pod: ``http://IP:PORT`` (an IPv6 address in brackets)."""
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return f"http://{host}:{port}"


def base_url(url: str) -> str:
    """A listed worker URL without its ``@rank`` suffix (DP-aware routing) and trailing slash."""
    return _RANK.sub("", url.strip()).rstrip("/")


def listed_urls(answer: Any) -> frozenset[str] | None:
    """The base URLs of a ``GET /list_workers`` answer (parsed JSON); None when it is not one
    (a router of another kind, an error page)."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("urls"), list):
        return None
    return frozenset(base_url(u) for u in answer["urls"] if isinstance(u, str))


def _ready(pod: Mapping[str, Any]) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def serving_pods(pods: Iterable[Mapping[str, Any]], deployment: str, generation: str, port: int) -> dict[str, str]:
    """``{url: pod name}`` of the pods the router should have registered: those its selectors pick
    (qdd.plan.router.selector: this deployment, role prefill or decode, group-role leader,
    ``generation``) that its discovery adds (Running, Ready, an IP; not being deleted)."""
    out: dict[str, str] = {}
    for p in pods:
        meta = p.get("metadata") or {}
        lab = meta.get("labels") or {}
        ip = (p.get("status") or {}).get("podIP")
        if (lab.get(labels.DEPLOYMENT) == deployment and lab.get(labels.ROLE) in ("prefill", "decode")
                and lab.get(labels.GROUP_ROLE) == "leader" and lab.get(labels.GENERATION) == generation
                and ip and not meta.get("deletionTimestamp") and _ready(p)):
            out[endpoint_url(str(ip), port)] = str(meta.get("name"))
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def router_instances(pods: Iterable[Mapping[str, Any]], deployment: str) -> frozenset[str]:
    """``uid/restarts`` of each Ready router pod of ``deployment``: what the router's list of workers
    was read from. A router that restarts (a new pod, or its container restarted in place) starts its
    discovery from nothing, so a list read before says nothing about it: a change here asks again."""
    out = set()
    for p in pods:
        meta = p.get("metadata") or {}
        if (meta.get("labels") or {}).get(labels.DEPLOYMENT) != deployment or \
                (meta.get("labels") or {}).get(labels.ROLE) != "router" or meta.get("deletionTimestamp") or not _ready(p):
            continue
        restarts = sum(int(c.get("restartCount") or 0) for c in (p.get("status") or {}).get("containerStatuses") or [])
        out.add(f"{meta.get('uid') or meta.get('name')}/{restarts}")
    return frozenset(out)


@dataclass(frozen=True)
class Registration:
    """What the router has registered of the ``planned`` endpoints (their count: endpoints of both
    roles). ``registered``: serving pods it lists; ``missing``: serving pods it does not list
    (planned endpoints without a Ready pod are counted, not named); ``error``: why the list could
    not be read (None when it was)."""

    planned: int
    registered: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    error: str | None = None

    @property
    def complete(self) -> bool:
        return self.error is None and len(self.registered) >= self.planned

    @property
    def message(self) -> str:
        """``waiting for N of M endpoints registered with the router (not listed: a, b)``, or why it is unknown."""
        if self.error is not None:
            return f"waiting for the router's list of registered endpoints ({self.error})"
        if self.complete:
            return f"all {self.planned} endpoints registered with the router"
        shown = ", ".join(self.missing[:MISSING_SHOWN]) + (
            f" and {len(self.missing) - MISSING_SHOWN} more" if len(self.missing) > MISSING_SHOWN else "")
        return (f"waiting for {len(self.registered)} of {self.planned} endpoints registered with the router"
                + (f" (not listed: {shown})" if shown else ""))


def registration(planned: int, pods: Mapping[str, str], listed: frozenset[str] | None,
                 error: str | None = None) -> Registration:
    """Compare the serving pods (``{url: name}``, :func:`serving_pods`) with the router's list.
    ``planned``: the endpoints of both roles the plan wants; ``listed`` None: no list yet
    (``error`` says why, or none was read yet)."""
    if listed is None:
        return Registration(planned, error=error or "not read yet")
    registered = tuple(name for url, name in pods.items() if url in listed)
    missing = tuple(name for url, name in pods.items() if url not in listed)
    return Registration(planned, registered, missing)
