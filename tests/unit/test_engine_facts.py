"""extraEnv against vLLM 0.33's own table of environment variables, the engine profiles' "fixed in" and
"has no effect on" facts, and the router facts (docs/facts/vllm-envs.md, engine-fixes.md, router-pd.md)."""

from __future__ import annotations

import copy

import pytest

from qdd.catalog.engine_facts import FIXES, NO_EFFECT
from qdd.catalog.vllm_envs import REPLACED, env_problem, vllm_envs
from qdd.catalog.vllm_options import serve_options
from qdd.errors import SpecError
from qdd.plan.router import BROKEN_POLICIES

from ..conftest import EXAMPLES, load
from .helpers import plan_of


def _errors(cr) -> list[tuple[str, str]]:
    try:
        plan_of(cr)
    except SpecError as e:
        return [(x.field, x.message) for x in e.errors]
    return []


def _env(seed_cr, role, *entries):
    cr = copy.deepcopy(seed_cr)
    cr["spec"][role]["extraEnv"] = [dict(e) for e in entries]
    return cr


# --- extraEnv against vLLM's registry ---------------------------------------------------------------

def test_the_table_is_vllms_0_33_registry():
    t = vllm_envs()
    assert t.vllm_version == "0.33.0" and len(t.names) > 300
    assert {"VLLM_SSM_CONV_STATE_LAYOUT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_LOG_STATS_INTERVAL"} <= t.names
    assert t.choices["VLLM_SSM_CONV_STATE_LAYOUT"] == (("DS", "SD"), True, False)


def test_every_replaced_name_is_gone_and_its_replacement_exists():
    t, options = vllm_envs(), serve_options()
    for name, fix in REPLACED.items():
        assert not t.reads(name), name
        for word in fix.split():
            if word.startswith("--"):
                assert options.resolve(word.rstrip(",;:)")) is not None, (name, word)


@pytest.mark.parametrize(("name", "value", "field", "words"), [
    ("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "600", "spec.decode.extraEnv[0].name", "set spec.kvTransfer.leaseSeconds instead"),
    ("VLLM_USE_V1", "1", "spec.decode.extraEnv[0].name", "no longer reads VLLM_USE_V1"),
    ("VLLM_ATTENTION_BACKEND", "FLASHINFER", "spec.decode.extraEnv[0].name", "--attention-backend"),
    ("VLLM_LOG_STATS_INTREVAL", "5", "spec.decode.extraEnv[0].name", "does not read VLLM_LOG_STATS_INTREVAL"),
    ("VLLM_KV_CACHE_LAYOUT", "hnd", "spec.decode.extraEnv[0].value", "one of: BHLNC"),
])
def test_env_vllm_would_ignore_or_refuse_is_refused(seed_cr, name, value, field, words):
    errors = _errors(_env(seed_cr, "decode", {"name": name, "value": value}))
    assert [f for f, _ in errors] == [field], errors
    assert words in errors[0][1]


@pytest.mark.parametrize("entry", [
    {"name": "VLLM_LOG_STATS_INTERVAL", "value": "5"}, {"name": "VLLM_KV_CACHE_LAYOUT", "value": "HND"},
    {"name": "VLLM_FLOAT32_MATMUL_PRECISION", "value": "HIGH"},  # vLLM compares it case-insensitively
    {"name": "NCCL_DEBUG", "value": "WARN"},  # not vLLM's prefix: not judged
    {"name": "VLLM_LOG_STATS_INTERVAL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
])
def test_env_vllm_reads_is_accepted(seed_cr, entry):
    assert _errors(_env(seed_cr, "prefill", entry)) == []


def test_other_engine_versions_are_not_judged_by_0_33s_table():
    assert env_problem("VLLM_USE_V1", "0.23.0") is None
    assert env_problem("VLLM_USE_V1", "v0.33.0") is not None


# --- "fixed in" facts ---------------------------------------------------------------------------------

def test_fixes_name_their_sources_and_versions():
    assert {f.pr for f in FIXES} == {"vllm#42430", "vllm#46694"}
    assert all(f.in_versions == {"0.32.0", "0.33.0"} for f in FIXES)


def test_an_engine_without_the_one_token_prefill_fix_is_rendered_with_piecewise_graphs(seed_cr):
    cr = copy.deepcopy(seed_cr)
    cr["spec"]["engine"]["vllmVersion"] = "0.23.0"
    cr["spec"]["prefill"]["tuning"] = {"asyncScheduling": False}
    cr["spec"]["decode"]["tuning"] = {"asyncScheduling": False}
    plan = plan_of(cr)
    for pod in (*plan.prefill.pods, *plan.decode.pods):
        i = pod.argv.index("--compilation-config")
        assert pod.argv[i + 1] == '{"cudagraph_mode":"PIECEWISE"}'
    assert any("lacks vllm#42430" in w and "PIECEWISE" in w for w in plan.warnings)
    new = plan_of(seed_cr)
    assert not any("--compilation-config" in p.argv for p in new.prefill.pods)
    assert not any("lacks vllm#" in w for w in new.warnings)


def test_mtp_on_an_engine_without_the_lookahead_fix_is_refused():
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-mtp1-cc2048.yaml")
    assert _errors(cr) == []
    cr["spec"]["engine"]["vllmVersion"] = "0.23.0"
    for role in ("prefill", "decode"):
        cr["spec"][role].setdefault("tuning", {})["asyncScheduling"] = False
    errors = _errors(cr)
    assert ("spec.engine.vllmVersion" in [f for f, _ in errors]), errors
    msg = dict(errors)["spec.engine.vllmVersion"]
    assert "lacks vllm#46694" in msg and "0.32.0, 0.33.0" in msg


# --- "has no effect on" facts ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [
    ["--kv-transfer-config.kv_connector_extra_config.kv_recompute_threshold", "256"],
    ["--kv-transfer-config", '{"kv_connector_extra_config": {"kv_recompute_threshold": 256}}'],
])
def test_a_knob_that_does_nothing_on_p_to_d_is_refused_saying_so(seed_cr, extra):
    cr = copy.deepcopy(seed_cr)
    cr["spec"]["decode"]["extraArgs"] = extra
    errors = _errors(cr)
    assert [f for f, _ in errors] == ["spec.decode.extraArgs[0]"]
    assert "kv_recompute_threshold has no effect on the P→D path of vLLM 0.33.0" in errors[0][1]
    assert "vllm#55801" in errors[0][1]
    assert [f.name for f in NO_EFFECT] == ["kv_recompute_threshold"]


def test_another_kv_transfer_key_stays_owned(seed_cr):
    cr = copy.deepcopy(seed_cr)
    cr["spec"]["decode"]["extraArgs"] = ["--kv-transfer-config.kv_role", "kv_both"]
    assert "owned by qdd" in _errors(cr)[0][1]


# --- router ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["prefillPolicy", "decodePolicy"])
def test_power_of_two_is_refused_with_its_reason(seed_cr, field):
    cr = copy.deepcopy(seed_cr)
    cr["spec"].setdefault("router", {})[field] = "power_of_two"
    errors = _errors(cr)
    assert [f for f, _ in errors] == [f"spec.router.{field}"]
    assert "/get_load" in errors[0][1] and "router#174" in errors[0][1]
    assert set(BROKEN_POLICIES) == {"power_of_two"}


@pytest.mark.parametrize("policy", ["round_robin", "random", "cache_aware"])
def test_policies_not_known_broken_are_rendered(seed_cr, policy):
    cr = copy.deepcopy(seed_cr)
    cr["spec"].setdefault("router", {})["prefillPolicy"] = policy
    args = plan_of(cr).router.args
    assert args[args.index("--prefill-policy") + 1] == policy


def test_the_router_uses_kubernetes_discovery_never_vllms_zmq_discovery(seed_cr):
    """vllm-project/router#299: vLLM's own discovery mode drops load state and skips cache-aware setup."""
    args = plan_of(seed_cr).router.args
    assert "--service-discovery" in args and "--vllm-pd-disaggregation" in args
    assert not any(a.startswith("--vllm-discovery") for a in args)
