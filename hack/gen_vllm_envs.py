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


def _accepts(name: str, getter, value: str) -> tuple[bool, str]:  # noqa: ANN001 — vLLM's getter
    """Whether vLLM's getter accepts ``value`` for ``name``, and its error text."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        getter()
        return True, ""
    except Exception as e:  # noqa: BLE001 — getters that parse ints/floats raise their own errors
        return False, str(e)
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _choices(name: str, getter) -> dict | None:  # noqa: ANN001 — vLLM's getter
    """The choices vLLM's getter accepts (read from the error it raises for a value outside them) and
    whether it compares them case-sensitively (env_with_choices' case_sensitive, probed)."""
    ok, text = _accepts(name, getter, _PROBE)
    if ok or "Valid options:" not in text:
        return None
    tail = text.split("Valid options:", 1)[1].strip().rstrip(".")
    values = sorted(x.strip().strip("'\"") for x in tail.strip("[]").split(",") if x.strip())
    flipped = next((v.swapcase() for v in values if v.swapcase() != v), None)
    sensitive = flipped is None or not _accepts(name, getter, flipped)[0]
    # env_list_with_choices: a comma-separated list of choices (accepted when two are joined).
    is_list = len(values) > 1 and _accepts(name, getter, ",".join(values[:2]))[0]
    return {"values": values, "case_sensitive": sensitive, "list": is_list}


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
