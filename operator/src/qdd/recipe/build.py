"""The QwenDisaggDeployment a recipe describes, checked by qdd's own API and planner."""

from __future__ import annotations

import re
from typing import Any

from .. import labels
from ..api import parse_resource, parse_spec
from ..api.resource import Resource
from ..api.spec import EngineSpec
from ..catalog import GPU_KINDS
from ..errors import FieldError, SpecError
from ..plan.args import check_extra, check_roles_match
from .flags import _env, _flags, _role_flag
from .names import cr_name
from .keys import ACCURACY_WORKLOAD, BACKEND_KEYS, ENGINE_DEFAULTS, Found, MODEL_KEYS, RESOURCE_KEYS, ROLES, RecipeError, SA_BENCH_KEYS, TOP_LEVEL_IGNORED, TOP_LEVEL_USED, UCX_ENV, _Build, _levels, _mapping, _num, _only, _pos, _put


def _model(b: _Build, recipe: dict[str, Any]) -> dict[str, Any]:
    model = _mapping(b, recipe.get("model"), "model")
    _only(b, model, "model", MODEL_KEYS)
    path = model.get("path")
    b.at("spec.model.name", "model.path")
    if not isinstance(path, str) or not path:
        b.error("model.path", "required: the HF id as 'hf:<org>/<name>'", covers="spec.model.name")
        return {}
    name = path[3:] if path.startswith("hf:") else path
    if "/" not in name:
        b.error("model.path", f"{path!r} is an srtslurm.yaml alias, which means nothing in a cluster; write the HF "
                              "id as 'hf:<org>/<name>' (e.g. hf:nvidia/Qwen3.5-397B-A17B-NVFP4)", covers="spec.model")
    precision = model.get("precision")
    if precision is not None:
        want = {"nvfp4": "NVFP4", "fp4": "NVFP4", "fp8": "FP8"}.get(str(precision).lower())
        suffix = re.search(r"-(NVFP4|FP4|FP8)$", name, re.IGNORECASE)
        have = None if suffix is None else {"FP4": "NVFP4"}.get(suffix.group(1).upper(), suffix.group(1).upper())
        if have is not None and want != have:
            b.error("model.precision", f"{precision!r} contradicts the checkpoint {name!r} ({have})")
    return {"name": name}


def _name(b: _Build, recipe: dict[str, Any], name: str | None) -> str | None:
    if name is not None:
        b.at("metadata.name", "--name")
        return name
    b.at("metadata.name", "name")
    raw = recipe.get("name")
    if not isinstance(raw, str) or not raw.strip():
        b.error("name", "required (or pass --name)", covers="metadata.name")
        return None
    model, res = recipe.get("model"), recipe.get("resources")
    precision = model.get("precision") if isinstance(model, dict) else None
    gpu = res.get("gpu_type") if isinstance(res, dict) else None
    out, how = cr_name(raw, str(precision) if precision else None, str(gpu) if gpu else None)
    b.notes["metadata.name"] = (f", {how}" if how else "") + "; pass --name to choose another"
    if how:
        b.said.append(f"metadata.name {out}: {how}; pass --name to choose another")
    return out


def _gpu(b: _Build, res: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(GPUs per node, cluster spec)."""
    raw = res.get("gpu_type")
    b.at("spec.cluster.gpuType", "resources.gpu_type")
    b.at("spec.cluster.gpusPerNode", "resources.gpus_per_node")
    if raw is None:
        b.error("resources.gpu_type", f"required (qdd supports {', '.join(GPU_KINDS)})")
    kind = GPU_KINDS.get({k.lower(): k for k in GPU_KINDS}.get(str(raw).lower(), ""))
    cluster: dict[str, Any] = {"gpuType": kind.name if kind else raw}
    gpn = kind.gpus_per_node if kind else None
    if res.get("gpus_per_node") is not None:
        given = _num(res["gpus_per_node"], int)
        if kind is None or given != kind.gpus_per_node:
            cluster["gpusPerNode"] = given
        gpn = given if _pos(given) else None
    return gpn, cluster


def _count(b: _Build, res: dict[str, Any], k: str) -> int | None:
    """A count qdd only checks against others (GPUs per worker, nodes)."""
    n = _num(res.get(k), int)
    if n is not None and not _pos(n):
        b.error(f"resources.{k}", f"must be a positive integer, got {res[k]!r}")
        return None
    return n


def _topology(b: _Build, role: str, res: dict[str, Any], topo: dict[str, Any], gpn: int | None) -> dict[str, Any]:
    """endpoints and topology of one role: DP from the flags, else from the GPUs (or nodes) per worker."""
    wkey, gkey, nkey = (f"resources.{k}" for k in (f"{role}_workers", f"gpus_per_{role}", f"{role}_nodes"))
    if res.get(f"{role}_workers") is None:
        b.error(wkey, "required: the number of endpoints of this role")
    b.at(f"spec.{role}.endpoints", wkey)
    workers, tp = _num(res.get(f"{role}_workers"), int), topo.get("tensorParallel", 1)
    gpus, nodes = _count(b, res, f"gpus_per_{role}"), _count(b, res, f"{role}_nodes")
    if gpus is None and nodes and gpn and _pos(workers) and (nodes * gpn) % workers == 0:
        gpus = nodes * gpn // workers
        b.at(f"spec.{role}.topology.dataParallel", nkey)
    elif gpus is not None:
        b.at(f"spec.{role}.topology.dataParallel", gkey)
    dp = topo.get("dataParallel", gpus // tp if gpus and _pos(tp) and gpus % tp == 0 else 1)
    if _pos(dp, tp) and gpus is not None and gpus != dp * tp:
        b.error(gkey, f"{gpus} GPUs per worker contradict data-parallel-size {dp} × tensor-parallel-size {tp} in "
                      f"backend.vllm_config.{role}")
    if _pos(dp, tp, workers) and nodes and gpn and nodes * gpn < workers * dp * tp:
        b.error(nkey, f"{nodes} nodes of {gpn} GPUs cannot hold {workers} workers of {dp * tp} GPUs")
    return {"endpoints": workers, "topology": {"dataParallel": dp, "tensorParallel": tp,
                                               "expertParallel": topo.get("expertParallel", False)}}


def _workload(b: _Build, recipe: dict[str, Any]) -> dict[str, Any]:
    bench = _mapping(b, recipe.get("benchmark"), "benchmark")
    if bench.get("type") == "gsm8k":
        w = ACCURACY_WORKLOAD
        b.said.append(f"spec.workload: a gsm8k recipe gives none; ISL/OSL {w['isl']}/{w['osl']}, range ratio "
                      f"{w['randomRangeRatio']}, concurrency {w['concurrency']}: the workload of the published Qwen3.5 "
                      "GB200 8k1k sa-bench recipes, so the engines run the flags of the sweep they are checked for")
        return dict(ACCURACY_WORKLOAD)
    if bench.get("type") != "sa-bench":
        b.error("benchmark.type", f"{bench.get('type')!r}: qdd imports sa-bench (a sweep) and gsm8k (an accuracy "
                                  "run) recipes", covers="spec.workload")
        return {}
    _only(b, bench, "benchmark", SA_BENCH_KEYS)
    for field, k in (("isl", "isl"), ("osl", "osl"), ("randomRangeRatio", "random_range_ratio"),
                     ("concurrency", "concurrencies")):
        b.at(f"spec.workload.{field}", f"benchmark.{k}")
    out = {"isl": _num(bench.get("isl"), int), "osl": _num(bench.get("osl"), int)}
    if bench.get("random_range_ratio") is not None:
        out["randomRangeRatio"] = _num(bench["random_range_ratio"], float)
    sweep = bench.get("concurrencies")
    levels = _levels(sweep)
    if sweep is not None and (not levels or not _pos(*levels)):
        b.error("benchmark.concurrencies", f"{sweep!r}: must be positive integers (a list, or joined by 'x')",
                covers="spec.workload.concurrency")
    out["concurrency"] = max(levels) if levels and _pos(*levels) else None
    return out



def _shared(b: _Build, path: str, given: dict[str, Found], what: str) -> Any:
    """The single value both roles give for a resource field set once (``given``: role → (value, key))."""
    values = {role: v for role, (v, _) in given.items()}
    if len(values) == 2 and values["prefill"] != values["decode"]:
        b.error(given["decode"][1], f"{values['decode']!r} differs from prefill's {values['prefill']!r}; qdd sets "
                                    f"{what} once for both roles ({path})")
    value = next(iter(values.values()), None)
    b.at(path, *(k for v, k in given.values() if v == value))
    return value


def _roles(b: _Build, backend: dict[str, Any], res: dict[str, Any], gpn: int | None) -> dict[str, Any]:
    """prefill, decode, and what both set once ({resource path: {role: (value, key)}})."""
    vcfg = _mapping(b, backend.get("vllm_config"), "backend.vllm_config")
    _only(b, vcfg, "backend.vllm_config", ROLES)
    out: dict[str, Any] = {"shared": {}}
    for role in ROLES:
        key, env_key = f"backend.vllm_config.{role}", f"backend.{role}_environment"
        b.at(f"spec.{role}", key)
        parsed: dict[str, Any] = {"path": f"spec.{role}", "shared": {},
                                  "spec": {"topology": {}, "tuning": {}, "extraArgs": []}}
        flags = _flags(b, vcfg.get(role), key)
        for flag, (value, k) in flags.items():
            _role_flag(b, parsed, flag, value, k)
        if "kv-transfer-config" not in flags and backend.get("connector") is None:
            b.error(f"{key}.kv-transfer-config", "required (or backend.connector: nixl): qdd moves KV from prefill "
                                                 "to decode with NIXL")
        extra_env, ucx = _env(b, role, backend.get(f"{role}_environment"), env_key)
        parsed["shared"].update({f"spec.kvTransfer.ucx.{f}": ucx.get(f, (None, f"{env_key}.{n}"))
                                 for n, f in UCX_ENV.items()})
        spec, tuning = parsed["spec"], parsed["spec"]["tuning"]
        out[role] = _topology(b, role, res, spec["topology"], gpn)
        out[role]["tuning"] = tuning | {f: v for f, v in ENGINE_DEFAULTS.items() if f not in tuning}
        out[role] |= {f: spec[f] for f in ("extraArgs",) if spec[f]} | ({"extraEnv": extra_env} if extra_env else {})
        for path, found in parsed["shared"].items():
            out["shared"].setdefault(path, {})[role] = found
    return out


def _kv_spec(b: _Build, shared: dict[str, dict[str, Found]]) -> dict[str, Any]:
    """spec.kvTransfer from both roles' settings (the connector only where it is not qdd's, for the API to refuse)."""
    kv: dict[str, Any] = {}
    for field in ("loadFailurePolicy", "leaseSeconds", "backends", "connector", "ucx.tls", "ucx.mnnvl", "ucx.memtypeCache"):
        path = f"spec.kvTransfer.{field}"
        if path in shared:
            value = _shared(b, path, shared[path], field.rsplit(".", 1)[-1])
            if value is not None and (field, value) != ("connector", "NixlConnector"):
                _put(kv, f"kvTransfer.{field}", list(value) if isinstance(value, list) else value)
    return kv


def _spec(b: _Build, recipe: dict[str, Any], image: str) -> dict[str, Any]:
    model = _model(b, recipe)
    res = _mapping(b, recipe.get("resources"), "resources")
    for k in res:
        if str(k).startswith("agg_") or k == "gpus_per_agg":
            b.error(f"resources.{k}", "an aggregated recipe: qdd deploys disaggregated prefill/decode only")
    _only(b, {k: v for k, v in res.items() if not str(k).startswith("agg_") and k != "gpus_per_agg"}, "resources",
          RESOURCE_KEYS)
    gpn, cluster = _gpu(b, res)
    backend = _mapping(b, recipe.get("backend"), "backend")
    _only(b, backend, "backend", BACKEND_KEYS)
    if backend.get("type") != "vllm":
        b.error("backend.type", f"{backend.get('type')!r}: qdd serves with vllm")
    if backend.get("connector") is not None and str(backend["connector"]).lower() != "nixl":
        b.error("backend.connector", f"{backend['connector']!r}: qdd transfers KV with NIXL only")
    roles = _roles(b, backend, res, gpn)
    if "spec.model.revision" in roles["shared"]:
        model["revision"] = _shared(b, "spec.model.revision", roles["shared"]["spec.model.revision"], "revision")
    if "spec.model.servedModelName" in roles["shared"]:
        model["servedModelName"] = _shared(b, "spec.model.servedModelName",
                                           roles["shared"]["spec.model.servedModelName"], "served-model-name")
    b.at("spec.engine.image", "--image")
    workload = _workload(b, recipe)
    if "spec.workload.maxModelLen" in roles["shared"]:
        workload["maxModelLen"] = _shared(b, "spec.workload.maxModelLen", roles["shared"]["spec.workload.maxModelLen"],
                                          "max-model-len")
    spec = {"model": model, "engine": {"image": image, "vllmVersion": EngineSpec.model_fields["vllm_version"].default},
            "workload": workload, "prefill": roles["prefill"], "decode": roles["decode"], "cluster": cluster}
    shared = roles["shared"]
    if "spec.speculative.method" in shared:  # one setting for both roles (the handshake compares it)
        given = shared["spec.speculative.method"]
        if len(given) == 1:
            (role, (_, key)), = given.items()
            b.error(key.rsplit(".", 1)[0], f"speculative decoding on {role} only: the NIXL handshake compares the "
                                           "speculative method, so every transfer would fail; set it on both roles or neither")
        spec["speculative"] = {f: _shared(b, f"spec.speculative.{f}", shared[f"spec.speculative.{f}"], f)
                               for f in ("method", "numSpeculativeTokens")}
    return spec | _kv_spec(b, shared)


def _checked(cr: dict[str, Any]) -> list[FieldError]:
    """What qdd's API (every field error, metadata's and the spec's) and its extraArgs/extraEnv checks refuse."""
    try:
        resource: Resource = parse_resource(cr)
    except SpecError as e:
        if any(f.field.startswith("spec") for f in e.errors):
            return e.errors
        try:
            parse_spec(cr["spec"])
        except SpecError as spec_error:
            return e.errors + spec_error.errors
        return e.errors
    s = resource.spec
    return [*check_extra("prefill", s.prefill, s.engine.vllm_version),
            *check_extra("decode", s.decode, s.engine.vllm_version), *check_roles_match(s.prefill, s.decode)]


def build(recipe: dict[str, Any], name: str | None, image: str) -> tuple[dict[str, Any], _Build]:
    """(the QwenDisaggDeployment, the build record: errors so far, notes in ``said``)."""
    if not isinstance(recipe, dict):
        raise RecipeError("(recipe)", f"must be a mapping, got {type(recipe).__name__}")
    b = _Build()
    _only(b, {k: v for k, v in recipe.items() if k not in TOP_LEVEL_IGNORED}, "", TOP_LEVEL_USED,
          f"; ignores {', '.join(TOP_LEVEL_IGNORED)}")
    spec = _spec(b, recipe, image)
    cr = {"apiVersion": f"{labels.GROUP}/{labels.VERSION}", "kind": labels.KIND,
          "metadata": {"name": _name(b, recipe, name)}, "spec": spec}
    for e in _checked(cr):
        b.errors += [err for err in b.trace(e) if err not in b.errors]
    return cr, b


def import_recipe(recipe: dict[str, Any], name: str | None, image: str) -> dict[str, Any]:
    """The QwenDisaggDeployment an srt-slurm ``recipe`` describes, named ``name`` (default: from the
    recipe's name, shortened as :func:`qdd.recipe.names.cr_name` says), running engine ``image``.
    Raises :class:`RecipeError` listing every problem, each naming the recipe key to change.
    :func:`qdd.recipe.objects.import_objects` also gives the benchmark and the notes."""
    cr, b = build(recipe, name, image)
    if b.errors:
        raise RecipeError(b.errors)
    return cr
