"""qdd's table of `vllm serve` options is what vLLM 0.33.0's parser has, and qdd resolves an argv
token to the option vLLM's parser sets with it (qdd.catalog.vllm_options)."""

from __future__ import annotations

import json
import subprocess

import pytest

from qdd.catalog.vllm_options import TABLE_FILE, serve_options

from .vllm_harness import ROOT, _child_env, check, ensure_venv

# (argv tail after the model, tokens qdd must resolve in it): the spellings a user could slip past a
# check by long names only, each parsed by vLLM itself.
CASES: dict[str, list[str]] = {
    "async-prefix": ["--asy"],
    "async-negation-prefix": ["--no-async"],
    "headless-prefix": ["--head"],
    "api-server-count-short-prefix": ["-as", "2"],
    "tp-short-equals": ["-tp=2"],
    "dp-local-short": ["-dpl", "4"],
    "nnodes-attached": ["-n2"],
    "node-rank-attached": ["-r1"],
    "underscore": ["--max_num_seqs=64"],
    "underscore-prefix": ["--max_num_se", "64"],
    "prefix-caching-negation-prefix": ["--no-enable-prefix"],
    "expert-parallel-prefix": ["--enable-exp"],
    "dotted-json": ["--kv-transfer-config.kv_role", "kv_both"],
    "quantization-attached": ["-qfp8"],
    "block-size-prefix": ["--block-si", "32"],
    "optimization-level": ["-O3"],
    "hybrid-kv-manager-prefix": ["--disable-hybrid-kv"],
    "short-dotted": ["-dpb.x", "8"],
    "json-subkey": ["--compilation-config.max_cudagraph_capture_size", "8192"],
    "harmless": ["--enable-eplb"],
    "max-model-len": ["--max-model-len", "9216"],
}


@pytest.fixture(scope="module")
def parsed():
    argvs = {"base": ["m"], **{k: ["m", *v] for k, v in CASES.items()}}
    return check(argvs)["argv"]


def test_committed_table_is_what_vllms_parser_has():
    python = ensure_venv()
    out = subprocess.run([str(python), str(ROOT / "hack" / "gen_vllm_options.py")], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env=_child_env(), check=True).stdout
    committed = (ROOT / "operator" / "src" / "qdd" / "catalog" / "data" / TABLE_FILE).read_text()
    assert json.loads(out) == json.loads(committed), (
        "regenerate: .qdd/vllm-venv/bin/python hack/gen_vllm_options.py > operator/src/qdd/catalog/data/" + TABLE_FILE)
    assert json.loads(committed)["vllm_version"] == "0.33.0"


@pytest.mark.parametrize("case", list(CASES))
def test_qdd_resolves_a_token_to_the_option_vllm_sets(parsed, case):
    base, got = parsed["base"], parsed[case]
    assert got["ok"], got.get("error")
    changed = {k for k, v in got["args"].items() if v != base["args"].get(k)}
    table = serve_options()
    token = CASES[case][0]
    r = table.resolve(token)
    assert r is not None and not r.ambiguous
    [option] = r.options
    # vLLM changed exactly the dest qdd names (-O3 goes through optimization_level's own config).
    assert option.dest in changed, (token, option.dest, sorted(changed))
