"""One level-triggered reconcile per QwenDisaggBenchmark: read the deployment (never write it), run
the benchmark's Jobs one after the other, record results in status and a ConfigMap.

Each pass: parse the benchmark → read its deployment and plan it (as its own reconcile does) →
while the deployment is not Ready, start nothing → apply the scripts ConfigMap → delete Jobs whose
manifest changed (a changed spec or image re-runs the steps) → read the Jobs and pods
(:func:`qdd.bench.observe.progress`) → create the next step's Job when nothing runs → write
``<benchmark>-results`` (results.json, the input of ``qdd bench report``) and the status. Every
child carries an owner reference to the benchmark: deleting it removes them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from typing import Any

from kubernetes.dynamic.exceptions import NotFoundError

from .. import labels
from ..api import parse_resource
from ..api.benchmark import KIND, BenchmarkSpec, parse_benchmark_spec
from ..api.conditions import Reason
from ..bench.observe import Progress, progress, topology
from ..errors import SpecError
from ..plan import Plan, build_plan
from ..render import benchmark as rb
from ..safetext import safe_value
from .bench_status import BenchFacts, compute_bench_status
from .children import APPLIED_HASH, with_owner
from .kube import TIMEOUT, Kube
from .status import status_patch

log = logging.getLogger("qdd.benchmark")
API_VERSION = f"{labels.GROUP}/{labels.VERSION}"


def _ready_cond(dep: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (dep.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def _ready(dep: dict[str, Any]) -> bool:
    return _ready_cond(dep).get("status") == "True"


def serves_for_gate(dep: dict[str, Any], generation: str) -> bool:
    """The deployment serves ``generation`` with everything but its accuracy gate ready: its status
    is of its current spec, names ``generation`` as current, and Ready is True or False only for the
    accuracy (AccuracyPending: the router serves it, every endpoint registered, the canary passed)."""
    st, cond = dep.get("status") or {}, _ready_cond(dep)
    return (st.get("observedGeneration") == dep["metadata"].get("generation")
            and (st.get("rollout") or {}).get("generation") == generation
            and (cond.get("status") == "True" or cond.get("reason") == Reason.ACCURACY_PENDING))


def _waiting(dep: dict[str, Any], name: str, generation: str | None) -> str:
    """Why the benchmark waits, with the deployment's own Ready reason and message (e.g. how many
    endpoints the router has registered)."""
    cond = _ready_cond(dep)
    why = f" ({cond.get('reason')}: {str(cond.get('message') or '')[:WAITING_EXCERPT]})" if cond.get("reason") else ""
    if generation is not None:
        return f"QwenDisaggDeployment {name} does not serve generation {generation} yet{why}"
    return f"QwenDisaggDeployment {name} is not Ready{why}"


WAITING_EXCERPT = 300
"""Characters of the deployment's Ready message quoted in the benchmark's."""


def _topology(plan: Plan) -> str:
    s = plan.spec
    return topology(s.prefill.endpoints, s.prefill.topology.data_parallel, s.decode.endpoints,
                    s.decode.topology.data_parallel, s.prefill.topology.tensor_parallel, s.decode.topology.expert_parallel)


class BenchmarkReconciler:
    def __init__(self, kube: Kube, namespaces: list[str] | None = None):
        self.kube = kube
        self.namespaces = namespaces or []
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    # --- API access (the dynamic client of qdd's Kube) ---------------------------------------------
    def _res(self, api_version: str, kind: str) -> Any:
        return self.kube.dyn.resources.get(api_version=api_version, kind=kind)

    def _get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._res(api_version, kind).get(name=name, namespace=namespace, _request_timeout=TIMEOUT).to_dict())
        except NotFoundError:
            return None

    def _list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        items = self._res(api_version, kind).get(namespace=namespace, label_selector=selector,
                                                 _request_timeout=TIMEOUT).to_dict()["items"]
        return [dict(i) for i in items]

    def list_benchmarks(self, namespace: str | None = None) -> list[tuple[str, str]]:
        res = self._res(API_VERSION, KIND)
        spaces: list[str | None] = [namespace] if namespace else [*self.namespaces] or [None]
        lists = [res.get(namespace=ns, _request_timeout=TIMEOUT) if ns else res.get(_request_timeout=TIMEOUT)
                 for ns in spaces]
        return sorted((i.metadata.namespace, i.metadata.name) for lst in lists for i in lst.items)

    # --- the pass ----------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        """One pass; passes of one benchmark never overlap (a second waits for the first)."""
        with self._guard:
            lock = self._locks.setdefault((namespace, name), threading.Lock())
        with lock:
            self.once(namespace, name)

    def once(self, namespace: str, name: str) -> str:
        bench = self._get(API_VERSION, KIND, namespace, name)
        if bench is None or bench["metadata"].get("deletionTimestamp"):
            return "gone"
        gen = bench["metadata"].get("generation")
        try:
            spec = parse_benchmark_spec(bench.get("spec"))
        except SpecError as e:
            return self._write(bench, BenchFacts(gen, None, invalid="; ".join(str(x) for x in e.errors)))
        facts = {"generation": gen, "accuracy_requested": spec.accuracy is not None}
        dep = self.kube.get_cr(namespace, spec.deployment_name)
        if dep is None:
            return self._write(bench, BenchFacts(progress=None, waiting=f"QwenDisaggDeployment {spec.deployment_name} "
                                                 "does not exist (yet)", **facts))
        try:
            plan = build_plan(parse_resource(dep))
        except SpecError as e:
            return self._write(bench, BenchFacts(progress=None, invalid=f"QwenDisaggDeployment {spec.deployment_name} "
                                                 f"is invalid: {'; '.join(str(x) for x in e.errors)}", **facts))
        facts |= {"topology": _topology(plan), "gpus": plan.gpus}
        old_gpus = (bench.get("status") or {}).get("gpus")
        if old_gpus and (bench.get("status") or {}).get("observedGeneration") == gen:
            facts["gpus"] = old_gpus  # per-GPU figures use the GPUs the run started with
        gate = plan.spec.validation.accuracy
        # The deployment's accuracy gate: runs per generation, as soon as that generation serves.
        measures = plan.generation if gate is not None and gate.benchmark_name == bench["metadata"]["name"] else None
        ready = _ready(dep) if measures is None else serves_for_gate(dep, measures)
        prog = self._steps(bench, spec, plan, facts["gpus"], ready, measures)
        waiting = None if ready or prog.complete or prog.failed else _waiting(dep, spec.deployment_name, measures)
        cm = self._results(bench, spec, plan, prog, facts) if (prog.sweep or prog.accuracy) else None
        return self._write(bench, BenchFacts(progress=prog, waiting=waiting, results_config_map=cm, **facts))

    def _steps(self, bench: dict[str, Any], spec: BenchmarkSpec, plan: Plan, gpus: int | None, ready: bool,
               generation: str | None = None) -> Progress:
        ns, name = bench["metadata"]["namespace"], bench["metadata"]["name"]
        steps = rb.step_names(spec)
        desired = {s: with_owner(rb.benchmark_job(name, spec, plan, s, generation), bench) for s in steps}
        observed = {j["metadata"]["name"]: j for j in self._list("batch/v1", "Job", ns, f"{rb.BENCHMARK}={name}")}
        current: dict[str, tuple[dict[str, Any] | None, list[dict[str, Any]]]] = {}
        stale = False
        for s in steps:
            job = observed.get(f"{name}-{s}")
            want = desired[s]["metadata"]["annotations"][APPLIED_HASH]
            if job is not None and (stale or (job["metadata"].get("annotations") or {}).get(APPLIED_HASH) != want):
                stale = True  # a changed step re-runs it and every step after it
                if not job["metadata"].get("deletionTimestamp"):
                    log.info("%s/%s: Job %s is out of date: deleting it", ns, name, job["metadata"]["name"])
                    self.kube.delete("batch/v1", "Job", ns, job["metadata"]["name"])
                current[s] = (job, [])  # still there: wait until it is gone
                continue
            pods = self._list("v1", "Pod", ns, f"job-name={name}-{s}") if job else []
            current[s] = (job, pods)
        if stale:
            return Progress(running="replacing out-of-date Jobs")
        concurrencies = list(spec.sweep.concurrencies) if spec.sweep else []
        threshold = spec.accuracy.pass_threshold if spec.accuracy else None
        prog = progress(steps, concurrencies, threshold, current, gpus, dt.datetime.now(dt.timezone.utc))
        if prog.start and ready:
            self.kube.apply(with_owner(rb.scripts_configmap(name, plan), bench))
            log.info("%s/%s: starting step %s", ns, name, prog.start)
            self.kube.apply(desired[prog.start])
            prog.running, prog.start = prog.start, None
        return prog

    def _results(self, bench: dict[str, Any], spec: BenchmarkSpec, plan: Plan, prog: Progress,
                 facts: dict[str, Any]) -> str:
        name = bench["metadata"]["name"]
        doc = {"benchmark": name, "deployment": spec.deployment_name, "topology": facts["topology"],
               "gpus": facts["gpus"], "complete": prog.complete, "sweep": prog.sweep, "accuracy": prog.accuracy}
        text = json.dumps(doc, indent=1, sort_keys=True)
        have = self._get("v1", "ConfigMap", bench["metadata"]["namespace"], rb.results_name(name))
        if have is None or (have.get("data") or {}).get("results.json") != text:
            self.kube.apply(with_owner(rb.results_configmap(name, plan, text), bench))
        if prog.complete and prog.sweep:
            self._calibrate_profile(bench, spec.deployment_name, text)
        return rb.results_name(name)

    def _calibrate_profile(self, bench: dict[str, Any], deployment: str, text: str) -> None:
        """A finished benchmark's points into the deployment's performance profile, when it has one
        (ConfigMap ``<deployment>-perf-profile``, written by ``qdd perf profile -o configmap``):
        docs/performance-model.md#calibration. Imported here: the operator loads the profile code
        only when a benchmark completes."""
        from pydantic import ValidationError

        from ..perf.measured import MeasuredError, calibrated_configmap
        from ..perf.profile import configmap_name

        ns = bench["metadata"]["namespace"]
        cm = self._get("v1", "ConfigMap", ns, configmap_name(deployment))
        if cm is None:
            return
        try:
            new = calibrated_configmap(cm, text, f"benchmark {bench['metadata']['name']}")
        except (MeasuredError, ValidationError, ValueError) as e:
            log.warning("%s/%s: performance profile not calibrated: %s", ns, bench["metadata"]["name"], e)
            return
        if new is not None:
            log.info("%s/%s: calibrating performance profile %s", ns, bench["metadata"]["name"], new["metadata"]["name"])
            self.kube.apply(new)

    def _write(self, bench: dict[str, Any], facts: BenchFacts) -> str:
        old = bench.get("status") or {}
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        new = safe_value(compute_bench_status(old, facts, now))  # the pod's message, as status and events carry it
        patch = status_patch(old, new)
        if patch is not None:
            meta = bench["metadata"]
            self._res(API_VERSION, KIND).status.patch(
                name=meta["name"], namespace=meta["namespace"], body={"status": patch},
                content_type="application/merge-patch+json", _request_timeout=TIMEOUT)
            self._events(bench, old, new)
        return str(new["phase"])

    def _events(self, bench: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
        def cond(st: dict[str, Any], t: str) -> dict[str, Any]:
            return next((c for c in st.get("conditions") or [] if c["type"] == t), {})
        for t, kind in (("Complete", "Normal"), ("Failed", "Warning")):
            if cond(new, t).get("status") == "True" and cond(old, t).get("status") != "True":
                self.kube.event(bench, kind, f"Benchmark{t}", cond(new, t).get("message", ""))
        acc = cond(new, "AccuracyPassed")
        if acc.get("status") in ("True", "False") and cond(old, "AccuracyPassed").get("status") != acc["status"]:
            self.kube.event(bench, "Normal" if acc["status"] == "True" else "Warning", f"Accuracy{acc['reason']}",
                            acc.get("message", ""))
