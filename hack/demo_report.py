"""Prints where every pod of a QwenDisaggDeployment landed, which IMEX-channel claim each holds
(and the device it was allocated), and the flags each role runs with.

Usage: python hack/demo_report.py NAMESPACE NAME   (KUBECONFIG selects the cluster)
"""

from __future__ import annotations

import sys

from kubernetes import client, config

FLAGS = ("--data-parallel-size", "--data-parallel-size-local", "--data-parallel-start-rank", "--headless",
         "--max-num-batched-tokens", "--max-num-seqs", "--max-cudagraph-capture-size", "--async-scheduling",
         "--no-async-scheduling", "--stream-interval", "--mamba-ssm-cache-dtype", "--no-enable-prefix-caching",
         "--language-model-only", "--kv-transfer-config")


def _claim_name(p) -> str | None:
    """The pod's channel claim: named in its spec (a tray claim) or generated from the template."""
    for c in p.spec.resource_claims or []:
        if c.resource_claim_name:
            return c.resource_claim_name
    for s in p.status.resource_claim_statuses or []:
        if s.resource_claim_name:
            return s.resource_claim_name
    return None


def main(namespace: str, name: str) -> None:
    config.load_kube_config()
    core = client.CoreV1Api()
    claims = {c["metadata"]["name"]: c for c in client.CustomObjectsApi().list_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims").get("items", [])}
    nodes = {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}
    pods = core.list_namespaced_pod(namespace, label_selector=f"qdd.dev/deployment={name}").items
    rows = [("POD", "ROLE", "NODE", "GPUS", "CLAIM", "DEVICE", "CLIQUE", "IP", "PHASE")]
    for p in sorted(pods, key=lambda p: (p.metadata.labels.get("qdd.dev/role", ""), p.metadata.name)):
        lab = nodes.get(p.spec.node_name or "", {})
        gpus = (p.spec.containers[0].resources.limits or {}).get("nvidia.com/gpu", "-")
        claim = _claim_name(p)
        res = (((claims.get(claim or "") or {}).get("status") or {}).get("allocation") or {}).get("devices", {})
        device = ",".join(f"{r['pool']}/{r['device']}" for r in res.get("results") or []) or "-"
        rows.append((p.metadata.name, p.metadata.labels.get("qdd.dev/role", "?"), p.spec.node_name or "-",
                     gpus, claim or "-", device, lab.get("nvidia.com/gpu.clique", "-"),
                     p.status.pod_ip or "-", p.status.phase))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows))
    gpu_pods = [r for r in rows[1:] if r[3] != "-" and r[2] != "-"]
    trays = {r[2] for r in gpu_pods}
    print(f"\n{len(gpu_pods)} GPU pods on {len(trays)} trays, {len({r[4] for r in gpu_pods if r[4] != '-'})} "
          f"IMEX-channel claims; {sum(int(r[3]) for r in gpu_pods)} GPUs asked of {4 * len(trays)} on those trays")
    print()
    seen = set()
    for p in sorted(pods, key=lambda p: p.metadata.name):
        role = p.metadata.labels.get("qdd.dev/role")
        kind = (role, p.metadata.labels.get("qdd.dev/group-role"))
        if role not in ("prefill", "decode") or kind in seen:
            continue
        seen.add(kind)
        args = p.spec.containers[0].args or []
        shown = []
        for i, a in enumerate(args):
            if a in FLAGS:
                nxt = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
                shown.append(f"{a} {nxt}".strip())
        env = {e.name: (e.value if e.value is not None else "<" + (e.value_from.field_ref.field_path if e.value_from and e.value_from.field_ref else "ref") + ">")
               for e in p.spec.containers[0].env or []}
        print(f"{role} ({kind[1]}, e.g. {p.metadata.name}), the sizing and P/D flags (`qdd render` shows all):")
        print("  vllm serve " + args[0] + " " + " ".join(shown))
        print("  env: " + " ".join(f"{k}={v}" for k, v in env.items()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
