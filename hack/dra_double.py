"""The pure rules of the DRA driver TEST DOUBLE (hack/fake_compute_domain_driver.py does the I/O).

Each function copies one behaviour of NVIDIA's DRA driver, kubernetes-sigs/dra-driver-nvidia-gpu
at commit 95932046, driver-managed IMEX (docs/facts/dra-driver.md names the files):

- :func:`workload_template`: the ResourceClaimTemplate the ComputeDomain controller creates
  (templates/compute-domain-workload-claim-template.tmpl.yaml, resourceclaimtemplate.go);
- :func:`prepare_node`: the kubelet plugin's Prepare/Unprepare of channel claims on one node
  (device_state.go applyComputeDomainChannelConfigDriverManaged, assertImexChannelNotAllocated;
  computedomain.go AssertComputeDomainNamespace, AddNodeLabel, RemoveNodeLabel);
- :func:`node_entries` and :func:`global_status`: ``status.nodes`` as the daemons report it and
  ``status.status`` as the controller computes it (cdstatus.go, computedomain.go
  calculateGlobalStatus).

Standard library only; tests/unit/test_dra_double.py is the contract test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CD_GROUP, CD_VERSION = "resource.nvidia.com", "v1beta1"
CD_LABEL = "resource.nvidia.com/computeDomain"  # on templates and nodes: the ComputeDomain's UID
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
TARGET_WORKLOAD = "Workload"


def workload_template(cd: dict) -> dict:
    """The channel ResourceClaimTemplate of ComputeDomain ``cd`` (a dict as the API returns it),
    in its namespace, named ``spec.channel.resourceClaimTemplate.name``. As the driver: labels on
    the template only (claims made from it carry none), no owner reference; the finalizer is left
    out (docs/facts/dra-driver.md, "What the double leaves out")."""
    meta, channel = cd["metadata"], (cd.get("spec") or {}).get("channel") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": channel["resourceClaimTemplate"]["name"],
            "namespace": meta["namespace"],
            "labels": {CD_LABEL: meta["uid"], TARGET_LABEL: TARGET_WORKLOAD},
        },
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
            "config": [{"requests": ["channel"], "opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": f"{CD_GROUP}/{CD_VERSION}", "kind": "ComputeDomainChannelConfig",
                "domainID": meta["uid"], "allocationMode": channel.get("allocationMode") or "Single"}}}],
        }}},
    }


def channel_domain(claim: dict) -> str | None:
    """The ComputeDomain UID of a channel claim (its opaque ComputeDomainChannelConfig), else None."""
    for c in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        o = c.get("opaque") or {}
        p = o.get("parameters") or {}
        if o.get("driver") == DRIVER and p.get("kind") == "ComputeDomainChannelConfig":
            return p.get("domainID")
    return None


def _channel_claim_reserved(claim: dict) -> bool:
    """An allocated channel claim (one of this driver's ``channel-*`` devices) with a consumer."""
    st = claim.get("status") or {}
    return bool(st.get("reservedFor")) and any(
        r.get("driver") == DRIVER and r.get("device", "").startswith("channel-")
        for r in ((st.get("allocation") or {}).get("devices") or {}).get("results") or [])


def claims_by_node(claims: list[dict], pods: list[dict]) -> dict[str, list[dict]]:
    """Which channel claims each node's kubelet plugin is asked to prepare: the kubelet prepares
    the claims of the pods bound to ITS node (a claim reserved by pods on two nodes is prepared on
    both), and the plugin looks a result's device up by its name alone (``getConfigResultsMap``:
    ``s.allocatable[result.Device]``, the pool is not compared): a claim whose allocation names
    another node's ``channel-0`` is prepared here like a local one. ``claims`` in the order
    returned (oldest first); a claim counts for a pod only when reserved for it."""
    by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims
               if channel_domain(c) is not None and _channel_claim_reserved(c)}
    order = {id(c): i for i, c in enumerate(claims)}
    out: dict[str, list[dict]] = {}
    for p in pods:
        node, meta = (p.get("spec") or {}).get("nodeName"), p["metadata"]
        if not node:
            continue
        names = [s.get("resourceClaimName") for s in (p.get("status") or {}).get("resourceClaimStatuses") or []]
        names += [c.get("resourceClaimName") for c in (p.get("spec") or {}).get("resourceClaims") or []]
        for n in dict.fromkeys(x for x in names if x):
            c = by_name.get((meta["namespace"], n))
            if c is None or not any(r.get("uid") == meta.get("uid") for r in c["status"]["reservedFor"]):
                continue
            lst = out.setdefault(node, [])
            if all(x is not c for x in lst):
                lst.append(c)
    return {n: sorted(lst, key=lambda c: order[id(c)]) for n, lst in out.items()}


@dataclass
class NodeState:
    """The kubelet plugin's checkpoint on one node: the claim (UID) holding its channel, the
    ComputeDomain it belongs to, and the node's ComputeDomain label."""

    holder: str | None = None
    holder_domain: str | None = None
    label: str | None = None
    errors: dict[str, str] = field(default_factory=dict)
    """claim UID → the error Prepare returned for it this pass."""


def prepare_node(state: NodeState, claims: list[dict], domains: dict[str, dict]) -> NodeState:
    """One pass of the kubelet plugin on one node. ``claims``: the channel claims of the pods bound
    to it (:func:`claims_by_node`), oldest first; ``domains``: ComputeDomains by UID. Unprepare
    first (the holder's claim is gone or no longer reserved here: the channel and the label are
    freed), then Prepare each claim in the driver's order of checks (device_state.go ``Prepare``:
    ``validateNoOverlappingPreparedDevices``, then ``prepareDevices`` → ``applyConfig`` →
    ``applyComputeDomainChannelConfigDriverManaged``); the first failing check is the claim's
    error, worded as ``Prepare`` returns it."""
    out = NodeState(state.holder, state.holder_domain, state.label)
    uids = {c["metadata"]["uid"] for c in claims}
    if out.holder is not None and out.holder not in uids:
        if out.label == out.holder_domain:
            out.label = None  # RemoveNodeLabel
        out.holder = out.holder_domain = None
    for c in claims:
        uid, domain = c["metadata"]["uid"], channel_domain(c)
        if uid == out.holder:
            continue
        if out.holder is not None:
            # Prepare: validateNoOverlappingPreparedDevices (device names: every node's one
            # channel device is channel-0) runs before the config is applied.
            out.errors[uid] = (f"unable to prepare claim {uid}: requested device channel-0 is already "
                               f"allocated to different claim {out.holder}")
            continue
        cd = domains.get(domain or "")
        if cd is None:
            out.errors[uid] = (f"prepare devices failed: error applying config: error asserting ComputeDomain's "
                               f"namespace: ComputeDomain not found: {domain}")
            continue
        if cd["metadata"]["namespace"] != c["metadata"]["namespace"]:
            out.errors[uid] = ("prepare devices failed: error applying config: error asserting ComputeDomain's "
                               "namespace: the ResourceClaim's namespace is different than the ComputeDomain's "
                               "namespace")
            continue
        if out.label is not None and out.label != domain:
            out.errors[uid] = ("prepare devices failed: error applying config: error adding Node label for "
                               "ComputeDomain: label already exists for a different ComputeDomain")
            continue
        out.label = domain
        out.holder, out.holder_domain = uid, domain
    return out


def node_entries(domain: str, nodes: list[dict]) -> list[dict]:
    """``status.nodes`` of ComputeDomain ``domain``: one Ready entry per node labelled with it
    (where its daemon runs; the double's daemon is ready at once), by node name."""
    out = []
    for n in sorted((n for n in nodes if (n["metadata"].get("labels") or {}).get(CD_LABEL) == domain),
                    key=lambda n: n["metadata"]["name"]):
        labels = n["metadata"].get("labels") or {}
        ips = [a["address"] for a in (n.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"]
        entry = {"name": n["metadata"]["name"], "cliqueID": labels.get("nvidia.com/gpu.clique", ""),
                 "index": len(out), "status": "Ready"}
        if ips:
            entry["ipAddress"] = ips[0]
        out.append(entry)
    return out


def global_status(cd: dict, nodes: list[dict]) -> str:
    """calculateGlobalStatus: NotReady with fewer nodes than ``spec.numNodes`` or any node
    NotReady, else Ready (a domain with ``numNodes: 0`` and no node yet is Ready)."""
    if len(nodes) < int((cd.get("spec") or {}).get("numNodes") or 0):
        return "NotReady"
    return "NotReady" if any(n.get("status") == "NotReady" for n in nodes) else "Ready"
