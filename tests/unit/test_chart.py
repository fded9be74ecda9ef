"""charts/qdd-operator with the real helm binary: `helm lint --strict`, `helm template` in both
install modes, the RBAC rules exactly as intended (and covering everything the operator's code
touches), restricted Pod Security, the strict values schema, and the CRD identical to `qdd crd`."""

from __future__ import annotations

import copy

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd import cli, labels
from qdd.controller.children import MANAGED_KINDS

from ..conftest import ROOT

CHART = ROOT / "charts" / "qdd-operator"
CRD_FILE = "qdd.dev_qwendisaggdeployments.yaml"
NS = "qdd-system"


def qdd_crd(kind: str = "deployment") -> str:
    """What `qdd crd --kind KIND` prints."""
    p = subprocess.run([sys.executable, "-m", "qdd.cli", "crd", "--kind", kind], capture_output=True, text=True,
                       check=True)
    return p.stdout


def helm_bin() -> str:
    cand = ROOT / ".qdd" / "bin" / "helm"
    found = str(cand) if cand.exists() else shutil.which("helm")
    if not found:
        pytest.fail("helm is not built: run `make tools` (hack/build-tools.sh builds it from Go modules)")
    return found


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def template(*sets: str, set_json: tuple[str, ...] = (), check: bool = True) -> list[dict[str, Any]] | str:
    args = ["template", "qdd", str(CHART), "--namespace", NS]
    for s in sets:
        args += ["--set", s]
    for s in set_json:
        args += ["--set-json", s]
    p = helm(*args, check=check)
    if not check:
        return p.stderr if p.returncode else ""
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def rules_table(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """{(apiGroup, resource): verbs} of a rule list; each (group, resource) must appear once."""
    out: dict[tuple[str, str], set[str]] = {}
    for r in rules:
        assert set(r) <= {"apiGroups", "resources", "verbs"}, r
        for g in r["apiGroups"]:
            for res in r["resources"]:
                assert (g, res) not in out, f"{g}/{res} appears in two rules"
                out[(g, res)] = set(r["verbs"])
    return out


# What the operator is meant to hold, and why (docs/install.md, "RBAC", says the same).
NAMESPACED = {
    ("qdd.dev", "qwendisaggdeployments"): {"get", "list", "watch", "patch"},
    ("qdd.dev", "qwendisaggdeployments/status"): {"patch"},
    ("qdd.dev", "qwendisaggdeployments/finalizers"): {"update"},
    ("qdd.dev", "qwendisaggbenchmarks"): {"get", "list", "watch"},
    ("qdd.dev", "qwendisaggbenchmarks/status"): {"patch"},
    ("qdd.dev", "qwendisaggbenchmarks/finalizers"): {"update"},
    ("qdd.dev", "qwendisaggrolescales"): {"get", "list", "watch", "create", "patch", "delete"},
    ("qdd.dev", "qwendisaggrolescales/scale"): {"get", "patch"},
    ("qdd.dev", "qwendisaggrolescales/status"): {"get", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "events"): {"create"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods/log"): {"get"},
    ("", "services"): {"list", "watch", "create", "patch", "delete"},
    ("", "serviceaccounts"): {"list", "watch", "create", "patch", "delete"},
    ("apps", "statefulsets"): {"list", "watch", "create", "patch", "delete"},
    ("apps", "daemonsets"): {"list", "watch", "create", "patch", "delete"},
    ("apps", "deployments"): {"list", "watch", "create", "patch", "delete"},
    ("batch", "jobs"): {"list", "watch", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"list", "watch", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"list", "watch", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"list", "watch", "create", "patch", "delete"},
    ("resource.nvidia.com", "computedomains"): {"get", "list", "watch", "create", "patch", "delete"},
    ("resource.k8s.io", "resourceclaims"): {"list", "watch", "create", "patch", "delete"},
    ("scheduling.k8s.io", "workloads"): {"list", "watch", "create", "patch", "delete"},
    ("scheduling.k8s.io", "podgroups"): {"list", "watch", "create", "patch", "delete"},
}
# CRD discovery, and the nodes (read-only): their clique labels and GPUs the capacity message counts
# (list), and the node watch for trays coming back (list, watch; qdd.controller.tray_watch). Both in the
# ClusterRole and, namespace-scoped, in the -discovery ClusterRole: nodes are cluster-scoped.
CRDS = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}, ("", "nodes"): {"list", "watch"}}
NAMESPACES = {("", "namespaces"): {"list", "watch"}}


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return template()


@pytest.fixture(scope="module")
def namespaced() -> list[dict[str, Any]]:
    return template(set_json=('watchNamespaces=["llm-a","llm-b"]',))


# --- lint and shape ------------------------------------------------------------------------------

def test_operator_pod_never_lands_on_a_gpu_node(default):
    """The operator needs no GPU: a required node affinity keeps it off GPU trays by default."""
    spec = one(default, "Deployment")["spec"]["template"]["spec"]
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}]}}}


@pytest.mark.parametrize("values", [
    [],
    ["--set-json", 'watchNamespaces=["llm-a","llm-b"]'],
    ["--set", "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,"
              "monitoring.dashboard.enabled=true,crds.install=false"],
], ids=["cluster-scoped", "namespace-scoped", "all-monitoring-no-crd"])
def test_helm_lint_strict(values):
    p = helm("lint", "--strict", str(CHART), "--namespace", NS, *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in p.stdout
    assert "[WARNING]" not in p.stdout and "[ERROR]" not in p.stdout, p.stdout


def test_chart_versions():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "qdd-operator"
    assert chart["version"] == "0.1.0" and chart["appVersion"] == "0.1.0"
    # The image tag defaults to appVersion; `make image-operator` tags the image with the package version.
    pyproject = (ROOT / "operator" / "pyproject.toml").read_text()
    assert f'version = "{chart["appVersion"]}"' in pyproject


def test_default_install_objects(default):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in default)
    assert kinds == sorted([
        ("ServiceAccount", "qdd-qdd-operator"),
        ("ClusterRole", "qdd-qdd-operator"),
        ("ClusterRoleBinding", "qdd-qdd-operator"),
        ("Service", "qdd-qdd-operator-metrics"),
        ("Deployment", "qdd-qdd-operator"),
        ("CustomResourceDefinition", "qwendisaggdeployments.qdd.dev"),
        ("CustomResourceDefinition", "qwendisaggbenchmarks.qdd.dev"),
        ("CustomResourceDefinition", "qwendisaggrolescales.qdd.dev"),
        # docs/placement.md#imex-channels-one-claim-per-tray
        ("MutatingAdmissionPolicy", "qdd-tray-claims"),
        ("MutatingAdmissionPolicyBinding", "qdd-tray-claims"),
    ])
    policy = copy.deepcopy([o for o in default if o["kind"].startswith("MutatingAdmissionPolicy")])
    for o in policy:  # kept on uninstall with the CRDs (crds.keep): deployments outlive the release
        assert o["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep",
                                                    "argocd.argoproj.io/sync-options": "Prune=false,Delete=false"}
    assert policy == list(yaml.safe_load_all((ROOT / "crds" / "qdd-tray-claims-policy.yaml").read_text()))
    for o in default:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "MutatingAdmissionPolicy",
                             "MutatingAdmissionPolicyBinding"):
            assert o["metadata"]["namespace"] == NS, o["metadata"]


# --- RBAC ----------------------------------------------------------------------------------------

def test_cluster_scoped_rbac_is_exactly_as_intended(default):
    role = one(default, "ClusterRole")
    assert rules_table(role["rules"]) == NAMESPACED | CRDS
    binding = one(default, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "qdd-qdd-operator", "namespace": NS}]
    assert not [o for o in default if o["kind"] in ("Role", "RoleBinding")]


def test_namespace_scoped_rbac_is_a_role_per_namespace(namespaced):
    roles = [o for o in namespaced if o["kind"] == "Role"]
    bindings = [o for o in namespaced if o["kind"] == "RoleBinding"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["llm-a", "llm-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["llm-a", "llm-b"]
    for r in roles:
        assert rules_table(r["rules"]) == NAMESPACED
    for b in bindings:
        assert b["roleRef"]["kind"] == "Role" and b["roleRef"]["name"] == "qdd-qdd-operator"
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "qdd-qdd-operator", "namespace": NS}]
    # Cluster-wide: only discovery, read-only.
    [cr] = [o for o in namespaced if o["kind"] == "ClusterRole"]
    assert cr["metadata"]["name"] == "qdd-qdd-operator-discovery"
    assert rules_table(cr["rules"]) == CRDS | NAMESPACES
    [crb] = [o for o in namespaced if o["kind"] == "ClusterRoleBinding"]
    assert crb["roleRef"]["name"] == "qdd-qdd-operator-discovery"
    args = one(namespaced, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=llm-a", "--namespace=llm-b"]


def test_namespace_scoped_without_discovery_has_no_cluster_rbac():
    objs = template("rbac.discovery=false", set_json=('watchNamespaces=["llm-a"]',))
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_rbac_create_false_renders_no_rbac():
    objs = template("rbac.create=false")
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]


def test_no_dangerous_permissions(default, namespaced):
    for o in default + namespaced:
        if o["kind"] not in ("ClusterRole", "Role"):
            continue
        for (group, res), verbs in rules_table(o["rules"]).items():
            assert "*" not in verbs and res != "*" and group != "*", o["metadata"]["name"]
            assert res != "secrets" and not res.startswith("secrets"), "no feature needs secrets"
            assert not verbs & {"escalate", "bind", "impersonate", "update", "deletecollection"} or \
                (res in ("qwendisaggdeployments/finalizers", "qwendisaggbenchmarks/finalizers")
                     and verbs == {"update"}), (res, verbs)
        # The operator never writes spec: no update/patch beyond kopf's annotations on the CR.
        assert all(v != "update" for (g, r), vs in rules_table(o["rules"]).items()
                   if r == labels.PLURAL for v in vs)


def _kopf_watched() -> set[tuple[str, str]]:
    """(group, plural) of every resource the operator's kopf handlers watch, from kopf's registry."""
    import kopf

    from qdd.controller import handlers

    registry = kopf.OperatorRegistry()
    old = kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        handlers.register(lambda: None, 30)
    finally:
        kopf.set_default_registry(old)
    out = set()
    for reg in (registry._watching, registry._changing, registry._spawning, registry._indexing):
        for h in reg.get_all_handlers():
            out.add((h.selector.group or "", h.selector.plural or h.selector.any_name))
    return out


def _plural(kind: str) -> str:
    return {"ComputeDomain": "computedomains", "ServiceAccount": "serviceaccounts", "Role": "roles",
            "RoleBinding": "rolebindings", "Service": "services", "StatefulSet": "statefulsets",
            "Pod": "pods", "Deployment": "deployments", "Job": "jobs", "Workload": "workloads",
            "PodGroup": "podgroups", "PodDisruptionBudget": "poddisruptionbudgets",
            "QwenDisaggRoleScale": "qwendisaggrolescales", "ResourceClaim": "resourceclaims",
            "ConfigMap": "configmaps", "DaemonSet": "daemonsets"}[kind]


def test_rbac_covers_what_the_operator_code_does(default):
    """Every kind the reconcile manages (children.MANAGED_KINDS) can be listed and watched (the
    informers, qdd.controller.informer), server-side applied (patch + create) and pruned
    (delete); every resource kopf watches can be listed and watched; the CR can be read and
    annotated; its status patched."""
    table = rules_table(one(default, "ClusterRole")["rules"])
    for api_version, kind in MANAGED_KINDS:
        group = api_version.rpartition("/")[0]
        have = table.get((group, _plural(kind)), set())
        assert {"list", "watch", "create", "patch", "delete"} <= have, f"{kind}: {have}"
    watched = _kopf_watched()
    assert (labels.GROUP, labels.PLURAL) in watched
    for group, plural in watched:
        assert {"list", "watch"} <= table.get((group, plural), set()), (group, plural)
    assert {"get", "patch"} <= table[(labels.GROUP, labels.PLURAL)]
    assert table[(labels.GROUP, f"{labels.PLURAL}/status")] == {"patch"}


def test_operator_holds_what_the_router_role_grants(default, seed_cr):
    from qdd.api import parse_resource
    from qdd.plan import build_plan
    from qdd.render import render

    table = rules_table(one(default, "ClusterRole")["rules"])
    granted = [o for o in render(build_plan(parse_resource(seed_cr))) if o["kind"] == "Role"]
    assert granted
    for role in granted:
        for (group, res), verbs in rules_table(role["rules"]).items():
            assert verbs <= table.get((group, res), set()), f"router Role grants {group}/{res} {verbs}"


# --- the Deployment ----------------------------------------------------------------------------

def _restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Pod Security Standards, restricted profile (v1.3x), the checks that apply to this pod."""
    bad = []
    psc = pod_spec.get("securityContext") or {}
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(f):
            bad.append(f)
    for v in pod_spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                         "projected", "secret", "image"}:
            bad.append(f"volume {v['name']}: {kinds}")
    if (psc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        bad.append("pod seccompProfile")
    for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            bad.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{c['name']}: allowPrivilegeEscalation")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{c['name']}: capabilities")
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot"))):
            bad.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad.append(f"{c['name']}: runAsUser 0")
        if c.get("ports") and any(p.get("hostPort") for p in c["ports"]):
            bad.append(f"{c['name']}: hostPort")
    return bad


def test_deployment_one_replica_recreate_restricted(default):
    dep = one(default, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert _restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] == 65532 and pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == "qdd-qdd-operator"
    assert c["image"] == "qdd/qdd-operator:0.1.0"


def test_probes_hit_kopf_liveness_endpoint(default):
    [c] = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert f"--liveness-port={ports['health']}" in c["args"]
    assert f"--metrics-port={ports['metrics']}" in c["args"]
    assert "--resync-seconds=30" in c["args"]
    assert not [a for a in c["args"] if a.startswith("--namespace")], "cluster-scoped: no -n"
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def _run_args(objs: list[dict[str, Any]]) -> argparse.Namespace:
    """The operator container's args as `qdd run` parses them (the image's entrypoint is `qdd run`)."""
    [c] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return cli.parser().parse_args(["run", *c["args"]])


def _watch_args(objs: list[dict[str, Any]]) -> list[str]:
    [c] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return [a for a in c["args"] if a.startswith("--watch-")]


def test_watch_timeouts_default_to_the_clis_and_reach_the_args(default):
    """operator.watch.* are `qdd run --watch-*-timeout`, with the same defaults as the CLI's."""
    run_defaults = cli.parser().parse_args(["run"])
    assert (run_defaults.watch_inactivity_timeout, run_defaults.watch_server_timeout,
            run_defaults.watch_client_timeout) == (70.0, 300, 330.0)
    assert _watch_args(default) == ["--watch-inactivity-timeout=70", "--watch-server-timeout=300",
                                    "--watch-client-timeout=330"]
    parsed = _run_args(default)
    for key in ("watch_inactivity_timeout", "watch_server_timeout", "watch_client_timeout"):
        assert getattr(parsed, key) == getattr(run_defaults, key), key
    values = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]["watch"]
    assert values == {"inactivityTimeoutSeconds": 70, "serverTimeoutSeconds": 300, "clientTimeoutSeconds": 330}


def test_watch_timeouts_set_by_values():
    objs = template(set_json=('operator.watch={"inactivityTimeoutSeconds": 45.5, "serverTimeoutSeconds": 120, '
                              '"clientTimeoutSeconds": 150}',))
    assert _watch_args(objs) == ["--watch-inactivity-timeout=45.5", "--watch-server-timeout=120",
                                 "--watch-client-timeout=150"]
    parsed = _run_args(objs)
    assert (parsed.watch_inactivity_timeout, parsed.watch_server_timeout, parsed.watch_client_timeout) == (
        45.5, 120, 150.0)


def test_watch_timeouts_absent_pass_no_flag():
    """Values without operator.watch (a `helm upgrade --reuse-values` from a chart that had none)
    render, and the operator runs with `qdd run`'s defaults."""
    objs = template("operator.watch=null")
    assert _watch_args(objs) == []
    parsed = _run_args(objs)
    assert (parsed.watch_inactivity_timeout, parsed.watch_server_timeout, parsed.watch_client_timeout) == (
        70.0, 300, 330.0)


def test_image_digest_and_tag():
    [c] = one(template("image.tag=1.2.3"), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "qdd/qdd-operator:1.2.3"
    digest = "sha256:" + "a" * 64
    [c] = one(template(f"image.digest={digest}", "image.repository=reg.example/qdd-operator"),
              "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"reg.example/qdd-operator@{digest}"


def test_metrics_service_and_service_monitor():
    objs = template("monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.labels.release=kps")
    svc = one(objs, "Service")
    dep = one(objs, "Deployment")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    [port] = svc["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"
    sm = one(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    [ep] = sm["spec"]["endpoints"]
    assert ep["port"] == "metrics" and ep["honorLabels"] is True and ep["path"] == "/metrics"


def test_dashboard_configmap():
    objs = template("monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace=grafana",
                    "monitoring.dashboard.annotations.grafana_folder=LLM")
    cm = one(objs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    shipped = json.loads((CHART / "dashboards" / "qdd-pd.json").read_text())
    assert json.loads(cm["data"]["qdd-pd.json"]) == shipped
    assert not [o for o in template() if o["kind"] == "ConfigMap"], "off by default"


def test_engine_pod_monitor_is_off_by_default_and_renders_when_on(default):
    assert not [o for o in default if o["kind"] == "PodMonitor"]
    pm = one(template("monitoring.podMonitor.enabled=true"), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}


# --- values schema -------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("unknownKey=1",),
    ("image.unknown=x",),
    ("operator.resyncSeconds=0",),
    ("operator.logLevel=LOUD",),
    ("operator.metricsPort=70000",),
    ("operator.watch.serverTimeoutSeconds=0",),
    ("operator.watch.inactivityTimeoutSeconds=0",),
    ("operator.watch.clientTimeoutSeconds=-1",),
    ("operator.watch.serverTimeoutSeconds=4000",),
    ("operator.watch.unknown=1",),
    ("image.pullPolicy=Sometimes",),
    ("image.digest=latest",),
    ("rbac.create=maybe",),
    ("crds.keep=yes",),
    ("monitoring.serviceMonitor.interval=soon",),
    ("monitoring.dashboard.labels.grafana_dashboard=1",),  # --set gives an int: labels are strings
    ("replicaCount=2",),  # one operator at a time: not a value
    ("monitoring.prometheusRule.thresholds.kvCacheUsage=1.5",),  # a fraction: (0, 1]
    ("monitoring.prometheusRule.thresholds.kvCacheUsage=0",),
    ("monitoring.prometheusRule.thresholds.kvCacheUsage=0.0",),
    ("monitoring.prometheusRule.thresholds.kvCacheUsage=most",),
    ("monitoring.prometheusRule.thresholds.waitingPerEngine=2.5",),  # a count
], ids=lambda a: a[0])
def test_schema_rejects_bad_values(args):
    err = template(*args, check=False)
    assert "values don't meet the specifications of the schema" in err, err


def _rule_exprs(objs: list[dict[str, Any]]) -> dict[str, str]:
    rule = one(objs, "PrometheusRule")
    return {r["alert"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}


def test_prometheus_rule_thresholds_by_set_a_float_and_a_zero():
    """`helm --set` gives 0.9 as the string "0.9" (only integers and booleans are typed): the
    schema takes it (a fraction in (0, 1]) and the rule compares with 0.9; a 0 set stays 0 (not
    the default 32); `--set-json` gives a number, the same rule."""
    exprs = _rule_exprs(template("monitoring.prometheusRule.enabled=true",
                                 "monitoring.prometheusRule.thresholds.kvCacheUsage=0.9",
                                 "monitoring.prometheusRule.thresholds.waitingPerEngine=0"))
    assert exprs["QddKVCacheSaturated"].count(">= 0.9 ") == 2 and ">= 0.95" not in exprs["QddKVCacheSaturated"]
    assert exprs["QddRequestsQueueing"].count("> 0 ") == 2 and "> 32" not in exprs["QddRequestsQueueing"]
    by_json = _rule_exprs(template("monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.thresholds.waitingPerEngine=0",
                                   set_json=("monitoring.prometheusRule.thresholds.kvCacheUsage=0.9",)))
    assert by_json == exprs
    assert ">= 1 " in _rule_exprs(template("monitoring.prometheusRule.enabled=true",
                                           "monitoring.prometheusRule.thresholds.kvCacheUsage=1"))["QddKVCacheSaturated"]


@pytest.mark.parametrize("value", ['["Bad_NS"]', '["a","a"]', '"llm"', '[""]'])
def test_schema_rejects_bad_watch_namespaces(value):
    err = template(set_json=(f"watchNamespaces={value}",), check=False)
    assert "values don't meet the specifications of the schema" in err, err


def test_schema_is_strict_everywhere():
    schema = json.loads((CHART / "values.schema.json").read_text())
    free_form = {"global", "affinity", "tolerations", "extraEnv", "claims"}

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and path.rpartition(".")[2] not in free_form:
            assert "additionalProperties" in node, f"{path} is not strict"
        for k, v in (node.get("properties") or {}).items():
            walk(v, f"{path}.{k}")
    walk(schema, "values")
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def keys(node: Any, sch: dict[str, Any], path: str) -> None:
        if isinstance(node, dict) and "properties" in sch:
            for k, v in node.items():
                assert k in sch["properties"], f"{path}.{k} is not in values.schema.json"
                keys(v, sch["properties"][k], f"{path}.{k}")
    keys(values, schema, "values")


# --- the CRD -------------------------------------------------------------------------------------

def test_chart_crd_is_byte_identical_to_qdd_crd():
    chart_crd = (CHART / "files" / "crds" / CRD_FILE).read_text()
    fix = f"cp crds/{CRD_FILE} charts/qdd-operator/files/crds/ (after `make crds`)"
    assert chart_crd == qdd_crd(), f"the chart's CRD differs from `qdd crd`: {fix}"
    assert chart_crd == (ROOT / "crds" / CRD_FILE).read_text(), f"the chart's CRD differs from crds/: {fix}"
    # The crds/ folder (installed once, never upgraded) holds only kopf's static peering CRDs, never qdd's.
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["kopf.dev_peerings.yaml"]


@pytest.mark.parametrize("kind", ["deployment", "benchmark", "rolescale"])
def test_rendered_crd_is_qdd_crd_plus_keep_policy(default, kind):
    want = yaml.safe_load(qdd_crd(kind))
    rendered = one(default, "CustomResourceDefinition", want["metadata"]["name"])
    assert rendered["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep",
                                                       "argocd.argoproj.io/sync-options": "Prune=false,Delete=false"}
    assert rendered == want


@pytest.mark.parametrize(("kind", "name"), [("benchmark", "qdd.dev_qwendisaggbenchmarks.yaml"),
                                            ("rolescale", "qdd.dev_qwendisaggrolescales.yaml")])
def test_other_crd_files_are_byte_identical_to_qdd_crd(kind, name):
    chart = (CHART / "files" / "crds" / name).read_text()
    assert chart == qdd_crd(kind) == (ROOT / "crds" / name).read_text(), "run `make crds`"


def test_crd_keep_and_install_switches():
    kept = ("CustomResourceDefinition", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    unkept = [o for o in template("crds.keep=false") if o["kind"] in kept]
    assert len(unkept) == 5 and all("annotations" not in o["metadata"] for o in unkept)
    assert not [o for o in template("crds.install=false") if o["kind"] == "CustomResourceDefinition"]


def test_rendered_crd_text_is_the_file_plus_annotations():
    p = helm("template", "qdd", str(CHART), "--namespace", NS, "--show-only", "templates/crd.yaml")
    text = p.stdout.split("\n", 2)[2]  # drop "---" and "# Source: ..."
    inserted = ("  annotations:\n    helm.sh/resource-policy: keep\n"
                "    argocd.argoproj.io/sync-options: Prune=false,Delete=false\n")
    assert inserted in text
    assert text.replace(inserted, "", 1).rstrip("\n") == qdd_crd().rstrip("\n")


def test_kubectl_only_manifests_match_the_chart_objects(default):
    """docs/install.md's kubectl-only install: `helm template` without the CRD (and the tray-claims
    admission policy, also in crds/), plus crds/."""
    objs = template("crds.install=false")
    from_crds = ("CustomResourceDefinition", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in default if o["kind"] not in from_crds)


def test_readme_and_install_doc_commands_use_this_chart():
    doc = (ROOT / "docs" / "install.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for text in (doc, readme):
        assert "helm install" in text and "charts/qdd-operator" in text
    assert "resource.customizations.health.qdd.dev_QwenDisaggDeployment" in doc
    assert "kind: Application" in doc
    assert Path(CHART / "files" / "argocd-health.lua").exists()


# --- operator replicas (kopf peering) -------------------------------------------------------------

def test_two_replicas_peer_through_kopf_and_roll_with_a_surge():
    objs = template("operator.replicas=2")
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert "--peering=qdd-qdd-operator" in c["args"] and "--peering-lifetime=15" in c["args"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    peering = one(objs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "qdd-qdd-operator" and "namespace" not in peering["metadata"]
    rules = rules_table(one(objs, "ClusterRole")["rules"])
    assert rules[("kopf.dev", "clusterkopfpeerings")] == {"get", "list", "watch", "patch"}


def test_one_replica_is_standalone_with_no_peering_objects(default):
    [c] = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [a for a in c["args"] if a.startswith("--peering")]
    assert not [o for o in default if o["kind"] in ("ClusterKopfPeering", "KopfPeering")]


def test_namespaced_replicas_get_a_kopf_peering_per_namespace():
    objs = template("operator.replicas=3", "watchNamespaces={a,b}", "operator.peering.name=ha")
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "KopfPeering") == [
        ("a", "ha"), ("b", "ha")]
    for role in (o for o in objs if o["kind"] == "Role"):
        assert rules_table(role["rules"])[("kopf.dev", "kopfpeerings")] == {"get", "list", "watch", "patch"}


def test_peering_crds_are_kopfs_shape():
    docs = list(yaml.safe_load_all((CHART / "crds" / "kopf.dev_peerings.yaml").read_text()))
    assert sorted((d["spec"]["names"]["kind"], d["spec"]["scope"]) for d in docs) == [
        ("ClusterKopfPeering", "Cluster"), ("KopfPeering", "Namespaced")]
    for d in docs:
        status = d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def test_older_kubernetes_is_refused_with_the_reason():
    """The tray-claims policy is admissionregistration.k8s.io/v1 (GA in Kubernetes 1.36): the chart
    says so for an older cluster instead of an install that fails on an unknown kind."""
    p = helm("template", "qdd", str(CHART), "--namespace", NS, "--kube-version", "1.35.2", check=False)
    assert p.returncode != 0
    assert "needs Kubernetes 1.36 or newer, this cluster is v1.35.2" in p.stderr
    assert "crds.install=false" in p.stderr
    ok = helm("template", "qdd", str(CHART), "--namespace", NS, "--kube-version", "1.35.2", "--set", "crds.install=false")
    assert "MutatingAdmissionPolicy" not in ok.stdout
    assert "kind: MutatingAdmissionPolicy\n" in helm("template", "qdd", str(CHART), "--namespace", NS,
                                                     "--kube-version", "1.36.0").stdout
