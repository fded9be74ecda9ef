"""Every seed example renders the seed recipe's values (docs/facts/seed-recipe.md, the vLLM blog's recipes)."""

from __future__ import annotations

import json
import re

import pytest

from ..conftest import ALL_SEED_EXAMPLES, load
from .helpers import by_name, engine_pod_specs, env_of, flag, objects_of, plan_of

CAPTURE = {3072: "512", 4096: "640", 5120: "768"}


def _n(path) -> int:
    return int(re.search(r"-(\d)xdep2", path.name).group(1))


@pytest.mark.parametrize("path", ALL_SEED_EXAMPLES, ids=lambda p: p.stem)
def test_seed_example_renders_the_recipe(path):
    cr = load(path)
    objs = objects_of(cr)
    name = cr["metadata"]["name"]
    cc = cr["spec"]["workload"]["concurrency"]
    n = _n(path)
    assert n == cr["spec"]["prefill"]["endpoints"]

    leader = by_name(objs, "Pod", f"{name}-decode-0-leader")["spec"]["containers"][0]
    assert flag(leader["args"], "--max-cudagraph-capture-size") == CAPTURE[cc]
    assert flag(leader["args"], "--max-num-seqs") == "1024"

    sts = by_name(objs, "StatefulSet", f"{name}-prefill")
    assert sts["spec"]["replicas"] == n
    prefill = sts["spec"]["template"]["spec"]["containers"][0]
    assert flag(prefill["args"], "--max-num-batched-tokens") == "16384"
    assert flag(prefill["args"], "--data-parallel-size") == "2"
    assert "--max-cudagraph-capture-size" not in prefill["args"]

    gpus = 0
    specs = engine_pod_specs(objs)
    assert len(specs) == n + 2
    for role, _labels, spec in specs:
        c = spec["containers"][0]
        args, env = c["args"], env_of(c)
        assert c["command"] == ["vllm", "serve"]
        assert args[0] == "nvidia/Qwen3.5-397B-A17B-NVFP4"
        assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
        assert flag(args, "--mamba-ssm-cache-dtype") == "bfloat16"
        assert "--no-enable-prefix-caching" in args and "--enable-prefix-caching" not in args
        assert "--language-model-only" in args
        assert "--async-scheduling" in args
        assert flag(args, "--stream-interval") == "100"
        assert flag(args, "--tensor-parallel-size") == "1"
        assert "--enable-expert-parallel" in args
        kv = json.loads(flag(args, "--kv-transfer-config"))
        assert kv["kv_connector"] == "NixlConnector"
        assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
        assert kv["kv_load_failure_policy"] == "fail"
        gpus += int(c["resources"]["limits"]["nvidia.com/gpu"])
        assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"]
        assert spec["nodeSelector"]["kubernetes.io/arch"] == "arm64"
        # Prefill DEP2 pods share one claim per tray (the admission policy renames group 0's claim
        # for each ordinal, qdd.render.trayclaims); a decode pod fills its tray: its own claim.
        assert spec["resourceClaims"] == ([{"name": "imex-channel", "resourceClaimName": f"{name}-prefill-tray-0"}]
                                          if role == "prefill" else
                                          [{"name": "imex-channel", "resourceClaimTemplateName": f"{name}-imex-channel"}])
        assert c["resources"]["claims"] == [{"name": "imex-channel"}]
    assert gpus == 2 * n + 8
    claims = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ResourceClaim")
    assert claims == [f"{name}-prefill-tray-{g}" for g in range(-(-n // 2))]
    assert sts["spec"]["template"]["metadata"]["annotations"] == {
        "qdd.dev/tray-claim-prefix": f"{name}-prefill-tray", "qdd.dev/pods-per-tray": "2"}
    assert plan_of(cr).gpus == 2 * n + 8


def test_headless_worker_flags_and_side_channel_ports(seed_cr):
    objs = objects_of(seed_cr)
    name = seed_cr["metadata"]["name"]
    leader = by_name(objs, "Pod", f"{name}-decode-0-leader")["spec"]["containers"][0]
    worker = by_name(objs, "Pod", f"{name}-decode-0-worker-1")["spec"]["containers"][0]
    dns = f"{name}-decode-0-leader.{name}-decode.default.svc"
    for c in (leader, worker):
        assert flag(c["args"], "--data-parallel-size") == "8"
        assert flag(c["args"], "--data-parallel-size-local") == "4"
        assert flag(c["args"], "--data-parallel-address") == dns
        assert flag(c["args"], "--data-parallel-rpc-port") == "29550"
        assert "--data-parallel-rank" not in c["args"]
    assert "--headless" in worker["args"]
    assert flag(worker["args"], "--data-parallel-start-rank") == "4"
    assert "--port" not in worker["args"] and "--api-server-count" not in worker["args"]
    assert "--headless" not in leader["args"] and "--data-parallel-start-rank" not in leader["args"]
    ports = lambda c: sorted(p["containerPort"] for p in c["ports"] if p["name"].startswith("nixl-"))  # noqa: E731
    assert ports(leader) == [5600, 5601, 5602, 5603]
    assert ports(worker) == [5604, 5605, 5606, 5607]
    assert {p["name"]: p["containerPort"] for p in leader["ports"]}["http"] == 8000
    assert not any(p["name"] == "http" for p in worker["ports"])
    # Readiness only where HTTP is served.
    assert "readinessProbe" in leader and "startupProbe" in leader
    assert "readinessProbe" not in worker and "startupProbe" not in worker


def test_prefill_pods_own_base_plus_their_dp_ranks(seed_cr):
    plan = plan_of(seed_cr)
    assert [p.side_channel_ports for p in plan.prefill.pods] == [(5600, 5601)] * 4
    assert [p.side_channel_ports for p in plan.decode.pods] == [(5600, 5601, 5602, 5603), (5604, 5605, 5606, 5607)]
    assert [list(p.dp_ranks) for p in plan.decode.pods] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_labels_on_every_object_and_pod(seed_cr):
    objs = objects_of(seed_cr)
    name = seed_cr["metadata"]["name"]
    for o in objs:
        lab = o["metadata"]["labels"]
        assert lab["qdd.dev/deployment"] == name
        if o["kind"] not in ("ComputeDomain", "Workload", "PodGroup", "ResourceClaim"):  # shared by both engine roles
            assert lab["qdd.dev/role"] in ("prefill", "decode", "router")
    for role, lab, _ in engine_pod_specs(objs):
        assert lab["qdd.dev/role"] == role and lab["qdd.dev/deployment"] == name
    dep = by_name(objs, "Deployment", f"{name}-router")
    assert dep["spec"]["template"]["metadata"]["labels"]["qdd.dev/role"] == "router"


def test_placement_gang_podgroup_and_group_anti_affinity(seed_cr):
    """With the Workload API (the default): one gang of every engine pod in one clique, no pod
    affinity on the clique (prefill pods sharing a tray claim: only the one that keeps them on
    one node, qdd.render.trayclaims.pod_affinity); the fallback (gang=False) keeps today's pod
    affinity on the clique."""
    from qdd.api import parse_resource
    from qdd.plan import build_plan
    from qdd.render import render

    objs = objects_of(seed_cr)
    name = seed_cr["metadata"]["name"]
    pg = by_name(objs, "PodGroup", f"{name}-engines")
    assert pg["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    # seed: 4 prefill DEP2 pods + 1 decode DEP8 over 2 pods
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 6}}
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": "nvidia.com/gpu.clique"}]}
    assert pg["spec"]["podGroupTemplateRef"] == {"workload": {"workloadName": name, "podGroupTemplateName": "engines"}}
    assert pg["metadata"]["annotations"]["qdd.dev/on-change"] == "keep"
    wl = by_name(objs, "Workload", name)
    assert wl["spec"]["controllerRef"] == {"apiGroup": "qdd.dev", "kind": "QwenDisaggDeployment", "name": name}
    assert [t["name"] for t in wl["spec"]["podGroupTemplates"]] == ["engines"]
    assert wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 6}}
    specs = engine_pod_specs(objs)
    assert len(specs) == 6  # 4 prefill (StatefulSet replicas) + 2 decode pods
    for role, _, spec in specs:
        assert spec["schedulingGroup"] == {"podGroupName": f"{name}-engines"}
        terms = spec["affinity"].get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
        assert [t["topologyKey"] for t in terms] == (["kubernetes.io/hostname"] if role == "prefill" else [])
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"] == [{"matchExpressions": [{"key": "nvidia.com/gpu.clique", "operator": "Exists"}]}]
    fallback = render(build_plan(parse_resource(seed_cr)), gang=False)
    assert not [o for o in fallback if o["kind"] in ("Workload", "PodGroup")]
    for _, _, spec in engine_pod_specs(fallback):
        assert "schedulingGroup" not in spec
        term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "nvidia.com/gpu.clique"
    for _, _, spec in engine_pod_specs(objs):
        vol = {v["name"]: v for v in spec["volumes"]}
        assert vol["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    leader = by_name(objs, "Pod", f"{name}-decode-0-leader")["spec"]
    anti = leader["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"]["qdd.dev/endpoint"] == "0"
    assert leader["hostname"] == f"{name}-decode-0-leader" and leader["subdomain"] == f"{name}-decode"
    svc = by_name(objs, "Service", f"{name}-decode")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    cd = by_name(objs, "ComputeDomain", f"{name}-compute-domain")
    assert cd["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{name}-imex-channel"


def test_router_is_pd_mode_with_nixl_and_rbac(seed_cr):
    objs = objects_of(seed_cr)
    name = seed_cr["metadata"]["name"]
    c = by_name(objs, "Deployment", f"{name}-router")["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    assert c["command"] == ["vllm-router"]
    assert "--vllm-pd-disaggregation" in args and flag(args, "--kv-connector") == "nixl"
    assert "--service-discovery" in args and flag(args, "--service-discovery-port") == "8000"
    i = args.index("--decode-selector")
    assert args[i + 1:i + 4] == [f"qdd.dev/deployment={name}", "qdd.dev/role=decode", "qdd.dev/group-role=leader"]
    role = by_name(objs, "Role", f"{name}-router")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_render_is_deterministic(seed_cr):
    from qdd.render import to_yaml

    assert to_yaml(objects_of(seed_cr)) == to_yaml(objects_of(seed_cr))


def test_rendered_yaml_reads_back_the_same_under_yaml_1_1_booleans(seed_cr):
    """kubectl's Go YAML reads bare y/n/on/off as booleans: `qdd render` must quote them."""
    import re

    import yaml

    from qdd.render import to_yaml

    class Yaml11(yaml.SafeLoader):
        pass

    Yaml11.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N|yes|no|on|off|true|false)$"),
                                 list("yYnNtTfFoO"))
    objs = objects_of(seed_cr)
    assert list(yaml.load_all(to_yaml(objs), Loader=Yaml11)) == objs
