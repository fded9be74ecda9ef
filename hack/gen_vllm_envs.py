"""Writes the table of every environment variable vLLM reads, from its own registry (vllm/envs.py).

Run with the vLLM parser venv (make vllm-venv):

    VLLM_TARGET_DEVICE=cpu .qdd/vllm-venv/bin/python hack/gen_vllm_envs.py \
        > operator/src/qdd/catalog/data/vllm-0.33.0-envs.json

tests/contract/test_vllm_envs.py regenerates it and fails on any difference, so the table qdd checks
``extraEnv`` with (qdd.catalog.vllm_envs) stays what vLLM 0.33.0 reads.

``names``: the keys of ``vllm.envs.environment_variables`` — vLLM's getters, the only names its
code reads through ``vllm.envs``; a ``VLLM_*`` variable outside it is logged as unknown at start-up
and otherwise ignored. ``choices``: the accepted values of the variables whose getter validates
them (``env_with_choices``), found by asking each getter for a value it cannot accept.
"""

from __future__ import annotations

import json
import os
import sys

_PROBE = "qdd-not-a-valid-choice"


def _choices(name: str, getter) -> list[str] | None:  # noqa: ANN001 — vLLM's getter
    """The choices vLLM's getter accepts, read from the error it raises for a value outside them."""
    old = os.environ.get(name)
    os.environ[name] = _PROBE
    try:
        getter()
    except ValueError as e:
        text = str(e)
        if "Valid options:" in text:
            tail = text.split("Valid options:", 1)[1].strip().rstrip(".")
            return sorted(x.strip().strip("'\"") for x in tail.strip("[]").split(",") if x.strip())
        return None
    except Exception:  # noqa: BLE001 — getters that parse ints/floats raise their own errors
        return None
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
    return None


def main() -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm
    import vllm.envs as envs

    registry = envs.environment_variables
    choices = {}
    for name in sorted(registry):
        c = _choices(name, registry[name])
        if c:
            choices[name] = c
    table = {"vllm_version": vllm.__version__, "names": sorted(registry), "choices": choices}
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
