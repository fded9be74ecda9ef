#!/usr/bin/env bash
# Runs this checkout's `qdd` with the performance model's venv (.qdd/perf-venv, made by
# hack/perf-venv.sh): e.g. `bash hack/qdd-perf.sh plan --predict -f examples/qwen35-397b.yaml`.
# An installed qdd with the perf extra (`pip install 'qdd[perf]'`) needs none of this.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$root/.qdd/perf-venv/bin/python" ] || bash "$root/hack/perf-venv.sh" >/dev/null
PYTHONPATH="$root/operator/src${PYTHONPATH:+:$PYTHONPATH}" exec "$root/.qdd/perf-venv/bin/python" -m qdd.cli "$@"
