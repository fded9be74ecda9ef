#!/usr/bin/env bash
# NIXL for the preflight program's CPU test (tests/contract/test_preflight_program.py): the PyPI
# wheels nixl 1.5.1 (the import name) and nixl-cu13 1.5.1 (the library, UCX bundled), installed
# with --no-deps into a folder the vLLM parser venv's python (torch, numpy) puts on its path. NIXL
# registers host memory on a machine without GPUs (docs/facts/cpu-engines.md). Cached per pin under
# ${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}; prints the folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pins="nixl==1.5.1 nixl-cu13==1.5.1"
key=$(echo "$pins" | sha256sum | cut -c1-12)
cache=${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}
dir="$cache/nixl-cpu-$key"
py="$root/.qdd/vllm-venv/bin/python"
if [ ! -f "$dir/.complete" ]; then
  rm -rf "$dir.tmp"
  mkdir -p "$cache"
  # shellcheck disable=SC2086
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" $pins >&2
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
fi
echo "$dir"
