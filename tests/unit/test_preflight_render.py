"""The preflight Jobs: serve next to prefill, fetch next to decode, same env and claim as the engines."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from qdd.preflight.layout import TransferLayout
from qdd.preflight.planned import for_plan
from qdd.render.preflight import PreflightOptions, preflight_objects
from qdd.render import render, to_yaml

from ..conftest import EXAMPLES, load
from .helpers import engine_pod_specs, env_of, flag, plan_of

SEED = "qwen35-397b-4xdep2-1xdep8-cc4096"


def _seed() -> dict:
    return copy.deepcopy(load(EXAMPLES / f"{SEED}.yaml"))


def _by_side(objs: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["labels"]["qdd.dev/preflight"] if o["kind"] == "Job" else "service": o for o in objs}


def _pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def test_seed_renders_one_pair_and_a_service():
    objs = preflight_objects(plan_of(_seed()))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Service", f"{SEED}-preflight"), ("Job", f"{SEED}-preflight-serve-0"), ("Job", f"{SEED}-preflight-fetch-0")]
    svc = objs[0]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"qdd.dev/deployment": SEED, "qdd.dev/role": "preflight",
                                       "qdd.dev/preflight": "serve"}
    assert svc["spec"]["ports"] == [{"name": "nixl", "port": 5600, "targetPort": "nixl"}]
    for job in objs[1:]:
        assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 1800
        assert _pod(job)["restartPolicy"] == "Never"
        assert all(len(n) <= 63 for n in (job["metadata"]["name"], _pod(job).get("hostname", "")))


def test_pods_get_the_engines_env_claim_gpu_and_placement():
    cr = _seed()
    plan = plan_of(cr)
    engines = {role: spec for role, _, spec in engine_pod_specs(render(plan))}
    sides = _by_side(preflight_objects(plan))
    for side, role in (("serve", "prefill"), ("fetch", "decode")):
        pod = _pod(sides[side])
        c = pod["containers"][0]
        engine = engines[role]["containers"][0]
        assert c["name"] == side and c["image"] == engine["image"]
        assert c["command"] == ["python3", "-m", "qdd.preflight"] and c["args"][0] == side
        assert c["env"] == engine["env"]  # UCX_*, side channel host/port, VLLM_SSM_CONV_STATE_LAYOUT …
        env = env_of(c)
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"
        assert c["resources"]["requests"]["nvidia.com/gpu"] == "1" == c["resources"]["limits"]["nvidia.com/gpu"]
        assert c["resources"]["claims"] == [{"name": "imex-channel"}]
        # A preflight pod holds a tray of its own (its own claim from the ComputeDomain's template;
        # serve and fetch are on two trays): docs/placement.md#imex-channels-one-claim-per-tray.
        assert pod["resourceClaims"] == [{"name": "imex-channel", "resourceClaimTemplateName": f"{cr['metadata']['name']}-imex-channel"}]
        assert pod["nodeSelector"] == engines[role]["nodeSelector"]
        assert pod["tolerations"] == engines[role]["tolerations"]
        assert c["terminationMessagePath"] == "/dev/termination-log"
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert flag(c["args"], "--result-file") == "/dev/termination-log"
        # GB200: memory exportable as a FABRIC handle, or cuda_ipc cannot cross nodes.
        assert flag(c["args"], "--alloc") == "vmm"
        aff = pod["affinity"]
        clique = aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert clique["topologyKey"] == "nvidia.com/gpu.clique"
        # gang-scheduled engines pick the domain; a preflight pod follows them, never itself
        assert {"key": "qdd.dev/role", "operator": "In", "values": ["prefill", "decode"]} in \
            clique["labelSelector"]["matchExpressions"]
        apart = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert apart["topologyKey"] == "kubernetes.io/hostname"
        assert apart["labelSelector"]["matchLabels"]["qdd.dev/preflight"] == ("fetch" if side == "serve" else "serve")
        near = aff["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert near["labelSelector"]["matchLabels"] == (
            {"statefulset.kubernetes.io/pod-name": f"{SEED}-prefill-0"} if side == "serve" else
            {"qdd.dev/deployment": SEED, "qdd.dev/role": "decode", "qdd.dev/endpoint": "0",
             "qdd.dev/group-role": "leader"})


def test_fetch_reads_the_serve_pod_through_its_dns_name_and_the_plan_layout():
    plan = plan_of(_seed())
    sides = _by_side(preflight_objects(plan))
    serve, fetch = _pod(sides["serve"]), _pod(sides["fetch"])
    assert serve["hostname"] == f"{SEED}-preflight-serve-0" and serve["subdomain"] == f"{SEED}-preflight"
    assert "hostname" not in fetch
    s_args, f_args = serve["containers"][0]["args"], fetch["containers"][0]["args"]
    assert flag(f_args, "--server-host") == f"{SEED}-preflight-serve-0.{SEED}-preflight.default.svc"
    assert flag(f_args, "--server-port") == flag(s_args, "--port") == "5600"
    assert serve["containers"][0]["ports"] == [{"name": "nixl", "containerPort": 5600, "protocol": "TCP"}]
    layout = TransferLayout.from_json(json.loads(flag(s_args, "--layout-json")))
    assert layout == for_plan(plan) == TransferLayout.from_json(json.loads(flag(f_args, "--layout-json")))
    assert layout.descriptors_per_request_coalesced == 15 and layout.kv_cache_dtype == "fp8"
    for args in (s_args, f_args):
        assert flag(args, "--num-threads") == "4" and flag(args, "--split-batch-size") == "1"
    assert flag(f_args, "--connect-timeout") == "1500" and "--min-bulk-gbps" not in f_args


def test_engine_selectors_never_pick_up_preflight_pods():
    plan = plan_of(_seed())
    pods = [o["spec"]["template"]["metadata"]["labels"] for o in preflight_objects(plan) if o["kind"] == "Job"]
    for obj in render(plan):
        sel = (obj["spec"].get("selector") or {}) if obj["kind"] in ("Service", "StatefulSet") else {}
        sel = sel.get("matchLabels", sel)
        if sel:
            assert not any(all(p.get(k) == v for k, v in sel.items()) for p in pods), obj["metadata"]["name"]
    assert {p["qdd.dev/role"] for p in pods} == {"preflight"}


def test_revision_follows_the_plan_and_is_shared_by_the_pair():
    a = preflight_objects(plan_of(_seed()))
    assert to_yaml(a) == to_yaml(preflight_objects(plan_of(_seed())))
    revs = {o["metadata"]["labels"]["qdd.dev/revision"] for o in a if o["kind"] == "Job"}
    assert len(revs) == 1
    assert revs == {o["spec"]["template"]["metadata"]["labels"]["qdd.dev/revision"] for o in a if o["kind"] == "Job"}
    cr = _seed()
    cr["spec"]["kvTransfer"]["ucx"] = {"tls": "cuda_copy,cuda_ipc,tcp"}
    b = preflight_objects(plan_of(cr))
    assert {o["metadata"]["labels"]["qdd.dev/revision"] for o in b if o["kind"] == "Job"} != revs


def test_one_pair_per_decode_endpoint():
    cr = _seed()
    cr["spec"]["decode"]["endpoints"] = 2
    names = [o["metadata"]["name"] for o in preflight_objects(plan_of(cr)) if o["kind"] == "Job"]
    assert names == [f"{SEED}-preflight-serve-0", f"{SEED}-preflight-fetch-0",
                     f"{SEED}-preflight-serve-1", f"{SEED}-preflight-fetch-1"]


def test_single_node_h200_deployment():
    cr = _seed()
    cr["spec"]["cluster"] = {"gpuType": "H200"}
    cr["spec"]["model"] = {"name": "Qwen/Qwen3.5-35B-A3B"}
    cr["spec"]["prefill"]["endpoints"] = 1
    cr["spec"]["decode"]["topology"]["dataParallel"] = 2
    cr["spec"]["workload"]["concurrency"] = 256
    objs = preflight_objects(plan_of(cr), PreflightOptions(image="registry.invalid/qdd-preflight:1"))
    for job in objs[1:]:
        pod = _pod(job)
        c = pod["containers"][0]
        assert c["image"] == "registry.invalid/qdd-preflight:1"
        assert flag(c["args"], "--alloc") == "cudamalloc"
        assert "resourceClaims" not in pod and "claims" not in c["resources"]
        assert "UCX_CUDA_IPC_ENABLE_MNNVL" not in env_of(c)
        # One node holds the whole deployment: apart is only preferred.
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]


def test_pure_modules_import_neither_nixl_nor_torch_and_the_core_does_not_import_the_program():
    """qdd.render renders the preflight Jobs with the pure preflight modules (layout, names, verdict);
    the GPU program (program, serve, fetch, run, wire, buffers) and nixl/torch stay out."""
    code = ("import sys, qdd.plan, qdd.render; "
            "prog = [m for m in sys.modules if m.split('.')[-1] in ('program', 'serve', 'fetch', 'run', 'wire', 'buffers')]; "
            "assert not prog, prog; "
            "import qdd.preflight.layout, qdd.preflight.verdict, qdd.preflight.result, qdd.preflight.ucx, "
            "qdd.render.preflight, qdd.preflight.observe, qdd.preflight.gpu.program; "
            "bad = [m for m in ('nixl', 'torch', 'numpy', 'kopf', 'kubernetes') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_fetch_job_carries_no_thresholds_the_operator_judges(seed_cr):
    """The program reports facts; only the operator judges them, with the spec's thresholds."""
    from qdd.render.preflight import preflight_objects

    from .helpers import plan_of

    seed_cr["spec"]["kvTransfer"] = {"preflight": {"minBulkGbps": 20.0, "maxRequestMs": 25.0}}
    [fetch] = [o for o in preflight_objects(plan_of(seed_cr)) if o["metadata"]["name"].endswith("fetch-0")]
    args = fetch["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith(("--min-", "--max-"))]


@pytest.mark.parametrize("same_domain", [True, False])
def test_user_node_affinity_is_anded_with_the_clique_in_one_term_on_every_gpu_pod(seed_cr, same_domain):
    """Never a second, OR-ed nodeSelectorTerm (NVIDIA/nvcf#1651): one term, every condition in it."""
    from qdd.render import render_all

    from .helpers import plan_of

    seed_cr["spec"]["cluster"]["sameNVLinkDomain"] = same_domain
    seed_cr["spec"]["cluster"]["nodeAffinity"] = [{"key": "pool.example/zone", "operator": "In", "values": ["a", "b"]},
                                                  {"key": "maintenance", "operator": "DoesNotExist"}]
    want = ([{"key": "nvidia.com/gpu.clique", "operator": "Exists"}] if same_domain else []) + [
        {"key": "pool.example/zone", "operator": "In", "values": ["a", "b"]},
        {"key": "maintenance", "operator": "DoesNotExist"}]
    specs = []
    for o in render_all(plan_of(seed_cr)):
        if o["kind"] == "Pod":
            specs.append(o["spec"])
        elif o["kind"] in ("StatefulSet", "Job"):
            specs.append(o["spec"]["template"]["spec"])
    assert len(specs) == 5  # the prefill template, two decode pods, two preflight Jobs
    for spec in specs:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": want}]


@pytest.mark.parametrize(("req", "words"), [
    ({"key": "k", "operator": "In"}, "need at least one value"),
    ({"key": "k", "operator": "Exists", "values": ["x"]}, "take no values"),
    ({"key": "k", "operator": "Gt", "values": ["x"]}, "exactly one integer"),
])
def test_node_affinity_requirements_follow_the_api_servers_rules(seed_cr, req, words):
    from qdd.errors import SpecError

    from .helpers import plan_of

    seed_cr["spec"]["cluster"]["nodeAffinity"] = [req]
    with pytest.raises(SpecError, match=words):
        plan_of(seed_cr)


def test_without_gang_scheduling_preflight_pods_keep_the_clique_with_each_other_too():
    """Fallback (no Workload API): the pod affinity that holds the deployment in one clique
    includes the preflight pods, as before gang scheduling."""
    for job in preflight_objects(plan_of(_seed()), gang=False)[1:]:
        term = job["spec"]["template"]["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "nvidia.com/gpu.clique"
        assert {"key": "qdd.dev/role", "operator": "In", "values": ["prefill", "decode", "preflight"]} in \
            term["labelSelector"]["matchExpressions"]
