"""Every argv qdd renders for every example parses, validates and launches with vLLM 0.33.0's own
CLI (the real parser, on CPU), and every env var name it sets exists in vLLM's env registry."""

from __future__ import annotations

import json

import pytest

from ..conftest import ALL_SEED_EXAMPLES, EXAMPLES, load
from ..unit.helpers import plan_of
from .vllm_harness import check

EXAMPLES_ALL = sorted(EXAMPLES.glob("*.yaml"))


def _argvs() -> tuple[dict[str, list[str]], set[str]]:
    argvs, env = {}, set()
    for path in EXAMPLES_ALL:
        plan = plan_of(load(path))
        for role in (plan.prefill, plan.decode):
            seen = set()
            for pod in role.pods:
                kind = (role.role, pod.group_role)
                if kind in seen:
                    continue  # endpoints of one role differ only in names
                seen.add(kind)
                argvs[f"{path.stem}/{role.role}-{pod.group_role}"] = list(pod.argv)
                env |= {e.name for e in pod.env if e.name.startswith("VLLM_")}
    return argvs, env


@pytest.fixture(scope="module")
def result():
    argvs, env = _argvs()
    return argvs, check(argvs, sorted(env))


def test_every_rendered_argv_is_accepted_by_vllm(result):
    argvs, res = result
    assert res["vllm_version"] == "0.33.0"
    assert len(argvs) >= 3 * len(ALL_SEED_EXAMPLES)
    bad = {k: v.get("error") for k, v in res["argv"].items() if not v["ok"]}
    assert not bad


def test_parsed_values_are_what_qdd_meant(result):
    _, res = result
    leader = res["argv"]["qwen35-397b-4xdep2-1xdep8-cc5120/decode-leader"]
    worker = res["argv"]["qwen35-397b-4xdep2-1xdep8-cc5120/decode-worker"]
    prefill = res["argv"]["qwen35-397b-4xdep2-1xdep8-cc5120/prefill-leader"]
    a = leader["args"]
    assert a["data_parallel_size"] == 8 and a["data_parallel_size_local"] == 4
    assert a["max_cudagraph_capture_size"] == 768 and a["max_num_seqs"] == 1024
    assert a["enable_prefix_caching"] is False and a["async_scheduling"] is True
    assert a["mamba_ssm_cache_dtype"] == "bfloat16" and a["language_model_only"] is True
    kv = a["kv_transfer_config"]
    kv = json.loads(kv) if isinstance(kv, str) else kv
    assert kv["kv_role"] == "kv_consumer" and kv["kv_connector"] == "NixlConnector"
    w = worker["args"]
    assert w["headless"] is True and w["data_parallel_start_rank"] == 4
    assert w.get("data_parallel_rank") is None
    assert worker["launch"]["mode"] == "headless" and worker["launch"]["api_server_count"] == 0
    assert prefill["args"]["max_num_batched_tokens"] == 16384 and prefill["args"]["data_parallel_size"] == 2


def test_every_env_name_is_registered_in_vllm(result):
    _, res = result
    assert res["unknown_env"] == []


def test_an_unknown_flag_fails_the_contract():
    argvs, _ = _argvs()
    first = next(iter(argvs.values()))
    res = check({"bad": [*first, "--no-such-flag"], "badenv": first}, ["VLLM_NO_SUCH_VARIABLE"])
    assert res["argv"]["bad"]["ok"] is False
    assert "--no-such-flag" in res["argv"]["bad"]["error"]
    assert res["unknown_env"] == ["VLLM_NO_SUCH_VARIABLE"]


def test_revision_lease_and_kv_dtype_parse_as_vllm_reads_them():
    """The flags issue #11 added, read back by vLLM 0.33.0's own parser on a decode leader."""
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml")
    cr["spec"]["model"]["revision"] = "main"
    cr["spec"]["kvTransfer"] = {"leaseSeconds": 300}
    leader = next(p for p in plan_of(cr).decode.pods if p.group_role == "leader")
    res = check({"leader": list(leader.argv)})["argv"]["leader"]
    assert res["ok"], res.get("error")
    a = res["args"]
    assert a["revision"] == "main" and a["tokenizer_revision"] == "main" and a["kv_cache_dtype"] == "fp8"
    kv = a["kv_transfer_config"]
    kv = json.loads(kv) if isinstance(kv, str) else kv
    assert kv["kv_connector_extra_config"]["kv_lease_duration"] == 300 and kv["kv_load_failure_policy"] == "fail"
