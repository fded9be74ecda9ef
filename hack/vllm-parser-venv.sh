#!/usr/bin/env bash
# Builds the venv in which tests/contract/vllm_check.py runs vLLM 0.33.0's own CLI parser and
# env registry on a CPU-only machine, and links it at .qdd/vllm-venv.
#
# Everything comes from ONE pinned file, hack/vllm-parser-requirements.txt: the full closure
# (torch + its CUDA runtime wheels, vllm, vLLM's pure-Python dependencies), installed with
# `pip install --no-deps` so that vLLM's GPU-only requirements (flashinfer, cutlass-dsl, ...)
# are never resolved. torch from PyPI is the CUDA build; it imports on a machine without a GPU
# but needs its nvidia-* wheels present to import at all (measured: without them
# `import torch` fails on libcublasLt), so they stay in the closure.
#
# Cache: the venv is built once per machine at
#   ${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}/vllm-venv-<key>
# where <key> hashes the requirements file and the interpreter's version, so a fresh clone in
# another folder (CI) reuses it. A cached venv without its completion stamp, or one whose
# python no longer runs or whose vllm/torch versions differ, is rebuilt. If the cache folder
# cannot be written, the venv is built in .qdd/vllm-venv itself. Nothing depends on the cache.
#
# Usage:
#   bash hack/vllm-parser-venv.sh            # ensure .qdd/vllm-venv (fast when cached)
#   bash hack/vllm-parser-venv.sh --rebuild  # rebuild even if a good cached venv exists
#   bash hack/vllm-parser-venv.sh --lock     # re-derive the pins (see lock() below)
# Env: QDD_PYTHON (interpreter, default python3, needs 3.11..3.14), QDD_CACHE.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/hack/vllm-parser-requirements.txt"
link="$root/.qdd/vllm-venv"
py=${QDD_PYTHON:-python3}
export VLLM_TARGET_DEVICE=cpu
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "vllm-parser-venv: $*" >&2; }

# Checks run inside the built venv. quick: metadata only (warm path, ~0.1 s);
# full: import vLLM's CLI parser and parse one argv (after a build, ~10 s).
check_venv() { # $1 = venv dir, $2 = quick|full
  local v=$1 mode=$2
  [ -x "$v/bin/python" ] || return 1
  "$v/bin/python" - "$mode" "$req" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as md
mode, req = sys.argv[1], sys.argv[2]
want = {}
for line in open(req):
    line = line.split("#", 1)[0].strip()
    if "==" in line:
        name, ver = line.split("==", 1)
        want[name.strip().lower()] = ver.strip()
for name in ("vllm", "torch"):
    assert md.version(name) == want[name], name
if mode == "full":
    import vllm.envs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    p = make_arg_parser(FlexibleArgumentParser())
    ns = p.parse_args(["m", "--tensor-parallel-size", "2"])
    assert ns.tensor_parallel_size == 2 and "VLLM_NIXL_SIDE_CHANNEL_PORT" in vllm.envs.environment_variables
PY
}

check_python() {
  "$py" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 15)' 2>/dev/null || {
    log "need Python 3.11..3.14 for vllm 0.33.0 (QDD_PYTHON=$py)"; exit 1; }
}

build() { # $1 = venv dir, $2 = key
  local v=$1 key=$2 t0=$SECONDS
  log "building $v (cold build takes minutes and ~5.5 GB)"
  rm -rf "$v"
  "$py" -m venv "$v"
  "$v/bin/python" -m pip install -q --no-deps -r "$req"
  if ! check_venv "$v" full; then
    log "built venv fails its import check; re-running it verbosely:"
    "$v/bin/python" -c 'import vllm.entrypoints.common.cli_args, vllm.envs' || true
    exit 1
  fi
  echo "$key" > "$v/.qdd-complete"
  log "built in $((SECONDS - t0)) s"
}

# --lock: derive the closure from vLLM's own metadata. Installs vllm==$vllm_version with
# --no-deps into a scratch venv, reads importlib.metadata.requires("vllm"), keeps the
# requirements whose markers hold (extras dropped), drops the GPU-only ones (torch* except the
# torch/torchvision pins vLLM declares, nvidia-*, flashinfer, cutlass, tilelang, quack,
# humming, tokenspeed, numba, opencv, nvtx, ...), installs torch and torchvision at vLLM's pins
# and the rest with their dependencies, and writes `pip freeze --all` as the requirements file.
# torchvision stays: transformers' Qwen2-VL image processor (imported when vLLM inspects the
# Qwen3.5 architecture for an engine config) needs it.
lock() {
  check_python
  local vllm_version=${VLLM_VERSION:-0.33.0} scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  "$py" -m venv "$scratch/v"
  local vpy="$scratch/v/bin/python"
  "$vpy" -m pip install -q --no-deps "vllm==$vllm_version"
  "$vpy" -m pip install -q packaging
  "$vpy" - > "$scratch/deps.txt" <<'PY'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement
GPU_ONLY = re.compile(
    r"^(torchaudio|torchcodec|nvidia-.*|flashinfer.*|pynvvideocodec|apache-tvm-ffi|tilelang|nvtx"
    r"|fastsafetensors|instanttensor|quack-kernels|tokenspeed-.*|humming-kernels|numba"
    r"|opencv-python.*)$")
for line in md.requires("vllm"):
    r = Requirement(line)
    if r.marker and not r.marker.evaluate({"extra": ""}):
        continue  # extras and markers that do not apply here
    name = re.sub(r"[-_.]+", "-", r.name).lower()
    if GPU_ONLY.match(name):
        print(f"drop {line}", file=sys.stderr)
        continue
    print(str(r).split(";")[0].strip())
PY
  "$vpy" -m pip install -q -r "$scratch/deps.txt"
  {
    echo "# Pinned closure for vLLM ${vllm_version}'s CLI parser and env registry on CPU (tests/contract)."
    echo "# Installed by hack/vllm-parser-venv.sh with \`pip install --no-deps -r\` into a fresh venv."
    echo "# Generated by \`bash hack/vllm-parser-venv.sh --lock\` from importlib.metadata.requires(\"vllm\")"
    echo "# minus GPU-only packages; torch/torchvision at the versions vllm ${vllm_version} pins (its"
    echo "# wheel requires torch==2.14.0). torch from PyPI is the CUDA build (PyPI serves no CPU"
    echo "# build); it imports on CPU with its nvidia-* wheels present. Python $("$vpy" -c 'import platform; print(platform.python_version())'), $(uname -m)."
    "$vpy" -m pip freeze --all --exclude pip | sed -E "s|^vllm @ .*|vllm==${vllm_version}|" | LC_ALL=C sort -f
  } > "$req.new"
  mv "$req.new" "$req"
  log "wrote $req"
}

case "${1:-}" in
  --lock) lock; exit 0 ;;
  --rebuild) force=1 ;;
  "") force=0 ;;
  *) log "unknown argument: $1"; exit 2 ;;
esac

check_python
key=$( { cat "$req"; "$py" -c 'import platform; print(platform.python_version())'; } | sha256sum | cut -c1-16)
mkdir -p "$root/.qdd"

cache=${QDD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/qdd}
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
  target="$cache/vllm-venv-$key"
  exec 9>"$target.lock"
  flock 9  # one builder per key; others wait and then find it built
  if [ "$force" = 1 ] || [ "$(cat "$target/.qdd-complete" 2>/dev/null)" != "$key" ] \
      || ! check_venv "$target" quick; then
    build "$target" "$key"
    # keep the cache from growing without bound: drop all but the 2 newest other builds
    { ls -1dt "$cache"/vllm-venv-*/ 2>/dev/null || true; } | sed 's|/$||' |
      { grep -vxF "$target" || true; } | tail -n +3 |
      while read -r old; do log "pruning $old"; rm -rf "$old" "$old.lock"; done
  fi
  if [ -L "$link" ] || [ ! -e "$link" ]; then
    ln -sfn "$target" "$link"
  else
    rm -rf "$link" && ln -s "$target" "$link"
  fi
else
  log "cache $cache not writable; building in $link"
  [ -L "$link" ] && rm -f "$link"
  if [ "$force" = 1 ] || [ "$(cat "$link/.qdd-complete" 2>/dev/null)" != "$key" ] \
      || ! check_venv "$link" quick; then
    build "$link" "$key"
  fi
fi
echo "$link"
