#!/usr/bin/env bash
# `make demo`: the seed deployment on a local, real Kubernetes control plane with a simulated
# GB200 NVL72 rack. Sets up what it needs, starts the cluster and the operator, applies the seed
# CR, waits for Ready, and shows where everything landed. Leaves it running: `make cluster-down`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KUBECONFIG=${KUBECONFIG:-$root/.qdd/kubeconfig}
export PATH="$root/.qdd/bin:$root/.qdd/venv/bin:$PATH"
example=${QDD_DEMO_EXAMPLE:-examples/qwen35-397b-4xdep2-1xdep8-cc4096.yaml}
name=$(python3 -c "import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))['metadata']['name'])" "$example")
ns=$(python3 -c "import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))['metadata'].get('namespace','default'))" "$example")
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Local control plane (kube-apiserver, etcd, controller-manager, scheduler) + simulated GB200 NVL72 rack"
bash hack/cluster-up.sh
say "CRD qwendisaggdeployments.qdd.dev"
kubectl apply --server-side --force-conflicts -f crds/qdd.dev_qwendisaggdeployments.yaml -f crds/qdd.dev_qwendisaggbenchmarks.yaml -f crds/qdd.dev_qwendisaggrolescales.yaml -f crds/qdd-tray-claims-policy.yaml
kubectl wait --for=condition=Established crd/qwendisaggdeployments.qdd.dev --timeout=60s
say "Operator (qdd run)"
bash hack/operator.sh start
say "Apply $example"
t0=$(date +%s%N)
kubectl apply -f "$example"
kubectl wait --for=condition=Ready "qdd/$name" -n "$ns" --timeout=300s
echo "Ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
kubectl get qdd -n "$ns" -o wide
say "Where every pod landed"
python3 hack/demo_report.py "$ns" "$name"
say "Sizing (qdd plan)"
qdd plan -f "$example"
cat <<EOT

NOTE: the nodes are simulated by kwok (fake GB200 trays: no GPUs, no containers run) and the
IMEX channel / ComputeDomain side is a test double for NVIDIA's DRA driver. The API server,
etcd, scheduler, controller-manager and the operator are real. No engine runs, so nothing serves
/metrics: the serving columns of `kubectl get qdd -o wide` stay empty and the serving conditions
say Unknown (NoEngineMetrics); the integration tests serve them with hack/fake_engine_metrics.py.

Look further:
  export KUBECONFIG=$KUBECONFIG PATH=$root/.qdd/bin:$root/.qdd/venv/bin:\$PATH
  kubectl get qdd -n $ns
  kubectl describe qdd $name -n $ns
  kubectl get pods -n $ns -l qdd.dev/deployment=$name -o wide
  kubectl scale qdd/$name -n $ns --replicas=6
  curl -s http://127.0.0.1:${QDD_METRICS_PORT:-18080}/metrics | grep ^qdd_
Stop everything: make cluster-down
EOT
