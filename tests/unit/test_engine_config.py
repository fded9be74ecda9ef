"""What vLLM 0.33.0's engine configuration refuses at start-up is refused at plan time, at the field to
change (qdd.plan.engine_config). The same generated combinations are judged by vLLM itself in
tests/contract/test_engine_config.py."""

from __future__ import annotations

import copy

import pytest

from qdd.errors import SpecError
from qdd.plan.engine_config import CONFIG_RULES, role_options

from .engine_combos import SMALL_MODEL, combos
from .helpers import plan_of


def _errors(cr) -> list[tuple[str, str]]:
    try:
        plan_of(cr)
    except SpecError as e:
        return [(x.field, x.message) for x in e.errors]
    return []


def _with(seed_cr, role, extra=(), **tuning):
    cr = copy.deepcopy(seed_cr)
    cr["spec"][role]["extraArgs"] = list(extra)
    cr["spec"][role].setdefault("tuning", {}).update(tuning)
    return cr


@pytest.mark.parametrize(("role", "extra", "tuning", "field", "words"), [
    ("prefill", ["--no-enable-chunked-prefill"], {"maxNumBatchedTokens": 4096}, "spec.prefill.tuning.maxNumBatchedTokens",
     "max-num-batched-tokens 4096 is below max-model-len 9216 with chunked prefill off (spec.prefill.extraArgs[0])"),
    ("decode", ["--disable-chunked-prefill"], {"maxNumBatchedTokens": 8192}, "spec.decode.tuning.maxNumBatchedTokens",
     "max-num-batched-tokens 8192 is below max-model-len 9216"),
    ("decode", ["--max-num-active-seqs", "4096"], {}, "spec.decode.extraArgs[0]",
     "--max-num-active-seqs 4096 exceeds max-num-seqs 1024"),
    ("prefill", ["--seed", "1", "--long-prefill-token-threshold=300000"], {}, "spec.prefill.extraArgs[2]",
     "--long-prefill-token-threshold 300000 exceeds max-model-len 9216"),
    ("decode", ["--eplb-config.num_redundant_experts", "8"], {}, "spec.decode.extraArgs[0]",
     "num_redundant_experts 8 without --enable-eplb"),
    ("decode", ["--eplb-config", '{"num_redundant_experts": 4}'], {}, "spec.decode.extraArgs[0]",
     "num_redundant_experts 4 without --enable-eplb"),
    ("prefill", ["-dcp", "2"], {}, "spec.prefill.extraArgs[0]", "--decode-context-parallel-size 2 does not divide"),
])
def test_engine_config_refusals_name_the_field(seed_cr, role, extra, tuning, field, words):
    errors = _errors(_with(seed_cr, role, extra, **tuning))
    assert [f for f, _ in errors] == [field], errors
    assert words in errors[0][1]


@pytest.mark.parametrize("extra", [
    ["--no-enable-chunked-prefill"],  # chunked prefill off, but prefill's 16384 batched tokens ≥ max-model-len 9216
    ["--max-num-active-seqs", "512"], ["--long-prefill-token-threshold", "4096"],
    ["--enable-eplb", "--eplb-config.num_redundant_experts", "8"], ["--enable-eplb"], ["-dcp", "1"],
])
def test_what_vllm_accepts_is_accepted(seed_cr, extra):
    assert _errors(_with(seed_cr, "prefill", extra)) == []


def test_eplb_without_expert_parallel_is_refused(seed_cr):
    cr = _with(seed_cr, "prefill", ["--enable-eplb"])
    cr["spec"]["model"]["name"] = SMALL_MODEL
    cr["spec"]["prefill"]["topology"]["expertParallel"] = False
    errors = _errors(cr)
    assert errors == [("spec.prefill.extraArgs[0]", errors[0][1])]
    assert "--enable-eplb needs expert parallelism" in errors[0][1]


def test_role_options_read_switches_json_keys_and_fields():
    argv = ["m", "--max-num-batched-tokens", "8192", "--no-enable-prefix-caching", "--eplb-config",
            '{"window_size": 10}', "--disable-chunked-prefill", "--eplb-config.num_redundant_experts", "2"]
    o = role_options("decode", argv, argv[-3:])
    assert o.get("enable_prefix_caching") == "false" and o.get("enable_chunked_prefill") == "false"
    assert o.get("eplb_config.window_size") == "10" and o.get("eplb_config.num_redundant_experts") == "2"
    assert o.field("max_num_batched_tokens", "x") == "spec.decode.tuning.maxNumBatchedTokens"
    assert o.field("enable_chunked_prefill", "x") == "spec.decode.extraArgs[0]"
    assert o.field("eplb_config.num_redundant_experts", "x") == "spec.decode.extraArgs[1]"


def test_every_rule_cites_vllm_source():
    assert all(r.source.startswith("vllm/config/") for r in CONFIG_RULES)


@pytest.mark.parametrize(("name", "cr"), combos(), ids=[n for n, _ in combos()])
def test_generated_combinations_are_refused_at_a_field_or_planned(name, cr):
    """The unit fuzzer: every draw either plans or is refused at spec fields; a refusal of the engine
    configuration names the extraArgs item or tuning field that causes it, and planning is deterministic."""
    errors = _errors(cr)
    assert errors == _errors(copy.deepcopy(cr))
    for field, message in errors:
        assert field.startswith(("spec.prefill.", "spec.decode.")), (field, message)
        if "vLLM's" in message and "Config refuses" in message:
            assert ".extraArgs[" in field or ".tuning." in field, (field, message)


def test_the_draw_reaches_each_rule():
    """Guards the generator: the refusals it draws cover every rule (else the contract proves little)."""
    texts = " ".join(m for _, cr in combos() for _, m in _errors(cr))
    for words in ("with chunked prefill off", "--max-num-active-seqs", "--long-prefill-token-threshold",
                  "without --enable-eplb", "--decode-context-parallel-size", "needs expert parallelism"):
        assert words in texts, words
