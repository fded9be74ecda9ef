"""`qdd render` output is what the operator applies, and the operator never writes spec.

Method: the operator applies every child with server-side apply under one field manager,
``qdd-operator``. Its managedFields entry (operation Apply) on a live child is the exact set of
fields the operator sent. For every object `qdd render -f CR` prints, the live child of that kind
and name must exist, and walking the rendered object and that field set together:

* the field set owns exactly the rendered fields — no more (nothing the operator adds beyond the
  render), no fewer — plus the two things the operator adds to every child: the controller
  ownerReference to the QwenDisaggDeployment and the ``qdd.dev/applied-hash`` annotation (the
  hash of the rendered manifest, checked here against the render);
* every rendered value equals the live value at that path (associative lists matched by their
  keys, as the API server merges them; inside atomic values — leaves, atomic lists and structs —
  the live value may only add what the API server adds: defaults such as fieldRef.apiVersion,
  and admission's appended not-ready/unreachable tolerations).

Server defaults and fields other controllers own are outside the field set and so ignored
without listing them. The other direction: every live child the CR controls is in the render.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd.controller.children import APPLIED_HASH, MANAGED_KINDS, manifest_hash
from qdd.render.trayclaims import bind_domain

from .conftest import REPO, VENV_BIN, Kube

SEED = REPO / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
MANAGER = "qdd-operator"
PLURALS = {"ComputeDomain": "computedomains.resource.nvidia.com", "ServiceAccount": "serviceaccounts",
           "Role": "roles.rbac.authorization.k8s.io", "RoleBinding": "rolebindings.rbac.authorization.k8s.io",
           "Service": "services", "StatefulSet": "statefulsets.apps", "Job": "jobs.batch", "Pod": "pods",
           "Deployment": "deployments.apps", "PodDisruptionBudget": "poddisruptionbudgets.policy",
           "Workload": "workloads.scheduling.k8s.io", "PodGroup": "podgroups.scheduling.k8s.io",
           "QwenDisaggRoleScale": "qwendisaggrolescales.qdd.dev",
           "ResourceClaim": "resourceclaims.resource.k8s.io", "ConfigMap": "configmaps",
           "DaemonSet": "daemonsets.apps"}




def seed(namespace: str, preflight: bool) -> dict[str, Any]:
    cr = yaml.safe_load(SEED.read_text())
    cr["metadata"]["namespace"] = namespace
    if not preflight:
        cr["spec"]["kvTransfer"]["preflight"] = {"enabled": False}
    return cr


def qdd_render(cr: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(cr))
    out = subprocess.run([str(VENV_BIN / "qdd"), "render", "-f", str(f)], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def apply_and_wait(kube: Kube, cr: dict[str, Any]) -> dict[str, Any]:
    name, ns = cr["metadata"]["name"], cr["metadata"]["namespace"]
    kube.apply(cr)
    kube.kubectl("wait", "--for=condition=Ready", f"qdd/{name}", "-n", ns, "--timeout=180s", timeout=190)
    return get(kube, "qdd", ns, name)


def get(kube: Kube, kind: str, namespace: str, name: str | None = None) -> Any:
    """`kubectl get -o json` with managedFields (kubectl hides them by default)."""
    args = ["get", kind, *([name] if name else []), "-n", namespace, "-o", "json", "--show-managed-fields"]
    return json.loads(kube.kubectl(*args).stdout)


def live_children(kube: Kube, cr: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of a managed kind that the CR controls (ownerReference controller=true)."""
    uid, ns = cr["metadata"]["uid"], cr["metadata"]["namespace"]
    out = {}
    for _, kind in MANAGED_KINDS:
        for o in get(kube, PLURALS[kind], ns)["items"]:
            if any(r.get("uid") == uid and r.get("controller") for r in o["metadata"].get("ownerReferences") or []):
                out[(kind, o["metadata"]["name"])] = o
    return out


def applied_fields(live: dict[str, Any]) -> dict[str, Any]:
    entries = [m for m in live["metadata"].get("managedFields") or []
               if m["manager"] == MANAGER and m["operation"] == "Apply" and not m.get("subresource")]
    assert len(entries) == 1, f"{live['kind']}/{live['metadata']['name']}: {MANAGER} Apply entries: {entries}"
    return entries[0]["fieldsV1"]


def _keyed(entry_key: str) -> dict[str, Any]:
    return json.loads(entry_key[2:])


def _matches(element: dict[str, Any], key: dict[str, Any]) -> bool:
    """A list element matches an associative-list key when every key field it sets is equal
    (key fields it leaves out are server defaults, e.g. a port's protocol)."""
    return all(element[k] == v for k, v in key.items() if k in element) and \
        any(k in element for k in key)


def within(want: Any, live: Any) -> bool:
    """``want`` is ``live`` minus what the API server added: every rendered map key with an equal
    value (recursively), every rendered list element in order (admission may append, e.g. the
    not-ready/unreachable tolerations; defaulting may fill a field, e.g. fieldRef.apiVersion)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(k in live and within(v, live[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) >= len(want) and all(within(w, x) for w, x in zip(want, live, strict=False))
    return want == live


def compare(want: Any, live: Any, fields: dict[str, Any], path: str, errors: list[str]) -> None:
    """Walk the rendered value ``want``, the live value and the field set together."""
    sub = {k: v for k, v in fields.items() if k != "."}
    if path.count(".") == 1 and path.endswith(".metadata"):
        # Identity, part of every request, never in a field set.
        for k in ("name", "namespace"):
            if want.get(k) != live.get(k):
                errors.append(f"{path}.{k}: rendered {want.get(k)!r}, live {live.get(k)!r}")
        want = {k: v for k, v in want.items() if k not in ("name", "namespace")}
    if isinstance(want, dict) and sub and all(k.startswith("f:") for k in sub):
        owned = {k[2:] for k in sub}
        if owned != set(want):
            errors.append(f"{path}: owned {sorted(owned - set(want))} not rendered; "
                          f"rendered {sorted(set(want) - owned)} not owned")
        if not isinstance(live, dict):
            errors.append(f"{path}: live value is {live!r}")
            return
        for k in sorted(owned & set(want)):
            compare(want[k], live.get(k), sub[f"f:{k}"], f"{path}.{k}", errors)
        return
    if isinstance(want, list) and sub and all(k[:2] in ("k:", "v:") for k in sub):
        if not isinstance(live, list):
            errors.append(f"{path}: live value is {live!r}")
            return
        if all(k.startswith("v:") for k in sub):
            if sorted(json.dumps(json.loads(k[2:])) for k in sub) != sorted(json.dumps(x) for x in want):
                errors.append(f"{path}: owned set {sorted(sub)} != rendered {want}")
            if any(x not in live for x in want):
                errors.append(f"{path}: {want} not all in live {live}")
            return
        if len(sub) != len(want):
            errors.append(f"{path}: {len(sub)} owned elements, {len(want)} rendered")
        for i, elem in enumerate(want):
            keys = [k for k in sub if _matches(elem, _keyed(k))]
            lives = [x for x in live if isinstance(x, dict) and keys and _matches(x, _keyed(keys[0]))]
            if len(keys) != 1 or len(lives) != 1:
                errors.append(f"{path}[{i}]: {len(keys)} owned keys, {len(lives)} live elements match {elem}")
                continue
            compare(elem, lives[0], sub[keys[0]], f"{path}[{i}]", errors)
        return
    # A leaf or an atomic value (scalar, atomic list, map owned whole): equal but for server
    # defaults inside it.
    if sub:
        errors.append(f"{path}: rendered {want!r} but the field set goes deeper: {sorted(sub)[:5]}")
    elif not within(want, live):
        errors.append(f"{path}: rendered {want!r}, live {live!r}")


def check_same(rendered: list[dict[str, Any]], live: dict[tuple[str, str], dict[str, Any]],
               cr: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    for r in rendered:
        k = (r["kind"], r["metadata"]["name"])
        if k not in live:
            errors.append(f"{k}: rendered, not in the cluster")
            continue
        o = live[k]
        want = json.loads(json.dumps(r))
        # What the operator adds to every rendered child (controller.children.with_owner):
        want["metadata"]["ownerReferences"] = [{
            "apiVersion": cr["apiVersion"], "kind": cr["kind"], "name": cr["metadata"]["name"],
            "uid": cr["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        want["metadata"].setdefault("annotations", {})[APPLIED_HASH] = manifest_hash(r)
        if r["kind"] == "ResourceClaim":  # and a tray claim's domainID, the live ComputeDomain's UID
            want = bind_domain(want, [v for (kind, _), v in live.items() if kind == "ComputeDomain"])
            assert want is not None, f"{k}: applied before its ComputeDomain"
        fields = applied_fields(o)
        # apiVersion and kind are part of every apply request, never of the field set.
        compare({k2: v for k2, v in want.items() if k2 not in ("apiVersion", "kind")},
                {k2: v for k2, v in o.items() if k2 not in ("apiVersion", "kind")}, fields, f"{k[0]}/{k[1]}", errors)
    return errors


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight-on", "preflight-off"])
def test_render_is_what_the_operator_applies(kube, operator, namespace, tmp_path, preflight):
    """The children are exactly `qdd render`'s objects (with the KV-transfer preflight's Jobs and
    Service when it is on, the default), field for field."""
    cr = seed(namespace, preflight=preflight)
    live_cr = apply_and_wait(kube, cr)
    rendered = qdd_render(cr, tmp_path)
    live = live_children(kube, live_cr)
    assert sorted(live) == sorted((r["kind"], r["metadata"]["name"]) for r in rendered)
    assert any(k == "Job" for k, _ in live) == preflight
    errors = check_same(rendered, live, live_cr)
    assert not errors, "\n".join(errors)
    # The method is not vacuous: the field sets are deep, and a changed render is caught.
    sts_name = f"{cr['metadata']['name']}-prefill"
    sts = applied_fields(live[("StatefulSet", sts_name)])
    assert "f:template" in sts["f:spec"] and "f:replicas" in sts["f:spec"]
    changed = json.loads(json.dumps(rendered))
    s = next(r for r in changed if r["kind"] == "StatefulSet")
    s["metadata"]["labels"]["extra"] = "label"
    s["spec"]["template"]["spec"]["containers"][0]["args"].append("--one-more")
    del s["spec"]["replicas"]
    caught = check_same(changed, live, live_cr)
    assert len([e for e in caught if e.startswith(f"StatefulSet/{sts_name}")]) >= 3, caught


def test_operator_never_writes_spec(kube, operator, namespace):
    cr = seed(namespace, preflight=False)
    name = cr["metadata"]["name"]
    obj = apply_and_wait(kube, cr)
    assert obj["metadata"]["generation"] == 1
    time.sleep(2 * operator.resync + 1)  # a few resync passes
    kube.kubectl("patch", "qdd", name, "-n", namespace, "--type=merge", "-p",
                 '{"spec":{"prefill":{"endpoints":5}}}')
    kube.wait_for(lambda: (o := kube.get("qdd", name, namespace))["status"].get("observedGeneration") == 2
                  and next(c for c in o["status"]["conditions"] if c["type"] == "Ready")["status"] == "True",
                  timeout=180, desc="generation 2 Ready")
    time.sleep(2 * operator.resync + 1)
    obj = get(kube, "qdd", namespace, name)
    assert obj["metadata"]["generation"] == 2, "only the user's two spec writes may bump the generation"
    managers = obj["metadata"]["managedFields"]
    users = {"kubectl-client-side-apply", "kubectl-patch", "kubectl"}
    spec_owners = {m["manager"] for m in managers if "f:spec" in (m.get("fieldsV1") or {})}
    assert spec_owners <= users, f"spec fields owned by {spec_owners - users}"
    status_writers = {m["manager"] for m in managers if m.get("subresource") == "status"}
    assert status_writers, "the operator writes status through the status subresource"
    assert not status_writers & users
    # Whatever else the operator (and kopf) wrote on the object is metadata only.
    for m in managers:
        if m["manager"] not in users and not m.get("subresource"):
            assert set(m["fieldsV1"]) <= {"f:metadata"}, m
