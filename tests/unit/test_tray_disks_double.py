"""Contract of the test double hack/fake_tray_disks.py (the kubelet running the weight cache's init
containers on the simulated trays): it runs the program of the pod's own ConfigMap, with the pod's
own arguments, against the host folders that stand for the tray's disk and the claim; the status it
writes is what the operator reads (qdd.controller.weight_cache) and the start length it gives is
qdd's start-up model for the cache state the program found."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from qdd.catalog.startup import LOCAL, REMOTE, engine_startup
from qdd.controller.weight_cache import tray_state, weight_cache_status
from qdd.render import render_all
from qdd.weightcache.program import hash_tree, manifest_digest

from .helpers import plan_of

ROOT = Path(__file__).resolve().parents[2]


def _double():
    sys.path.insert(0, str(ROOT / "hack"))
    spec = importlib.util.spec_from_file_location("fake_tray_disks", ROOT / "hack" / "fake_tray_disks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeCore:
    """The few CoreV1Api calls the double makes, against rendered objects."""

    def __init__(self, objs: list[dict[str, Any]]):
        self.configmaps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
        self.status: dict[str, dict[str, Any]] = {}
        self.meta: dict[str, dict[str, Any]] = {}

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        return type("CM", (), {"data": self.configmaps[name]["data"]})

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.status.setdefault(name, {}).update(body["status"])

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.meta.setdefault(name, {}).update(body["metadata"]["annotations"])


def _pod(template: dict[str, Any], name: str, node: str, ns: str, annotations: dict[str, str] | None = None) -> dict:
    pod = copy.deepcopy(template)
    pod["metadata"] = {**pod["metadata"], "name": name, "namespace": ns, "uid": name,
                       "annotations": dict(annotations or {})}
    pod["spec"]["nodeName"] = node
    pod["kind"] = "Pod"
    return pod


@pytest.fixture
def world(seed_cr: dict, tmp_path: Path):
    mod = _double()
    disks = mod.Disks(tmp_path / "disks")
    ns = seed_cr["metadata"]["namespace"]
    source = disks.claim(ns, "models", "q")
    source.mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "model.safetensors").write_bytes(b"\x01" * 5000)
    digest = manifest_digest(hash_tree(source))
    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "subPath": "q"}}
    seed_cr["spec"]["model"]["cache"] = {"digest": digest}
    plan = plan_of(seed_cr)
    objs = render_all(plan)
    return mod, disks, plan, objs, ns, digest


def test_prefetch_pod_status_is_what_the_program_says(world):
    mod, disks, plan, objs, ns, digest = world
    core = FakeCore(objs)
    [ds] = [o for o in objs if o["kind"] == "DaemonSet"]
    pod = _pod(ds["spec"]["template"], "wc-abc", "gb200-r1-n01", ns)
    mod.prefetch(core, pod, disks)
    st = core.status["wc-abc"]
    [init] = st["initContainerStatuses"]
    term = init["state"]["terminated"]
    assert term["exitCode"] == 0 and json.loads(term["message"])["state"] == "warm"
    assert st["phase"] == "Running" and core.meta["wc-abc"] == {mod.RESULT: "0"}
    folder = disks.host_path("gb200-r1-n01", f"/var/lib/qdd/weights/{ns}/{digest.split(':')[1]}")
    assert manifest_digest(hash_tree(folder / "files")) == digest
    assert tray_state({**pod, "status": st}).state == "verified"


def test_a_failed_prefetch_leaves_the_pod_pending_with_the_message_in_last_state(world):
    mod, disks, plan, objs, ns, digest = world
    (disks.claim(ns, "models", "q") / "config.json").write_text('{"changed": true}')  # the claim no longer matches
    core = FakeCore(objs)
    [ds] = [o for o in objs if o["kind"] == "DaemonSet"]
    pod = _pod(ds["spec"]["template"], "wc-x", "gb200-r1-n02", ns)
    mod.prefetch(core, pod, disks)
    st = core.status["wc-x"]
    assert st["phase"] == "Pending"
    [init] = st["initContainerStatuses"]
    assert init["state"]["waiting"]["reason"] == "CrashLoopBackOff" and init["lastState"]["terminated"]["exitCode"] == 1
    assert tray_state({**pod, "status": st}).state == "failed"


@pytest.mark.parametrize("warm_tray", [True, False])
def test_engine_start_length_is_the_model_s_for_the_cache_state_found(world, warm_tray: bool):
    mod, disks, plan, objs, ns, digest = world
    core = FakeCore(objs)
    [ds] = [o for o in objs if o["kind"] == "DaemonSet"]
    node = "gb200-r1-n03"
    if warm_tray:
        mod.prefetch(core, _pod(ds["spec"]["template"], "wc-p", node, ns), disks)
    [sts] = [o for o in objs if o["kind"] == "StatefulSet"]
    ann = {mod.HOLD: "init", f"{mod.PREFIX}cache-aware": "true", f"{mod.PREFIX}time-scale": "100"}
    pod = _pod(sts["spec"]["template"], "prefill-0", node, ns, ann)
    mod.start(core, pod, disks)
    report = json.loads(core.status["prefill-0"]["initContainerStatuses"][0]["state"]["terminated"]["message"])
    assert report["source"] == ("cache" if warm_tray else "remote")
    want = engine_startup(237e9, LOCAL if warm_tray else REMOTE).compressed(100).as_durations()
    got = core.meta["prefill-0"]
    assert got[mod.HOLD] is None and {k: got[f"{mod.PREFIX}{k}"] for k in want} == want
    assert got[f"{mod.PREFIX}weights-from"] == ("cache" if warm_tray else "claim")
    link = disks.pod_dir(ns, "prefill-0") / "qdd-model" / "model"
    assert (link / "config.json").read_text() == "{}"  # the link the engine would read through
    status = weight_cache_status(plan, [{**pod, "status": core.status["prefill-0"]}])
    assert status["enginesFromCache" if warm_tray else "enginesFromClaim"] == 1


def test_compile_cache_warm_only_after_a_start_of_the_key_finished_compiling(world, seed_cr: dict):
    mod, disks, _, _, ns, _ = world
    seed_cr["spec"]["engine"]["compileCache"] = {"claimName": "cc"}
    objs = render_all(plan_of(seed_cr))
    core = FakeCore(objs)
    [sts] = [o for o in objs if o["kind"] == "StatefulSet"]
    ann = {mod.HOLD: "init", f"{mod.PREFIX}cache-aware": "true", f"{mod.PREFIX}time-scale": "100000"}
    mod.start(core, _pod(sts["spec"]["template"], "a", "gb200-r1-n04", ns, ann), disks)
    assert core.meta["a"][f"{mod.PREFIX}compile-cache"] == "cold"
    import time
    time.sleep(0.05)  # the first start's compile phase (compressed 100,000 times) has ended
    mod.start(core, _pod(sts["spec"]["template"], "b", "gb200-r1-n05", ns, ann), disks)
    assert core.meta["b"][f"{mod.PREFIX}compile-cache"] == "warm"
    assert core.meta["b"][f"{mod.PREFIX}compile"] == engine_startup(237e9, REMOTE, True, True).compressed(100000).as_durations()["compile"]
