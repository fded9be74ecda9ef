"""The node-local weight cache end to end on the real control plane (spec.model.cache; issue 28 item 1).

Real: the API server, the scheduler (its InterPodAffinity score decides the warm-tray preference
inside the gang's NVLink domain), the DaemonSet and StatefulSet controllers, the operator, and the
program every prefetch and engine pod runs (qdd.weightcache.program, read from the operator's
ConfigMap). Simulated: the trays' disks and the claim's contents are host folders, and the kubelet's
running of the init containers is hack/fake_tray_disks.py (a TEST DOUBLE that runs that very
program); start lengths come from qdd's start-up model for the cache state each pod found.

One deployment (3 x DEP4 prefill + 1 x DEP8 decode: five whole trays) whose cache may be prefetched
to four trays A, B, C, D (spec.model.cache.nodeSelector). Before it: tray A holds a copy of the
digest with one byte flipped (its record unchanged). Then, checked in one run:

1. prefetch: four prefetch pods, A's copy refused (a hash differs from the record) and fetched
   again from the claim, all four verified (status.weightCache, the pods' labels);
2. D's verified copy is then changed (a file grows) and every engine pod is deleted: the gang comes
   back on A, B, C, D (preferred) and one tray E without a copy (nothing requires a warm tray);
3. the engines on A, B, C read the cache; the one on D refuses its copy (changed since
   verification) and reads the claim, saying so; the one on E reads the claim ("no verified cache
   on this tray"), and the deployment is Ready: a tray without the cache still serves;
4. start lengths: each engine pod's weights phase is the model's for where it read them (local
   copy faster than the claim); with spec.engine.compileCache the first placement compiles cold, the
   second finds each role's key filled and starts warm (issue 28 item 5).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from qdd.observe.startup_log import parse_startup_log
from qdd.weightcache.program import hash_tree, manifest_digest, prefetch

from .conftest import REPO, Kube
from .test_operator import SEED, cr_of

ENGINE_LOG = "tests/unit/data/vllm-0.32.0-cpu-start-cold.log"
"""What kwok serves as every simulated vllm container's log (hack/cluster/engine_stages.py ENGINE_LOG)."""
TIMEOUT = 50
SCALE = 100
SUB = "ckpt"
CLAIM = "models"


def _disks(kube: Kube) -> Path:
    return REPO / ".qdd" / "clusters" / kube.cluster / "disks"


def _checkpoint(folder: Path) -> None:
    """A few files shaped like a safetensors checkpoint (bytes that hash, not a model)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForConditionalGeneration"]}))
    for i in (1, 2):
        (folder / f"model-0000{i}-of-00002.safetensors").write_bytes(bytes(range(256)) * (256 * i))
    (folder / "tokenizer.json").write_text("{}")
    (folder / ".cache").mkdir(exist_ok=True)
    (folder / ".cache" / "download.lock").write_text("not part of the checkpoint")


def _pods(kube: Kube, ns: str, selector: str) -> list[dict]:
    return [p for p in kube.get("pods", namespace=ns, selector=selector)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _cache(kube: Kube, ns: str, name: str) -> dict:
    return (kube.get("qdd", name, namespace=ns).get("status") or {}).get("weightCache") or {}


def _ready(kube: Kube, ns: str, name: str) -> bool:
    st = kube.get("qdd", name, namespace=ns).get("status") or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])


@pytest.fixture
def trays(kube: Kube, namespace: str):
    """Four trays labelled for this test's prefetch; the labels, the volume and the trays' folders go after."""
    names = [f"gb200-r1-n{i:02d}" for i in (3, 7, 11, 15)]
    for n in names:
        kube.kubectl("label", "node", n, f"qdd.dev/test-weights={namespace}", "--overwrite")
    yield names
    for n in names:
        kube.kubectl("label", "node", n, "qdd.dev/test-weights-", check=False)
    for claim in (CLAIM, "compile-cache"):
        kube.kubectl("delete", "pv", f"{namespace}-{claim}", "--ignore-not-found", "--wait=false", check=False)
    shutil.rmtree(_disks(kube) / "volumes" / namespace, ignore_errors=True)


def test_prefetch_prefers_warm_trays_refuses_corrupt_copies_and_serves_without_one(kube, operator, namespace, trays):
    disks = _disks(kube)
    source = disks / "volumes" / namespace / CLAIM / SUB
    _checkpoint(source)
    digest = manifest_digest(hash_tree(source))
    assert digest.startswith("sha256:") and len(digest) == 71
    a, b, c, d = trays
    root = "/var/lib/qdd/weights"
    folder = lambda tray: disks / "trays" / tray / root.lstrip("/") / namespace / digest.split(":")[1]  # noqa: E731
    # Tray A: a verified copy from an earlier prefetch, then one byte flipped (size and record unchanged).
    code, _ = prefetch(source, folder(a), digest)
    assert code == 0
    shard = folder(a) / "files" / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.chmod(0o644)
    shard.write_bytes(bytes(data))

    for claim in (CLAIM, "compile-cache"):
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                             "hostPath": {"path": f"/simulated/{claim}"},
                             "claimRef": {"namespace": namespace, "name": claim}}})
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
                    "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{namespace}-{claim}",
                             "resources": {"requests": {"storage": "1Gi"}}}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qdd-sim-engine-startup", "namespace": namespace},
                "data": {"cache-aware": "true", "time-scale": str(SCALE), "checkpoint-bytes": "237e9"}})
    cr = cr_of(SEED, namespace, **{
        "metadata.name": "wc", "spec.prefill.endpoints": 3, "spec.prefill.topology.dataParallel": 4,
        "spec.kvTransfer.preflight": {"enabled": False},
        "spec.model.source": {"pvc": {"claimName": CLAIM, "subPath": SUB}},
        "spec.engine.compileCache": {"claimName": "compile-cache"},
        "spec.model.cache": {"digest": digest, "nodeSelector": {"qdd.dev/test-weights": namespace}}})
    kube.apply(cr)

    # 1. prefetch on the four trays; A's copy refused and fetched again
    st = kube.wait_for(lambda: (s := _cache(kube, namespace, "wc")).get("verified") == 4 and s, timeout=TIMEOUT,
                       desc="four trays verified")
    assert st["digest"] == digest and st["trays"] == 4 and st["verifiedTrays"] == sorted(trays)
    assert st["failed"] == 0 and st["fetching"] == 0
    [refused] = st["refused"]
    assert refused.startswith(f"{a}: sha256 of model-00002-of-00002.safetensors differs from the record"), refused
    prefetchers = _pods(kube, namespace, "qdd.dev/role=weight-cache")
    assert sorted(p["spec"]["nodeName"] for p in prefetchers) == sorted(trays)
    assert {p["metadata"]["labels"]["qdd.dev/weight-cache"] for p in prefetchers} == {"verified"}
    assert manifest_digest(hash_tree(folder(a) / "files")) == digest  # A holds the right bytes again
    kube.wait_for(lambda: _ready(kube, namespace, "wc"), timeout=TIMEOUT, desc="Ready (first placement)")
    first = _pods(kube, namespace, "qdd.dev/deployment=wc,qdd.dev/role in (prefill,decode)")
    assert {p["metadata"]["annotations"]["engine.sim.qdd.dev/compile-cache"] for p in first} == {"cold"}

    # 2. D's copy changes after verification; every engine pod is placed again
    grown = folder(d) / "files" / "tokenizer.json"
    grown.chmod(0o644)
    grown.write_text("{} ")
    engines = "qdd.dev/deployment=wc,qdd.dev/role in (prefill,decode)"
    old = {p["metadata"]["uid"] for p in _pods(kube, namespace, engines)}
    assert len(old) == 5
    kube.kubectl("delete", "pods", "-n", namespace, "-l", engines, "--wait=false")

    def replaced() -> list[dict] | None:
        pods = _pods(kube, namespace, engines)
        fresh = [p for p in pods if p["metadata"]["uid"] not in old]
        return fresh if len(fresh) == 5 and _ready(kube, namespace, "wc") and \
            _cache(kube, namespace, "wc").get("enginesFromCache", 0) + \
            _cache(kube, namespace, "wc").get("enginesFromClaim", 0) == 5 else None

    t0 = time.monotonic()
    pods = kube.wait_for(replaced, timeout=TIMEOUT, desc="the engines back and Ready")
    took = time.monotonic() - t0
    on = {p["spec"]["nodeName"]: p for p in pods}
    assert set(trays) <= set(on), f"the warm trays were not preferred: {sorted(on)}"
    [e] = set(on) - set(trays)

    # 3. who read what, and why
    st = _cache(kube, namespace, "wc")
    assert st["enginesFromCache"] == 3 and st["enginesFromClaim"] == 2, st
    by_tray = {f.split(" on ")[1].split(":")[0]: f for f in st["fallbacks"]}
    assert set(by_tray) == {d, e}, st["fallbacks"]
    assert "refused: tokenizer.json changed since verification" in by_tray[d]
    assert by_tray[e].endswith("no verified cache on this tray")

    # 4. start lengths: the model's weights phase for where each pod read its weights; compile warm now
    ann = {n: p["metadata"]["annotations"] for n, p in on.items()}
    assert {x["engine.sim.qdd.dev/compile-cache"] for x in ann.values()} == {"warm"}
    assert {x["engine.sim.qdd.dev/compile"] for x in ann.values()} == {"0.08s"}  # (8 s + 0 s planned KV) / 100
    assert {n for n, x in ann.items() if x["engine.sim.qdd.dev/weights-from"] == "cache"} == {a, b, trays[2]}
    fast = {ann[n]["engine.sim.qdd.dev/weights"] for n in (a, b, trays[2])}
    slow = {ann[n]["engine.sim.qdd.dev/weights"] for n in (d, e)}
    assert fast == {"0.639s"} and slow == {"1.485s"}, (fast, slow)  # (30 s + 237 GB / 7 or 2 GB/s) / 100

    # 5. each engine pod's start-up, read by the operator from its log through pods/log: kwok serves the
    #    real CPU engine's start-up log (hack/cluster/engine_stages.py ENGINE_LOG) as every vllm container's
    names = {p["metadata"]["name"] for p in pods}
    started = kube.wait_for(lambda: (st := (kube.get("qdd", "wc", namespace=namespace).get("status") or {}).get("startup"))
                            and names <= {r["pod"] for r in st["pods"]} and st, timeout=30, desc="status.startup")
    row = next(r for r in started["pods"] if r["pod"] in names)
    want = parse_startup_log((REPO / ENGINE_LOG).read_text()).as_status()
    assert want["warmupSeconds"] > 0 and {k: row.get(k) for k in want} == want, row
    assert row["node"] in on and "toReadySeconds" in row
    print(f"\nweight cache: 4 trays prefetched (A refused and fetched again), engines back on {sorted(on)} in "
          f"{took:.1f} s: 3 from the cache, D refused at start, E without a copy")
