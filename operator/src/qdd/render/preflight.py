"""Plan → the preflight's Kubernetes objects. Pure: no I/O, deterministic bytes.

What is rendered, per decode endpoint *d* (one "pair"; the seed's 1 × DEP8 decode gives one):
- Job ``<cr>-preflight-serve-<d>``: ``python3 -m qdd.preflight serve`` with the prefill pods' env
  (UCX_*, ``VLLM_NIXL_SIDE_CHANNEL_HOST`` from ``status.podIP``, the side-channel port), listening
  with NIXL's own listener on the side-channel port; stable DNS through ``hostname``/``subdomain``;
- Job ``<cr>-preflight-fetch-<d>``: ``python3 -m qdd.preflight fetch`` with the decode pods' env,
  reading from ``<cr>-preflight-serve-<d>.<cr>-preflight.<ns>.svc``;
- one headless Service ``<cr>-preflight`` (publishNotReadyAddresses) that gives the serve pods DNS.
Each pod asks one GPU and the deployment's ComputeDomain channel claim, uses the engines' image,
node selection and tolerations, is kept in the deployment's NVLink clique (required pod affinity
on ``nvidia.com/gpu.clique`` with the engine and preflight pods), prefers the node of the prefill
(serve) or decode (fetch) endpoint it stands for, and — when the deployment spans nodes — must
not share a node with the other side of its pair, so the bytes cross nodes as prefill→decode
bytes do (on GB200 that is the MNNVL path through the IMEX channel, which one node would not
exercise). The image must contain the ``qdd`` package (the program needs only nixl and torch).

Labels: ``qdd.dev/deployment``, ``qdd.dev/role: preflight`` (never prefill/decode: the role
selectors of StatefulSets, Services and the router must not pick these pods up),
``qdd.dev/preflight: serve|fetch``, ``qdd.dev/endpoint: <d>``, ``qdd.dev/revision`` (hash of the
pair's pod specs: Job templates are immutable, so a changed plan means delete and re-create).

Result contract (see :mod:`qdd.preflight.result`): the fetch container writes the compact JSON
result to ``/dev/termination-log`` (``terminationMessagePath``; ≤ 4096 bytes) and exits 0 (passed),
1 (ran, did not pass) or 2 (could not run); serve exits after the fetch said bye or at its
timeout. The controller reads ``status.containerStatuses[name=fetch].state.terminated.message``
of the fetch Job's pod, ``parse_termination_message`` → ``verdict`` (with ``job_failed`` from the
Job's status) → ``combine`` over pairs → the ``KVTransferReady`` condition; all of that is
:func:`qdd.preflight.observe.kv_transfer_verdict` (rendered objects + live Jobs and Pods).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


from .. import labels, names
from ..hashing import content_hash
from ..plan import Plan, RolePlan
from ..preflight.layout import DEFAULT_BULK_BYTES, DEFAULT_REQUESTS
from ..preflight.planned import for_plan
from ..preflight.names import ROLE, SIDE, TERMINATION_LOG, job_name, serve_host, service_name
from ..preflight.verdict import Thresholds
from .placement import ENGINE_ROLES, GPU_ROLES, clique_pod_affinity_term, gpu_node_selector, node_affinity
from .safe import ENV as _env
from .safe import load


@dataclass(frozen=True)
class PreflightOptions:
    """``num_threads``/``split_batch_size``: the UCX backend setting that measured best on two
    H200s (bench/README.md): NIXL splits one request's descriptors over 4 threads."""

    requests: int = DEFAULT_REQUESTS
    bulk_bytes: int = DEFAULT_BULK_BYTES
    num_threads: int = 4
    split_batch_size: int = 1
    thresholds: Thresholds = field(default_factory=Thresholds)
    deadline_seconds: int = 1800
    image: str | None = None


def _base_labels(plan: Plan) -> dict[str, str]:
    return labels.object_labels(plan.name, ROLE)


def _endpoint_selector(plan: Plan, role: RolePlan, endpoint: int) -> dict[str, str]:
    if role.uses_statefulset:
        return {"statefulset.kubernetes.io/pod-name": names.statefulset_pod(plan.name, role.role, endpoint, plan.slot)}
    near = {labels.DEPLOYMENT: plan.name, labels.ROLE: role.role, labels.ENDPOINT: str(endpoint),
            labels.GROUP_ROLE: "leader"}
    # Slot a's selector is the one qdd always rendered (an upgrade re-runs no preflight).
    return near if plan.slot == "a" else {**near, labels.SLOT: plan.slot}


def _affinity(plan: Plan, side: str, pair: int, near: dict[str, str], gang: bool) -> dict[str, Any]:
    other = {labels.DEPLOYMENT: plan.name, labels.ROLE: ROLE, SIDE: "fetch" if side == "serve" else "serve",
             labels.ENDPOINT: str(pair)}
    apart = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": other}}
    # Across nodes when the deployment spans nodes (the prefill→decode path crosses them);
    # only preferred on a single node, where it could never be met.
    anti = ({"requiredDuringSchedulingIgnoredDuringExecution": [apart]} if plan.min_nodes > 1 else
            {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": apart}]})
    aff: dict[str, Any] = {"podAntiAffinity": anti, "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": near}}}]}}
    nodes = node_affinity(plan)
    if nodes:
        aff["nodeAffinity"] = nodes
    if plan.spec.cluster.same_nvlink_domain:
        # With gang scheduling the engines' PodGroup picks the domain; the preflight pods follow
        # the engine pods only (a preflight pod matching its own term could pick a domain first,
        # where the gang need not fit), so they wait until the engines are bound.
        roles = ENGINE_ROLES if gang else GPU_ROLES
        aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = [
            clique_pod_affinity_term(plan.name, roles)]
    return aff


def _mnnvl(plan: Plan) -> bool:
    return any(e.name == "UCX_CUDA_IPC_ENABLE_MNNVL" and e.value == "y" for e in plan.decode.pods[0].env)


def _args(plan: Plan, side: str, pair: int, layout_json: str, o: PreflightOptions) -> list[str]:
    port = str(plan.spec.kv_transfer.side_channel_port)
    # Multi-node NVLink: cuda_ipc crosses nodes only for memory exportable as a FABRIC handle.
    alloc = "vmm" if _mnnvl(plan) else "cudamalloc"
    common = ["--layout-json", layout_json, "--alloc", alloc, "--requests", str(o.requests),
              "--bulk-bytes", str(o.bulk_bytes),
              "--num-threads", str(o.num_threads), "--split-batch-size", str(o.split_batch_size),
              "--result-file", TERMINATION_LOG]
    budget = str(max(60, o.deadline_seconds - 300))
    if side == "serve":
        return ["serve", *common, "--port", port, "--timeout", budget, "--exit-after", "1"]
    # No thresholds: the program reports facts, the operator judges them with the spec's
    # (qdd.preflight.verdict), so a changed threshold re-judges without re-running the Jobs.
    return ["fetch", *common, "--server-host", serve_host(plan.name, plan.namespace, pair), "--server-port", port,
            "--connect-timeout", budget]


def _job(plan: Plan, side: str, pair: int, layout_json: str, o: PreflightOptions, gang: bool) -> dict[str, Any]:
    s = plan.spec
    role = plan.prefill if side == "serve" else plan.decode
    endpoint = pair % role.endpoints
    pod = next(p for p in role.pods if p.endpoint == endpoint and p.group_role == "leader")
    engine = s.engine.model_copy(update={"image": o.image}) if o.image else s.engine
    node_selector = gpu_node_selector(plan)
    text = _env.get_template("preflight-job.yaml.j2").render(
        d=plan, side=side, pair=pair, name=job_name(plan.name, side, pair), service=service_name(plan.name),
        labels={**_base_labels(plan), SIDE: side, labels.ENDPOINT: str(pair)}, deadline=o.deadline_seconds,
        image_pull_secrets=s.engine.image_pull_secrets, node_selector=node_selector,
        affinity=_affinity(plan, side, pair, _endpoint_selector(plan, role, endpoint), gang),
        tolerations=[t.to_k8s() for t in s.cluster.tolerations], compute_domain=plan.compute_domain,
        claim_template=names.imex_claim_template(plan.name, plan.slot), engine=engine,
        args=_args(plan, side, pair, layout_json, o), env=pod.env, port=s.kv_transfer.side_channel_port)
    return load(text)


def _service(plan: Plan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(plan.name), "namespace": plan.namespace,
                         "labels": {**_base_labels(plan), SIDE: "serve"}},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {labels.DEPLOYMENT: plan.name, labels.ROLE: ROLE, SIDE: "serve"},
                     "ports": [{"name": "nixl", "port": plan.spec.kv_transfer.side_channel_port,
                                "targetPort": "nixl"}]}}


def revision(jobs: list[dict[str, Any]]) -> str:
    """Short hash of a preflight pair's pod templates (Job templates are immutable: a new one is a new pair)."""
    return content_hash([j["spec"]["template"]["spec"] for j in jobs], 10)


def preflight_objects(plan: Plan, options: PreflightOptions | None = None, gang: bool = True) -> list[dict[str, Any]]:
    """The Service, then per decode endpoint the serve Job and the fetch Job. ``gang``: the
    cluster gang-schedules the engines (qdd.render.gang), which the affinity follows."""
    o = options or PreflightOptions()
    layout = for_plan(plan)
    layout_json = json.dumps(asdict(layout), sort_keys=True, separators=(",", ":"))
    out: list[dict[str, Any]] = [_service(plan)]
    for pair in range(plan.decode.endpoints):
        jobs = [_job(plan, side, pair, layout_json, o, gang) for side in ("serve", "fetch")]
        rev = revision(jobs)
        for j in jobs:
            j["metadata"]["labels"][labels.REVISION] = rev
            j["spec"]["template"]["metadata"]["labels"][labels.REVISION] = rev
        out += jobs
    return out
