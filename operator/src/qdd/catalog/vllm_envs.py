"""Every environment variable vLLM 0.33.0 reads, and what replaced the ones it no longer reads.

The table (``data/vllm-0.33.0-envs.json``) is generated from vLLM's own registry
(``vllm.envs.environment_variables``, vllm/envs.py) by ``hack/gen_vllm_envs.py`` and kept equal
by ``tests/contract/test_vllm_envs.py``. vLLM reads its settings only through that registry; a
``VLLM_*`` variable outside it is logged once as unknown at start-up ("Unknown vLLM environment
variable detected") and has no other effect — a setting that silently does nothing.

:data:`REPLACED` names, for variables that older releases read and 0.33 does not, what to set
instead (a spec field, a flag, or nothing); each entry says where that comes from
(docs/facts/vllm-envs.md). tests/unit/test_vllm_envs.py checks that every name in it is really
absent from the table and that every flag it names is a `vllm serve` option of 0.33.0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

TABLE_FILE = "vllm-0.33.0-envs.json"


@dataclass(frozen=True)
class EnvTable:
    """``names``: every variable vLLM reads. ``choices``: for variables whose getter validates the
    value, (accepted values, whether compared case-sensitively, whether a comma-separated list of them)."""

    vllm_version: str
    names: frozenset[str]
    choices: dict[str, tuple[tuple[str, ...], bool, bool]]

    def reads(self, name: str) -> bool:
        return name in self.names

    def value_problem(self, name: str, value: str) -> str | None:
        """Why vLLM's getter refuses ``value`` for ``name`` (its engine would fail at start-up), or None."""
        if name not in self.choices:
            return None
        values, sensitive, is_list = self.choices[name]
        allowed = set(values) if sensitive else {v.lower() for v in values}
        given = [v.strip() for v in value.split(",")] if is_list else [value]
        ok = all((g if sensitive else g.lower()) in allowed for g in given)
        return None if ok else (f"{value!r} is not a value vLLM {self.vllm_version} accepts for {name} (its getter "
                                f"raises at start-up); one of: {', '.join(values)}")


@cache
def vllm_envs() -> EnvTable:
    """The generated table of vLLM 0.33.0's environment variables."""
    data = json.loads(resources.files("qdd.catalog").joinpath("data", TABLE_FILE).read_text())
    return EnvTable(data["vllm_version"], frozenset(data["names"]),
                    {k: (tuple(v["values"]), bool(v["case_sensitive"]), bool(v["list"])) for k, v in data.get("choices", {}).items()})


REPLACED: dict[str, str] = {
    "VLLM_USE_V1": "remove it: the V1 engine is the only engine since vLLM 0.11, and the variable left the registry",
    "VLLM_ATTENTION_BACKEND": "give --attention-backend in extraArgs instead, equal on both roles (vLLM 0.33 reads the "
                              "backend from --attention-backend / --attention-config only)",
    "VLLM_ALL2ALL_BACKEND": "set spec.{role}.tuning.all2allBackend instead (rendered as --all2all-backend)",
    "VLLM_NIXL_ABORT_REQUEST_TIMEOUT": "set spec.kvTransfer.leaseSeconds instead: prefill holds a request's KV blocks for "
                                       "kv_connector_extra_config.kv_lease_duration in vLLM 0.33",
}
"""Variables that vLLM 0.33.0 no longer reads → what to do instead (only names absent from the table)."""


def env_problem(name: str, engine_version: str) -> str | None:
    """Why ``name`` in an engine pod's env does nothing on vLLM ``engine_version``, or None.

    Only ``VLLM_*`` names are judged (vLLM's own prefix; others belong to libraries such as UCX,
    NCCL or CUDA), and only for the engine version the table was generated from: for another version
    qdd does not know what the engine reads."""
    table = vllm_envs()
    if not name.startswith("VLLM_") or engine_version.removeprefix("v") != table.vllm_version or table.reads(name):
        return None
    fix = REPLACED.get(name)
    if fix:
        return f"vLLM {table.vllm_version} no longer reads {name} (it would only log it as unknown): {fix}"
    return (f"vLLM {table.vllm_version} does not read {name} (not in vllm/envs.py; it would only log it as unknown "
            "and ignore it): check its spelling or remove it")
