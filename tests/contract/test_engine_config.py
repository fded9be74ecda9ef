"""qdd refuses exactly the argvs vLLM 0.33.0's engine configuration refuses (not only its parser).

Every rendered engine argv (each example's, and each generated tuning/extraArgs combination's,
tests/unit/engine_combos.py) goes through vLLM's own ``AsyncEngineArgs.create_engine_config`` on
CPU, with the checkpoint's config.json written from the catalog (qdd.catalog.config_json). For every
leader argv, qdd's verdict (qdd.plan.engine_config) must equal vLLM's: refused by both, or by
neither. Parse-level problems are qdd's other checks (test_rendered_argv.py); here every argv parses.

One checker run (one vLLM import) serves the module; ~1-3 s per argv.
"""

from __future__ import annotations

import pytest

from qdd.api import parse_resource
from qdd.catalog import resolve_checkpoint
from qdd.catalog.config_json import config_json
from qdd.errors import SpecError
from qdd.plan import build as build_mod
from qdd.plan.engine_config import config_errors, role_options

from ..conftest import EXAMPLES, load
from ..unit.engine_combos import combos
from .vllm_harness import check

SEED_EXAMPLE = "qwen35-397b-4xdep2-1xdep8-cc4096"


def _argvs_without_config_rules(cr) -> dict[str, tuple[list[str], list[str]]] | None:
    """{role: (leader argv, extraArgs)} as qdd renders them with the engine-config rules switched off
    (so that vLLM can judge what qdd would refuse), or None when qdd refuses the CR for another reason."""
    saved = build_mod.config_errors
    build_mod.config_errors = lambda options: []
    try:
        plan = build_mod.build_plan(parse_resource(cr))
    except SpecError:
        return None
    finally:
        build_mod.config_errors = saved
    out = {}
    for role in (plan.prefill, plan.decode):
        leader = next(p for p in role.pods if p.group_role == "leader")
        out[role.role] = (list(leader.argv), list(getattr(plan.spec, role.role).extra_args))
    return out


CPU_ONLY = ("only supported on CUDA devices",)
"""vLLM refusals that come from the CPU platform the check runs on, not from the argv: a GB200 engine
accepts the same argv (vllm/config/parallel.py: EPLB is refused on platforms other than CUDA/ROCm/XPU)."""


@pytest.fixture(scope="module")
def judged():
    return judge()


def judge() -> dict[str, tuple]:
    """{id: (qdd's refusals, vLLM's parse result, vLLM's engine-config result)} for every leader argv."""
    by_model: dict[str, dict[str, list[str]]] = {}
    verdicts = {}
    for name, cr in [(SEED_EXAMPLE, load(EXAMPLES / f"{SEED_EXAMPLE}.yaml")), *combos()]:
        found = _argvs_without_config_rules(cr)
        if found is None:
            continue
        model = cr["spec"]["model"]["name"]
        for role, (argv, extra) in found.items():
            key = f"{name}/{role}"
            by_model.setdefault(model, {})[key] = argv
            verdicts[key] = [e.field + ": " + e.message for e in config_errors(role_options(role, argv, extra))]
    out = {}
    for model, argvs in sorted(by_model.items()):  # one checker run per checkpoint config.json
        res = check(argvs, engine_config={"config_json": config_json(resolve_checkpoint(model).architecture)})
        out.update({k: (verdicts[k], res["argv"][k], res["engine_config"].get(k)) for k in argvs})
    return out


def _cpu_only(engine) -> bool:
    return engine is not None and not engine["ok"] and any(m in engine["error"] for m in CPU_ONLY)


def test_every_generated_argv_parses(judged):
    assert len(judged) >= 40
    bad = {k: v[1].get("error") for k, v in judged.items() if not v[1]["ok"]}
    assert not bad


def test_qdd_refuses_what_vllms_engine_config_refuses(judged):
    """The contract: qdd refused ⇔ vLLM's create_engine_config raised."""
    disagree = {}
    for key, (qdd_errors, _, engine) in judged.items():
        if _cpu_only(engine):
            continue  # judged on GPU semantics by the unit tests (tests/unit/test_engine_config.py)
        vllm_refuses = engine is not None and not engine["ok"]
        if bool(qdd_errors) != vllm_refuses:
            disagree[key] = {"qdd": qdd_errors, "vllm": engine and engine.get("error")}
    assert not disagree


def test_the_generated_set_holds_refusals_of_each_rule(judged):
    refused = [v for v in judged.values() if v[2] is not None and not v[2]["ok"] and not _cpu_only(v[2])]
    assert len(refused) >= 3, "the draw no longer reaches vLLM's configuration refusals: widen engine_combos"
    texts = " ".join(v[2]["error"] for v in refused)
    assert "max_num_batched_tokens" in texts or "max_model_len" in texts


def test_the_seed_builds_and_vllm_reads_the_catalogs_config(judged):
    for role in ("prefill", "decode"):
        qdd_errors, parsed, engine = judged[f"{SEED_EXAMPLE}/{role}"]
        assert not qdd_errors and engine["ok"], engine
        assert engine["model"]["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
        assert engine["model"]["max_model_len"] == 9216


def test_vllm_reads_back_the_catalogs_numbers(judged):
    """qdd.catalog.config_json writes the catalog's architecture; vLLM's ModelConfig reads the same numbers."""
    seen = set()
    for name, cr in [(SEED_EXAMPLE, load(EXAMPLES / f"{SEED_EXAMPLE}.yaml")), *combos()]:
        arch = resolve_checkpoint(cr["spec"]["model"]["name"]).architecture
        engine = judged.get(f"{name}/prefill", (None, None, None))[2]
        if arch.name in seen or engine is None or not engine["ok"]:
            continue
        seen.add(arch.name)
        m = engine["model"]
        assert (m["num_hidden_layers"], m["total_num_kv_heads"], m["head_size"], m["vocab_size"], m["hidden_size"],
                m["linear_num_value_heads"], m["is_hybrid"]) == (
            arch.num_hidden_layers, arch.num_key_value_heads, arch.head_dim, arch.vocab_size, arch.hidden_size,
            arch.linear_num_value_heads, True), (arch.name, m)
    assert seen == {"Qwen3.5-397B-A17B", "Qwen3.5-35B-A3B"}
