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

Each router replica runs its own discovery, and the router Service sends a request to any Ready
one: a replica that restarted, or whose watch never saw a pod, would send that share of the traffic
to fewer endpoints while another replica's list shows them all. So each Ready router pod's list is
read (at its pod IP), and the deployment counts as registered only when every one lists every
planned endpoint; the message names the router pods and the endpoints each lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import labels, names

LIST_PATH = "/list_workers"
"""vllm-router's list of registered workers (admin route; no authentication unless the router was
started with API-key validation URLs, which qdd never renders)."""
MISSING_SHOWN = 5
"""Endpoints named in a message at most, per router pod (a 16-endpoint deployment would fill the condition)."""
ROUTERS_SHOWN = 3
"""Router pods named in a message at most."""
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


@dataclass(frozen=True)
class RouterPod:
    """One Ready router pod of a deployment: its ``name``, pod ``ip`` (where its list of workers is
    read, at the router port) and ``instance``: ``uid/restarts``. A router that restarts (a new pod,
    or its container restarted in place) starts its discovery from nothing, so a list read from an
    earlier instance says nothing about it: a new instance is read again."""

    name: str
    ip: str
    instance: str


def _of_router_replicaset(meta: Mapping[str, Any], deployment: str) -> bool:
    prefix = names.router(deployment) + "-"
    return any(o.get("controller") and o.get("kind") == "ReplicaSet" and str(o.get("name", "")).startswith(prefix)
               for o in meta.get("ownerReferences") or [])


def router_pods(pods: Iterable[Mapping[str, Any]], deployment: str) -> tuple[RouterPod, ...]:
    """The Ready router pods of ``deployment`` (role router, Running, Ready, an IP, not being
    deleted), by name: the pods the router Service sends requests to, each of which must list
    every serving pod. Only pods of the router Deployment's ReplicaSets (their controller owner
    reference): a pod that anyone with pod rights labels as a router must not hold Ready back, nor
    be sent the operator's reads."""
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        lab = meta.get("labels") or {}
        ip = (p.get("status") or {}).get("podIP")
        if (lab.get(labels.DEPLOYMENT) != deployment or lab.get(labels.ROLE) != "router" or meta.get("deletionTimestamp")
                or not ip or not _ready(p) or not _of_router_replicaset(meta, deployment)):
            continue
        restarts = sum(int(c.get("restartCount") or 0) for c in (p.get("status") or {}).get("containerStatuses") or [])
        out.append(RouterPod(str(meta.get("name")), str(ip), f"{meta.get('uid') or meta.get('name')}/{restarts}"))
    return tuple(sorted(out, key=lambda r: r.name))


def _names(items: Sequence[str], limit: int) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclass(frozen=True)
class Registration:
    """What the Ready router pods have registered of the ``planned`` endpoints (their count:
    endpoints of both roles). ``registered``: serving pods every router pod lists; ``missing``:
    serving pods a router pod whose list is known does not list (planned endpoints without a Ready
    pod are counted, not named); ``lacking``: per router pod (by name), the serving pods it does not
    list; ``unread``: per router pod, why its list is not known; ``routers``: the router pods asked."""

    planned: int
    registered: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    lacking: tuple[tuple[str, tuple[str, ...]], ...] = ()
    unread: tuple[tuple[str, str], ...] = ()
    routers: tuple[str, ...] = ()

    @property
    def error(self) -> str | None:
        """Why a router pod's list is not known (the first such pod), or why none was asked; None when every list was read."""
        if not self.routers:
            return "no Ready router pod"
        return f"{self.unread[0][0]}: {self.unread[0][1]}" if self.unread else None

    @property
    def complete(self) -> bool:
        return self.error is None and len(self.registered) >= self.planned

    @property
    def message(self) -> str:
        """``waiting for N of M endpoints registered with every router pod (not listed by R: a, b)``,
        ``waiting for the list of registered endpoints of router pod R (why)``, or that all are."""
        if not self.routers:
            return "waiting for a Ready router pod to read its list of registered endpoints"
        if self.complete:
            return f"all {self.planned} endpoints registered with every router pod ({_names(self.routers, ROUTERS_SHOWN)})"
        unread = [f"{r} ({why})" for r, why in self.unread]
        if len(self.unread) == len(self.routers):
            return f"waiting for the list of registered endpoints of router pod {_names(unread, ROUTERS_SHOWN)}"
        parts = [f"{r}: {_names(names, MISSING_SHOWN)}" for r, names in self.lacking[:ROUTERS_SHOWN]]
        shown = ("not listed by " + "; by ".join(parts)) if parts else ""
        if len(self.lacking) > ROUTERS_SHOWN:
            shown += f"; and by {len(self.lacking) - ROUTERS_SHOWN} more router pods"
        if unread:
            shown += ("; " if shown else "") + "no list yet from " + _names(unread, ROUTERS_SHOWN)
        return (f"waiting for {len(self.registered)} of {self.planned} endpoints registered with every router pod"
                + (f" ({shown})" if shown else ""))


Listing = frozenset[str] | str
"""One router pod's list: the base URLs it lists (:func:`listed_urls`), or why it is not known."""


def registration(planned: int, pods: Mapping[str, str], lists: Mapping[str, Listing]) -> Registration:
    """Compare the serving pods (``{url: name}``, :func:`serving_pods`) with the list of each Ready
    router pod (``{router pod name: Listing}``; no entry: no Ready router pod). ``planned``: the
    endpoints of both roles the plan wants. An endpoint is registered when every router pod whose
    list is known lists it; the deployment, when every router pod's list is known and lists every
    planned endpoint."""
    known = {r: v for r, v in sorted(lists.items()) if not isinstance(v, str)}
    unread = tuple((r, v) for r, v in sorted(lists.items()) if isinstance(v, str))
    lacking = tuple((r, tuple(name for url, name in pods.items() if url not in listed)) for r, listed in known.items())
    lacking = tuple((r, names) for r, names in lacking if names)
    gone = {name for _, names in lacking for name in names}
    return Registration(planned, tuple(name for name in pods.values() if name not in gone),
                        tuple(name for name in pods.values() if name in gone), lacking, unread,
                        tuple(sorted(lists)))
