"""Property-based: generated resources (fuzz_resources.py) through plan and render.

A resource is either refused with field-named errors (SpecError: every message names a field
under spec or metadata) or it renders, and then the invariants below hold for every object. The
budget is fixed and the run derandomized, so `make test` is reproducible:
``QDD_FUZZ_EXAMPLES`` (default 150) sets the number of resources; ``make fuzz`` runs 3,000.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings

from qdd.api import parse_resource
from qdd.catalog.vllm_options import serve_options
from qdd.errors import SpecError
from qdd.plan.weight_cache import DEFAULT_ROOT
from qdd.plan import Plan, build_plan, sizing
from qdd.plan.args import MUST_MATCH_FLAGS
from qdd.render import render_all, to_yaml

from .fuzz_resources import resources

EXAMPLES = int(os.environ.get("QDD_FUZZ_EXAMPLES", "150"))
SHRINK = os.environ.get("QDD_FUZZ_SHRINK") == "1"
"""Shrinking a failure to its minimal resource can take minutes: on in `make fuzz`, off in `make test`
(which reports the first failing resource as generated)."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if SHRINK else [])],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Plain scalars a YAML 1.2 (Go, kubectl) or 1.1 reader takes for something other than a string.
NOT_A_STRING = re.compile(r"[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?|[-+]?0[xXoObB][0-9a-fA-F_]+"
                          r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)|~|null|Null|NULL|[yYnN]|yes|Yes|YES|no|No|NO"
                          r"|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+")
# Equal on every engine pod: the NIXL handshake or the transferred bytes depend on them.
MUST_MATCH = {*MUST_MATCH_FLAGS, "tensor-parallel-size", "kv-cache-dtype", "mamba-ssm-cache-dtype", "served-model-name",
              "enable-prefix-caching", "generation-config"}


def _plan(cr: dict[str, Any]) -> Plan | None:
    try:
        return build_plan(parse_resource(cr))
    except SpecError as e:
        errors = e.errors
    assert errors
    for err in errors:
        assert err.field.startswith(("spec", "metadata")), err
        assert err.message, err
    return None


def _engine_pods(objs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], int]]:
    """(metadata, pod spec, copies) of every engine pod: bare pods, and StatefulSet templates × replicas."""
    out = []
    for o in objs:
        role = o["metadata"]["labels"].get("qdd.dev/role")
        if o["kind"] == "Pod":
            out.append((o["metadata"], o["spec"], 1))
        elif o["kind"] == "StatefulSet" and role in ("prefill", "decode"):
            out.append((o["spec"]["template"]["metadata"], o["spec"]["template"]["spec"], o["spec"]["replicas"]))
    return out


def _options(argv: list[str]) -> dict[str, str]:
    """{option name: value} of an argv after the model, as vLLM's parser reads it."""
    table, out, i = serve_options(), {}, 1
    while i < len(argv):
        r = table.resolve(argv[i])
        if r is None or not r.options:
            i += 1
            continue
        [opt] = r.options
        if opt.takes_value and r.attached is None:
            out[opt.name] = argv[i + 1]
            i += 2
        else:
            out[opt.name] = r.attached if r.attached is not None else argv[i]
            i += 1
    return out


def _plain_scalars(text: str) -> list[str]:
    out = []
    for doc in yaml.compose_all(text):
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.ScalarNode):
                if node.tag == "tag:yaml.org,2002:str" and node.style is None:
                    out.append(node.value)
            elif isinstance(node, yaml.SequenceNode):
                stack += node.value
            elif isinstance(node, yaml.MappingNode):
                stack += [x for kv in node.value for x in kv]
    return out


def _host_paths_only_the_weight_cache(plan: Plan, spec: dict[str, Any]) -> None:
    """No hostPath but the weight cache's (spec.model.cache): the operator's root, the namespace and a digest's
    64 hex digits, never another spec string, and read-only in every container that mounts it (qdd.render.weight_cache)."""
    host = [v for v in spec.get("volumes", []) if "hostPath" in v]
    if plan.spec.model.cache is None:
        assert not host
        return
    [v] = host
    assert v == {"name": "weight-cache", "hostPath": {
        "path": f"{DEFAULT_ROOT}/{plan.namespace}/{plan.spec.model.cache.digest.split(':')[1]}",
        "type": "DirectoryOrCreate"}}
    for c in spec["containers"] + spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            if m["name"] == "weight-cache":
                assert m["readOnly"] is True, c["name"]


def check_invariants(plan: Plan, objs: list[dict[str, Any]]) -> None:
    text = to_yaml(objs)
    assert to_yaml(render_all(plan)) == text, "rendering is not deterministic"
    assert list(yaml.safe_load_all(text)) == objs
    ambiguous = [s for s in _plain_scalars(text) if NOT_A_STRING.fullmatch(s) or NOT_A_STRING.fullmatch(s.replace("_", ""))]
    assert not ambiguous, f"plain scalars another YAML reader takes for non-strings: {ambiguous[:3]}"

    pods = _engine_pods(objs)
    gpus = sum(int(p["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]) * n for _, p, n in pods)
    assert gpus == plan.gpus == sum(r.endpoints * r.dp * r.tp for r in (plan.prefill, plan.decode))

    must: dict[str, set[str]] = {}
    for meta, spec, _ in pods:
        c = spec["containers"][0]
        assert "hostNetwork" not in spec and "hostPID" not in spec and "hostIPC" not in spec
        assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
        _host_paths_only_the_weight_cache(plan, spec)
        assert not c.get("securityContext", {}).get("privileged")
        opts = _options(c["args"])
        for name in MUST_MATCH:
            must.setdefault(name, set()).add(opts.get(name, "<unset>"))
        must.setdefault("<model>", set()).add(c["args"][0])
        kv = json.loads(opts["kv-transfer-config"])
        must.setdefault("<kv>", set()).add(json.dumps({k: v for k, v in kv.items() if k != "kv_role"}, sort_keys=True))
        names = [p["name"] for p in c["ports"]]
        assert len(names) == len(set(names)) and all(len(n) <= 15 for n in names), names
        for k, v in meta["labels"].items():
            assert LABEL_VALUE.match(v) and len(v) <= 63, (k, v)
    assert all(len(v) == 1 for v in must.values()), {k: v for k, v in must.items() if len(v) > 1}

    for role in (plan.prefill, plan.decode):
        for ep in range(role.endpoints):
            group = [p for p in role.pods if p.endpoint == ep]
            assert sum(p.dp_size_local for p in group) == role.dp
            assert [p.dp_start_rank for p in group] == [i * role.dp // len(group) for i in range(len(group))]
            ports = [port for p in group for port in p.side_channel_ports]
            base = plan.spec.kv_transfer.side_channel_port
            assert ports == list(range(base, base + role.dp))
            assert plan.spec.ports.http not in ports and plan.spec.ports.data_parallel_rpc not in ports
            for p in group:
                assert ("--headless" in p.argv) == (p.group_role == "worker")
                assert ("--port" in p.argv) == p.serves_http == (p.group_role == "leader")
    d = plan.decode
    per_rank = sizing.per_rank_concurrency(plan.spec.workload.concurrency, d.endpoints, d.dp)
    if plan.spec.decode.tuning.max_cudagraph_capture_size is None:
        assert d.max_cudagraph_capture_size >= per_rank
    assert d.max_num_seqs >= per_rank

    for o in objs:
        name = o["metadata"]["name"]
        assert len(name) <= 63 and DNS1123_LABEL.match(name), name
        if o["kind"] == "Service":
            assert DNS1035_LABEL.match(name), name


@FUZZ
@given(resources())
def test_generated_resources_are_refused_by_field_or_render_with_the_invariants(cr):
    plan = _plan(cr)
    if plan is not None:
        check_invariants(plan, render_all(plan))
