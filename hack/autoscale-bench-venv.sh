#!/usr/bin/env bash
# Builds the venv in which bench/autoscale.py (make bench-autoscale) runs NVIDIA Dynamo 1.4.2's engine
# simulator (mocker), offline replay and Planner, with AIConfigurator's GB200 perf database, and links it
# at .qdd/autoscale-venv. Never part of the operator's runtime dependencies.
#
# Everything comes from ONE pinned file, hack/autoscale-bench-requirements.txt (pip install --no-deps).
# Cache (hack/pinned-venv.sh): ${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}/autoscale-venv-<key>, key =
# hash of the requirements file and the interpreter version. Cold build ≈ 5 min, ~1.5 GB; warm < 1 s.
#
# Usage:
#   bash hack/autoscale-bench-venv.sh            # ensure .qdd/autoscale-venv
#   bash hack/autoscale-bench-venv.sh --rebuild  # rebuild even if a good cached venv exists
#   bash hack/autoscale-bench-venv.sh --lock     # re-derive the pins from the top-level packages below
# Env: QDD_PYTHON (interpreter, default python3, 3.11..3.13), QDD_CACHE.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/hack/autoscale-bench-requirements.txt"
link="$root/.qdd/autoscale-venv"
py=${QDD_PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The Planner imports plotly, prometheus-api-client, pmdarima, prophet and filterpy at module load
# (none of them in ai-dynamo's metadata).
TOP=(ai-dynamo==1.4.2 ai-dynamo-runtime==1.4.2 aiconfigurator-core==0.12.0 scikit-learn plotly prometheus-api-client
     pmdarima prophet filterpy jinja2 pyyaml)

log() { echo "autoscale-bench-venv: $*" >&2; }
# shellcheck source=hack/pinned-venv.sh
. "$root/hack/pinned-venv.sh"

# quick: the pins of the simulator and the perf database; full: import the replay, the Planner's
# replay adapter and AIConfigurator's SDK (after a build, ~5 s).
check_venv() { # $1 = venv dir, $2 = quick|full
  local v=$1 mode=$2
  pins_match "$v" ai-dynamo ai-dynamo-runtime aiconfigurator-core || return 1
  [ "$mode" = full ] || return 0
  "$v/bin/python" -c 'import dynamo.replay, dynamo.planner.offline.replay_adapter, aiconfigurator_core.sdk.engine' >/dev/null 2>&1
}

explain_failure() { "$1/bin/python" -c 'import dynamo.replay, dynamo.planner.offline.replay_adapter, aiconfigurator_core.sdk.engine'; }

lock() {
  local scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  "$py" -m venv "$scratch/v"
  "$scratch/v/bin/python" -m pip install -q "${TOP[@]}"
  {
    sed -n '1,6p' "$req"
    "$scratch/v/bin/python" -m pip freeze --all --exclude pip | LC_ALL=C sort -f
  } > "$req.new"
  mv "$req.new" "$req"
  log "wrote $req"
}

pinned_venv_args "$@"
key=$( { cat "$req"; "$py" -c 'import platform; print(platform.python_version())'; } | sha256sum | cut -c1-16)
link_cached_venv autoscale-venv "$key" 1 "cold build ≈ 5 min, ~1.5 GB"
