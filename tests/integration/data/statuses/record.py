"""Re-record the QwenDisaggDeployment objects that tests/unit/test_argocd_health.py feeds to the
Argo CD health check (charts/qdd-operator/files/argocd-health.lua).

    .qdd/venv/bin/python tests/integration/data/statuses/record.py

Brings up (or reuses) the local control plane the integration tests use (QDD_TEST_CLUSTER,
default qdd-test; QDD_TEST_KUBECONFIG, default .qdd/kubeconfig-test), applies the CRD, runs the
operator as a process, and captures `kubectl get qdd -o json` (managedFields dropped) in each
state, into this folder:

  no-status.json          just applied, the operator has not written status yet
  progressing.json        current generation observed, endpoints starting
  ready.json              Ready=True for the current generation
  stale-generation.json   spec changed (a new engine image), not reconciled yet
  rolling-out.json        the new generation observed, its endpoints rolling out
  degraded.json           a decode pod deleted (held in Terminating by a finalizer so that the
                          state lasts): the whole decode group is being recreated
  invalid-capacity.json   concurrency 20000 exceeds the decode capacity (PlanValid=False)
  invalid-model.json      a model name the catalog does not know (PlanValid=False)

The cluster is left up (it is reused by the next run); QDD_KEEP_CLUSTER is not needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tests.integration.conftest import BIN, TOOLS, Kube, _run_script  # noqa: E402
from tests.integration.operator_proc import OperatorProcess  # noqa: E402

SEED = REPO / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
NS = "qdd-statuses"
HOLD = "qdd.dev/test-hold"


def scrub(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"].pop("managedFields", None)
    return obj


class Watcher:
    """Every version of one QwenDisaggDeployment, from a `kubectl get -w` stream."""

    def __init__(self, kube: Kube, name: str):
        self.kube, self.name = kube, name
        self.seen: list[dict[str, Any]] = []
        self.cv = threading.Condition()
        cmd = [kube.kubectl_bin, "--kubeconfig", str(kube.kubeconfig), "--context", kube.context,
               "get", "qdd", name, "-n", NS, "-o", "json", "--watch"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=kube.env)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        dec, buf = json.JSONDecoder(), ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = dec.raw_decode(buf.lstrip())
                except json.JSONDecodeError:
                    break
                buf = buf.lstrip()[end:]
                with self.cv:
                    self.seen.append(obj)
                    self.cv.notify_all()

    def first(self, pred: Callable[[dict[str, Any]], bool], desc: str, after: int = 0,
              timeout: float = 120) -> dict[str, Any]:
        """The first version (from the ``after``-th on) for which ``pred`` holds."""
        with self.cv:
            ok = self.cv.wait_for(lambda: any(pred(o) for o in self.seen[after:]), timeout)
            if not ok:
                raise SystemExit(f"timed out waiting for {desc}; last: {json.dumps(self.seen[-1:])[:2000]}")
            return next(o for o in self.seen[after:] if pred(o))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def current(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]


def save(name: str, obj: dict[str, Any]) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(scrub(obj), indent=2, sort_keys=True) + "\n")
    print(f"recorded {name}.json: " + ", ".join(f"{c['type']}={c['status']}" for c in
                                                (obj.get("status") or {}).get("conditions") or []))


def seed(name: str, **spec: Any) -> dict[str, Any]:
    cr = yaml.safe_load(SEED.read_text())
    cr["metadata"] = {"name": name, "namespace": NS}
    for dotted, value in spec.items():
        node = cr["spec"]
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return cr


def main() -> None:
    cluster = os.environ.get("QDD_TEST_CLUSTER", "qdd-test")
    kube = Kube(cluster, Path(os.environ.get("QDD_TEST_KUBECONFIG", REPO / ".qdd" / "kubeconfig-test")))
    if any(not (BIN / t).exists() for t in TOOLS):
        _run_script("build-tools.sh", kube.env, "build-tools.log", 3600)
    _run_script("cluster-up.sh", kube.env, f"cluster-up-{cluster}.log", 600)
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                 str(REPO / "crds" / "qdd.dev_qwendisaggdeployments.yaml"))
    kube.kubectl("wait", "--for=condition=Established", "crd/qwendisaggdeployments.qdd.dev", "--timeout=60s")
    kube.kubectl("delete", "namespace", NS, "--ignore-not-found", "--timeout=120s")
    kube.kubectl("create", "namespace", NS)
    kube.wait_for(lambda: kube.exists("serviceaccount", "default", NS), timeout=60, desc="default SA")
    op = OperatorProcess(kube, resync_seconds=5)
    try:
        name = "qwen35"
        # 1. No status: applied while the operator is not running yet.
        kube.apply(seed(name))
        save("no-status", kube.get("qdd", name, NS))
        w = Watcher(kube, name)
        op.start()
        save("progressing", w.first(lambda o: current(o) and cond(o, "Progressing").get("status") == "True",
                                    "Progressing=True"))
        save("ready", w.first(lambda o: current(o) and cond(o, "Ready").get("status") == "True", "Ready=True"))
        # 2. A spec change the operator has not seen: stop it, change the engine image (every
        # endpoint rolls), record, restart.
        op.stop()
        kube.kubectl("patch", "qdd", name, "-n", NS, "--type=merge", "-p",
                     '{"spec":{"engine":{"image":"qdd/vllm:0.33.0-cu13-arm64-r2"}}}')
        save("stale-generation", kube.get("qdd", name, NS))
        op.start()
        save("rolling-out", w.first(lambda o: o["metadata"]["generation"] == 2 and current(o)
                                    and cond(o, "Ready").get("status") == "False", "generation 2 rolling out"))
        w.first(lambda o: o["metadata"]["generation"] == 2 and current(o) and cond(o, "Ready").get("status") == "True",
                "generation 2 Ready")
        # 3. Degraded: a decode pod goes away (held Terminating so the state can be seen).
        pod = f"{name}-decode-0-worker-1"
        kube.kubectl("patch", "pod", pod, "-n", NS, "--type=json",
                     "-p", json.dumps([{"op": "add", "path": "/metadata/finalizers", "value": [HOLD]}]))
        n = len(w.seen)
        kube.kubectl("delete", "pod", pod, "-n", NS, "--wait=false")
        save("degraded", w.first(lambda o: cond(o, "Degraded").get("status") == "True", "Degraded=True", after=n))
        kube.kubectl("patch", "pod", pod, "-n", NS, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
        kube.kubectl("wait", "--for=condition=Ready", f"qdd/{name}", "-n", NS, "--timeout=120s")
        w.stop()
        # 4. Invalid specs: nothing is applied, PlanValid/Ready False, Stalled True.
        for fname, cr in (("invalid-capacity", seed("qwen35-cc20000", **{"workload.concurrency": 20000})),
                          ("invalid-model", seed("qwen35-bad-model", **{"model.name": "acme/NotAQwen-1B"}))):
            kube.apply(cr)  # before the watch: `kubectl get NAME --watch` needs the object
            w = Watcher(kube, cr["metadata"]["name"])
            save(fname, w.first(lambda o: current(o) and cond(o, "PlanValid").get("status") == "False",
                                "PlanValid=False"))
            w.stop()
    finally:
        op.stop()
        kube.kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found", check=False)


if __name__ == "__main__":
    main()
