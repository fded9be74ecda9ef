#!/usr/bin/env python3
"""TEST DOUBLE of the kubelet on the simulated GB200 trays, for what touches the trays' disks: the
node-local weight cache's init containers and each engine pod's start length by cache state.

Stands in for: the kubelet (Kubernetes v1.36) running an init container to completion before the
pod's containers, keeping its exit code and termination message in
``status.initContainerStatuses`` (``state.terminated``), and mounting hostPath and claim volumes.
kwok runs no container, so this double runs the program itself — the very file the pod would run,
``program.py`` read from the pod's ConfigMap (qdd.weightcache.program, rendered by the operator) —
with the tray's disk and the claims as host folders:

* a hostPath ``/X`` of tray ``N`` is ``<disks>/trays/N/X``;
* claim ``C`` of namespace ``NS`` is ``<disks>/volumes/NS/C`` (its subPath below it);
* an engine pod's emptyDir holding the model link is ``<disks>/pods/NS/POD/``.

Prefetch pods (``qdd.dev/role=weight-cache``, the DaemonSet's) stay Pending, their init container
running (the Stage ``qdd-weight-cache-held`` keeps kwok's own pod-ready off them), until this
double has run ``program.py prefetch``; then the pod is Running with the program's exit code and
JSON line as the init container's termination message, or, on failure, Pending with the init
container in back-off (not retried here; delete the pod to retry).

Engine pods that carry ``engine.sim.qdd.dev/hold`` (the MutatingAdmissionPolicies of
hack/cluster/engine_stages.py set it on pods with the ``weights-select`` init container, or in a
namespace whose ``qdd-sim-engine-startup`` says ``cache-aware: "true"``) wait for this double:
it runs ``program.py select`` (the link it makes is a real symlink in the pod's folder), writes the
init container's status, and — cache-aware — sets the pod's start length from qdd's start-up model
(qdd.catalog.startup) for the cache state it found: the weights from the tray's verified copy
(``local``) or from the claim (``remote``), the compile caches warm when the pod's compile-cache
claim holds its key's folder from an earlier start that finished compiling (the first start of a
key writes ``<claim>/<key>/.sim-compiled-at``, the time its compile phase ends), cold otherwise;
then it removes the hold, and the engine Stages play the phases.

What it leaves out: image pulls, copy time (the program copies the small test files at once), the
kubelet's retries of a failed init container, and a container restarted in place keeps the start
length its pod was given (a new pod gets a new one).

Usage: fake_tray_disks.py --disks DIR [--kubeconfig PATH] [--resync SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator" / "src"))
sys.path.insert(0, str(ROOT / "hack" / "cluster"))
import pod_double  # noqa: E402  (hack/, next to this script)
from engine_stages import DEFAULT_SCALE, PREFIX, SEED_CHECKPOINT_BYTES  # noqa: E402
from qdd.catalog.startup import LOCAL, REMOTE, engine_startup  # noqa: E402

SELECTOR = "qdd.dev/role"
HOLD = f"{PREFIX}hold"
RESULT = "tray.sim.qdd.dev/result"
COMPILED_AT = ".sim-compiled-at"
log = logging.getLogger("fake-tray-disks")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _args(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


class Disks:
    """The host folders that stand for the trays' disks, the claims and the pods' emptyDirs."""

    def __init__(self, root: Path):
        self.root = root

    def host_path(self, node: str, path: str) -> Path:
        return self.root / "trays" / node / path.lstrip("/")

    def claim(self, namespace: str, claim: str, sub_path: str | None) -> Path:
        p = self.root / "volumes" / namespace / claim
        return p / sub_path if sub_path else p

    def pod_dir(self, namespace: str, pod: str) -> Path:
        return self.root / "pods" / namespace / pod


def _volume_paths(pod: dict[str, Any], container: dict[str, Any], disks: Disks) -> dict[str, Path]:
    """mountPath -> host folder for the hostPath, claim and emptyDir mounts of ``container``."""
    ns, node = pod["metadata"]["namespace"], pod["spec"]["nodeName"]
    vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out = {}
    for m in container.get("volumeMounts") or []:
        v = vols.get(m["name"]) or {}
        if "hostPath" in v:
            out[m["mountPath"]] = disks.host_path(node, v["hostPath"]["path"])
        elif "persistentVolumeClaim" in v:
            out[m["mountPath"]] = disks.claim(ns, v["persistentVolumeClaim"]["claimName"], m.get("subPath"))
        elif "emptyDir" in v:
            out[m["mountPath"]] = disks.pod_dir(ns, pod["metadata"]["name"]) / m["name"]
    return out


def _on_host(path: str, mounts: dict[str, Path]) -> str:
    for mount in sorted(mounts, key=len, reverse=True):
        if path == mount or path.startswith(mount + "/"):
            return str(mounts[mount]) + path[len(mount):]
    return path


def _program(core: client.CoreV1Api, pod: dict[str, Any]) -> str | None:
    """The text of program.py from the ConfigMap the pod mounts (what the kubelet would project)."""
    for v in pod["spec"].get("volumes") or []:
        if "configMap" in v and v["name"] == "weight-cache-program":
            cm = core.read_namespaced_config_map(v["configMap"]["name"], pod["metadata"]["namespace"])
            return (cm.data or {}).get("program.py")
    return None


def run_init(core: client.CoreV1Api, pod: dict[str, Any], init: dict[str, Any], disks: Disks) -> tuple[int, str]:
    """Run the init container's command (``python3 <program> ...``) on the host: (exit code, its
    termination message)."""
    text = _program(core, pod)
    if text is None:
        return 1, json.dumps({"error": "the program's ConfigMap is missing (the kubelet would not start the pod)"})
    mounts = _volume_paths(pod, init, disks)
    for m, host in mounts.items():
        if not m.startswith("/weight-cache-program"):
            host.mkdir(parents=True, exist_ok=True)  # hostPath DirectoryOrCreate, emptyDir, the claim's folder
    argv = list(init["command"])[2:]
    args = [_on_host(a, mounts) if a.startswith("/") else a for a in argv]
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "program.py"
        prog.write_text(text)
        term = Path(tmp) / "termination-log"
        if "--termination-log" in args:
            args[args.index("--termination-log") + 1] = str(term)
        p = subprocess.run([sys.executable, str(prog), *args], capture_output=True, text=True, timeout=600)
        message = term.read_text() if term.exists() else (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode != 0 and not message:
        message = p.stderr[-2000:]
    return p.returncode, message


def _terminated(name: str, image: str, code: int, message: str, started: str) -> dict[str, Any]:
    return {"name": name, "image": image, "ready": code == 0, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "message": message, "startedAt": started, "finishedAt": _now()}}}


def prefetch(core: client.CoreV1Api, pod: dict[str, Any], disks: Disks) -> None:
    started = _now()
    init = next(c for c in pod["spec"]["initContainers"] if c["name"] == "prefetch")
    code, message = run_init(core, pod, init, disks)
    now = _now()
    ok = code == 0
    hold = pod["spec"]["containers"][0]
    init_status = _terminated("prefetch", init["image"], code, message, started)
    if not ok:  # the kubelet restarts a failed init container after a back-off: the last exit in lastState
        init_status["lastState"] = init_status.pop("state")
        init_status["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container prefetch"}}
    status = {
        "phase": "Running" if ok else "Pending",
        "conditions": [{"type": t, "status": "True" if ok else "False", "lastTransitionTime": now}
                       for t in ("Initialized", "Ready", "ContainersReady")] +
                      [{"type": "PodScheduled", "status": "True", "lastTransitionTime": started}],
        "initContainerStatuses": [init_status],
        "containerStatuses": [{"name": hold["name"], "image": hold["image"], "ready": ok, "restartCount": 0,
                               "started": ok, "state": {"running": {"startedAt": now}} if ok else
                               {"waiting": {"reason": "PodInitializing"}}}],
        "startTime": started,
    }
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    core.patch_namespaced_pod_status(name, ns, {"status": status})
    core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {RESULT: str(code)}}})
    log.info("prefetch on %s for %s/%s: exit %d %s", pod["spec"]["nodeName"], ns, name, code, message[:300])


def _compile_state(pod: dict[str, Any], disks: Disks) -> tuple[bool, Path | None]:
    """(warm, the key's folder on its claim) of the pod's compile cache; (False, None) without one."""
    vllm = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")
    root = next((e.get("value") for e in vllm.get("env") or [] if e["name"] == "VLLM_CACHE_ROOT"), None)
    mounts = _volume_paths(pod, vllm, disks)
    if not root or "/compile-cache" not in mounts:
        return False, None
    key_dir = Path(_on_host(root, mounts)).parent
    marker = key_dir / COMPILED_AT
    try:
        warm = float(marker.read_text()) <= time.time()
    except (OSError, ValueError):
        warm = False
    return warm, key_dir


def _probe_kill_ms(pod: dict[str, Any], scale: int, start_ms: int) -> int | None:
    """The kubelet's kill at the startup probe's budget, compressed (as the admission policy works it out)."""
    probe = pod["spec"]["containers"][0].get("startupProbe")
    if not probe:
        return None
    budget = (probe.get("initialDelaySeconds", 0) + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)) * 1000
    return budget // scale if budget // scale < start_ms else None


def start(core: client.CoreV1Api, pod: dict[str, Any], disks: Disks) -> None:
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    ann = pod["metadata"].get("annotations") or {}
    source = "remote"
    init = next((c for c in pod["spec"].get("initContainers") or [] if c["name"] == "weights-select"), None)
    if init is not None:
        started = _now()
        code, message = run_init(core, pod, init, disks)
        with contextlib.suppress(ValueError, AttributeError):
            source = json.loads(message).get("source", "remote")
        core.patch_namespaced_pod_status(name, ns, {"status": {"initContainerStatuses": [
            _terminated("weights-select", init["image"], code, message, started)]}})
        log.info("weights-select on %s for %s/%s: %s", pod["spec"]["nodeName"], ns, name, message[:300])
    patch: dict[str, Any] = {HOLD: None}
    if ann.get(f"{PREFIX}cache-aware") == "true":
        scale = int(ann.get(f"{PREFIX}time-scale") or DEFAULT_SCALE)
        size = float(ann.get(f"{PREFIX}checkpoint-bytes") or SEED_CHECKPOINT_BYTES)
        warm, key_dir = _compile_state(pod, disks)
        phases = engine_startup(size, LOCAL if source == "cache" else REMOTE, compile_cache_warm=warm,
                                memory_plan_cached=warm)
        short = phases.compressed(scale)
        if key_dir is not None and not warm:
            key_dir.mkdir(parents=True, exist_ok=True)
            done = time.time() + short.weights + short.compile
            marker = key_dir / COMPILED_AT
            if not marker.exists():  # the first cold start of a key fills it; concurrent ones compile too
                marker.write_text(f"{done:.3f}")
        kill = _probe_kill_ms(pod, scale, int(short.total * 1000))
        patch |= {f"{PREFIX}{k}": v for k, v in short.as_durations().items()}
        patch |= {f"{PREFIX}weights-from": "cache" if source == "cache" else "claim",
                  f"{PREFIX}compile-cache": "warm" if warm else "cold",
                  f"{PREFIX}probe-kill": f"{kill}ms" if kill is not None else None}
        log.info("start of %s/%s: weights from %s, compile %s: %.1f s modelled (%s)", ns, name, source,
                 "warm" if warm else "cold", phases.total, short.as_durations())
    core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": patch}})


def converge(core: client.CoreV1Api, obj: client.V1Pod, disks: Disks, done: set[str]) -> None:
    """Idempotent: a pod is handled once (``done``: its uid; the watch also delivers the versions
    between this double's own two patches, which still carry the hold)."""
    pod = core.api_client.sanitize_for_serialization(obj)
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if meta.get("deletionTimestamp") or not spec.get("nodeName") or meta["uid"] in done:
        return
    role = (meta.get("labels") or {}).get("qdd.dev/role")
    ann = meta.get("annotations") or {}
    if role == "weight-cache" and RESULT not in ann:
        done.add(meta["uid"])
        prefetch(core, pod, disks)
    elif role in ("prefill", "decode") and HOLD in ann:
        done.add(meta["uid"])
        start(core, pod, disks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--disks", required=True)
    a, _ = ap.parse_known_args()
    disks = Disks(Path(a.disks))
    disks.root.mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    pod_double.run("fake-tray-disks", f"the trays' disks in {disks.root}", SELECTOR,
                   lambda core, pod: converge(core, pod, disks, done))


if __name__ == "__main__":
    main()
