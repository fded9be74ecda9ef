"""No string of the spec can change the structure of what qdd renders (qdd.render.safe).

Every string field of the spec — found by walking the API models, so a new field is covered the
day it is added — gets each hostile value below, one field and one value at a time, *past*
validation (the value is put into the parsed spec with ``model_copy``, as if the API's patterns
had a hole). The rendered objects (engines and preflight) must have exactly the paths of the
base rendering, and differ only in values that carry the hostile string (and the revision labels
that hash them). The same for the QwenDisaggBenchmark's string fields and its Jobs, whose shell
script also carries the deployment's served model name and model path (one shell word each).
What the API refuses of these strings is tested in test_api_limits.py.
"""

from __future__ import annotations

import re
import shlex
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from qdd.api import parse_resource
from qdd.api.benchmark import parse_benchmark_spec
from qdd.api.spec import QwenDisaggDeploymentSpec
from qdd.errors import SpecError
from qdd.plan import build_plan
from qdd.render import render_all, to_yaml
from qdd.render.benchmark import benchmark_job, scripts_configmap, step_names
from qdd.render.safe import load_all

HOSTILE = [
    "x\nhostNetwork: true\nhostPID: true\nserviceAccountName: admin",
    "img: bad",
    "a # cut here",
    "'\"quoted\"'",
    "{{ 7 * 7 }}{% raw %}",
    "&anchor *alias !!python/object:os.system",
    "- item\n- other",
    "{a: b}, [1, 2]",
    "? key\n: value",
    "\ttab\r\nCRLF\x00nul\u2028line-sep",
    "01234e5",
    "1e_3",
    "0_x1F",
    "yes",
    "x" * 100_000,
]

# Strings the planner interprets rather than passes through: a hostile value there is an unknown
# catalog entry (SpecError), never rendered. Each is still length- and pattern-limited by the API.
INTERPRETED = {
    "engine.vllmVersion": "selects the engine profile",
    "model.architecture.name": "selects catalog numbers",
    "model.architecture.vllmClass": "recorded with the architecture; the engine reads the class from config.json",
    "prefill.tuning.all2allBackend": "one of vLLM's --all2all-backend choices",
    "decode.tuning.all2allBackend": "one of vLLM's --all2all-backend choices",
}
"""Enum fields (Literal types) are interpreted too and never free text; the walk leaves them out."""
NOT_RENDERED = {
    "validation.canary.prompt": "sent by the operator as one JSON string of the canary request, in no object "
                                "(tests/unit/test_canary.py: a hostile prompt round-trips exactly)",
}
HUB_ONLY = {"model.name": "with a PVC source the engines load /models, so the hub base renders it"}


def _base_cr(seed: dict[str, Any]) -> dict[str, Any]:
    """The seed with every optional string field set, so that each reaches the rendered objects."""
    s = seed["spec"]
    s["model"]["source"] = {"pvc": {"claimName": "models", "subPath": "qwen/Qwen3.5-397B-A17B-NVFP4"},
                            "huggingFace": {"tokenSecretRef": {"name": "hf", "key": "token"}, "cachePvc": "hf-cache"}}
    s["model"]["architecture"] = {"name": "Qwen3.5-397B-A17B", "vllmClass": "Qwen3_5MoeForConditionalGeneration"}
    s["model"]["quantization"] = "nvfp4"
    s["engine"]["imagePullSecrets"] = ["regcred"]
    s["cluster"]["nodeSelector"] = {"pool.example/name": "gb200"}
    s["cluster"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}]
    s["cluster"]["nodeAffinity"] = [{"key": "pool.example/zone", "operator": "In", "values": ["zone-a"]}]
    s["kvTransfer"]["sideChannelHost"] = "nixl.example"
    s["kvTransfer"]["ucx"] = {"tls": "cuda_copy,cuda_ipc,tcp"}
    for role in ("prefill", "decode"):
        s[role]["extraArgs"] = ["--max-logprobs", "5"]
        s[role]["extraEnv"] = [
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            {"name": "LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        ]
        s[role]["cpu"], s[role]["memory"] = "32", "256Gi"
        s[role]["tuning"] = {"all2allBackend": "allgather_reducescatter"}
    s["router"] = {"image": "registry.example/vllm-router:0.1.17"}
    return seed


def _leaf_types(t: Any) -> list[Any]:
    args = typing.get_args(t)
    if typing.get_origin(t) is typing.Annotated:
        return _leaf_types(args[0])
    if args and (typing.get_origin(t) in (typing.Union, types.UnionType, list, dict, tuple)):
        return [x for a in args for x in _leaf_types(a)]
    return [t]


def _string_paths(model: BaseModel, prefix: str = "") -> list[tuple[str, tuple[Any, ...]]]:
    """(dotted camelCase path, attribute path) of every free-text string value in a parsed model."""
    out = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if any(typing.get_origin(t) is typing.Literal for t in _leaf_types(field.annotation)):
            continue
        here = f"{prefix}{field.alias or name}"
        out += _value_paths(value, here, (name,))
    return out


def _value_paths(value: Any, here: str, attrs: tuple[Any, ...]) -> list[tuple[str, tuple[Any, ...]]]:
    if isinstance(value, BaseModel):
        return [(p, attrs + a) for p, a in _string_paths(value, here + ".")]
    if isinstance(value, str):
        return [(here, attrs)]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _value_paths(v, f"{here}[{i}]", attrs + (i,))]
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out.append((f"{here}{{key}}", attrs + (("key", k),)))
            out += _value_paths(v, f"{here}[{k}]", attrs + (k,))
        return out
    return []


def _replace(node: Any, attrs: tuple[Any, ...], value: str) -> Any:
    head, rest = attrs[0], attrs[1:]
    if isinstance(node, BaseModel):
        return node.model_copy(update={head: _replace(getattr(node, head), rest, value) if rest else value})
    if isinstance(node, (list, tuple)):
        items = list(node)
        items[head] = _replace(items[head], rest, value) if rest else value
        return type(node)(items) if isinstance(node, tuple) else items
    if isinstance(head, tuple):  # a mapping key
        return {(value if k == head[1] else k): v for k, v in node.items()}
    return {**node, head: _replace(node[head], rest, value) if rest else value}


def _flatten(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{path}/{k}"))
        return out or {path: {}}
    if isinstance(node, list):
        out = {}
        for i, v in enumerate(node):
            out.update(_flatten(v, f"{path}[{i}]"))
        return out or {path: []}
    return {path: node}


def _base(hub: bool) -> tuple[Any, dict[str, Any]]:
    from ..conftest import EXAMPLES, load

    cr = _base_cr(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"))
    del cr["spec"]["model"]["source"]["pvc" if hub else "huggingFace"]  # one source at a time (issue 21)
    res = parse_resource(cr)
    return res, _flatten(render_all(build_plan(res)))


BASES = {False: _base(False), True: _base(True)}


def _fields() -> list[tuple[str, tuple[Any, ...]]]:
    """The string fields of both bases (each has one model source: pvc, or the hub's token and cache)."""
    out: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for res, _ in (BASES[False], BASES[True]):
        out |= {p: (p, a) for p, a in _string_paths(res.spec) if p not in out}
    return list(out.values())


FIELDS = _fields()


def test_every_string_field_of_the_spec_is_covered():
    """The walk finds the string fields the base CR sets (a field added to the API shows up here)."""
    paths = {p for p, _ in FIELDS}
    assert {"engine.image", "engine.imagePullSecrets[0]", "model.source.pvc.claimName", "cluster.nodeSelector{key}",
            "cluster.nodeSelector[pool.example/name]", "cluster.tolerations[0].key", "prefill.extraArgs[1]",
            "decode.extraEnv[1].valueFrom.secretKeyRef.name", "router.image", "kvTransfer.ucx.tls",
            "prefill.memory", "cluster.shmSize", "model.servedModelName"} <= paths
    assert len(paths) >= 40


def _is_hash(key: str, value: object, cr: str) -> bool:
    """A rendered content hash: the revision, the generation label, the router's serving
    generation annotation and its generation selectors."""
    if key.endswith(("/qdd.dev/revision", "/qdd.dev/generation")):
        return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{8,10}", value) is not None
    if key.endswith("/qdd.dev/serving-generation"):
        return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{8}/[ab]", value) is not None
    return isinstance(value, str) and re.fullmatch(r"qdd\.dev/generation=[0-9a-f]{8}", value) is not None



@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: repr(h[:24]))
@pytest.mark.parametrize(("path", "attrs"), [f for f in FIELDS if f[0] not in INTERPRETED and f[0] not in NOT_RENDERED], ids=lambda x: x if isinstance(x, str) else "")
def test_hostile_string_changes_values_never_structure(path, attrs, hostile):
    res, want = BASES[path in HUB_ONLY or path.startswith("model.source.huggingFace")]  # one source per base
    spec = _replace(res.spec, attrs, hostile)
    if path.endswith("extraArgs[0]") or ("extraArgs" in path and hostile.startswith("-")):
        # In the flag's place a hostile string is no option (and its value then a stray positional);
        # as a value, one that starts with '-' reads as an option: vLLM would refuse both, so qdd does.
        with pytest.raises(SpecError) as e:
            build_plan(res.__class__(res.name, res.namespace, spec))
        role = path.split(".")[0]
        assert {x.field for x in e.value.errors} <= {f"spec.{role}.extraArgs[0]", f"spec.{role}.extraArgs[1]"}
        return
    got = _flatten(render_all(build_plan(res.__class__(res.name, res.namespace, spec))))
    if "{key}" in path:  # the hostile string is a key: compare with it named back
        got = {k.replace(f"/{hostile}", "/pool.example/name"): v for k, v in got.items()}
    assert set(got) == set(want), f"{path}: structure changed: {sorted(set(got) ^ set(want))[:5]}"
    changed = {k for k in want if got[k] != want[k]}
    assert changed, f"{path} does not reach the rendered objects: nothing tests it"
    for k in changed:
        if _is_hash(k, got[k], res.name):
            continue  # a hash of the spec (revision, generation) changes with any value, never its shape
        assert isinstance(got[k], str) and (hostile in got[k] or "{key}" in path), (
            f"{path}: {k} changed to {str(got[k])[:80]!r}, which is not the value given")
    # The YAML stream says the same after a round trip through a YAML parser.
    objs = render_all(build_plan(res.__class__(res.name, res.namespace, spec)))
    assert load_all(to_yaml(objs)) == objs


def test_api_refuses_the_hostile_strings_before_render(seed_cr):
    """The patterns stop these strings at apply time; the rendering holds even without them."""
    for hostile in [h for h in HOSTILE if h not in ("yes", "01234e5", "1e_3", "0_x1F")]:  # valid names
        cr = _base_cr(seed_cr)
        del cr["spec"]["model"]["source"]["huggingFace"]  # one model source (issue 21)
        cr["spec"]["engine"]["imagePullSecrets"] = [hostile]
        cr["spec"]["engine"]["image"] = hostile
        with pytest.raises(SpecError) as e:
            parse_resource(cr)
        assert {x.field for x in e.value.errors} == {"spec.engine.imagePullSecrets[0]", "spec.engine.image"}


def test_spec_type_hints_have_no_free_form_mappings():
    """No field takes arbitrary nested data (it would reach the pods unchecked, or nest without bound)."""
    def walk(model: type[BaseModel], seen: set[type]) -> list[str]:
        bad = []
        for name, field in model.model_fields.items():
            for t in _leaf_types(field.annotation):
                if t is Any or t is dict and not typing.get_args(field.annotation):
                    bad.append(f"{model.__name__}.{name}")
                if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
                    seen.add(t)
                    bad += walk(t, seen)
        return bad

    assert walk(QwenDisaggDeploymentSpec, set()) == []


# --- the QwenDisaggBenchmark kind ------------------------------------------------------------------

BENCH_NOT_RENDERED = {
    "deploymentName": "selects the deployment whose plan the Jobs are rendered from; a name the API refuses never "
                      "finds one",
}


def _bench_base() -> tuple[Any, Any, dict[str, Any]]:
    """(benchmark spec with every optional string set, the deployment's plan, the flattened Jobs + scripts)."""
    from ..conftest import EXAMPLES, load

    spec = load(EXAMPLES / "benchmarks" / "qwen35-397b-4xdep2-1xdep8-sweep.yaml")["spec"]
    spec["image"] = "registry.example/qdd-vllm:0.33.0"
    spec["sweep"]["concurrencies"] = [64]
    bench = parse_benchmark_spec(spec)
    plan = build_plan(BASES[False][0])
    return bench, plan, _flatten(_bench_objects(bench, plan))


def _bench_objects(bench: Any, plan: Any) -> list[dict[str, Any]]:
    return [benchmark_job("b", bench, plan, step) for step in step_names(bench)] + [scripts_configmap("b", plan)]


BENCH_BASE = _bench_base()
BENCH_FIELDS = _string_paths(BENCH_BASE[0])


def test_every_string_field_of_the_benchmark_spec_is_covered():
    assert {p for p, _ in BENCH_FIELDS} == {"deploymentName", "image", "accuracy.source.claimName",
                                            "accuracy.source.path"}


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: repr(h[:24]))
@pytest.mark.parametrize(("path", "attrs"), [f for f in BENCH_FIELDS if f[0] not in BENCH_NOT_RENDERED],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_hostile_benchmark_string_changes_values_never_structure(path, attrs, hostile):
    """The benchmark's Jobs and scripts ConfigMap, past validation: the same paths, only the values
    that carry the string differ."""
    bench, plan, want = BENCH_BASE
    objs = _bench_objects(_replace(bench, attrs, hostile), plan)
    got = _flatten(objs)
    assert set(got) == set(want), f"{path}: structure changed: {sorted(set(got) ^ set(want))[:5]}"
    changed = {k for k in want if got[k] != want[k]}
    assert changed, f"{path} does not reach the rendered objects: nothing tests it"
    for k in changed:
        assert got[k] == hostile, f"{path}: {k} changed to {str(got[k])[:80]!r}, which is not the value given"
    assert load_all(to_yaml(objs)) == objs


@pytest.mark.parametrize("hostile", [h for h in HOSTILE if "\x00" not in h], ids=lambda h: repr(h[:24]))
@pytest.mark.parametrize("field", ["served_model_name", "name"])
def test_hostile_deployment_strings_stay_one_word_of_the_benchmark_shell_script(field, hostile):
    """The Jobs run ``/bin/sh -c SCRIPT`` with the deployment's served model name (--model) and model
    path (--tokenizer) in it: each stays exactly one shell word (shlex quoting), never a command."""
    bench, plan, _ = BENCH_BASE
    res = BASES[field == "name"][0]  # the model's name is the engines' (and the tokenizer's) path with a hub source
    model = res.spec.model.model_copy(update={field: hostile})
    hostile_plan = build_plan(res.__class__(res.name, res.namespace, res.spec.model_copy(update={"model": model})))
    jobs = _bench_objects(bench, hostile_plan)[:-1]
    assert [j["metadata"]["name"] for j in jobs] == ["b-sweep-0", "b-accuracy"]
    for job in jobs if field == "served_model_name" else jobs[:1]:  # GSM8K needs no tokenizer
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[:2] == ["/bin/sh", "-c"] and len(command) == 3
        words = shlex.split(command[2])
        flag = "--model" if field == "served_model_name" else "--tokenizer"
        assert words[words.index(flag) + 1] == hostile, (job["metadata"]["name"], flag)
