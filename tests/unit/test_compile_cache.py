"""spec.engine.compileCache: the engines' compilation and JIT caches on a volume, in a folder keyed by
everything that invalidates them (qdd.plan.compile_cache); the key in `qdd plan` and status.plan."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qdd.api.spec import QwenDisaggDeploymentSpec
from qdd.controller.status import Observed, _plan_status
from qdd.errors import SpecError
from qdd.plan.compile_cache import CACHE_ENV, checkpoint_identity, compile_cache_key
from qdd.plan.summary import summary
from qdd.plan.types import Plan

from .helpers import engine_pod_specs, env_of, objects_of, plan_of


@pytest.fixture
def cached_cr(seed_cr: dict[str, Any]) -> dict[str, Any]:
    cr = copy.deepcopy(seed_cr)
    cr["spec"]["engine"]["compileCache"] = {"claimName": "qwen-compile-cache", "subPath": "qdd"}
    return cr


def _key(cr: dict[str, Any], role: str = "prefill", slot: str = "a") -> str:
    key = plan_of(cr, slot).role(role).compile_cache_key
    assert key is not None and len(key) == 16 and int(key, 16) >= 0
    return key


def test_every_engine_pod_gets_the_cache_variables_and_the_volume(cached_cr):
    plan = plan_of(cached_cr)
    pods = engine_pod_specs(objects_of(cached_cr))
    assert {role for role, _, _ in pods} == {"prefill", "decode"}
    for role, _, spec in pods:
        key = plan.role(role).compile_cache_key
        c = spec["containers"][0]
        env = env_of(c)
        assert {n: env[n] for n in (*CACHE_ENV, "VLLM_ENABLE_STARTUP_PLAN")} == {
            "VLLM_CACHE_ROOT": f"/compile-cache/{key}/vllm",
            "TRITON_CACHE_DIR": f"/compile-cache/{key}/triton",
            "FLASHINFER_WORKSPACE_BASE": f"/compile-cache/{key}/flashinfer",
            "DG_JIT_CACHE_DIR": f"/compile-cache/{key}/deep_gemm",
            "VLLM_ENABLE_STARTUP_PLAN": "1",
        }
        assert {"name": "compile-cache", "mountPath": "/compile-cache", "subPath": "qdd"} in c["volumeMounts"]
        assert {"name": "compile-cache", "persistentVolumeClaim": {"claimName": "qwen-compile-cache"}} in spec["volumes"]


def test_without_the_field_nothing_is_rendered(seed_cr):
    plan = plan_of(seed_cr)
    assert plan.prefill.compile_cache_key is None and plan.decode.compile_cache_key is None
    for _, _, spec in engine_pod_specs(objects_of(seed_cr)):
        c = spec["containers"][0]
        assert not set(env_of(c)) & {*CACHE_ENV, "VLLM_ENABLE_STARTUP_PLAN"}
        assert all(v["name"] != "compile-cache" for v in spec["volumes"])
    assert "compileCache" not in summary(plan)["prefill"]
    assert "prefillCompileCacheKey" not in _status(plan)


def test_prefill_and_decode_have_keys_of_their_own_shared_by_their_endpoints(cached_cr):
    plan = plan_of(cached_cr)
    assert plan.prefill.compile_cache_key != plan.decode.compile_cache_key
    for r in (plan.prefill, plan.decode):
        roots = {dict((e.name, e.value) for e in p.env)["VLLM_CACHE_ROOT"] for p in r.pods}
        assert roots == {f"/compile-cache/{r.compile_cache_key}/vllm"}, "one folder for every pod of a role"


def _status(plan: Plan) -> dict[str, Any]:
    return _plan_status(plan, plan.name, plan.namespace, None, Observed(children={}, groups=[]))["plan"]


def test_the_key_is_in_qdd_plan_and_in_status_plan(cached_cr):
    plan = plan_of(cached_cr)
    s = summary(plan)
    for r in (plan.prefill, plan.decode):
        assert s[r.role]["compileCache"] == {"key": r.compile_cache_key, "path": f"/compile-cache/{r.compile_cache_key}"}
    st = _status(plan)
    assert st["prefillCompileCacheKey"] == plan.prefill.compile_cache_key
    assert st["decodeCompileCacheKey"] == plan.decode.compile_cache_key


def _set(cr: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    cr = copy.deepcopy(cr)
    *parents, last = path.split(".")
    node = cr
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return cr


@pytest.mark.parametrize(("path", "value"), [
    ("spec.engine.image", "qdd/vllm:0.33.0-cu13-arm64-rebuilt"),
    ("spec.model.revision", "0123456789abcdef0123456789abcdef01234567"),
    ("spec.model.quantization", "nvfp4"),
    ("spec.model.loadFormat", "fastsafetensors"),
    ("spec.prefill.topology.dataParallel", 4),
    ("spec.prefill.tuning.maxNumBatchedTokens", 8192),
    ("spec.prefill.tuning.mambaSsmCacheDtype", "float16"),
    ("spec.decode.tuning.mambaSsmCacheDtype", "float16"),
    ("spec.prefill.extraArgs", ["--max-logprobs", "5"]),
    ("spec.prefill.extraEnv", [{"name": "VLLM_USE_DEEP_GEMM", "value": "0"}]),
])
def test_the_key_changes_with_each_input_that_invalidates_the_cache(cached_cr, path, value):
    cr = cached_cr
    if path.endswith("mambaSsmCacheDtype"):  # must match: set on both roles
        cr = _set(cr, path.replace("prefill", "decode") if "prefill" in path else path.replace("decode", "prefill"), value)
    assert _key(_set(cr, path, value)) != _key(cached_cr)


@pytest.mark.parametrize(("path", "value"), [
    ("spec.prefill.endpoints", 6),
    ("metadata.name", "another-deployment"),
    ("metadata.namespace", "elsewhere"),
    ("spec.ports.http", 8100),
    ("spec.ports.dataParallelRpc", 29600),
    ("spec.kvTransfer.sideChannelPort", 5700),
    ("spec.kvTransfer.ucx.tls", "cuda_ipc,cuda_copy,tcp"),
    ("spec.router.replicas", 2),
    ("spec.cluster.startupTimeoutSeconds", 1800),
    ("spec.engine.compileCache", {"claimName": "another-claim"}),
    ("spec.prefill.tuning.kvCacheDtype", "fp8"),  # what auto resolves to for this checkpoint: the same argv
    ("spec.decode.tuning.maxNumSeqs", 1024),  # decode only
])
def test_the_key_stays_equal_when_nothing_that_invalidates_the_cache_changes(cached_cr, path, value):
    cr = _set(cached_cr, path, value)
    if path.endswith("kvCacheDtype"):
        cr = _set(cr, "spec.decode.tuning.kvCacheDtype", value)
    assert _key(cr) == _key(cached_cr)
    assert _key(cached_cr, slot="b") == _key(cached_cr)


DIGEST_A, DIGEST_B = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32


def _checkpoint(cr: dict[str, Any], sub_path: str | None = "Qwen3.5-397B-A17B-NVFP4", claim: str = "models",
                digest: str | None = None) -> dict[str, Any]:
    cr = _set(cr, "spec.model.source", {"pvc": {"claimName": claim, **({"subPath": sub_path} if sub_path else {})}})
    return _set(cr, "spec.model.cache", {"digest": digest}) if digest else cr


def test_the_checkpoint_identity_is_what_is_set(seed_cr, cached_cr):
    assert checkpoint_identity(plan_of(seed_cr).spec) == {}, "no claim, no digest: the key as before"
    assert checkpoint_identity(plan_of(_checkpoint(cached_cr, digest=DIGEST_A)).spec) == {
        "claimName": "models", "subPath": "Qwen3.5-397B-A17B-NVFP4", "digest": DIGEST_A}
    assert checkpoint_identity(plan_of(_checkpoint(cached_cr, sub_path=None)).spec) == {"claimName": "models"}


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_another_checkpoint_of_the_same_model_name_gets_another_key(cached_cr, role):
    """Another subPath of one volume, another claim, other bytes (digest): other compiled artefacts."""
    base = _key(_checkpoint(cached_cr), role)
    assert _key(_checkpoint(cached_cr), role) == base, "the same checkpoint: the same key"
    others = {
        "subPath": _key(_checkpoint(cached_cr, sub_path="Qwen3.5-397B-A17B-NVFP4-rev2"), role),
        "no subPath": _key(_checkpoint(cached_cr, sub_path=None), role),
        "claim": _key(_checkpoint(cached_cr, claim="models-eu"), role),
    }
    assert base not in others.values() and len(set(others.values())) == 3
    a, b = _key(_checkpoint(cached_cr, digest=DIGEST_A), role), _key(_checkpoint(cached_cr, digest=DIGEST_B), role)
    assert a != b, "same claim and subPath, other bytes"
    assert _key(_checkpoint(cached_cr, digest=DIGEST_A), role) == a
    # what does not tell checkpoints apart keeps it: the trays to prefetch to, the compile-cache claim
    assert _key(_set(_checkpoint(cached_cr, digest=DIGEST_A), "spec.model.cache.nodeSelector",
                     {"example.com/nvme": "true"}), role) == a
    assert _key(_set(_checkpoint(cached_cr, digest=DIGEST_A), "spec.engine.compileCache",
                     {"claimName": "another-claim", "subPath": "x"}), role) == a


def test_the_key_of_another_digest_is_in_status_and_qdd_plan(cached_cr):
    plans = [plan_of(_checkpoint(cached_cr, digest=d)) for d in (DIGEST_A, DIGEST_B)]
    keys = [(p.prefill.compile_cache_key, p.decode.compile_cache_key) for p in plans]
    assert keys[0] != keys[1] and len({*keys[0], *keys[1]}) == 4
    for plan, (prefill, decode) in zip(plans, keys, strict=True):
        st = _status(plan)
        assert (st["prefillCompileCacheKey"], st["decodeCompileCacheKey"]) == (prefill, decode)
        assert summary(plan)["prefill"]["compileCache"] == {"key": prefill, "path": f"/compile-cache/{prefill}"}
        env = dict((e.name, e.value) for e in plan.prefill.pods[0].env)
        assert env["VLLM_CACHE_ROOT"] == f"/compile-cache/{prefill}/vllm"


def test_enabling_the_weight_cache_changes_the_key_disabling_it_restores_it(cached_cr):
    """docs/cold-start.md#compile-cache: the first start after enabling spec.model.cache compiles cold
    (the digest joins the key); without it again, the earlier key and its folder."""
    claim = _key(_checkpoint(cached_cr))
    cached = _key(_checkpoint(cached_cr, digest=DIGEST_A))
    assert cached != claim
    assert _key(_checkpoint(cached_cr)) == claim


def _with(spec: QwenDisaggDeploymentSpec, part: str, **changes: Any) -> QwenDisaggDeploymentSpec:
    return spec.model_copy(update={part: getattr(spec, part).model_copy(update=changes)})


def test_inputs_beyond_one_example_change_the_key(cached_cr):
    plan = plan_of(cached_cr)
    spec, r = plan.spec, plan.prefill
    pod = r.pods[0]
    argv = [a for a in pod.argv]  # the shared argv is what the planner hashes; any argv shows the function's inputs
    base = compile_cache_key(spec, spec.prefill, "GB200", argv, pod.env)
    assert base == compile_cache_key(spec, spec.prefill, "GB200", list(argv), tuple(pod.env)), "deterministic"
    other_topology = spec.prefill.model_copy(update={"topology": spec.prefill.topology.model_copy(
        update={"tensor_parallel": 2})})
    no_ep = spec.prefill.model_copy(update={"topology": spec.prefill.topology.model_copy(update={"expert_parallel": False})})
    variants = {
        "gpu": compile_cache_key(spec, spec.prefill, "B200", argv, pod.env),
        "vllm": compile_cache_key(_with(spec, "engine", vllm_version="0.34.0"), spec.prefill, "GB200", argv, pod.env),
        "model": compile_cache_key(_with(spec, "model", name="nvidia/Qwen3.8-2.4T-A95B-NVFP4"), spec.prefill, "GB200", argv, pod.env),
        "tp": compile_cache_key(spec, other_topology, "GB200", argv, pod.env),
        "ep": compile_cache_key(spec, no_ep, "GB200", argv, pod.env),
        "flag order": compile_cache_key(spec, spec.prefill, "GB200", list(reversed(argv)), pod.env),
    }
    assert base not in variants.values()
    assert len(set(variants.values())) == len(variants)


@pytest.mark.parametrize("name", [*CACHE_ENV, "VLLM_ENABLE_STARTUP_PLAN", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
                                  "TORCHINDUCTOR_CACHE_DIR"])
def test_the_cache_variables_are_owned(seed_cr, name):
    cr = _set(seed_cr, "spec.prefill.extraEnv", [{"name": name, "value": "/elsewhere"}])
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    msgs = [x.message for x in e.value.errors]
    assert any(name in m and "spec.engine.compileCache" in m for m in msgs), msgs



def test_the_start_up_model_sees_the_cache_state(seed_cr, cached_cr):
    # seed checkpoint 237 GB from remote storage at 2 GB/s (qdd.catalog.startup)
    cold = {"seconds": 323.5, "process": 30.0, "weights": 118.5, "torchCompile": 85.0, "kvProfile": 30.0, "graphs": 60.0}
    without = summary(plan_of(seed_cr))["startup"]
    assert without == {"first": cold, "restart": cold}, "no volume: every start compiles and profiles again"
    with_cache = summary(plan_of(cached_cr))["startup"]
    # warm: 8 s compile, KV profiling skipped by the startup plan, 25 s graphs
    assert with_cache == {"first": cold, "restart": {"seconds": 181.5, "process": 30.0, "weights": 118.5,
                                                     "torchCompile": 8.0, "kvProfile": 0.0, "graphs": 25.0}}
