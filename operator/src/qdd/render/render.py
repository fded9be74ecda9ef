"""Plan → Kubernetes objects through the jinja2 templates next to this file.

Deterministic: same plan, same objects in the same order, byte for byte (``to_yaml``).
Owner references and server-side fields are the controller's business, not render's.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import yaml

from .. import labels, names
from ..hashing import content_hash
from ..plan import Plan, PodPlan, RolePlan
from ..plan import compile_cache
from ..plan.weight_cache import DEFAULT_ROOT
from ..plan.router import METRICS_PORT, router_args
from .gang import gang_objects, pod_group
from .placement import CPU_ONLY_NODE_AFFINITY, gpu_node_selector
from .rolescale import role_scale_objects
from .preflight import PreflightOptions, preflight_objects
from .safe import ENV as _env
from .safe import load, load_all
from .tolerations import node_loss_tolerations
from ..plan.trays import pods_per_tray
from .trayclaims import pod_affinity, pod_annotations, tray_claims, uses_tray_claims
from .weight_cache import add_to_engine_pod
from .weight_cache import objects as weight_cache_objects

KIND_ORDER = ["ComputeDomain", "ResourceClaim", "Workload", "PodGroup", "ServiceAccount", "Role", "RoleBinding", "ConfigMap",
              "Service", "PodDisruptionBudget", "DaemonSet", "StatefulSet", "Job", "Pod", "Deployment", "QwenDisaggRoleScale"]


def revision(pod_specs: list[dict[str, Any]]) -> str:
    """Short hash of an endpoint's pod specs: pods whose label differs from it are out of date."""
    return content_hash(pod_specs, 10)


def slot_labels(plan: Plan) -> dict[str, str]:
    """Labels of every object of one generation's slot (StatefulSet, bare pods, PodGroups,
    ComputeDomain): the generation and the slot."""
    return {labels.GENERATION: plan.generation, labels.SLOT: plan.slot}


def _ctx(plan: Plan, gang: bool) -> dict[str, Any]:
    s = plan.spec
    node_selector = gpu_node_selector(plan)
    src = s.model.source
    return dict(
        d=plan, gang=gang, engine=s.engine, node_selector=node_selector, tolerations=[t.to_k8s() for t in s.cluster.tolerations],
        same_nvlink_domain=s.cluster.same_nvlink_domain, compute_domain=plan.compute_domain,
        claim_template=names.imex_claim_template(plan.name, plan.slot), image_pull_secrets=s.engine.image_pull_secrets,
        http_port=s.ports.http, dp_rpc_port=s.ports.data_parallel_rpc, shm_size=s.cluster.shm_size,
        node_loss_tolerations=node_loss_tolerations(s.cluster.node_loss_toleration_seconds),
        startup_failures=max(1, s.cluster.startup_timeout_seconds // 10),
        model_pvc=src.pvc if src else None,
        hf_cache_pvc=src.hugging_face.cache_pvc if src and src.hugging_face else None,
        compile_cache=s.engine.compile_cache, compile_cache_mount=compile_cache.MOUNT, compile_cache_volume=compile_cache.VOLUME,
    )


def _pod(plan: Plan, role: RolePlan, pod: PodPlan, bare: bool, gang: bool, root: str) -> dict[str, Any]:
    rs = plan.spec.prefill if role.role == "prefill" else plan.spec.decode
    # A StatefulSet lives for one generation, so its template carries it: its pods are created with
    # it (the router selects them by it). A StatefulSet made before its template did keeps its
    # template as it is (a change would restart every prefill engine): the operator labels its pods
    # instead (qdd.controller.rollout.keep_unlabelled_templates).
    extra = {labels.ENDPOINT: str(pod.endpoint), labels.GROUP_ROLE: pod.group_role,
             labels.GROUP_SIZE: str(role.pods_per_endpoint), **slot_labels(plan)} if bare else {
        labels.GROUP_ROLE: pod.group_role, labels.GENERATION: plan.generation,
        **({labels.SLOT: plan.slot} if plan.slot != "a" else {})}
    text = _env.get_template("engine-pod.yaml.j2").render(
        **_ctx(plan, gang), r=role, pod=pod, bare=bare, pod_labels=extra,
        tray_annotations={} if bare else pod_annotations(plan, role),
        tray_affinity=None if bare else pod_affinity(plan, role, gang),
        tray_claim0=names.tray_claim(plan.name, role.role, 0, plan.slot),
        subdomain=names.role_set(plan.name, role.role), cpu=rs.cpu, memory=rs.memory,
        pod_group=pod_group(plan, role.role, pod.endpoint) if gang else None)
    return add_to_engine_pod(load(text), plan, root)


def _role_objects(plan: Plan, role: RolePlan, gang: bool, root: str) -> list[dict[str, Any]]:
    name = names.role_set(plan.name, role.role)
    out = load_all(_env.get_template("service-headless.yaml.j2").render(
        **_ctx(plan, gang), name=name, role=role.role))
    if role.endpoints > 1:
        out += load_all(_env.get_template("pdb.yaml.j2").render(
            **_ctx(plan, gang), name=name, role=role.role,
            max_unavailable=pods_per_tray(plan, role) if uses_tray_claims(plan, role) else 1))
    if role.uses_statefulset:
        template = _pod(plan, role, role.pods[0], bare=False, gang=gang, root=root)
        text = _env.get_template("statefulset.yaml.j2").render(
            **_ctx(plan, gang), r=role, name=names.statefulset(plan.name, role.role, plan.slot), service=name,
            pod_template=template, slot_labels=slot_labels(plan),
            slot_selector={labels.SLOT: plan.slot} if plan.slot != "a" else {})
        out += load_all(text)
        return out + tray_claims(plan, role)
    for ep in range(role.endpoints):
        group = [p for p in role.pods if p.endpoint == ep]
        pods = [_pod(plan, role, p, bare=True, gang=gang, root=root) for p in group]
        rev = revision([p["spec"] for p in pods])
        for p in pods:
            p["apiVersion"], p["kind"] = "v1", "Pod"
            p["metadata"]["labels"][labels.REVISION] = rev
        out += [{"apiVersion": "v1", "kind": "Pod", **{k: v for k, v in p.items() if k not in ("apiVersion", "kind")}}
                for p in pods]
    return out


def render(plan: Plan, gang: bool = True, serving: tuple[str, str] | None = None,
           weight_cache_root: str = DEFAULT_ROOT) -> list[dict[str, Any]]:
    """Every object of the deployment, ordered by kind then by name. ``gang``: the cluster serves
    the Workload API (scheduling.k8s.io/v1alpha2 PodGroup, gang and topology-aware scheduling on):
    the Workload and PodGroups of :mod:`.gang` and pods that name their PodGroup; else the
    fallback, a required pod affinity on the NVLink clique (:mod:`.placement`). ``serving``:
    (generation, slot) the router sends traffic to, default the plan's own; during a Surge the
    controller keeps it on the old generation until the new one is Ready (qdd.controller.rollout).
    ``weight_cache_root``: the trays' folder of node-local weight caches (the operator's setting, never
    the spec's; qdd.render.weight_cache), used only with spec.model.cache."""
    ctx = _ctx(plan, gang)
    objs: list[dict[str, Any]] = []
    if plan.compute_domain:
        objs += load_all(_env.get_template("computedomain.yaml.j2").render(
            **ctx, cd_name=names.compute_domain(plan.name, plan.slot), slot_labels=slot_labels(plan)))
    if gang:
        objs += gang_objects(plan)
    objs += weight_cache_objects(plan, weight_cache_root)
    objs += _role_objects(plan, plan.prefill, gang, weight_cache_root)
    objs += _role_objects(plan, plan.decode, gang, weight_cache_root)
    if plan.router.replicas > 0:
        gen, slot = serving or (plan.generation, plan.slot)
        router = plan.router if gen == plan.generation else dataclasses.replace(
            plan.router, args=router_args(plan.name, plan.namespace, plan.spec, gen))
        objs += load_all(_env.get_template("router.yaml.j2").render(
            **ctx, name=names.router(plan.name), router=router, metrics_port=METRICS_PORT,
            serving=f"{gen}/{slot}",
            service_type=plan.spec.router.service_type, cpu_only_affinity=CPU_ONLY_NODE_AFFINITY))
    objs += role_scale_objects(plan)
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(objs, key=lambda o: (order[o["kind"]], o["metadata"]["name"]))


class _Dumper(yaml.SafeDumper):
    """Quotes every string that some YAML reader would take for another type. PyYAML quotes
    what its own YAML 1.1 resolver reads as non-strings, but writes ``y``, ``on`` or
    ``11962460e4`` bare, and kubectl's Go YAML reads them back as a boolean or a float: a
    revision hash of digits and one ``e`` would become a number and the object be refused."""


_YAML11_BOOLS = {"y", "n", "yes", "no", "on", "off", "true", "false"}
_NOT_A_STRING = re.compile(
    r"""[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?   # decimal / float, YAML 1.1 and 1.2
    |[-+]?0[xXoObB][0-9a-fA-F_]+                                    # hex, octal, binary
    |[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?                   # YAML 1.1 sexagesimal
    |[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)|~|null|Null|NULL""", re.VERBOSE)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Go's YAML reader ignores '_' in numbers ("1e_3" is 1000): test the string without them too.
    quote = value.lower() in _YAML11_BOOLS or _NOT_A_STRING.fullmatch(value.replace("_", "")) is not None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'" if quote else None)


_Dumper.add_representer(str, _str)


def render_all(plan: Plan, gang: bool = True, serving: tuple[str, str] | None = None,
               weight_cache_root: str = DEFAULT_ROOT) -> list[dict[str, Any]]:
    """Everything the operator applies: :func:`render` plus, unless the spec turns it off, the
    KV-transfer preflight (:func:`qdd.render.preflight.preflight_objects`), in one order."""
    objs = render(plan, gang, serving, weight_cache_root)
    if plan.spec.kv_transfer.preflight.enabled:
        objs += preflight_objects(plan, PreflightOptions(), gang)
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(objs, key=lambda o: (order[o["kind"]], o["metadata"]["name"]))


def to_yaml(objs: list[dict[str, Any]]) -> str:
    """A YAML stream, one document per object, stable bytes, safe for YAML 1.1 readers (kubectl)."""
    return "".join("---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16)
                   for o in objs)
