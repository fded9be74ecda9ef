"""Prints where every pod of a QwenDisaggDeployment landed and the flags each role runs with.

Usage: python hack/demo_report.py NAMESPACE NAME   (KUBECONFIG selects the cluster)
"""

from __future__ import annotations

import sys

from kubernetes import client, config

FLAGS = ("--data-parallel-size", "--data-parallel-size-local", "--data-parallel-start-rank", "--headless",
         "--max-num-batched-tokens", "--max-num-seqs", "--max-cudagraph-capture-size", "--async-scheduling",
         "--no-async-scheduling", "--stream-interval", "--mamba-ssm-cache-dtype", "--no-enable-prefix-caching",
         "--language-model-only", "--kv-transfer-config")


def main(namespace: str, name: str) -> None:
    config.load_kube_config()
    core = client.CoreV1Api()
    nodes = {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}
    pods = core.list_namespaced_pod(namespace, label_selector=f"qdd.dev/deployment={name}").items
    rows = [("POD", "ROLE", "NODE", "ARCH", "GPUS", "CLIQUE", "IP", "PHASE")]
    for p in sorted(pods, key=lambda p: (p.metadata.labels.get("qdd.dev/role", ""), p.metadata.name)):
        lab = nodes.get(p.spec.node_name or "", {})
        gpus = (p.spec.containers[0].resources.limits or {}).get("nvidia.com/gpu", "-")
        rows.append((p.metadata.name, p.metadata.labels.get("qdd.dev/role", "?"), p.spec.node_name or "-",
                     lab.get("kubernetes.io/arch", "-"), gpus, lab.get("nvidia.com/gpu.clique", "-"),
                     p.status.pod_ip or "-", p.status.phase))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows))
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
