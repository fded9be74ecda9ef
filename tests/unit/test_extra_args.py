"""extraArgs/extraEnv may add to what qdd renders, never contradict it (qdd.plan.args)."""

from __future__ import annotations

import pytest

from qdd.errors import SpecError
from qdd.plan.args import OWNED_FLAGS, owned_flag

from .helpers import plan_of


@pytest.mark.parametrize(("arg", "owned"), [
    ("--max-num-seqs", "max-num-seqs"), ("--max-num-seqs=5", "max-num-seqs"), ("--max_num_seqs", "max-num-seqs"),
    ("--no-async-scheduling", "async-scheduling"), ("--enable-prefix-caching", "enable-prefix-caching"),
    ("--data-parallel-rank 3", "data-parallel-rank"), ("-tp", "tensor-parallel-size"), ("-dpl=4", "data-parallel-size-local"),
    ("-dpn", "data-parallel-rank"), ("-dpr", "data-parallel-start-rank"), ("-asc", "api-server-count"),
    ("--kv-transfer-config.kv_role", "kv-transfer-config"), ("--max-num-seq", "max-num-seqs"),
    ("--headless", "headless"), ("--model", "model"), ("--config", "config"), ("--port=9000", "port"),
    ("--all2all", "all2all-backend"),
    # Pipeline and prefill-context parallelism multiply an endpoint's ranks beyond the GPUs qdd gives its pods.
    ("-pp", "pipeline-parallel-size"), ("--pipeline-parallel-size=2", "pipeline-parallel-size"),
    ("-pcp", "prefill-context-parallel-size"),
])
def test_owned_flags_are_seen_through_every_spelling(arg, owned):
    assert owned_flag(arg) == owned


@pytest.mark.parametrize("arg", ["--enable-eplb", "--max-logprobs", "-dcp", "--dp", "3", "",
                                 '{"max_cudagraph_capture_size": 64}', "--eplb-config.window_size", "--no-enable-eplb"])
def test_other_arguments_are_not_owned(arg):
    assert owned_flag(arg) is None


def test_every_owned_flag_says_what_to_set_instead():
    assert all(w.startswith(("spec.", "tuning.", "topology.", "(")) for w in OWNED_FLAGS.values())


def _errors(cr) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    return [(x.field, x.message) for x in e.value.errors]


def test_owned_flag_error_points_to_the_field(seed_cr):
    seed_cr["spec"]["decode"]["extraArgs"] = ["--enable-eplb", "--max-num-seqs=5", "-dp", "4"]
    assert _errors(seed_cr) == [
        ("spec.decode.extraArgs[1]", "--max-num-seqs is owned by qdd; set spec.decode.tuning.maxNumSeqs instead"),
        ("spec.decode.extraArgs[2]", "-dp sets --data-parallel-size, which is owned by qdd; "
                                     "set spec.decode.topology.dataParallel instead")]


def test_flag_and_value_in_one_element_is_refused(seed_cr):
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--max-logprobs 10"]
    [(field, msg)] = _errors(seed_cr)
    assert field == "spec.prefill.extraArgs[0]" and "two list items" in msg


@pytest.mark.parametrize(("env", "field"), [
    ([{"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "SD"}], "spec.prefill.extraEnv[0].name"),
    ([{"name": "VLLM_LOGGING_COLOR", "value": "1"}], "spec.prefill.extraEnv[0].name"),
    ([{"name": "UCX_TLS", "value": "tcp"}], "spec.prefill.extraEnv[0].name"),
    ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "spec.prefill.extraEnv[1].name"),
    ([{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}], "spec.prefill.extraEnv[0]"),
])
def test_extra_env_that_would_contradict_or_duplicate_is_refused(seed_cr, env, field):
    seed_cr["spec"]["prefill"]["extraEnv"] = env
    assert [f for f, _ in _errors(seed_cr)] == [field]


def test_extra_args_and_env_are_appended_in_order(seed_cr):
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--enable-eplb", "--max-logprobs", "10"]
    seed_cr["spec"]["prefill"]["extraEnv"] = [{"name": "NCCL_DEBUG", "value": "WARN"},
                                              {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    pod = plan_of(seed_cr).prefill.pods[0]
    assert pod.argv[-3:] == ("--enable-eplb", "--max-logprobs", "10")
    assert [e.to_k8s() for e in pod.env[-2:]] == [
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert len({e.name for e in pod.env}) == len(pod.env)


def test_gdn_prefill_backend_auto_is_the_flag_left_out(seed_cr):
    """vLLM 0.33's parser has no 'auto' choice for --gdn-prefill-backend (it exits 2 on it)."""
    seed_cr["spec"]["prefill"]["tuning"] = {"gdnPrefillBackend": "auto"}
    assert "--gdn-prefill-backend" not in plan_of(seed_cr).prefill.pods[0].argv
    seed_cr["spec"]["prefill"]["tuning"] = {"gdnPrefillBackend": "flashinfer"}
    assert plan_of(seed_cr).prefill.pods[0].argv[-4:-2] == ("--gdn-prefill-backend", "flashinfer")


def test_must_match_flags_must_be_equal_on_both_roles(seed_cr):
    from qdd.errors import SpecError

    from .helpers import plan_of

    seed_cr["spec"]["prefill"]["extraArgs"] = ["--block-size", "2128"]
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert str(e.value) == ("spec.decode.extraArgs: --block-size is 2128 on prefill and unset on decode; prefill and "
                            "decode must agree on it for the KV transfer (give it to both roles, equal)")
    seed_cr["spec"]["decode"]["extraArgs"] = ["--block-size=2128"]
    assert "--block-size=2128" in plan_of(seed_cr).decode.pods[0].argv


def test_hybrid_kv_cache_manager_cannot_be_disabled(seed_cr):
    from qdd.errors import SpecError

    from .helpers import plan_of

    seed_cr["spec"]["decode"]["extraArgs"] = ["--disable-hybrid-kv-cache-manager"]
    with pytest.raises(SpecError, match=r"spec.decode.extraArgs\[0\]: --disable-hybrid-kv-cache-manager is owned"):
        plan_of(seed_cr)


def test_deployment_larger_than_one_nvlink_domain_is_refused(seed_cr):
    from qdd.errors import SpecError

    from .helpers import plan_of

    seed_cr["spec"]["prefill"]["endpoints"] = 29  # 58 + 8 = 66 GPUs fit 72
    assert plan_of(seed_cr).gpus == 66
    seed_cr["spec"]["prefill"]["endpoints"] = 33  # 66 + 8 = 74 GPUs do not
    with pytest.raises(SpecError, match=r"spec.prefill.endpoints: 74 GPUs \(66 prefill \+ 8 decode\) do not fit one "
                                        r"NVLink domain of 18 × 4 = 72 GB200 GPUs"):
        plan_of(seed_cr)
    seed_cr["spec"]["cluster"]["sameNVLinkDomain"] = False
    assert plan_of(seed_cr).gpus == 74


def test_context_longer_than_the_model_is_refused(seed_cr):
    from qdd.errors import SpecError

    from .helpers import plan_of

    seed_cr["spec"]["workload"].update(isl=262144, osl=1024, concurrency=8)
    with pytest.raises(SpecError, match=r"spec.workload.osl: isl \+ osl = 263168 tokens exceeds the model's context of 262144"):
        plan_of(seed_cr)


@pytest.mark.parametrize(("arg", "owned"), [
    ("--asy", "async-scheduling"), ("--no-async", "async-scheduling"), ("--head", "headless"),
    ("-as", "api-server-count"), ("-n2", "nnodes"), ("-r1", "node-rank"), ("--disable-exp", "enable-expert-parallel"),
    ("--no-enable-prefix", "enable-prefix-caching"), ("--disable-prefix-caching", "enable-prefix-caching"),
    ("--disable-hybrid-kv", "disable-hybrid-kv-cache-manager"), ("--kv_transfer_config.kv_role", "kv-transfer-config"),
    ("--data-parallel-backend=ray", "data-parallel-backend"),
])
def test_abbreviations_and_aliases_vllm_accepts_are_owned(arg, owned):
    """Spellings vLLM 0.33.0's parser maps to an owned option (tests/contract/test_vllm_options.py
    proves the parser does) are refused like the long name."""
    assert owned_flag(arg) == owned


def test_async_scheduling_prefix_is_refused_on_the_old_profile(seed_cr):
    seed_cr["spec"]["engine"]["vllmVersion"] = "0.23.0"
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--asy"]
    assert _errors(seed_cr) == [("spec.prefill.extraArgs[0]", "--asy sets --async-scheduling, which is owned by qdd; "
                                                              "set spec.prefill.tuning.asyncScheduling instead")]


def test_headless_prefix_on_a_leader_is_refused(seed_cr):
    seed_cr["spec"]["decode"]["extraArgs"] = ["--head"]
    assert _errors(seed_cr) == [("spec.decode.extraArgs[0]", "--head sets --headless, which is owned by qdd; "
                                                             "remove it (owned: set on worker pods)")]


@pytest.mark.parametrize(("args", "message"), [
    (["--max-num"], "--max-num is ambiguous in vLLM 0.33.0's parser, which refuses it (--max-num-active-seqs"),
    (["--enable-eplb", "true"], "'true' is neither an option nor the value of the one before it"),
    (["--max-logprobs"], "--max-logprobs needs a value"),
    (["--enable-lo"], "--enable-lo is ambiguous in vLLM 0.33.0's parser"),
    (["--not-a-flag"], "--not-a-flag is not a `vllm serve` option of vLLM 0.33.0"),
    (["--"], "'--' would end vLLM's options"),
])
def test_ambiguous_unknown_and_end_of_options_are_refused(seed_cr, args, message):
    seed_cr["spec"]["prefill"]["extraArgs"] = args
    [(field, msg)] = _errors(seed_cr)
    assert field.startswith("spec.prefill.extraArgs[") and message in msg


@pytest.mark.parametrize(("prefill", "decode"), [
    (["--block-size", "32"], ["--block_size=64"]),
    (["-q", "fp8"], ["--quantization", "modelopt_fp4"]),
    (["--block-si", "32"], []),
    (["--tokenizer=a/b"], ["--tokenizer", "c/d"]),
    # dotted JSON keys are merged into the option's value as vLLM's parser merges them
    (["--hf-overrides.num_hidden_layers", "1"], ["--hf-overrides.num_hidden_layers", "2"]),
    (["--hf-overrides.a=1"], ["--hf-overrides.b=1"]),
    (["--attention-config.backend", "FLASHINFER"], []),
])
def test_must_match_flags_compare_by_the_option_whatever_the_spelling(seed_cr, prefill, decode):
    seed_cr["spec"]["prefill"]["extraArgs"] = prefill
    seed_cr["spec"]["decode"]["extraArgs"] = decode
    [(field, msg)] = _errors(seed_cr)
    assert field == "spec.decode.extraArgs" and "on prefill and" in msg


def test_must_match_flags_spelled_differently_but_equal_pass(seed_cr):
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--block-size", "32"]
    seed_cr["spec"]["decode"]["extraArgs"] = ["--block_size=32"]
    assert plan_of(seed_cr).decode.pods[0].argv[-1] == "--block_size=32"


def test_all2all_backend_must_be_one_vllm_has(seed_cr):
    seed_cr["spec"]["decode"]["tuning"] = {"all2allBackend": "bogus"}
    [(field, msg)] = _errors(seed_cr)
    assert field == "spec.decode.tuning.all2allBackend" and msg.startswith("'bogus' is not an --all2all-backend of vLLM 0.33.0")
    seed_cr["spec"]["decode"]["tuning"] = {"all2allBackend": "flashinfer_nvlink_one_sided"}
    assert plan_of(seed_cr).decode.pods[0].argv[-4:-2] == ("--all2all-backend", "flashinfer_nvlink_one_sided")


def test_must_match_dotted_and_json_spellings_of_one_value_agree(seed_cr):
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--hf-overrides.a", "1"]
    seed_cr["spec"]["decode"]["extraArgs"] = ["--hf-overrides", '{"a": 1}']
    assert plan_of(seed_cr).decode.pods[0].argv[-1] == '{"a": 1}'


@pytest.mark.parametrize(("arg", "value", "field"), [
    ("--compilation-config.max_cudagraph_capture_size", "8192", "tuning.maxCudagraphCaptureSize"),
    ("-cc", '{"cudagraph_capture_sizes": [1, 2]}', "tuning.maxCudagraphCaptureSize"),
    ("--additional-config.gdn_prefill_backend", "triton", "tuning.gdnPrefillBackend"),
])
def test_owned_settings_inside_json_options_are_refused(seed_cr, arg, value, field):
    seed_cr["spec"]["decode"]["extraArgs"] = [arg, value]
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.decode.extraArgs[0]" and f"spec.decode.{field}" in msg


@pytest.mark.parametrize("arg", ["-dpa.x=evil", "-dpb.x"])
def test_single_dash_dotted_aliases_of_owned_flags_are_refused_on_every_profile(seed_cr, arg):
    seed_cr["spec"]["engine"]["vllmVersion"] = "0.23.0"
    seed_cr["spec"]["decode"]["tuning"] = {"asyncScheduling": False}
    seed_cr["spec"]["prefill"]["tuning"] = {"asyncScheduling": False}
    seed_cr["spec"]["decode"]["extraArgs"] = [arg, "8"] if "=" not in arg else [arg]
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.decode.extraArgs[0]" and "owned by qdd" in msg


def test_kv_cache_dtype_is_resolved_and_rendered_on_every_pod(seed_cr):
    """Never `auto`: the seed's NVFP4 checkpoint declares FP8 KV, which vLLM 0.33 would pick silently."""
    plan = plan_of(seed_cr)
    assert plan.kv_cache_dtype == "fp8" and plan.kv_cache_dtype_source.startswith("checkpoint: ModelOpt NVFP4")
    assert {p.argv[p.argv.index("--kv-cache-dtype") + 1] for p in plan.prefill.pods + plan.decode.pods} == {"fp8"}
    seed_cr["spec"]["prefill"]["tuning"] = {"kvCacheDtype": "bfloat16"}
    seed_cr["spec"]["decode"]["tuning"] = {"kvCacheDtype": "bfloat16"}
    seed_cr["spec"]["workload"]["concurrency"] = 2048  # twice the bytes per token: about 2,860 fit one DEP8
    plan = plan_of(seed_cr)
    assert plan.kv_cache_dtype == "bfloat16" and plan.capacity.layout.kv_dtype == "bfloat16"
    assert plan.kv_cache_dtype_source == "spec.{prefill,decode}.tuning.kvCacheDtype"


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"kvTransfer": {"loadFailurePolicy": "recompute"}}, "spec.kvTransfer.loadFailurePolicy", "vllm#49250"),
    ({"prefill": {"tuning": {"kvCacheDtype": "nvfp4"}}, "decode": {"tuning": {"kvCacheDtype": "nvfp4"}}},
     "spec.decode.tuning.kvCacheDtype", "vllm#55673"),
    ({"prefill": {"tuning": {"kvCacheDtype": "nvfp4"}}}, "spec.prefill.tuning.kvCacheDtype", "vllm#55673"),
])
def test_silent_wrong_output_settings_are_refused(seed_cr, spec, field, words):
    """Each refusal names the role the user set it on, and why."""
    for k, v in spec.items():
        for kk, vv in v.items():
            seed_cr["spec"].setdefault(k, {})[kk] = vv
    errors = dict(_errors(seed_cr))
    assert field in errors and words in errors[field]


def test_rule_messages_say_what_the_spec_has(seed_cr):
    seed_cr["spec"]["prefill"]["tuning"] = {"kvCacheDtype": "bfloat16"}
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.decode.tuning.kvCacheDtype" and msg.endswith("(prefill bfloat16, decode auto)")
    seed_cr["spec"]["prefill"]["tuning"] = {}
    seed_cr["spec"]["workload"]["maxModelLen"] = 4096
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.workload.maxModelLen" and msg.endswith("(maxModelLen 4096, isl + osl = 9216)")


def test_lease_and_revision_are_rendered_identically_on_every_pod(seed_cr):
    import json

    seed_cr["spec"]["kvTransfer"] = {"leaseSeconds": 300}
    seed_cr["spec"]["model"]["revision"] = "0123abc"
    plan = plan_of(seed_cr)
    for pod in plan.prefill.pods + plan.decode.pods:
        kv = json.loads(pod.argv[pod.argv.index("--kv-transfer-config") + 1])
        assert kv["kv_connector_extra_config"]["kv_lease_duration"] == 300 and kv["kv_load_failure_policy"] == "fail"
        assert pod.argv[pod.argv.index("--revision") + 1] == pod.argv[pod.argv.index("--tokenizer-revision") + 1] == "0123abc"
    assert not [w for w in plan.warnings if "revision" in w]
    seed_cr["spec"]["model"].pop("revision")
    assert [w for w in plan_of(seed_cr).warnings if "spec.model.revision is unset" in w]
    seed_cr["spec"]["decode"]["extraArgs"] = ["--revision", "x"]
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.decode.extraArgs[0]" and "set spec.model.revision instead" in msg


def test_one_context_length_on_both_roles(seed_cr):
    plan = plan_of(seed_cr)  # isl 8192 + osl 1024
    assert {p.argv[p.argv.index("--max-model-len") + 1] for p in plan.prefill.pods + plan.decode.pods} == {"9216"}
    seed_cr["spec"]["workload"]["maxModelLen"] = 16384
    plan = plan_of(seed_cr)
    assert {p.argv[p.argv.index("--max-model-len") + 1] for p in plan.prefill.pods + plan.decode.pods} == {"16384"}
    seed_cr["spec"]["workload"]["maxModelLen"] = 9000
    assert [f for f, _ in _errors(seed_cr)] == ["spec.workload.maxModelLen"]
    seed_cr["spec"]["workload"].pop("maxModelLen")
    seed_cr["spec"]["prefill"]["extraArgs"] = ["--max-model-len", "4096"]
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.prefill.extraArgs[0]" and "spec.workload.maxModelLen" in msg


def test_api_server_count_is_explicit_on_every_http_pod_and_absent_on_headless_ones(seed_cr):
    plan = plan_of(seed_cr)
    counts = {(p.role, p.group_role): (p.argv[p.argv.index("--api-server-count") + 1] if "--api-server-count" in p.argv
                                       else None) for p in plan.prefill.pods + plan.decode.pods}
    assert counts == {("prefill", "leader"): "2", ("decode", "leader"): "8", ("decode", "worker"): None}
    seed_cr["spec"]["decode"]["tuning"] = {"apiServerCount": 1}
    assert next(p.argv[p.argv.index("--api-server-count") + 1] for p in plan_of(seed_cr).decode.pods
                       if p.group_role == "leader") == "1"


def test_engine_temporary_files_on_a_node_local_volume_and_no_fixed_metrics_dir(seed_cr):
    from .helpers import engine_pod_specs, objects_of

    for _, _, spec in engine_pod_specs(objects_of(seed_cr)):
        assert {"name": "tmp", "mountPath": "/tmp"} in spec["containers"][0]["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
    seed_cr["spec"]["decode"]["extraEnv"] = [{"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/metrics"}]
    [(f, msg)] = _errors(seed_cr)
    assert f == "spec.decode.extraEnv[0].name" and "stale metrics" in msg
