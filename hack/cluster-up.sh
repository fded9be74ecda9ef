#!/usr/bin/env bash
# Starts (or ensures) a local, real Kubernetes control plane with a simulated GB200 NVL72 rack:
#   etcd + kube-apiserver + kube-controller-manager + kube-scheduler (built by hack/build-tools.sh)
#   run by `kwokctl --runtime binary`, kwok playing every kubelet;
#   18 fake GB200 nodes per rack (4 nvidia.com/gpu each, arm64, GPU Feature Discovery labels, one
#   NVLink clique label per rack) + 2 CPU-only amd64 nodes;
#   the ComputeDomain CRD stand-in (crds/test/), the DRA driver's DeviceClasses and per-node
#   ResourceSlices as NVIDIA's driver publishes them (hack/cluster/objects.py), and the test doubles: the ComputeDomain driver (hack/fake_compute_domain_driver.py),
#   the GPUs behind the KV-transfer preflight (hack/fake_preflight_result.py) and the benchmark
#   Jobs (hack/fake_bench_result.py), and the router that answers the operator's canary
#   (hack/fake_canary_router.py; its URL in .qdd/clusters/$QDD_CLUSTER/fake-canary-router.url), and
#   the trays' disks for the weight cache's init containers and cache-aware start lengths
#   (hack/fake_tray_disks.py; host folders under .qdd/clusters/$QDD_CLUSTER/disks).
#
# Usage: hack/cluster-up.sh [--racks N]
# Env:   QDD_CLUSTER  cluster name (default qdd)
#        KUBECONFIG   kubeconfig to write the context kwok-$QDD_CLUSTER into (default .qdd/kubeconfig);
#                     its current-context is set to this cluster
#        QDD_RACKS    GB200 racks (default 1; 2 adds gb200-r2-n01..18 with another clique)
#        QDD_WORKLOAD_API  1 (default): the Workload API (scheduling.k8s.io/v1alpha2 Workload and
#                     PodGroup) served and the scheduler's gang and topology-aware plugins on (the
#                     alpha gates of v1.36, docs/placement.md); 0: a cluster without it (the
#                     fallback path). Fixed when the cluster is created: a cluster of the other
#                     kind under the same name (or one made with another
#                     hack/cluster/scheduler-config.yaml) is deleted and created again.
#        QDD_HEARTBEAT_FACTOR  kwokctl's --heartbeat-factor (default 5, kwokctl's own): scales the node
#                     lease (40 s x factor, renewed every quarter), kwok's node status period and
#                     kube-controller-manager's --node-monitor-grace-period (40 s x factor) and
#                     --node-monitor-period (5 s x factor). 1 is a kubelet's defaults: a node that
#                     stops renewing its lease is NotReady after 40-45 s instead of 200-225 s
#                     (tests/integration/test_node_loss.py). Fixed when the cluster is created.
# Idempotent: when the cluster is already up it only (re)applies the objects, prunes simulated
# nodes of racks no longer asked for, and makes sure the driver runs. Nothing is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
racks=${QDD_RACKS:-1}
while [ $# -gt 0 ]; do
  case $1 in
    --racks) racks=$2; shift 2 ;;
    --racks=*) racks=${1#*=}; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "cluster-up: unknown argument $1" >&2; exit 2 ;;
  esac
done

. "$root/hack/cluster/env.sh"
mkdir -p "$state" "$(dirname "$KUBECONFIG")"

t0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '[cluster-up %s %3d.%01ds] %s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$*"; }

# The control plane and the test doubles started below outlive this script: they must not inherit
# the caller's descriptors. `flock LOCKFILE make bench-scale` handed its lock to them, and the
# lock stayed taken for as long as the cluster ran (every other job waiting on it stalled).
for fd in $(ls /proc/$$/fd); do
  case $fd in 0|1|2|255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
done

# One cluster-up/cluster-down at a time per cluster. Processes that outlive this script (the
# control plane, the driver) are started with fd 9 closed, or they would hold the lock forever.
mkdir -p "$root/.qdd/locks"
exec 9>"$root/.qdd/locks/cluster-$name.lock"
if ! flock -w 600 9; then echo "cluster-up: timed out waiting for the lock of cluster $name" >&2; exit 1; fi

# --- tools -------------------------------------------------------------------------------------
need_tools=0
for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok kwokctl; do
  [ -x "$bin/$b" ] || need_tools=1
done
if [ $need_tools = 1 ]; then log "control-plane binaries missing: running hack/build-tools.sh"; bash hack/build-tools.sh; fi
if [ ! -x "$root/.qdd/venv/bin/python" ] || [ ! -x "$bin/kubectl" ]; then
  log "python venv / kubectl missing: running hack/venv.sh"; bash hack/venv.sh
fi
py="$root/.qdd/venv/bin/python"

# Belt and braces: kwokctl is given a local path for every binary it may use; should it still try
# to download anything, the dead proxy makes that fail at once instead of reaching out.
# (Go never proxies loopback, so the components still talk to each other.)
offline_env=(env HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9
  https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9
  NO_PROXY=127.0.0.1,localhost,::1 no_proxy=127.0.0.1,localhost,::1
  KWOK_KUBE_APISERVER_BINARY="$bin/kube-apiserver"
  KWOK_KUBE_CONTROLLER_MANAGER_BINARY="$bin/kube-controller-manager"
  KWOK_KUBE_SCHEDULER_BINARY="$bin/kube-scheduler"
  KWOK_KWOK_CONTROLLER_BINARY="$bin/kwok"
  KWOK_ETCD_BINARY="$bin/etcd"
  KWOK_KUBECTL_BINARY="$bin/kubectl")

api_ok() { [ -s "$cluster_kc" ] && kubectl --kubeconfig "$cluster_kc" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }

# Kubernetes v1.36's workload-aware scheduling is alpha: the API group is off by default and so
# are the gates. GenericWorkload serves Workload/PodGroup and Pod spec.schedulingGroup;
# GangScheduling and TopologyAwareWorkloadScheduling add the scheduler plugins GangScheduling,
# TopologyPlacementGenerator and PodGroupPodsCount to its default profile
# (pkg/scheduler/apis/config/v1/default_plugins.go of k8s.io/kubernetes v1.36.3). kwokctl hands
# the gates to every component and the runtime config to the API server.
workload_api=${QDD_WORKLOAD_API:-1}
case $workload_api in 0|1) ;; *) echo "cluster-up: QDD_WORKLOAD_API must be 0 or 1, not $workload_api" >&2; exit 2 ;; esac
workload_flags=()
if [ "$workload_api" = 1 ]; then
  workload_flags=(--kube-feature-gates "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"
                  --kube-runtime-config "scheduling.k8s.io/v1alpha2=true")
fi
heartbeat=${QDD_HEARTBEAT_FACTOR:-5}
case $heartbeat in ''|*[!0-9.]*) echo "cluster-up: QDD_HEARTBEAT_FACTOR must be a number, not $heartbeat" >&2; exit 2 ;; esac
# What a cluster was created with (gates, scheduler configuration, heartbeats): another ask recreates it.
mode_file="$state/created-with"
mode="workload-api=$workload_api scheduler-config=$(sha256sum < "$root/hack/cluster/scheduler-config.yaml" | cut -c1-12)"
# The engine pods' kwok Stages are in kwok's configuration, read when kwok starts: new ones recreate the cluster.
mode="$mode engine-stages=$(cat "$root/hack/cluster/engine_stages.py" "$root/operator/src/qdd/catalog/startup.py" | sha256sum | cut -c1-12)"
# Clusters made before the factor was a knob ran kwokctl's default, 5: their mode stays as it was.
[ "$heartbeat" = 5 ] || mode="$mode heartbeat-factor=$heartbeat"

create_cluster() {
  log "creating cluster (kwokctl --runtime binary, local binaries, Workload API: $workload_api)"
  "${offline_env[@]}" kwokctl create cluster --name "$name" --runtime binary "${workload_flags[@]}" \
    --heartbeat-factor "$heartbeat" \
    --kube-apiserver-binary "$bin/kube-apiserver" \
    --kube-controller-manager-binary "$bin/kube-controller-manager" \
    --kube-scheduler-binary "$bin/kube-scheduler" \
    --kwok-controller-binary "$bin/kwok" \
    --etcd-binary "$bin/etcd" \
    --kube-scheduler-config "$root/hack/cluster/scheduler-config.yaml" \
    --kubeconfig "" --quiet-pull --disable-qps-limits \
    --wait 120s --timeout 5m 9>&-
  add_engine_stages
  mkdir -p "$state"; echo "$mode" > "$mode_file"
}

# kwokctl wrote kwok's own Stages (pod-ready, pod-complete, pod-delete, the node stages, sized for
# the heartbeat factor) into the cluster's kwok configuration; the engine pods' Stages
# (hack/cluster/engine_stages.py: start-up phases, readiness, crashes) are added to them, and the
# kwok controller started again to read them. Done before any node exists: no lease to wait out.
add_engine_stages() {
  local conf="$cluster_dir/kwok.yaml"
  [ -s "$conf" ] || { echo "cluster-up: $conf missing after kwokctl create" >&2; exit 1; }
  if ! grep -q 'name: qdd-engine-container-start' "$conf"; then
    { echo "---"; "$py" "$root/hack/cluster/engine_stages.py" stages "$state/engine-logs"; } >> "$conf"
  fi
  # kwok exits when its server port was taken meanwhile (another cluster on this machine): try again.
  local try pidf="$cluster_dir/pids/kwok-controller.pid"
  for try in 1 2 3; do
    stop_leftovers kwok-controller
    "${offline_env[@]}" kwokctl start cluster --name "$name" --wait 60s --timeout 2m 9>&- >/dev/null || true
    sleep 3
    if [ -s "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then break; fi
    log "kwok controller did not stay up (try $try; see its log): starting it again"
  done
  log "engine start-up Stages added to kwok's configuration (hack/cluster/engine_stages.py)"
}

if [ -d "$cluster_dir" ] && [ "$(cat "$mode_file" 2>/dev/null)" != "$mode" ]; then
  log "cluster exists, created with '$(cat "$mode_file" 2>/dev/null)', '$mode' asked: recreating it"
  QDD_CLUSTER="$name" QDD_CLUSTER_LOCK_HELD="$name" bash "$root/hack/cluster-down.sh" 9>&- || true
fi

# Stops whatever is left of this cluster's components (pids recorded by kwokctl, command line
# naming this cluster's directory), so that `kwokctl start` starts every one of them afresh.
stop_leftovers() {  # [component]: only that one
  local f pid pids=()
  for f in "$cluster_dir"/pids/${1:-*}.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null && grep -qaF "$cluster_dir/" "/proc/$pid/cmdline"; then
      pids+=("$pid"); kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  [ ${#pids[@]} -eq 0 ] || log "stopped ${#pids[@]} leftover component(s)"
}

if [ -d "$cluster_dir" ]; then
  if api_ok; then
    # A component can exit by itself while the API server serves (kube-scheduler and
    # kube-controller-manager after losing their leader lease): kwokctl starts only the stopped ones.
    dead=()
    for f in "$cluster_dir"/pids/*.pid; do
      [ -s "$f" ] && ! kill -0 "$(cat "$f")" 2>/dev/null && dead+=("$(basename "$f" .pid)")
    done
    if [ ${#dead[@]} -gt 0 ]; then
      log "cluster up, but ${dead[*]} not running: starting it again"
      "${offline_env[@]}" kwokctl start cluster --name "$name" --wait 60s --timeout 2m 9>&- >/dev/null
    fi
    log "cluster already up"
  else
    log "cluster exists but does not serve: restarting its components"
    stop_leftovers
    if ! "${offline_env[@]}" kwokctl start cluster --name "$name" --wait 60s --timeout 2m 9>&- || ! api_ok; then
      log "start failed: deleting and recreating"
      QDD_CLUSTER="$name" QDD_CLUSTER_LOCK_HELD="$name" bash "$root/hack/cluster-down.sh" 9>&- || true
      create_cluster
    else
      # The restarted kwok has a new identity: it would wait out the node leases of the old one
      # (200 s) before playing any pod. Their holder is gone: drop them, restart kwok.
      kubectl --kubeconfig "$cluster_kc" -n kube-node-lease delete lease --all >/dev/null
      stop_leftovers kwok-controller
      "${offline_env[@]}" kwokctl start cluster --name "$name" --wait 60s --timeout 2m 9>&- >/dev/null 2>&1 || true
      log "restarted kwok after dropping the stale node leases"
    fi
  fi
else
  create_cluster
fi
api_ok || { echo "cluster-up: API server of $name is not ready" >&2; exit 1; }
log "API server ready"

# --- kubeconfig: merge context kwok-$name into $KUBECONFIG and make it current ------------------
ensure_kubeconfig() {
  local fresh merged
  fresh=$(mktemp); merged=$(mktemp)
  kwokctl get kubeconfig --name "$name" > "$fresh"
  if [ -s "$KUBECONFIG" ]; then
    # The first file wins on conflicts: the fresh entries replace stale ones of the same name.
    KUBECONFIG="$fresh:$KUBECONFIG" kubectl config view --flatten > "$merged"
  else
    KUBECONFIG="$fresh" kubectl config view --flatten > "$merged"
  fi
  chmod 600 "$merged"
  mv -f "$merged" "$KUBECONFIG"
  rm -f "$fresh"
  kubectl config use-context "$ctx" >/dev/null
}
ensure_kubeconfig
k() { kubectl --context "$ctx" "$@"; }

# --- objects -----------------------------------------------------------------------------------
k apply -f crds/test/computedomains.resource.nvidia.com.yaml >/dev/null
k wait --for=condition=Established --timeout=60s crd/computedomains.resource.nvidia.com >/dev/null

objects=$(mktemp); trap 'rm -f "$objects"' EXIT
"$py" hack/cluster/objects.py --racks "$racks" > "$objects"
k apply -f "$objects" >/dev/null
# The engine pods' start-up durations per namespace (a ConfigMap qdd-sim-engine-startup), copied
# onto each engine pod at creation by a MutatingAdmissionPolicy (hack/cluster/engine_stages.py).
"$py" hack/cluster/engine_stages.py admission | k apply -f - >/dev/null
# Prune simulated nodes (and their slices) of racks no longer asked for.
want_nodes=$("$py" -c 'import json,sys; print(" ".join(sorted(i["metadata"]["name"] for i in json.load(open(sys.argv[1]))["items"] if i["kind"]=="Node")))' "$objects")
for n in $(k get nodes -l qdd.dev/simulated=true -o jsonpath='{.items[*].metadata.name}'); do
  case " $want_nodes " in *" $n "*) ;; *)
    log "pruning node $n (not in a rack asked for)"
    k delete resourceslice "$n-compute-domain.nvidia.com" --ignore-not-found >/dev/null
    k delete node "$n" --ignore-not-found >/dev/null ;;
  esac
done
n_nodes=$(wc -w <<<"$want_nodes")
log "applied $n_nodes nodes ($racks GB200 rack(s) x 18 + CPU nodes), DeviceClasses, ResourceSlices (channel-0 + daemon-0 per tray, as the real driver)"

k wait --for=condition=Ready node -l qdd.dev/simulated=true --timeout=180s >/dev/null
ready=$(k get nodes -l qdd.dev/simulated=true -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' | grep -c True || true)
log "all $ready simulated nodes Ready"

# --- the test doubles: NVIDIA's ComputeDomain driver, and the GPUs behind the KV-transfer preflight --
mkdir -p "$state"
for double in "${doubles[@]}"; do
  pidf="$state/${double//_/-}.pid"
  dlog="$state/${double//_/-}.log"
  running=0
  if [ -s "$pidf" ]; then
    pid=$(cat "$pidf")
    if kill -0 "$pid" 2>/dev/null && grep -qaF "$double.py" "/proc/$pid/cmdline"; then running=1; fi
  fi
  if [ $running = 1 ]; then
    log "$double (test double) already running, pid $pid"
    continue
  fi
  seen=0; [ -f "$dlog" ] && seen=$(wc -l < "$dlog")
  extra=()
  [ "$double" = fake_canary_router ] && extra=(--url-file "$canary_url_file")
  [ "$double" = fake_tray_disks ] && extra=(--disks "$tray_disks")
  setsid "$py" -u "hack/$double.py" --kubeconfig "$cluster_kc" "${extra[@]}" >> "$dlog" 2>&1 < /dev/null 9>&- &
  pid=$!
  echo "$pid" > "$pidf"
  for _ in $(seq 1 100); do
    # grep -c reads to the end: no early close, so no SIGPIPE under pipefail
    [ "$(tail -n +$((seen + 1)) "$dlog" 2>/dev/null | grep -c started || true)" != 0 ] && break
    kill -0 "$pid" 2>/dev/null || { echo "cluster-up: $double exited; see $dlog" >&2; tail -n 20 "$dlog" >&2; exit 1; }
    sleep 0.1
  done
  log "$double (test double) started, pid $pid, log .qdd/clusters/$name/${double//_/-}.log"
done

log "cluster $name up: kubectl --kubeconfig ${KUBECONFIG#"$root"/} --context $ctx"
