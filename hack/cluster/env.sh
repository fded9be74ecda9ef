# Sourced by hack/cluster-up.sh and hack/cluster-down.sh (with $root set): the names and paths of
# one local cluster, so that both scripts agree on them.
name=${QDD_CLUSTER:-qdd}
export KUBECONFIG=${KUBECONFIG:-$root/.qdd/kubeconfig}
case $KUBECONFIG in /*) ;; *) KUBECONFIG="$root/$KUBECONFIG" ;; esac
bin="$root/.qdd/bin"
export PATH="$bin:$root/.qdd/venv/bin:$PATH"
export KWOK_WORKDIR="$root/.qdd/kwok"
state="$root/.qdd/clusters/$name"
cluster_dir="$KWOK_WORKDIR/clusters/$name"
cluster_kc="$cluster_dir/kubeconfig.yaml"
ctx="kwok-$name"
# Test doubles started with the cluster (hack/<name>.py), stopped with it.
doubles=(fake_compute_domain_driver fake_preflight_result fake_bench_result fake_canary_router fake_tray_disks)
# The trays' disks and the claims' contents as host folders (hack/fake_tray_disks.py).
tray_disks="$state/disks"
# The canary's router double writes its URL here; the operator's QDD_CANARY_URL_OVERRIDE reads it.
canary_url_file="$state/fake-canary-router.url"
