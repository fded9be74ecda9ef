#!/usr/bin/env bash
# Runs the operator (`qdd run`) as a local background process against .qdd/kubeconfig.
# Usage: hack/operator.sh start|stop|restart|status
# Env:   KUBECONFIG (default .qdd/kubeconfig), QDD_METRICS_PORT (18080), QDD_LIVENESS_PORT (18081),
#        QDD_RESYNC_SECONDS (30), QDD_CLUSTER (qdd). Log: .qdd/operator.log; pid: .qdd/operator.pid.
#        With the simulated cluster of QDD_CLUSTER up, the canary goes to its router TEST DOUBLE
#        (QDD_CANARY_URL_OVERRIDE from .qdd/clusters/$QDD_CLUSTER/fake-canary-router.url): kwok runs no router.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export KUBECONFIG=${KUBECONFIG:-$root/.qdd/kubeconfig}
pidfile=${QDD_OPERATOR_PIDFILE:-$root/.qdd/operator.pid}
logfile=${QDD_OPERATOR_LOG:-$root/.qdd/operator.log}
metrics=${QDD_METRICS_PORT:-18080}
liveness=${QDD_LIVENESS_PORT:-18081}
canary_url_file="$root/.qdd/clusters/${QDD_CLUSTER:-qdd}/fake-canary-router.url"
if [ -z "${QDD_CANARY_URL_OVERRIDE:-}" ] && [ -s "$canary_url_file" ]; then
  QDD_CANARY_URL_OVERRIDE=$(cat "$canary_url_file")
  export QDD_CANARY_URL_OVERRIDE
fi

running() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  if running; then echo "operator already running (pid $(cat "$pidfile"))"; return; fi
  for p in "$metrics" "$liveness"; do
    if port_busy "$p"; then
      echo "port $p is already in use (another operator?): set QDD_METRICS_PORT / QDD_LIVENESS_PORT" >&2; exit 1
    fi
  done
  nohup "$root/.qdd/venv/bin/qdd" run --metrics-port "$metrics" --liveness-port "$liveness" \
    --resync-seconds "${QDD_RESYNC_SECONDS:-30}" >>"$logfile" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if running && curl -fsS "http://127.0.0.1:$liveness/healthz" >/dev/null 2>&1 && sleep 0.5 && running; then
      echo "operator running (pid $(cat "$pidfile")); metrics http://127.0.0.1:$metrics/metrics; log $logfile"
      return
    fi
    running || { echo "operator exited; last log lines:" >&2; tail -20 "$logfile" >&2; exit 1; }
    sleep 0.2
  done
  echo "operator did not report live within 20 s; see $logfile" >&2; exit 1
}

stop() {
  if running; then
    kill "$(cat "$pidfile")" && for _ in $(seq 1 50); do running || break; sleep 0.2; done
    running && kill -9 "$(cat "$pidfile")"
    echo "operator stopped"
  fi
  rm -f "$pidfile"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running; then echo "running (pid $(cat "$pidfile"))"; else echo "stopped"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
