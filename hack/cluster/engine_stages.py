#!/usr/bin/env python3
"""TEST DOUBLE of a kubelet running a vLLM engine: kwok Stages that play an engine pod's start-up
phases, its readiness and its crashes, with the durations of qdd's start-up model.

Stands in for: the kubelet (Kubernetes v1.36, pkg/kubelet: container start, probes, restart
back-off) running ``vllm serve`` (vLLM 0.33). What the real pair does, with sources in
docs/facts/engine-startup.md: the engine reads its weights, compiles, profiles the KV cache,
autotunes and captures CUDA graphs; its API server listens only then, so ``/health`` (the startup
and readiness probes') answers 200 only when the engine serves; a container with a readiness probe
is Ready only then, one without (a multi-pod endpoint's headless worker) is Ready as soon as it
runs. A container that exits is restarted by the kubelet after a back-off of 10 s doubling up to
5 min (restartPolicy Always: StatefulSet pods) or leaves the pod Failed (restartPolicy Never:
qdd's bare pods). An unknown or rejected flag makes ``vllm serve`` exit with status 2 during its
start (argparse), every time it is started again.

What it leaves out: probes are not run (readiness follows the phases, which is what /health would
answer); a liveness probe never fails a serving engine; a DP group's leader does not wait for its
workers (all pods of a group play the same durations); image pulls take no time.

Durations: per pod, from annotations ``engine.sim.qdd.dev/{weights,compile,graphs}`` (Go
durations, already compressed) and ``engine.sim.qdd.dev/time-scale`` (the compression factor,
applied to the kubelet's back-off and to a crash's delay), which the MutatingAdmissionPolicy of
:func:`admission_objects` copies at pod creation from the ConfigMap ``qdd-sim-engine-startup`` of
the pod's namespace (keys ``weights``, ``compile``, ``graphs``, ``time-scale``, ``crash``,
``crash-after``). Without one, the defaults below: the seed's checkpoint read from local storage
with a warm compile cache (qdd.catalog.startup), compressed :data:`DEFAULT_SCALE` times (~1.3 s).
Crashes: ``crash: startup`` (every start of the pod exits 2 after ``crash-after``, default 15 s
compressed: the import time before argparse) or ``crash: serving`` (the engine serves, then exits 1
after ``crash-after``; once: the crash annotation is removed when it fires). A test may also
annotate a live pod ``engine.sim.qdd.dev/crash=serving``.

The startup probe: when the modelled start outlasts the probe's budget (compressed by the same
factor), the kubelet's kill is played: the container exits 137 at the budget and is restarted, as
often as it starts (the policy writes ``engine.sim.qdd.dev/probe-kill`` at admission).

Phases are visible on the pod: ``engine.sim.qdd.dev/phase`` = weights | compile | graphs | serving
| backoff | exited, and ``engine.sim.qdd.dev/phase-until`` (RFC 3339): the phase's end is an
absolute time, so that an unrelated update of the pod (kwok plays a stage's delay again from every
new version of the object) does not restart it.

Usage: ``engine_stages.py stages [ENGINE_LOG_DIR]`` (kwok Stage documents, YAML, appended to the
cluster's kwok configuration by hack/cluster-up.sh; with a folder, also the ClusterLogs that serve a
real engine's start-up log as every ``vllm`` container's, written there in CRI format) | ``engine_stages.py admission`` (a v1/List, JSON, for
kubectl apply).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from qdd.catalog.startup import LOCAL, engine_startup

PREFIX = "engine.sim.qdd.dev/"
CONFIGMAP = "qdd-sim-engine-startup"
PARAM_KEYS = ("weights", "compile", "graphs", "time-scale", "crash", "crash-after", "cache-aware", "checkpoint-bytes")
SEED_CHECKPOINT_BYTES = 237e9
"""nvidia/Qwen3.5-397B-A17B-NVFP4 as qdd.plan.startup.checkpoint_bytes counts it (≈ 237 GB)."""
DEFAULT_SCALE = 100
DEFAULTS = engine_startup(SEED_CHECKPOINT_BYTES, LOCAL, compile_cache_warm=True).compressed(DEFAULT_SCALE).as_durations()
CRASH_AFTER_STARTUP_MS = 15000
"""``vllm serve`` with a flag its parser refuses: the imports (torch, vLLM) take 10-20 s before
argparse exits 2 (measured on the CPU engines here: docs/facts/cpu-engines.md)."""

_ENGINE = [
    {"key": '.metadata.labels["qdd.dev/role"]', "operator": "In", "values": ["prefill", "decode"]},
    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
]


def _phase(*values: str) -> dict[str, Any]:
    return {"key": f'.metadata.annotations["{PREFIX}phase"]', "operator": "In", "values": list(values)}


def _until(key: str = "phase-until") -> dict[str, Any]:
    return {"durationMilliseconds": 0, "durationFrom": {"jq": {"expression": f'.metadata.annotations["{PREFIX}{key}"]'}}}


# Go template helpers, shared by the templates below (kwok renders them with sprig's functions).
_ANN = '{{ $a := or .metadata.annotations dict }}{{ $scale := int (or (index $a "engine.sim.qdd.dev/time-scale") "%d") }}' % DEFAULT_SCALE
_STAMP = '"2006-01-02T15:04:05.000000000Z07:00"'


def _enter(phase: str, extra: str = "") -> str:
    """A metadata patch entering ``phase`` until now + its duration."""
    dur = f'(or (index $a "{PREFIX}{phase}") "{DEFAULTS[phase]}")'
    return (_ANN + "\nmetadata:\n  annotations:\n"
            f'    {PREFIX}phase: {phase}\n'
            f'    {PREFIX}phase-until: {{{{ now | dateModify {dur} | date {_STAMP} | quote }}}}\n' + extra)


# Entering "weights": a flag vLLM refuses ends the process crash-after (default: the import time)
# from now, status 2; else, when the start outlasts the startup probe's budget (probe-kill, worked
# out at admission), the kubelet kills the container at the budget, status 137.
_CRASH_AT_START = (
    '{{ if eq (index $a "engine.sim.qdd.dev/crash" | toString) "startup" }}'
    '{{ $after := or (index $a "engine.sim.qdd.dev/crash-after") (printf "%dms" (div ' + str(CRASH_AFTER_STARTUP_MS) + ' $scale)) }}\n'
    f'    {PREFIX}crash-at: {{{{ now | dateModify $after | date {_STAMP} | quote }}}}\n'
    f'    {PREFIX}exit-code: "2"\n'
    f'    {PREFIX}exit-message: "vllm serve: error: unrecognized arguments (simulated start-up crash)"\n'
    '{{ else if index $a "engine.sim.qdd.dev/probe-kill" }}\n'
    f'    {PREFIX}crash-at: {{{{ now | dateModify (index $a "{PREFIX}probe-kill") | date {_STAMP} | quote }}}}\n'
    f'    {PREFIX}exit-code: "137"\n'
    f'    {PREFIX}exit-message: "startup probe failed: the kubelet killed the engine while it was still starting"\n'
    '{{ end }}\n')
_CRASH_AT_SERVING = (
    '{{ if eq (index $a "engine.sim.qdd.dev/crash" | toString) "serving" }}'
    '{{ $after := or (index $a "engine.sim.qdd.dev/crash-after") "0s" }}\n'
    f'    {PREFIX}crash-at: {{{{ now | dateModify $after | date {_STAMP} | quote }}}}\n'
    '{{ end }}\n')

# The container runs (first start or a restart after back-off): Running, not Ready while a
# readiness probe would fail; a container without probes is started and Ready at once.
_RUNNING = """{{ $now := Now }}
{{ $restarts := 0 }}{{ $last := dict }}
{{ range .status.containerStatuses }}{{ $restarts = int .restartCount }}{{ with .lastState }}{{ $last = . }}{{ end }}{{ end }}
{{ $probed := (index .spec.containers 0).readinessProbe }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: {{ if $probed }}"False"{{ else }}"True"{{ end }}, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: {{ if $probed }}"False"{{ else }}"True"{{ end }}, lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: {{ if .readinessProbe }}false{{ else }}true{{ end }}
  started: {{ if .startupProbe }}false{{ else }}true{{ end }}
  restartCount: {{ $restarts }}
  {{ with $last.terminated }}
  lastState:
    terminated: {exitCode: {{ int .exitCode }}, reason: {{ .reason | Quote }}, finishedAt: {{ .finishedAt | Quote }}, startedAt: {{ .startedAt | Quote }}}
  {{ end }}
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ if not .status.podIP }}{{/* a restarted container keeps its pod's addresses */}}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ end }}
phase: Running
{{ if not .status.startTime }}startTime: {{ $now | Quote }}{{ end }}
"""

# The engine answers /health: started and Ready (a condition already True keeps its transition time:
# the headless worker, without probes, has been Ready since its container ran).
_SERVING = """{{ $now := Now }}
{{ $restarts := 0 }}{{ $last := dict }}{{ $started := $now }}{{ $readyAt := $now }}{{ $crAt := $now }}
{{ range .status.containerStatuses }}{{ $restarts = int .restartCount }}{{ with .lastState }}{{ $last = . }}{{ end }}{{ with .state.running }}{{ $started = .startedAt }}{{ end }}{{ end }}
{{ range .status.conditions }}{{ if eq (.status | toString) "True" }}{{ if eq (.type | toString) "Ready" }}{{ $readyAt = .lastTransitionTime }}{{ end }}{{ if eq (.type | toString) "ContainersReady" }}{{ $crAt = .lastTransitionTime }}{{ end }}{{ end }}{{ end }}
conditions:
- {type: Ready, status: "True", lastTransitionTime: {{ $readyAt | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $crAt | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: {{ $restarts }}
  {{ with $last.terminated }}
  lastState:
    terminated: {exitCode: {{ int .exitCode }}, reason: {{ .reason | Quote }}, finishedAt: {{ .finishedAt | Quote }}, startedAt: {{ .startedAt | Quote }}}
  {{ end }}
  state:
    running:
      startedAt: {{ $started | Quote }}
{{ end }}
"""

# The container exited (status and message from the annotations the crash was planned with, else an
# engine-core death, 1): restartPolicy Always waits in CrashLoopBackOff, Never fails the pod.
_EXITED = """{{ $now := Now }}{{ $a := or .metadata.annotations dict }}
{{ $code := or (index $a "engine.sim.qdd.dev/exit-code") "1" }}
{{ $msg := or (index $a "engine.sim.qdd.dev/exit-message") "EngineCore died unexpectedly (simulated crash after serving)" }}
{{ $restarts := 0 }}{{ $started := $now }}
{{ range .status.containerStatuses }}{{ $restarts = int .restartCount }}{{ with .state.running }}{{ $started = .startedAt }}{{ end }}{{ end }}
{{ $always := ne (.spec.restartPolicy | toString) "Never" }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  {{ if $always }}
  restartCount: {{ add1 $restarts }}
  lastState:
    terminated: {exitCode: {{ $code }}, reason: Error, message: {{ $msg | Quote }}, finishedAt: {{ $now | Quote }}, startedAt: {{ $started | Quote }}}
  state:
    waiting: {reason: CrashLoopBackOff, message: "back-off restarting failed container vllm"}
  {{ else }}
  restartCount: {{ $restarts }}
  state:
    terminated: {exitCode: {{ $code }}, reason: Error, message: {{ $msg | Quote }}, finishedAt: {{ $now | Quote }}, startedAt: {{ $started | Quote }}}
  {{ end }}
{{ end }}
phase: {{ if $always }}Running{{ else }}Failed{{ end }}
"""

# After an exit: back-off (the kubelet's 10 s doubling per restart up to 300 s, compressed), or the end.
_AFTER_EXIT = (_ANN + """
{{ $restarts := 0 }}{{ range .status.containerStatuses }}{{ $restarts = int .restartCount }}{{ end }}
{{ $b := 10000 }}{{ range until $restarts }}{{ $b = mul $b 2 }}{{ end }}{{ $b = min $b 300000 }}
metadata:
  annotations:
    engine.sim.qdd.dev/crash-at: null
    engine.sim.qdd.dev/exit-code: null
    engine.sim.qdd.dev/exit-message: null
{{ if eq (index $a "engine.sim.qdd.dev/crash" | toString) "serving" }}    engine.sim.qdd.dev/crash: null
{{ end }}{{ if ne (.spec.restartPolicy | toString) "Never" }}    engine.sim.qdd.dev/phase: backoff
    engine.sim.qdd.dev/phase-until: {{ now | dateModify (printf "%dms" (div $b $scale)) | date """ + _STAMP + """ | quote }}
{{ else }}    engine.sim.qdd.dev/phase: exited
{{ end }}""")


def _stage(name: str, select: list[dict[str, Any]], steps: list[dict[str, Any]], delay: dict[str, Any] | None = None,
           weight: int = 1) -> dict[str, Any]:
    """One Stage for engine pods. Weight ≥ 1: when kwok's own pod-ready (weight 0) matches as well, a
    stage of weight > 0 is always the one chosen (pkg/utils/lifecycle/lifecycle.go, Match)."""
    spec: dict[str, Any] = {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                            "selector": {"matchExpressions": _ENGINE + select}, "weight": weight, "steps": steps}
    if delay:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "template": template}}


def _meta(template: str) -> dict[str, Any]:
    return {"patch": {"template": template}}


def _exit() -> list[dict[str, Any]]:
    # The annotations first: the pod leaves the crash's stage before its status changes, or the
    # status patch's own event would match the crash again (kwok plays a stage on every new version).
    return [_meta(_AFTER_EXIT), _status(_EXITED)]


def stages() -> list[dict[str, Any]]:
    """The engine pods' Stages, in the order a pod meets them."""
    absent = {"key": f'.metadata.annotations["{PREFIX}phase"]', "operator": "DoesNotExist"}
    pending = {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
    crash = {"key": f'.metadata.annotations["{PREFIX}crash-at"]', "operator": "Exists"}
    no_crash = {"key": f'.metadata.annotations["{PREFIX}crash-at"]', "operator": "DoesNotExist"}
    start = [_status(_RUNNING), _meta(_enter("weights", _CRASH_AT_START))]
    not_held = {"key": f'.metadata.annotations["{HOLD}"]', "operator": "DoesNotExist"}
    held = {"key": f'.metadata.annotations["{HOLD}"]', "operator": "Exists"}
    return [
        _stage("qdd-engine-container-start", [pending, absent, not_held], start),
        # Held for hack/fake_tray_disks.py (its init container, its start length by cache state): no
        # step, and a weight above kwok's own pod-ready keeps that one off the pod meanwhile.
        _stage("qdd-engine-held", [pending, held], [_meta(_NOTHING)], _LONG),
        _stage("qdd-engine-restart", [_phase("backoff")], start, _until()),
        _stage("qdd-engine-weights-loaded", [_phase("weights"), no_crash], [_meta(_enter("compile"))], _until()),
        _stage("qdd-engine-compiled", [_phase("compile"), no_crash], [_meta(_enter("graphs"))], _until()),
        _stage("qdd-engine-serving", [_phase("graphs"), no_crash],
               [_status(_SERVING), _meta(_ANN + f"\nmetadata:\n  annotations:\n    {PREFIX}phase: serving\n" + _CRASH_AT_SERVING)],
               _until()),
        # A start-up crash, or the kubelet's kill at the startup probe's budget.
        _stage("qdd-engine-startup-crash", [_phase("weights", "compile", "graphs"), crash],
               _exit(), _until("crash-at")),
        _stage("qdd-engine-crash", [_phase("serving"), crash],
               _exit(), _until("crash-at")),
        # A live pod annotated crash=serving by a test: the crash is due now.
        _stage("qdd-engine-crash-now", [_phase("serving"), no_crash,
                                         {"key": f'.metadata.annotations["{PREFIX}crash"]', "operator": "In", "values": ["serving"]}],
               _exit()),
    ]


HOLD = f"{PREFIX}hold"
"""On an engine pod that waits for hack/fake_tray_disks.py before its container starts."""
_NOTHING = "metadata:\n  annotations: {}\n"
_LONG = {"durationMilliseconds": 86_400_000}


def weight_cache_stages() -> list[dict[str, Any]]:
    """The prefetch pods of the weight cache (``qdd.dev/role=weight-cache``) wait, Pending, for
    hack/fake_tray_disks.py to run their init container: a Stage above kwok's pod-ready that does nothing."""
    spec = {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": '.metadata.labels["qdd.dev/role"]', "operator": "In", "values": ["weight-cache"]},
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]}]},
            "weight": 1, "delay": _LONG, "steps": [_meta(_NOTHING)]}
    return [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "qdd-weight-cache-held"},
             "spec": spec}]


ENGINE_LOG = "tests/unit/data/vllm-0.32.0-cpu-start-cold.log"
"""The start-up log of a real engine (the CPU build's prefill, captured by make bench-cold-start), which
kwok serves as the log of every simulated ``vllm`` container: what the operator's start-up reader
(qdd.controller.startup_logs) reads through ``pods/log``, as from a real engine."""


def engine_logs(folder: Path | None = None) -> list[dict[str, Any]]:
    """kwok's ClusterLogs (kwok.x-k8s.io/v1alpha1): every container named ``vllm`` logs :data:`ENGINE_LOG`.
    kwok reads a container runtime's log file (CRI format: ``<RFC 3339 time> stdout F <line>`` per line):
    with ``folder``, that file is written there from :data:`ENGINE_LOG`; nothing without one."""
    if folder is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "vllm-engine.cri.log"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    text = (Path(__file__).resolve().parents[2] / ENGINE_LOG).read_text()
    path.write_text("".join(f"{stamp} stdout F {line}\n" for line in text.splitlines()))
    return [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "qdd-engine-logs"},
             "spec": {"logs": [{"containers": ["vllm"], "logsFile": str(path)}]}}]


def admission_objects() -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36) that
    copies a namespace's ConfigMap ``qdd-sim-engine-startup`` onto each engine pod it creates, and
    its binding. No ConfigMap in the namespace: the pod is left as it is (the Stages' defaults)."""
    keys = json.dumps(list(PARAM_KEYS)).replace('"', "'")
    patch = ("!has(params.data) ? [] : (has(object.metadata.annotations) ? [] : [JSONPatch{op: 'add', path: "
             "'/metadata/annotations', value: {}}]) + params.data.filter(k, k in " + keys + ")"
             ".map(k, JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('" + PREFIX + "' + k), "
             "value: params.data[k]}) + (variables.probeKillMs >= 0 ? [JSONPatch{op: 'add', path: "
             "'/metadata/annotations/' + jsonpatch.escapeKey('" + PREFIX + "probe-kill'), "
             "value: string(variables.probeKillMs) + 'ms'}] : []) + ('cache-aware' in params.data && "
             "params.data['cache-aware'] == 'true' ? [JSONPatch{op: 'add', path: '/metadata/annotations/' + "
             "jsonpatch.escapeKey('" + HOLD + "'), value: 'cache-aware'}] : [])")
    timed = "has(params.data) && ['weights', 'compile', 'graphs', 'time-scale'].all(k, k in params.data)"
    probe = "object.spec.containers[0].startupProbe"
    variables = [
        # The modelled start, compressed (ms), when the namespace's ConfigMap gives it.
        {"name": "startMs", "expression": f"{timed} ? " + " + ".join(
            f"duration(params.data['{p}']).getMilliseconds()" for p in ("weights", "compile", "graphs")) + " : -1"},
        # The startup probe's budget (ms, uncompressed): the kubelet restarts a container whose probe
        # has not passed after initialDelaySeconds + periodSeconds x failureThreshold (defaults 0, 10, 3).
        {"name": "budgetMs", "expression": f"has({probe}) ? ({probe}.?initialDelaySeconds.orValue(0) + "
                                           f"{probe}.?periodSeconds.orValue(10) * {probe}.?failureThreshold.orValue(3)) "
                                           "* 1000 : -1"},
        {"name": "probeKillMs", "expression": "variables.startMs >= 0 && variables.budgetMs >= 0 && "
                                              "variables.budgetMs / int(params.data['time-scale']) < variables.startMs ? "
                                              "variables.budgetMs / int(params.data['time-scale']) : -1"},
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "qdd-sim-engine-startup"},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "matchConditions": [{"name": "engine-pod", "expression":
                                 "has(object.metadata.labels) && 'qdd.dev/role' in object.metadata.labels && "
                                 "object.metadata.labels['qdd.dev/role'] in ['prefill', 'decode']"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "variables": variables,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "qdd-sim-engine-startup"},
        "spec": {"policyName": "qdd-sim-engine-startup",
                 "paramRef": {"name": CONFIGMAP, "parameterNotFoundAction": "Allow"}},
    }
    return [policy, binding, *_hold_for_init_objects()]


def _hold_for_init_objects() -> list[dict[str, Any]]:
    """A second policy, without parameters: an engine pod with the weight cache's init container
    (``weights-select``) waits for hack/fake_tray_disks.py to run it, with or without the ConfigMap."""
    name = "qdd-sim-tray-disks"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "matchConditions": [{"name": "engine-pod-with-weight-cache", "expression":
                                 "has(object.metadata.labels) && 'qdd.dev/role' in object.metadata.labels && "
                                 "object.metadata.labels['qdd.dev/role'] in ['prefill', 'decode'] && "
                                 "has(object.spec.initContainers) && "
                                 "object.spec.initContainers.exists(c, c.name == 'weights-select')"}],
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                           "(has(object.metadata.annotations) ? [] : [JSONPatch{op: 'add', path: '/metadata/annotations', "
                           "value: {}}]) + [JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('"
                           + HOLD + "'), value: 'init'}]"}}],
        },
    }
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name}, "spec": {"policyName": name}}
    return [policy, binding]


def main(argv: list[str]) -> int:
    if argv[1:2] == ["stages"] and len(argv) in (2, 3):
        logs = engine_logs(Path(argv[2])) if len(argv) == 3 else []
        sys.stdout.write(yaml.safe_dump_all(stages() + weight_cache_stages() + logs, sort_keys=False, width=1000))
        return 0
    if argv[1:] == ["admission"]:
        json.dump({"apiVersion": "v1", "kind": "List", "items": admission_objects()}, sys.stdout, indent=1)
        return 0
    sys.stderr.write("usage: engine_stages.py stages [ENGINE_LOG_DIR]|admission\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
