"""`qdd import-recipe`: an srt-slurm recipe becomes a QwenDisaggDeployment (qdd.recipe, docs/facts/recipes.md)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qdd.recipe import RecipeError, import_recipe
from qdd.recipe.objects import import_objects
from qdd.render import to_yaml

from ..conftest import EXAMPLES, ROOT, load
from .helpers import flag, objects_of, plan_of

FIXTURE = Path(__file__).parent / "data" / "srt-slurm-qwen35-4xdep2-1xdep8.yaml"
IMAGE = "qdd/vllm:0.33.0-cu13-arm64"


@pytest.fixture
def recipe() -> dict:
    return copy.deepcopy(yaml.safe_load(FIXTURE.read_text()))


def imp(r: dict, name: str | None = None) -> dict:
    """The deployment; the benchmark section is checked too (import_objects)."""
    cr = import_objects(r, name=name, image=IMAGE).deployment
    assert cr == import_recipe(r, name=name, image=IMAGE)
    return cr


def errors(r: dict, name: str | None = None) -> list[tuple[str, str]]:
    """Every (recipe key, message) the import refuses ``r`` with."""
    with pytest.raises(RecipeError) as e:
        imp(r, name)
    assert str(e.value).splitlines() == [f"{k}: {m}" for k, m in e.value.errors]
    assert e.value.key == e.value.errors[0][0]
    return e.value.errors


def error_key(r: dict, name: str | None = None) -> str:
    """The one recipe key ``r`` is refused for (one problem, one error: no follow-on noise)."""
    found = errors(r, name)
    assert len(found) == 1, found
    return found[0][0]


def pods(cr: dict) -> list[tuple[str, tuple[str, ...], tuple]]:
    plan = plan_of(cr)
    return [(p.name, p.argv, p.env) for role in (plan.prefill, plan.decode) for p in role.pods]


def test_seed_recipe_imports_to_the_seed_example(recipe):
    example = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")
    cr = imp(recipe)
    assert cr["metadata"]["name"] == example["metadata"]["name"]
    assert cr["spec"]["workload"] == example["spec"]["workload"]
    assert cr["spec"]["prefill"]["topology"] == example["spec"]["prefill"]["topology"]
    assert cr["spec"]["decode"]["topology"] == example["spec"]["decode"]["topology"]
    assert cr["spec"]["prefill"]["endpoints"] == 4 and cr["spec"]["decode"]["endpoints"] == 1
    assert cr["spec"]["model"] == example["spec"]["model"]
    assert cr["spec"]["cluster"] == {"gpuType": "GB200"}
    assert "extraArgs" not in cr["spec"]["prefill"] and "extraEnv" not in cr["spec"]["decode"]
    # Same argv and env in every pod, and the same objects byte for byte.
    assert pods(cr) == pods(example)
    assert to_yaml(objects_of(cr)) == to_yaml(objects_of(example))


def test_cc5120_variant_keeps_the_recipe_capture_size(recipe):
    recipe["benchmark"]["concurrencies"] = "5120"
    recipe["backend"]["vllm_config"]["decode"]["max-cudagraph-capture-size"] = 768
    cr = imp(recipe, name="qwen35-397b-4xdep2-1xdep8-cc5120")
    assert cr["spec"]["decode"]["tuning"]["maxCudagraphCaptureSize"] == 768
    assert pods(cr) == pods(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml"))


@pytest.mark.parametrize(("given", "want"), [("64x128x4096", 4096), ([64, 2048, 512], 2048), (1024, 1024),
                                             ("5120", 5120)])
def test_workload_concurrency_is_the_highest_of_the_sweep(recipe, given, want):
    recipe["benchmark"]["concurrencies"] = given
    assert imp(recipe)["spec"]["workload"]["concurrency"] == want


def test_flags_qdd_owns_per_process_are_dropped(recipe):
    decode = recipe["backend"]["vllm_config"]["decode"]
    decode.update({"headless": True, "port": 8123, "data-parallel-size-local": 4, "data_parallel_start_rank": 4,
                   "data-parallel-address": "10.0.0.1", "data-parallel-rpc-port": 13345, "data-parallel-hybrid-lb": True})
    cr = imp(recipe)
    assert "extraArgs" not in cr["spec"]["decode"]
    assert pods(cr) == pods(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml"))


def test_other_flags_pass_through_to_extra_args(recipe):
    recipe["backend"]["vllm_config"]["decode"].update({
        "enable-eplb": True, "max_model_len": 10240, "compilation-config": {"mode": 3},
        "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}, "enforce-eager": False,
        "gpu-memory-utilization": 0.9, "all2all-backend": "flashinfer_nvlink_two_sided"})
    recipe["backend"]["vllm_config"]["prefill"]["speculative-config"] = '{"method": "qwen3_5_mtp"}'
    cr = imp(recipe)
    d = cr["spec"]["decode"]
    assert d["extraArgs"] == ["--enable-eplb", "--compilation-config", '{"mode":3}']
    assert cr["spec"]["workload"]["maxModelLen"] == 10240  # one context length, set once for both roles
    # MTP is one setting for both roles (the NIXL handshake compares it): it becomes spec.speculative
    assert cr["spec"]["speculative"] == {"method": "mtp", "numSpeculativeTokens": 1}
    assert d["tuning"]["gpuMemoryUtilization"] == 0.9 and d["tuning"]["all2allBackend"] == "flashinfer_nvlink_two_sided"
    plan = plan_of(cr)
    leader = plan.decode.pods[0].argv
    assert leader[-3:] == tuple(d["extraArgs"]) and flag(list(leader), "--gpu-memory-utilization") == "0.9"
    assert flag(list(leader), "--max-model-len") == "10240"
    for pod in plan.prefill.pods + plan.decode.pods:
        assert flag(list(pod.argv), "--speculative-config") == '{"method":"mtp","num_speculative_tokens":1}'


def test_speculative_config_on_one_role_only_is_refused(recipe):
    recipe["backend"]["vllm_config"]["decode"]["speculative-config"] = {"method": "mtp", "num_speculative_tokens": 1}
    with pytest.raises(RecipeError) as e:
        imp(recipe)
    assert e.value.key == "backend.vllm_config.decode.speculative-config"
    assert "decode only" in str(e.value)


def test_speculative_config_of_another_method_names_the_recipe_key(recipe):
    recipe["backend"]["vllm_config"]["decode"]["speculative-config"] = '{"method": "eagle3", "model": "x/y"}'
    with pytest.raises(RecipeError) as e:
        imp(recipe)
    keys = [k for k, _ in e.value.errors]
    assert "backend.vllm_config.decode.speculative-config.method" in keys
    assert "backend.vllm_config.decode.speculative-config.model" in keys


def test_environment_owned_and_dynamo_dropped_others_kept(recipe):
    env = recipe["backend"]["prefill_environment"]
    env.update({"NCCL_DEBUG": "WARN", "HF_TOKEN": "hf_secret", "VLLM_NIXL_SIDE_CHANNEL_PORT": 7000,
                "DYNAMO_FOO": "1", "VLLM_LOG_STATS_INTERVAL": 5})
    for role in ("prefill", "decode"):
        recipe["backend"][f"{role}_environment"]["UCX_TLS"] = "cuda_copy,cuda_ipc,tcp"
        recipe["backend"][f"{role}_environment"]["UCX_MEMTYPE_CACHE"] = "n"
    cr = imp(recipe)
    assert cr["spec"]["prefill"]["extraEnv"] == [{"name": "NCCL_DEBUG", "value": "WARN"},
                                                 {"name": "VLLM_LOG_STATS_INTERVAL", "value": "5"}]
    assert "extraEnv" not in cr["spec"]["decode"]
    assert cr["spec"]["kvTransfer"]["ucx"] == {"tls": "cuda_copy,cuda_ipc,tcp", "memtypeCache": False}
    env_of = {e.name: e.value for e in plan_of(cr).prefill.pods[0].env}
    assert env_of["UCX_TLS"] == "cuda_copy,cuda_ipc,tcp" and env_of["NCCL_DEBUG"] == "WARN"


def test_flags_left_out_keep_vllm_defaults_not_qdd_defaults(recipe):
    for role in ("prefill", "decode"):
        for k in ("language-model-only", "stream-interval", "mamba-ssm-cache-dtype"):
            recipe["backend"]["vllm_config"][role].pop(k)
    cr = imp(recipe)
    assert cr["spec"]["decode"]["tuning"] == {"languageModelOnly": False, "streamInterval": 1,
                                              "mambaSsmCacheDtype": "auto", "asyncScheduling": True}
    argv = list(plan_of(cr).decode.pods[0].argv)
    assert "--language-model-only" not in argv
    assert flag(argv, "--stream-interval") == "1" and flag(argv, "--mamba-ssm-cache-dtype") == "auto"
    for role in ("prefill", "decode"):
        recipe["backend"]["vllm_config"][role].pop("enable-expert-parallel")
    assert imp(recipe)["spec"]["decode"]["topology"]["expertParallel"] is False


def test_no_switches_set_tuning_false(recipe):
    p = recipe["backend"]["vllm_config"]["prefill"]
    del p["async-scheduling"], p["language-model-only"]
    p.update({"no-async-scheduling": True, "no-language-model-only": True})
    t = imp(recipe)["spec"]["prefill"]["tuning"]
    assert t["asyncScheduling"] is False and t["languageModelOnly"] is False


def test_sizes_derived_from_nodes_when_gpus_per_worker_and_dp_are_missing(recipe):
    del recipe["resources"]["gpus_per_prefill"], recipe["backend"]["vllm_config"]["prefill"]["data-parallel-size"]
    assert imp(recipe)["spec"]["prefill"]["topology"]["dataParallel"] == 2


def test_names(recipe):
    recipe["name"] = "4xDEP2_1xDEP8_cc5120"
    assert imp(recipe)["metadata"]["name"] == "qdd-4xdep2-1xdep8-cc5120"
    assert imp(recipe, name="mine")["metadata"]["name"] == "mine"
    recipe["name"] = "qwen35-397b-nvfp4-gb200-disagg-4xdep2-1xdep8"  # 44 characters: shortened (qdd.recipe.names)
    assert imp(recipe)["metadata"]["name"] == "qwen35-397b-4xdep2-1xdep8"
    recipe["name"] = "x" * 41  # one word: cannot drop one, so the start and a hash
    assert imp(recipe)["metadata"]["name"] == "x" * 31 + "-" + __import__("hashlib").sha256(b"x" * 41).hexdigest()[:8]
    assert error_key(recipe, name="Bad_Name") == "--name"


def _set(path: str, value):
    def mutate(r: dict) -> None:
        *head, last = path.split("/")
        node = r
        for part in head:
            node = node.setdefault(part, {})
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return mutate


_DELETE = object()
P = "backend/vllm_config/prefill/"
D = "backend/vllm_config/decode/"

BAD = {
    "unknown top-level key": (_set("sweep", {}), "sweep"),
    "unknown resources key": (_set("resources/gpus_per_agent", 4), "resources.gpus_per_agent"),
    "aggregated recipe": (_set("resources/agg_workers", 2), "resources.agg_workers"),
    "unsupported gpu": (_set("resources/gpu_type", "gb300"), "resources.gpu_type"),
    "gpus per worker vs DP": (_set("resources/gpus_per_decode", 4), "resources.gpus_per_decode"),
    "too few nodes": (_set("resources/decode_nodes", 1), "resources.decode_nodes"),
    "missing workers": (_set("resources/prefill_workers", _DELETE), "resources.prefill_workers"),
    "backend not vllm": (_set("backend/type", "sglang"), "backend.type"),
    "connector not nixl": (_set("backend/connector", "lmcache"), "backend.connector"),
    "kv connector not nixl": (_set(D + "kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1"}'),
                              "backend.vllm_config.decode.kv-transfer-config.kv_connector"),
    "kv config not json": (_set(D + "kv-transfer-config", "{nope"), "backend.vllm_config.decode.kv-transfer-config"),
    "no kv transfer": (_set(D + "kv-transfer-config", _DELETE), "backend.vllm_config.decode.kv-transfer-config"),
    "kv dtype differs": (_set(D + "kv-cache-dtype", "fp8"), "backend.vllm_config.decode.kv-cache-dtype"),
    "ssm dtype differs": (_set(D + "mamba-ssm-cache-dtype", "float32"), "backend.vllm_config.decode.mamba-ssm-cache-dtype"),
    "tp differs": (lambda r: r["backend"]["vllm_config"]["decode"].update({"tensor-parallel-size": 2,
                                                                           "data-parallel-size": 4}),
                   "backend.vllm_config.decode.tensor-parallel-size"),
    "served name differs": (_set(D + "served-model-name", "other"), "backend.vllm_config.decode.served-model-name"),
    "prefix caching on": (_set(P + "enable-prefix-caching", True), "backend.vllm_config.prefill.enable-prefix-caching"),
    "generation config": (_set(P + "generation-config", "auto"), "backend.vllm_config.prefill.generation-config"),
    "hybrid kv manager off": (_set(P + "disable-hybrid-kv-cache-manager", True),
                              "backend.vllm_config.prefill.disable-hybrid-kv-cache-manager"),
    "async on and off": (_set(P + "no-async-scheduling", True), "backend.vllm_config.prefill.no-async-scheduling"),
    "pipeline parallel": (_set(P + "pipeline-parallel-size", 2), "backend.vllm_config.prefill.pipeline-parallel-size"),
    "flag spelled twice": (_set(P + "max_num_batched_tokens", 8192), "backend.vllm_config.prefill.max_num_batched_tokens"),
    "owned flag without mapping": (_set(P + "config", "x.yaml"), "backend.vllm_config.prefill.config"),
    "bad integer": (_set(P + "max-num-batched-tokens", "lots"), "backend.vllm_config.prefill.max-num-batched-tokens"),
    "conv layout SD": (_set("backend/decode_environment/VLLM_SSM_CONV_STATE_LAYOUT", "SD"),
                       "backend.decode_environment.VLLM_SSM_CONV_STATE_LAYOUT"),
    "ucx on one role": (_set("backend/decode_environment/UCX_TLS", "tcp"), "backend.decode_environment.UCX_TLS"),
    "mmlu": (_set("benchmark", {"type": "mmlu", "num_examples": 200}), "benchmark.type"),
    "gsm8k-key": (_set("benchmark", {"type": "gsm8k", "num_problems": 1319}), "benchmark.num_problems"),
    "gsm8k-repeat": (_set("benchmark", {"type": "gsm8k", "repeat": 0}), "benchmark.repeat"),
    "missing isl": (_set("benchmark/isl", _DELETE), "benchmark.isl"),
    "ratio zero": (_set("benchmark/random_range_ratio", 0), "benchmark.random_range_ratio"),
    "srtslurm alias": (_set("model/path", "qwen35-397b-a17b-nvfp4"), "model.path"),
    "precision contradicts checkpoint": (_set("model/precision", "FP8"), "model.precision"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_recipe_names_the_key(recipe, case):
    mutate, key = BAD[case]
    mutate(recipe)
    assert error_key(recipe) == key


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qdd.cli", "import-recipe", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_cli_imports_and_refuses(tmp_path):
    ok = _cli(str(FIXTURE), "--name", "imported", "--image", IMAGE)
    assert ok.returncode == 0, ok.stderr
    docs = list(yaml.safe_load_all(ok.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("QwenDisaggDeployment", "imported"),
                                                                   ("QwenDisaggBenchmark", "imported")]
    assert docs[1]["spec"]["deploymentName"] == "imported"
    bad = tmp_path / "bad.yaml"
    bad.write_text(FIXTURE.read_text().replace('gpu_type: "gb200"', 'gpu_type: "mi300x"'))
    out = _cli(str(bad))
    assert out.returncode == 2 and "resources.gpu_type" in out.stderr and "Traceback" not in out.stderr


def test_every_bad_value_is_reported_with_its_recipe_key(recipe):
    recipe["backend"]["vllm_config"]["decode"]["max-num-seqs"] = "lots"
    recipe["benchmark"]["random_range_ratio"] = 2
    recipe["resources"]["gpu_type"] = "mi300x"
    found = dict(errors(recipe))
    assert set(found) == {"backend.vllm_config.decode.max-num-seqs", "benchmark.random_range_ratio",
                          "resources.gpu_type"}
    # The API's message, and the resource field it was about.
    assert "integer" in found["backend.vllm_config.decode.max-num-seqs"]
    assert "spec.decode.tuning.maxNumSeqs" in found["backend.vllm_config.decode.max-num-seqs"]
    assert "spec.workload.randomRangeRatio" in found["benchmark.random_range_ratio"]
    assert "GB200" in found["resources.gpu_type"]


def test_recipe_errors_and_api_errors_are_reported_together(recipe):
    recipe["sweep"] = {}
    recipe["resources"]["gpus_per_agent"] = 4
    recipe["model"]["revision"] = "main"
    recipe["backend"]["vllm_config"]["prefill"]["pipeline-parallel-size"] = 2
    recipe["backend"]["vllm_config"]["prefill"]["max-num-batched-tokens"] = 0
    # Differs from prefill: a cross-field rule, which the API checks only once every field is valid.
    recipe["backend"]["vllm_config"]["decode"]["kv-cache-dtype"] = "fp8"
    assert [k for k, _ in errors(recipe, name="Bad_Name")] == [
        "sweep", "model.revision", "resources.gpus_per_agent", "backend.vllm_config.prefill.pipeline-parallel-size",
        "--name", "backend.vllm_config.prefill.max-num-batched-tokens"]


def test_extra_args_refused_by_the_planner_name_their_flags(recipe):
    recipe["backend"]["vllm_config"]["decode"].update({"foo-bar": True, "config": "x.yaml", "block-size": 16})
    recipe["backend"]["decode_environment"]["VLLM_SSM_CONV_STATE_LAYOUT"] = "SD"
    keys = {k for k, _ in errors(recipe)}
    assert keys == {"backend.vllm_config.decode.foo-bar", "backend.vllm_config.decode.config",
                    "backend.vllm_config.decode", "backend.decode_environment.VLLM_SSM_CONV_STATE_LAYOUT"}


def test_flags_resolve_as_vllm_parses_them(recipe):
    p = recipe["backend"]["vllm_config"]["prefill"]
    del p["async-scheduling"], p["max-num-batched-tokens"]
    p.update({"async": True, "max_num_batched": 16384})
    assert imp(recipe)["spec"]["prefill"]["tuning"] == imp(yaml.safe_load(FIXTURE.read_text()))["spec"]["prefill"]["tuning"]
    p["max-num-batched-tokens"] = 8192
    assert error_key(recipe) == "backend.vllm_config.prefill.max-num-batched-tokens"


def test_a_field_both_roles_set_names_each_key(recipe):
    for role in ("prefill", "decode"):
        recipe["backend"]["vllm_config"][role]["kv-transfer-config"] = {"kv_connector": "NixlConnector",
                                                                        "kv_load_failure_policy": "never"}
    assert {k for k, _ in errors(recipe)} == {f"backend.vllm_config.{r}.kv-transfer-config.kv_load_failure_policy"
                                              for r in ("prefill", "decode")}


def test_recipe_error_keeps_the_one_error_form():
    e = RecipeError("resources.gpu_type", "bad")
    assert (e.key, e.errors, str(e)) == ("resources.gpu_type", [("resources.gpu_type", "bad")], "resources.gpu_type: bad")


def test_revision_lease_and_context_length_become_fields_set_once(recipe):
    for role in ("prefill", "decode"):
        cfg = recipe["backend"]["vllm_config"][role]
        cfg["revision"] = "0123abc"
        kv = cfg["kv-transfer-config"]
        kv = json.loads(kv) if isinstance(kv, str) else dict(kv)
        kv["kv_connector_extra_config"] = {**kv.get("kv_connector_extra_config", {}), "kv_lease_duration": 90}
        cfg["kv-transfer-config"] = kv
    cr = imp(recipe)
    assert cr["spec"]["model"]["revision"] == "0123abc" and cr["spec"]["kvTransfer"]["leaseSeconds"] == 90
    assert "--revision" not in " ".join(cr["spec"]["decode"].get("extraArgs", []))
