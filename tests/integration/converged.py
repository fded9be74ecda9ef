"""What "converged, nothing lost" means after a fault, checked against the live cluster.

:func:`wait_converged` waits until the custom resource says Ready for its current generation and
its children are exactly what ``qdd render`` renders for its spec — no object missing, none extra
(an orphan or a duplicate would be extra), every child controlled by this very custom resource
(its uid, not only its name), the prefill pods by its StatefulSet, no pod left terminating.
"""

from __future__ import annotations

import time
from typing import Any

from qdd.api import parse_resource
from qdd.plan import build_plan
from qdd.render import render_all

from .conftest import LOGS, Kube

# Every kind qdd applies (qdd.controller.children.MANAGED_KINDS) except Pod, checked on its own.
CHILD_KINDS = ("computedomains,resourceclaims,workloads,podgroups,serviceaccounts,roles,rolebindings,services,"
               "poddisruptionbudgets,daemonsets,statefulsets,jobs,deployments,configmaps")
ENGINE_ROLES = ("prefill", "decode")


def rendered(cr: dict[str, Any], gang: bool = True) -> list[dict[str, Any]]:
    """What the working tree's qdd renders for ``cr`` (`qdd render` does the same)."""
    return render_all(build_plan(parse_resource(cr)), gang)


def _rendered_kind(o: dict[str, Any], uid: str) -> bool:
    """Whether a labelled object is one qdd renders: not a ConfigMap of someone else's (a user's perf
    profile, a benchmark's results), not a ResourceClaim the resource-claim controller made for a pod
    from a template (the pod is its controller); the tray claims qdd renders are checked."""
    refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("controller")]
    if o["kind"] == "ConfigMap":
        return any(r.get("uid") == uid for r in refs)
    if o["kind"] == "ResourceClaim":
        return not any(r.get("kind") == "Pod" for r in refs)
    return True


def _problems(kube: Kube, cr: dict[str, Any], want: list[dict[str, Any]]) -> list[str]:
    """What still differs from converged; empty when converged."""
    name, ns = cr["metadata"]["name"], cr["metadata"]["namespace"]
    obj = kube.get("qdd", name, ns)
    uid, status = obj["metadata"]["uid"], obj.get("status") or {}
    out = []
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        out.append(f"observedGeneration {status.get('observedGeneration')} != {obj['metadata']['generation']}")
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    if ready.get("status") != "True":
        out.append(f"Ready {ready.get('status')} ({ready.get('reason')})")
    sel = f"qdd.dev/deployment={name}"
    live = [o for o in kube.get(CHILD_KINDS, namespace=ns, selector=sel)["items"] if _rendered_kind(o, uid)]
    want_keys = sorted((o["kind"], o["metadata"]["name"]) for o in want if o["kind"] != "Pod")
    live_keys = sorted((o["kind"], o["metadata"]["name"]) for o in live)
    if live_keys != want_keys:
        out.append(f"children: missing {sorted(set(want_keys) - set(live_keys))}, "
                   f"extra {sorted(set(live_keys) - set(want_keys))}, duplicates {len(live_keys) - len(set(live_keys))}")
    for o in live:
        refs = [r["uid"] for r in o["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if refs != [uid]:
            out.append(f"{o['kind']} {o['metadata']['name']} controlled by {refs}, not {uid}")
    sts = {o["metadata"]["uid"] for o in live if o["kind"] == "StatefulSet"}
    engine = [p for p in kube.get("pods", namespace=ns, selector=sel)["items"]
              if p["metadata"]["labels"].get("qdd.dev/role") in ENGINE_ROLES]
    prefill = next((o for o in want if o["kind"] == "StatefulSet"), {}).get("spec", {}).get("replicas", 0)
    want_pods = sorted([o["metadata"]["name"] for o in want if o["kind"] == "Pod"]
                       + [f"{name}-prefill-{i}" for i in range(prefill)])
    live_pods = sorted(p["metadata"]["name"] for p in engine)
    if live_pods != want_pods:
        out.append(f"engine pods {live_pods}, want {want_pods}")
    for p in engine:
        refs = [r["uid"] for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if p["metadata"].get("deletionTimestamp"):
            out.append(f"pod {p['metadata']['name']} terminating")
        if refs != [uid] and not (len(refs) == 1 and refs[0] in sts):
            out.append(f"pod {p['metadata']['name']} controlled by {refs}")
        pod_ready = [c["status"] for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        if pod_ready != ["True"]:
            out.append(f"pod {p['metadata']['name']} not Ready (phase {(p.get('status') or {}).get('phase')}, "
                       f"node {p['spec'].get('nodeName')})")
    return out


def wait_converged(kube: Kube, cr: dict[str, Any], timeout: float = 120) -> float:
    """Seconds until ``cr`` (as last applied, with its current spec) is converged; fails naming
    what still differs after ``timeout`` seconds."""
    name, ns = cr["metadata"]["name"], cr["metadata"]["namespace"]
    start, last = time.monotonic(), ["not checked yet"]
    while time.monotonic() - start < timeout:
        live = kube.get("qdd", name, ns)
        last = _problems(kube, live, rendered(live))
        if not last:
            return time.monotonic() - start
        time.sleep(0.5)
    dump = LOGS / f"unconverged-{ns}-{name}.yaml"  # for the post-mortem: the namespace is deleted after the test
    dump.parent.mkdir(parents=True, exist_ok=True)
    dump.write_text(kube.kubectl("get", "qdd,pods,podgroups,workloads,statefulsets,events", "-n", ns, "-o", "yaml",
                                 check=False).stdout)
    raise AssertionError(f"{ns}/{name} not converged after {timeout:.0f} s (objects: {dump}): " + "; ".join(last))
