"""Pins the vLLM contract harness itself against vLLM 0.33.0's real parser and env registry.

One checker run (one vLLM import) serves the whole module: every argv is sent in a single
request, and the harness memoises identical requests.
"""

from __future__ import annotations

import json

import pytest

from .vllm_harness import check

MODEL = "nvidia/Qwen3.5-397B-A17B-NVFP4"
KV_CONSUMER = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_load_failure_policy":"fail"}'
KV_PRODUCER = '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_load_failure_policy":"fail"}'

# docs/facts/seed-recipe.md and docs/facts/vllm-flags.md: flags both roles carry.
COMMON = [
    "--served-model-name", "Qwen3.5-397B-A17B-NVFP4",
    "--tensor-parallel-size", "1",
    "--enable-expert-parallel",
    "--generation-config", "vllm",
    "--no-enable-prefix-caching",
    "--async-scheduling",
    "--stream-interval", "100",
    "--mamba-ssm-cache-dtype", "bfloat16",
    "--language-model-only",
]
DECODE_DP = [
    "--data-parallel-size", "8",
    "--data-parallel-size-local", "4",
    "--data-parallel-address", "10.0.0.1",
    "--data-parallel-rpc-port", "29550",
]
ARGVS = {
    # seed decode endpoint (DEP8 over 2 nodes), leader pod: DP ranks 0..3 + the API servers
    "decode-leader": [MODEL, *COMMON, *DECODE_DP, "--max-cudagraph-capture-size", "640",
                      "--kv-transfer-config", KV_CONSUMER],
    # the same endpoint's worker pod: DP ranks 4..7, no API server
    "decode-worker": [MODEL, *COMMON, *DECODE_DP, "--headless", "--data-parallel-start-rank", "4",
                      "--max-cudagraph-capture-size", "640", "--kv-transfer-config", KV_CONSUMER],
    # seed prefill endpoint (DEP2 on one node)
    "prefill": [MODEL, *COMMON, "--data-parallel-size", "2", "--max-num-batched-tokens", "16384",
                "--gdn-prefill-backend", "flashinfer", "--kv-transfer-config", KV_PRODUCER],
    "unknown-flag": [MODEL, "--tensor-parallel-size", "1", "--no-such-flag"],
    "bad-kv-role": [MODEL, "--kv-transfer-config",
                    '{"kv_connector":"NixlConnector","kv_role":"kv_decoder"}'],
    "bad-gdn-backend": [MODEL, "--gdn-prefill-backend", "auto"],
    "headless-with-api-servers": [MODEL, *DECODE_DP, "--headless", "--api-server-count", "1"],
    "headless-hybrid-lb": [MODEL, *DECODE_DP, "--headless", "--data-parallel-start-rank", "4",
                           "--data-parallel-hybrid-lb"],
    "local-larger-than-global": [MODEL, "--data-parallel-size", "8",
                                 "--data-parallel-size-local", "16"],
}
ENV = [
    "VLLM_SSM_CONV_STATE_LAYOUT",
    "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "VLLM_NIXL_SIDE_CHANNEL_PORT",
    "VLLM_LOGGING_COLOR",
    "VLLM_LOG_STATS_INTERVAL",
    "VLLM_SSM_CONV_STATE_LAYOT",  # misspelt on purpose
]
OPTIONS = [
    "--async-scheduling", "--no-async-scheduling", "--gdn-prefill-backend",
    "--language-model-only", "--mamba-ssm-cache-dtype", "--gpu-memory-utilization",
    "--max-cudagraph-capture-size", "--max-num-seqs", "--max-num-batched-tokens",
    "--stream-interval", "--no-enable-prefix-caching", "--all2all-backend", "--headless",
    "--data-parallel-start-rank", "--data-parallel-hybrid-lb", "--api-server-count",
    "--gdn-decode-backend-that-does-not-exist",
]


@pytest.fixture(scope="module")
def res():
    # One checker run (one vLLM import, ~8 s) for the parse, launch, env, option and
    # engine-config checks of the whole module.
    return check(ARGVS, ENV, options=OPTIONS, engine_config=True)


@pytest.fixture(scope="module")
def engine(res):
    # vLLM's config validation on a stand-in Qwen3.5-397B config on the CPU platform.
    return res["engine_config"]


def test_version_and_platform(res):
    assert res["vllm_version"] == "0.33.0"
    assert res["platform"] == "cpu"


def test_decode_leader_parses_with_the_right_values(res):
    r = res["argv"]["decode-leader"]
    assert r["ok"], r
    a = r["args"]
    assert a["model_tag"] == MODEL
    assert a["served_model_name"] == ["Qwen3.5-397B-A17B-NVFP4"]
    assert a["tensor_parallel_size"] == 1
    assert a["data_parallel_size"] == 8
    assert a["data_parallel_size_local"] == 4
    assert a["data_parallel_address"] == "10.0.0.1"
    assert a["data_parallel_rpc_port"] == 29550
    assert a["data_parallel_start_rank"] is None
    assert a["headless"] is False
    assert a["enable_expert_parallel"] is True
    assert a["generation_config"] == "vllm"
    assert a["enable_prefix_caching"] is False
    assert a["async_scheduling"] is True
    assert a["stream_interval"] == 100
    assert a["mamba_ssm_cache_dtype"] == "bfloat16"
    assert a["language_model_only"] is True
    assert a["max_cudagraph_capture_size"] == 640
    kv = a["kv_transfer_config"]
    assert {k: kv[k] for k in ("kv_connector", "kv_role", "kv_load_failure_policy")} == json.loads(
        KV_CONSUMER
    )
    # vLLM fills the rest; kv_buffer_device defaults to the platform's device type
    # (config/kv_transfer.py:kv_buffer_device_default_factory): "cpu" here, "cuda" on GPUs.
    assert kv["kv_buffer_device"] == "cpu"
    assert kv["kv_connector_extra_config"] == {}
    # internal load balancing: vLLM starts one API server per DP rank of the endpoint
    assert r["launch"] == {"mode": "multi_api_server", "api_server_count": 8}


def test_headless_worker_parses(res):
    r = res["argv"]["decode-worker"]
    assert r["ok"], r
    a = r["args"]
    assert a["headless"] is True
    assert a["data_parallel_start_rank"] == 4
    assert a["data_parallel_size_local"] == 4
    assert a["data_parallel_rank"] is None
    assert a["api_server_count"] is None
    assert r["launch"] == {"mode": "headless", "api_server_count": 0}


def test_prefill_parses(res):
    r = res["argv"]["prefill"]
    assert r["ok"], r
    assert r["args"]["max_num_batched_tokens"] == 16384
    assert r["args"]["gdn_prefill_backend"] == "flashinfer"
    assert r["args"]["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert r["launch"] == {"mode": "multi_api_server", "api_server_count": 2}


def test_unknown_flag_fails_naming_the_flag(res):
    r = res["argv"]["unknown-flag"]
    assert not r["ok"]
    assert r["stage"] == "parse"
    assert r["exit_code"] == 2
    assert "--no-such-flag" in r["error"]
    assert "unrecognized arguments" in r["error"]


def test_bad_kv_role_fails_at_parse(res):
    r = res["argv"]["bad-kv-role"]
    assert not r["ok"] and r["stage"] == "parse"
    assert "--kv-transfer-config" in r["error"]


def test_gdn_prefill_backend_has_no_auto_choice(res):
    r = res["argv"]["bad-gdn-backend"]
    assert not r["ok"] and r["stage"] == "parse"
    assert "invalid choice: 'auto'" in r["error"]


def test_cross_flag_error_of_vllm_serve(res):
    r = res["argv"]["headless-with-api-servers"]
    assert not r["ok"]
    assert r["stage"] == "launch"
    assert "--api-server-count=1 cannot be used with --headless" in r["error"]
    r = res["argv"]["headless-hybrid-lb"]
    assert not r["ok"] and r["stage"] == "launch"
    assert "data_parallel_hybrid_lb is not applicable in headless mode" in r["error"]


def test_env_names(res):
    assert res["unknown_env"] == ["VLLM_SSM_CONV_STATE_LAYOT"]


def test_env_values_are_validated_by_vllm():
    r = check({}, {
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.1",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
        "VLLM_LOGGING_COLOR": "0",
        "VLLM_KV_CACHE_LAYOUT": "hnd",  # choices are case-sensitive: HND
        "VLLM_NO_SUCH_THING": "1",
    })
    assert r["unknown_env"] == ["VLLM_NO_SUCH_THING"]
    v = r["env_values"]
    assert v["VLLM_SSM_CONV_STATE_LAYOUT"] == {"ok": True, "value": "DS"}
    assert v["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"ok": True, "value": "10.0.0.1"}
    assert v["VLLM_NIXL_SIDE_CHANNEL_PORT"] == {"ok": True, "value": 5600}
    assert v["VLLM_LOGGING_COLOR"] == {"ok": True, "value": "0"}
    assert not v["VLLM_KV_CACHE_LAYOUT"]["ok"]
    assert "Invalid value 'hnd'" in v["VLLM_KV_CACHE_LAYOUT"]["error"]
    assert "VLLM_NO_SUCH_THING" not in v


def test_flag_facts(res):
    o = res["options"]
    assert o["--async-scheduling"]["option_strings"] == ["--async-scheduling",
                                                         "--no-async-scheduling"]
    assert o["--async-scheduling"]["default"] is None  # None = decided by VllmConfig (auto-on)
    assert o["--gdn-prefill-backend"]["choices"] == [
        "flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl"]
    assert o["--gdn-prefill-backend"]["default"] is None
    assert o["--language-model-only"]["exists"] and not o["--language-model-only"]["takes_value"]
    assert o["--mamba-ssm-cache-dtype"]["choices"] == ["auto", "bfloat16", "float16", "float32"]
    assert o["--mamba-ssm-cache-dtype"]["default"] == "auto"
    assert o["--gpu-memory-utilization"]["default"] == 0.92
    assert o["--max-cudagraph-capture-size"]["default"] is None
    assert o["--max-num-seqs"]["default"] is None  # platform/usage defaults, see docs
    assert o["--max-num-batched-tokens"]["default"] is None
    assert o["--stream-interval"]["default"] == 1
    # accepted, but hidden: help shows --enable-prefix-caching / --disable-prefix-caching
    pc = o["--no-enable-prefix-caching"]
    assert pc["dest"] == "enable_prefix_caching" and pc["hidden"]
    assert pc["option_strings"] == ["--enable-prefix-caching", "--disable-prefix-caching"]
    assert "--no-enable-prefix-caching" in pc["all_option_strings"]
    assert o["--all2all-backend"]["default"] == "allgather_reducescatter"
    assert o["--api-server-count"]["default"] is None
    assert o["--gdn-decode-backend-that-does-not-exist"] == {"exists": False}


def test_engine_config_catches_cross_flag_errors(engine):
    assert engine["decode-leader"]["ok"], engine["decode-leader"]
    assert engine["decode-worker"]["ok"], engine["decode-worker"]
    assert engine["prefill"]["ok"], engine["prefill"]
    assert engine["decode-worker"]["parallel"]["data_parallel_rank"] == 4
    assert engine["decode-leader"]["parallel"]["data_parallel_master_ip"] == "10.0.0.1"
    assert engine["decode-leader"]["cache"]["mamba_ssm_cache_dtype"] == "bfloat16"
    assert engine["decode-leader"]["kv_transfer"]["kv_role"] == "kv_consumer"
    bad = engine["local-larger-than-global"]
    assert not bad["ok"]
    assert "data_parallel_size_local (16) must be <= data_parallel_size (8)" in bad["error"]
