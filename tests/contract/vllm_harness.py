"""Contract checks of rendered `vllm serve` argv/env against vLLM 0.33.0 itself.

    from tests.contract.vllm_harness import check   # or: from .vllm_harness import check

    res = check({"decode-leader": argv_after_vllm_serve, ...}, ["VLLM_SSM_CONV_STATE_LAYOUT"])
    res["argv"]["decode-leader"]["ok"]            # parsed, validated and launchable?
    res["argv"]["decode-leader"]["args"]          # the parsed namespace, JSON-able
    res["argv"]["decode-leader"]["launch"]        # {"mode": "headless"|..., "api_server_count": n}
    res["argv"]["bad"]["error"]                   # e.g. "unrecognized arguments: --no-such-flag"
    res["unknown_env"]                            # names not in vllm.envs.environment_variables

Each call runs tests/contract/vllm_check.py once, in a subprocess, with the vLLM venv's python
(.qdd/vllm-venv/bin/python): importing vLLM costs ~8 s, so batch every argv of a test module
into one call (results of identical requests are memoised per process). The venv is ensured
once per process with `bash hack/vllm-parser-venv.sh` (a cold build takes minutes; a warm one
well under a second) — never skipped. See vllm_check.py for the output format and for
`options` (flag descriptions) and `engine_config` (vLLM's config validation on a stand-in
Qwen3.5 config, CPU platform).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".qdd" / "vllm-venv" / "bin" / "python"
CHECKER = Path(__file__).resolve().with_name("vllm_check.py")
VENV_SCRIPT = ROOT / "hack" / "vllm-parser-venv.sh"

_ensured = False
_memo: dict[str, dict[str, Any]] = {}


def ensure_venv() -> Path:
    """Build or link .qdd/vllm-venv (once per process) and return its python."""
    global _ensured
    if not _ensured or not VENV_PYTHON.exists():
        proc = subprocess.run(
            ["bash", str(VENV_SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=3600
        )
        if proc.returncode != 0 or not VENV_PYTHON.exists():
            raise RuntimeError(
                f"hack/vllm-parser-venv.sh failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
            )
        _ensured = True
    return VENV_PYTHON


def _child_env() -> dict[str, str]:
    # The caller's VLLM_* settings would change vLLM's behaviour (e.g. VLLM_USE_RUST_FRONTEND
    # changes api_server_count): results must depend on the argv alone.
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    return env


def run_checker(request: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Send one raw request (see vllm_check.py) to the checker and return its JSON answer."""
    key = json.dumps(request, sort_keys=True)
    if key in _memo:
        return _memo[key]
    python = ensure_venv()
    proc = subprocess.run(
        [str(python), str(CHECKER)], input=key, capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env=_child_env(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"vllm_check.py failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(
            f"vllm_check.py printed no JSON ({e}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        ) from e
    _memo[key] = result
    return result


def check(
    argvs: dict[str, list[str]],
    env_names: list[str] | dict[str, str] = (),
    *,
    options: list[str] = (),
    engine_config: bool | dict[str, Any] = False,
) -> dict[str, Any]:
    """Check argvs (each: what follows `vllm serve`, model first) and env names.

    env_names may also be a {name: value} mapping: then each known name's value is also run
    through vLLM's own getter (e.g. choice validation) and reported in result["env_values"].
    options: flags to describe from the serve parser (result["options"][flag]).
    engine_config: also build vLLM's engine config per passing argv (result["engine_config"]).
    """
    env_payload: list[str] | dict[str, str]
    env_payload = dict(env_names) if isinstance(env_names, dict) else list(env_names)
    request: dict[str, Any] = {
        "argvs": [{"id": k, "argv": [str(a) for a in v]} for k, v in argvs.items()],
        "env": env_payload,
        "options": list(options),
        "engine_config": engine_config,
    }
    return run_checker(request)


if __name__ == "__main__":  # ad-hoc: python tests/contract/vllm_harness.py < request.json
    json.dump(run_checker(json.load(sys.stdin)), sys.stdout, indent=1, sort_keys=True)
    print()
