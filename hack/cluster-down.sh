#!/usr/bin/env bash
# Stops and deletes the local cluster started by hack/cluster-up.sh: the ComputeDomain driver test
# double, every kwokctl component (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok) and the cluster's data; removes context kwok-$QDD_CLUSTER from $KUBECONFIG (and the file
# when no context is left). Safe to run when nothing is up.
# Env: QDD_CLUSTER (default qdd), KUBECONFIG (default .qdd/kubeconfig).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/hack/cluster/env.sh"
log() { printf '[cluster-down %s] %s\n' "$name" "$*"; }

mkdir -p "$root/.qdd/locks"
if [ "${QDD_CLUSTER_LOCK_HELD:-}" != "$name" ]; then  # set by cluster-up when it calls us
  exec 9>"$root/.qdd/locks/cluster-$name.lock"
  if ! flock -w 600 9; then echo "cluster-down: timed out waiting for the lock of cluster $name" >&2; exit 1; fi
fi

# 1. The test doubles (their pid files say which process; never matched by name alone).
for double in "${doubles[@]}"; do
  pidf="$state/${double//_/-}.pid"
  if [ -s "$pidf" ]; then
    pid=$(cat "$pidf")
    if kill -0 "$pid" 2>/dev/null && grep -qaF "$double.py" "/proc/$pid/cmdline"; then
      kill -TERM "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then log "$double did not exit on SIGTERM; killing"; kill -KILL "$pid" || true; fi
      log "stopped $double (pid $pid)"
    fi
    rm -f "$pidf"
  fi
done
rm -f "$canary_url_file"

# 2. The control plane: kwokctl stops the components it started and deletes the cluster's data;
# any component still alive after that (its pid recorded by kwokctl, its command line naming this
# cluster's directory) is stopped here.
if [ -d "$cluster_dir" ]; then
  pids=()
  for f in "$cluster_dir"/pids/*.pid; do [ -s "$f" ] && pids+=("$(cat "$f")"); done
  if [ -x "$bin/kwokctl" ]; then
    kwokctl delete cluster --name "$name" --kubeconfig "$KUBECONFIG" 9>&- || log "kwokctl delete failed"
  fi
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null && grep -qaF "$cluster_dir/" "/proc/$pid/cmdline"; then
      log "stopping leftover component pid $pid"
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null && grep -qaF "$cluster_dir/" "/proc/$pid/cmdline"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$cluster_dir"
  log "deleted cluster"
else
  log "no cluster named $name"
fi

# 3. The kubeconfig entries.
if [ -s "$KUBECONFIG" ] && command -v kubectl >/dev/null; then
  kubectl config delete-context "$ctx" >/dev/null 2>&1 || true
  kubectl config delete-cluster "$ctx" >/dev/null 2>&1 || true
  kubectl config delete-user "$ctx" >/dev/null 2>&1 || true
  if [ -z "$(kubectl config get-contexts -o name 2>/dev/null)" ]; then rm -f "$KUBECONFIG"; fi
fi
rm -rf "$state"
log "down"
