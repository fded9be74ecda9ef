#!/usr/bin/env bash
# Builds the venv of qdd's optional performance model (qdd/perf, `qdd plan --predict`, `--slo`,
# `qdd perf`): NVIDIA's aiconfigurator 0.12.0 with its GB200 database, plus qdd's own base
# dependencies, and links it at .qdd/perf-venv. qdd itself is not installed in it (the cache is
# shared by every checkout): hack/qdd-perf.sh runs this checkout's qdd with it.
#
# Everything comes from ONE pinned file, hack/perf-requirements.txt, installed with
# `pip install --no-deps` (hack/pinned-venv.sh). Cache: ${QDD_CACHE:-~/.cache/qdd}/perf-venv-<key>,
# <key> hashing the requirements file and the interpreter's version. Cold ≈ 3 min and 850 MB
# (pyarrow, scipy, pandas, plotly, bokeh come with aiconfigurator); warm < 1 s.
#
# Usage:
#   bash hack/perf-venv.sh            # ensure .qdd/perf-venv (fast when cached)
#   bash hack/perf-venv.sh --rebuild  # rebuild even if a good cached venv exists
#   bash hack/perf-venv.sh --lock     # re-derive the pins (see lock() below)
# Env: QDD_PYTHON (interpreter, default python3, 3.11..3.13), QDD_CACHE.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/hack/perf-requirements.txt"
link="$root/.qdd/perf-venv"
py=${QDD_PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "perf-venv: $*" >&2; }
# shellcheck source=hack/pinned-venv.sh
. "$root/hack/pinned-venv.sh"

# quick: the pins of the two aiconfigurator packages; full: load the GB200 vLLM database the
# performance model reads (what `qdd plan --predict` needs first).
check_venv() { # $1 = venv dir, $2 = quick|full
  local v=$1 mode=$2
  pins_match "$v" aiconfigurator aiconfigurator-core pydantic || return 1
  [ "$mode" = full ] || return 0
  "$v/bin/python" - <<'PY' >/dev/null 2>&1
from aiconfigurator.sdk.perf_database import get_database
assert get_database("gb200", "vllm", "0.24.0") is not None
PY
}

explain_failure() { "$1/bin/python" -c 'from aiconfigurator.sdk.perf_database import get_database; print(get_database("gb200", "vllm", "0.24.0"))'; }

check_python() {
  "$py" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 14)' 2>/dev/null || {
    log "need Python 3.11..3.13 for aiconfigurator 0.12.0 (QDD_PYTHON=$py)"; exit 1; }
}

# --lock: install the two packages and qdd's base dependencies (from operator/pyproject.toml)
# with their dependencies into a scratch venv and write `pip freeze` as the requirements file.
lock() {
  check_python
  local scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  "$py" -m venv "$scratch/v"
  "$scratch/v/bin/python" -m pip install -q aiconfigurator==0.12.0 aiconfigurator-core==0.12.0 \
    "pydantic>=2.7,<3" "jinja2>=3.1" "pyyaml>=6"
  {
    sed -n '1,5p' "$req"
    "$scratch/v/bin/python" -m pip freeze --all --exclude pip --exclude setuptools | LC_ALL=C sort -f
  } > "$req.new"
  mv "$req.new" "$req"
  log "wrote $req"
}

pinned_venv_args "$@"

check_python
key=$( { cat "$req"; "$py" -c 'import platform; print(platform.python_version())'; } | sha256sum | cut -c1-16)
link_cached_venv perf-venv "$key" 1 "cold build takes ~3 min and ~850 MB"
