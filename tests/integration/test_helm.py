"""charts/qdd-operator on the real local control plane: helm install, upgrade, uninstall.

kwok plays the kubelets, so the chart's operator pod is scheduled and marked Running but no
container runs. What proves the chart works is therefore done twice over:

* the chart's objects are created by the real API server — the operator pod admitted into a
  namespace that enforces the *restricted* Pod Security level, the CRD Established;
* the operator runs here as a process (`qdd run`) with a kubeconfig that authenticates as the
  chart's ServiceAccount (a token from `kubectl create token`), so every API call it makes is
  authorized by the chart's RBAC alone: the seed example reaches Ready, a decode pod deleted is
  recreated with its group, an invalid spec gets its Warning event, a deleted CR is cleaned up,
  and the operator's log shows no Forbidden answer. Along the way the Argo CD health check
  (files/argocd-health.lua, in Lua 5.1) judges the live object: Progressing, Healthy, Degraded
  (a decode pod gone; an unknown model), Progressing again (a spec change not yet reconciled).

Then `helm upgrade` to a newer chart (0.1.1, a new CRD printer column) leaves the newer operator
Deployment and CRD in the cluster, and `helm uninstall` leaves nothing stuck: no RBAC left, the
CRD and the QwenDisaggDeployments kept (by design), none of them blocked by a finalizer. Last,
namespace-scoped mode with its Roles.

The tests of this module share the release and a QwenDisaggDeployment kept across upgrade and
uninstall, each made by a fixture that makes it when it is missing: no test reads what another
test left, and any one of them runs alone (``-k``).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import BIN, REPO, Kube
from .operator_proc import OperatorProcess

CHART = REPO / "charts" / "qdd-operator"
CRD_NAME = "qwendisaggdeployments.qdd.dev"
CRD_FILE = REPO / "crds" / "qdd.dev_qwendisaggdeployments.yaml"
BENCHMARK_CRD_NAME = "qwendisaggbenchmarks.qdd.dev"
BENCHMARK_CRD_FILE = REPO / "crds" / "qdd.dev_qwendisaggbenchmarks.yaml"
ROLESCALE_CRD_NAME = "qwendisaggrolescales.qdd.dev"
ROLESCALE_CRD_FILE = REPO / "crds" / "qdd.dev_qwendisaggrolescales.yaml"
SEED = REPO / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
RELEASE = "qdd-operator"  # objects are named qdd-operator
RELEASE_NS = "qdd-system"
APPS_NS = "qdd-helm-apps"  # holds a QwenDisaggDeployment across install, upgrade and uninstall
LUA = CHART / "files" / "argocd-health.lua"
TIMINGS: dict[str, float] = {}


def helm(kube: Kube, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    binary = BIN / "helm"
    assert binary.exists(), "helm is built by hack/build-tools.sh"
    cmd = [str(binary), "--kubeconfig", str(kube.kubeconfig), "--kube-context", kube.context, *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=kube.env, timeout=timeout)
    TIMINGS[f"helm {args[0]}"] = TIMINGS.get(f"helm {args[0]}", 0) + time.monotonic() - t0
    if check and p.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def sa_kubeconfig(kube: Kube, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig for the current cluster that authenticates with a token of ``sa``."""
    cfg = yaml.safe_load(kube.kubectl("config", "view", "--minify", "--flatten").stdout)
    token = kube.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    cfg["users"] = [{"name": sa, "user": {"token": token}}]
    cfg["contexts"][0]["context"]["user"] = sa
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


class SAOperator(OperatorProcess):
    """`qdd run` as a ServiceAccount, with extra arguments (e.g. --namespace)."""

    def __init__(self, kube: Kube, kubeconfig: Path, args: tuple[str, ...] = ()):
        as_sa = copy.copy(kube)
        as_sa.env = {**kube.env, "KUBECONFIG": str(kubeconfig)}
        as_sa.cluster = f"{kube.cluster}-helm-sa"
        super().__init__(as_sa)
        self.args = args
        self.log_path.unlink(missing_ok=True)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 — the operator process writes it until stop()
        self.proc = subprocess.Popen(
            [str(REPO / ".qdd" / "venv" / "bin" / "qdd"), "run", "--metrics-port", str(self.metrics_port),
             "--liveness-port", str(self.liveness_port), "--resync-seconds", str(self.resync), *self.args],
            env={**self.kube.env, **self.kube.canary_env()}, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.kube.wait_for(self.live, timeout=60, interval=0.3, desc="operator liveness endpoint")

    def forbidden(self) -> list[str]:
        return forbidden_lines(self.log_path.read_text())


FORBIDDEN = re.compile(r"\bforbidden\b|Not enough permissions|\(403\)|\b403 Forbidden\b", re.IGNORECASE)
"""An API server's refusal as the operator logs it: the kubernetes client's ApiException ("(403)",
"Reason: Forbidden", "... is forbidden: User ... cannot ..."), kopf's "Not enough permissions".
Never a bare 403: the log's timestamps carry milliseconds ("00:22:59,403")."""


def forbidden_lines(text: str) -> list[str]:
    """The lines of an operator log that say the API server refused a request."""
    return [ln for ln in text.splitlines() if FORBIDDEN.search(ln)]


def lua_health(obj: dict[str, Any]) -> str:
    from lupa import lua51

    rt = lua51.LuaRuntime()

    def conv(v: Any) -> Any:
        if isinstance(v, dict):
            return rt.table_from({k: conv(x) for k, x in v.items() if x is not None})
        if isinstance(v, list):
            return rt.table_from([conv(x) for x in v])
        return v
    rt.globals().obj = conv(obj)
    return rt.execute(LUA.read_text())["status"]


def cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def seed(namespace: str, name: str | None = None) -> dict[str, Any]:
    cr = yaml.safe_load(SEED.read_text())
    cr["metadata"]["namespace"] = namespace
    if name:
        cr["metadata"]["name"] = name
    return cr


def wait_ready(kube: Kube, name: str, ns: str, timeout: int = 180) -> dict[str, Any]:
    kube.kubectl("wait", "--for=condition=Ready", f"qdd/{name}", "-n", ns, f"--timeout={timeout}s",
                 timeout=timeout + 10)
    return kube.get("qdd", name, ns)


def release_objects(kube: Kube, cluster_scoped: bool = True) -> list[str]:
    """Names of objects labelled with this release that are still in the cluster."""
    sel = f"app.kubernetes.io/instance={RELEASE}"
    kinds = "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,configmaps"
    out = kube.kubectl("get", kinds, "-A", "-l", sel, "-o", "name").stdout.split()
    if cluster_scoped:
        out += kube.kubectl("get", "clusterroles,clusterrolebindings", "-l", sel, "-o", "name").stdout.split()
    return out


@pytest.fixture(scope="module")
def release_ns(kube: Kube):
    """The release namespace, enforcing the restricted Pod Security level. The CRD, if another
    test applied it with kubectl, is handed to the release as docs/install.md says."""
    for ns in (RELEASE_NS, APPS_NS):
        kube.kubectl("delete", "namespace", ns, "--ignore-not-found", "--timeout=120s", timeout=130)
        kube.kubectl("create", "namespace", ns)
    kube.wait_for(lambda: kube.exists("serviceaccount", "default", APPS_NS), timeout=60, desc="default SA")
    kube.kubectl("label", "namespace", RELEASE_NS, "pod-security.kubernetes.io/enforce=restricted",
                 "pod-security.kubernetes.io/enforce-version=latest")
    for crd in (CRD_NAME, BENCHMARK_CRD_NAME, ROLESCALE_CRD_NAME):
        if kube.exists("crd", crd):
            kube.kubectl("annotate", "crd", crd, "--overwrite", f"meta.helm.sh/release-name={RELEASE}",
                         f"meta.helm.sh/release-namespace={RELEASE_NS}")
            kube.kubectl("label", "crd", crd, "--overwrite", "app.kubernetes.io/managed-by=Helm")
    # the tray-claims admission policy and its binding (installed with the CRDs) the same way
    for kind in ("mutatingadmissionpolicy", "mutatingadmissionpolicybinding"):
        if kube.exists(kind, "qdd-tray-claims"):
            kube.kubectl("annotate", kind, "qdd-tray-claims", "--overwrite", f"meta.helm.sh/release-name={RELEASE}",
                         f"meta.helm.sh/release-namespace={RELEASE_NS}")
            kube.kubectl("label", kind, "qdd-tray-claims", "--overwrite", "app.kubernetes.io/managed-by=Helm")
    yield RELEASE_NS
    helm(kube, "uninstall", RELEASE, "-n", RELEASE_NS, "--ignore-not-found", "--wait", check=False)
    for ns in (RELEASE_NS, APPS_NS):
        kube.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
    # Leave the current CRD for the tests that follow (a kubectl server-side apply of crds/).
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE), "-f", str(BENCHMARK_CRD_FILE),
                 "-f", str(ROLESCALE_CRD_FILE), "-f", str(REPO / "crds" / "qdd-tray-claims-policy.yaml"), check=False)
    print("\nhelm timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(TIMINGS.items())))


def installed(kube: Kube) -> list[dict[str, Any]]:
    """The releases named RELEASE in RELEASE_NS (helm list)."""
    out = json.loads(helm(kube, "list", "-n", RELEASE_NS, "-o", "json").stdout)
    return [r for r in out if r["name"] == RELEASE]


@pytest.fixture
def release(kube, release_ns) -> str:
    """The chart 0.1.0 installed cluster-scoped in RELEASE_NS (installed now when it is not)."""
    if not installed(kube):
        helm(kube, "install", RELEASE, str(CHART), "-n", release_ns, "--wait", "--timeout", "120s")
    return helm(kube, "status", RELEASE, "-n", release_ns).stdout


@pytest.fixture
def kept(kube, release, tmp_path) -> tuple[str, str, int]:
    """(namespace, name, generation) of a QwenDisaggDeployment that the chart's operator made Ready,
    then edited while no operator runs (its status older than its spec): what upgrade and
    uninstall must leave alone. Made when missing (module-long: a later test finds it)."""
    ns, name = APPS_NS, "kept"
    if kube.exists("qdd", name, ns):
        obj = kube.get("qdd", name, ns)
        return ns, name, obj["metadata"]["generation"]
    op = SAOperator(kube, sa_kubeconfig(kube, RELEASE_NS, RELEASE, tmp_path / "sa-kept.kubeconfig"))
    op.start()
    try:
        kube.apply(seed(ns, name))
        wait_ready(kube, name, ns)
    finally:
        op.stop()
    kube.kubectl("patch", "qdd", name, "-n", ns, "--type=merge", "-p", '{"spec":{"prefill":{"endpoints":3}}}')
    obj = kube.get("qdd", name, ns)
    assert obj["status"]["observedGeneration"] < obj["metadata"]["generation"]
    return ns, name, obj["metadata"]["generation"]


def test_install_cluster_scoped(kube, release_ns, release):
    assert "STATUS: deployed" in release
    kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    crd = kube.get("crd", CRD_NAME)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The operator pod passed the restricted Pod Security admission and is (simulated) running.
    kube.kubectl("-n", release_ns, "rollout", "status", f"deployment/{RELEASE}", "--timeout=60s")
    [pod] = kube.get("pods", namespace=release_ns, selector="app.kubernetes.io/component=operator")["items"]
    assert pod["spec"]["serviceAccountName"] == RELEASE
    assert pod["spec"]["containers"][0]["image"] == "qdd/qdd-operator:0.1.0"
    dep = kube.get("deployment", RELEASE, release_ns)
    assert dep["spec"]["strategy"]["type"] == "Recreate" and dep["spec"]["replicas"] == 1
    # What the ServiceAccount may and may not do, asked of the API server's authorizer.
    who = f"system:serviceaccount:{release_ns}:{RELEASE}"
    for verb, res, ok in [("patch", "qwendisaggdeployments.qdd.dev/status", True), ("watch", "pods", True),
                          ("delete", "pods", True), ("create", "events", True), ("patch", "statefulsets.apps", True),
                          ("get", "secrets", False), ("update", "qwendisaggdeployments.qdd.dev", False),
                          ("escalate", "roles.rbac.authorization.k8s.io", False),
                          ("create", "clusterroles.rbac.authorization.k8s.io", False),
                          ("delete", "customresourcedefinitions.apiextensions.k8s.io", False)]:
        r = kube.kubectl("auth", "can-i", verb, res, "-A", f"--as={who}", check=False)
        assert r.stdout.strip() == ("yes" if ok else "no"), (verb, res, r.stdout, r.stderr)


def test_chart_rbac_is_enough_for_the_operator(kube, release_ns, release, tmp_path):
    """The operator with only the chart's ServiceAccount token drives the seed example to Ready."""
    namespace = APPS_NS
    op = SAOperator(kube, sa_kubeconfig(kube, release_ns, RELEASE, tmp_path / "sa.kubeconfig"))
    op.start()
    try:
        cr = seed(namespace)
        name = cr["metadata"]["name"]
        t0 = time.monotonic()
        kube.apply(cr)
        first = kube.wait_for(lambda: (o := kube.get("qdd", name, namespace)).get("status") and o,
                              timeout=60, desc="first status")
        assert lua_health(first) in ("Progressing", "Healthy")
        obj = wait_ready(kube, name, namespace)
        TIMINGS["seed Ready as the chart's SA"] = time.monotonic() - t0
        assert lua_health(obj) == "Healthy"
        assert obj["status"]["prefillReady"] == "4/4" and obj["status"]["decodeReady"] == "1/1"
        # The router's Role was created by the operator: RBAC let it grant what it holds.
        assert kube.exists("role", f"{name}-router", namespace)
        # A decode pod dies (held Terminating by a finalizer, as a slow engine shutdown would):
        # Degraded, in Argo CD too; the operator (delete, create) recreates the whole group.
        before = {p["metadata"]["uid"] for p in kube.get("pods", namespace=namespace,
                                                         selector=f"qdd.dev/deployment={name},qdd.dev/role=decode")["items"]}
        worker = f"{name}-decode-0-worker-1"
        kube.kubectl("patch", "pod", worker, "-n", namespace, "--type=json",
                     "-p", '[{"op":"add","path":"/metadata/finalizers","value":["qdd.dev/test-hold"]}]')
        kube.kubectl("delete", "pod", worker, "-n", namespace, "--wait=false")
        degraded = kube.wait_for(lambda: cond(o := kube.get("qdd", name, namespace), "Degraded").get("status") == "True"
                                 and o, timeout=60, desc="Degraded=True")
        assert lua_health(degraded) == "Degraded"
        kube.kubectl("patch", "pod", worker, "-n", namespace, "--type=json",
                     "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')

        def regrouped():
            pods = kube.get("pods", namespace=namespace, selector=f"qdd.dev/deployment={name},qdd.dev/role=decode")["items"]
            o = kube.get("qdd", name, namespace)
            return (len(pods) == 2 and not ({p["metadata"]["uid"] for p in pods} & before)
                    and cond(o, "Ready").get("status") == "True" and o)
        kube.wait_for(regrouped, timeout=120, desc="decode group recreated and Ready")
        # An invalid spec: status and a Warning event (events: create).
        bad = seed(namespace, "bad-model")
        bad["spec"]["model"]["name"] = "acme/NotAQwen-1B"
        kube.apply(bad)
        kube.wait_for(lambda: cond(kube.get("qdd", "bad-model", namespace), "PlanValid").get("status") == "False",
                      timeout=60, desc="PlanValid=False")
        assert lua_health(kube.get("qdd", "bad-model", namespace)) == "Degraded"
        events = kube.get("events", namespace=namespace)["items"]
        assert any(e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == "bad-model" for e in events)
        kube.kubectl("delete", "qdd", "bad-model", "-n", namespace, "--timeout=30s")
        assert op.forbidden() == [], op.forbidden()
        assert op.proc is not None and op.proc.poll() is None
        # A spec change while no operator runs: Argo CD says Progressing (older observedGeneration).
        op.stop()
        kube.kubectl("patch", "qdd", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"prefill":{"endpoints":3}}}')
        stale = kube.get("qdd", name, namespace)
        assert stale["status"]["observedGeneration"] < stale["metadata"]["generation"]
        assert lua_health(stale) == "Progressing"
    finally:
        op.stop()
    kube.kubectl("delete", "qdd", name, "-n", namespace, "--timeout=60s", timeout=70)


def _newer_chart(tmp_path: Path) -> Path:
    """The chart as 0.1.1: new version and appVersion, and a CRD with one more printer column."""
    chart = tmp_path / "qdd-operator"
    shutil.copytree(CHART, chart)
    meta = (chart / "Chart.yaml").read_text()
    meta = meta.replace("version: 0.1.0", "version: 0.1.1").replace('appVersion: "0.1.0"', 'appVersion: "0.1.1"')
    (chart / "Chart.yaml").write_text(meta)
    crd_path = chart / "files" / "crds" / CRD_FILE.name
    text = crd_path.read_text()
    column = ("    - name: Router\n      type: string\n      jsonPath: .status.routerEndpoint\n"
              "      description: Router endpoint (added in chart 0.1.1).\n      priority: 1\n")
    assert "    additionalPrinterColumns:\n" in text
    crd_path.write_text(text.replace("    additionalPrinterColumns:\n", "    additionalPrinterColumns:\n" + column, 1))
    return chart


def test_upgrade_to_newer_chart(kube, release_ns, release, kept, tmp_path):
    chart = _newer_chart(tmp_path)
    old_rs = {r["metadata"]["name"] for r in kube.get("replicasets", namespace=release_ns)["items"]}
    pkg = helm(kube, "package", str(chart), "-d", str(tmp_path)).stdout
    tgz = tmp_path / "qdd-operator-0.1.1.tgz"
    assert tgz.exists(), pkg
    helm(kube, "upgrade", RELEASE, str(tgz), "-n", release_ns, "--reuse-values", "--wait", "--timeout", "120s")
    kube.kubectl("-n", release_ns, "rollout", "status", f"deployment/{RELEASE}", "--timeout=60s")
    [rel] = json.loads(helm(kube, "list", "-n", release_ns, "-o", "json").stdout)
    assert rel["chart"] == "qdd-operator-0.1.1" and rel["app_version"] == "0.1.1" and rel["revision"] == "2"
    # The newer operator runs: one pod, of the new image, the old ReplicaSet scaled to zero.
    pods = kube.get("pods", namespace=release_ns, selector="app.kubernetes.io/component=operator")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert [p["spec"]["containers"][0]["image"] for p in live] == ["qdd/qdd-operator:0.1.1"]
    for r in kube.get("replicasets", namespace=release_ns)["items"]:
        if r["metadata"]["name"] in old_rs:
            assert r["spec"]["replicas"] == 0
    # The newer CRD is served: the new column, still kept on uninstall.
    crd = kube.get("crd", CRD_NAME)
    cols = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert cols[0] == "Router", cols
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The QwenDisaggDeployment left running across the upgrade is untouched.
    ns, name, generation = kept
    obj = kube.get("qdd", name, ns)
    assert obj["metadata"]["generation"] == generation and not obj["metadata"].get("deletionTimestamp")
    out = kube.kubectl("get", "qdd", name, "-n", ns, "-o", "wide").stdout
    assert "ROUTER" in out.splitlines()[0], out


def test_uninstall_leaves_nothing_stuck(kube, release_ns, release, kept):
    helm(kube, "uninstall", RELEASE, "-n", release_ns, "--wait", "--timeout", "120s")
    assert json.loads(helm(kube, "list", "-n", release_ns, "-o", "json").stdout) == []
    kube.wait_for(lambda: release_objects(kube) == [], timeout=60, desc="no object of the release left")
    # Kept by design: the CRD, and with it the QwenDisaggDeployments — none stuck in deletion.
    assert kube.exists("crd", CRD_NAME)
    for o in json.loads(kube.kubectl("get", "qdd", "-A", "-o", "json").stdout)["items"]:
        assert not o["metadata"].get("deletionTimestamp"), o["metadata"]
        assert not o["metadata"].get("finalizers"), o["metadata"]
    # With no operator running, deleting one completes at once and its children go with it.
    ns, name, _ = kept
    kube.kubectl("delete", "qdd", name, "-n", ns, "--timeout=30s")
    sel = f"qdd.dev/deployment={name}"
    kube.wait_for(lambda: not kube.get("pods,statefulsets,deployments,services,roles,rolebindings,jobs",
                                       namespace=ns, selector=sel)["items"],
                  timeout=90, desc="garbage collector removed every child")
    kube.kubectl("delete", "namespace", release_ns, "--timeout=60s", timeout=70)


def test_namespace_scoped_mode(kube, namespace, tmp_path):
    """watchNamespaces=[ns]: Roles only there, the operator (as the chart's SA, `--namespace ns`)
    serves that namespace and cannot even see another one. The CRD is left as it is
    (crds.install=false: the one kept from the first release)."""
    # Whatever release an earlier test left is uninstalled first (its cluster-scoped RBAC too); the
    # CRD this mode does not install is applied when no earlier test left it.
    helm(kube, "uninstall", RELEASE, "-n", RELEASE_NS, "--ignore-not-found", "--wait", check=False)
    if not kube.exists("crd", CRD_NAME):
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE), "-f", str(BENCHMARK_CRD_FILE))
        kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    if not kube.exists("mutatingadmissionpolicy", "qdd-tray-claims"):  # installed with the CRDs, kept likewise
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds" / "qdd-tray-claims-policy.yaml"))
    kube.kubectl("delete", "namespace", RELEASE_NS, "--ignore-not-found", "--timeout=120s", timeout=130)
    kube.kubectl("create", "namespace", RELEASE_NS)
    other = f"{namespace}-other"
    kube.kubectl("create", "namespace", other)
    try:
        helm(kube, "install", RELEASE, str(CHART), "-n", RELEASE_NS, "--set", "crds.install=false",
             "--set-json", f'watchNamespaces=["{namespace}"]', "--wait", "--timeout", "120s")
        assert kube.exists("role", RELEASE, namespace) and not kube.exists("role", RELEASE, other)
        assert not kube.exists("clusterrole", RELEASE) and kube.exists("clusterrole", f"{RELEASE}-discovery")
        args = kube.get("deployment", RELEASE, RELEASE_NS)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--namespace={namespace}" in args
        who = f"system:serviceaccount:{RELEASE_NS}:{RELEASE}"
        for ns, ok in ((namespace, "yes"), (other, "no")):
            r = kube.kubectl("auth", "can-i", "list", "qwendisaggdeployments.qdd.dev", "-n", ns, f"--as={who}", check=False)
            assert r.stdout.strip() == ok, (ns, r.stdout)
        op = SAOperator(kube, sa_kubeconfig(kube, RELEASE_NS, RELEASE, tmp_path / "sa.kubeconfig"),
                        ("--namespace", namespace))
        op.start()
        try:
            mine, theirs = seed(namespace), seed(other)
            kube.apply(mine)
            kube.apply(theirs)
            wait_ready(kube, mine["metadata"]["name"], namespace)
            time.sleep(3)
            assert "status" not in kube.get("qdd", theirs["metadata"]["name"], other), "not watched"
            assert op.forbidden() == [], op.forbidden()
        finally:
            op.stop()
        for cr in (mine, theirs):
            kube.kubectl("delete", "qdd", cr["metadata"]["name"], "-n", cr["metadata"]["namespace"], "--timeout=30s")
        helm(kube, "uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "120s")
        kube.wait_for(lambda: release_objects(kube) == [], timeout=60, desc="no object of the release left")
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", "--ignore-not-found", check=False)
