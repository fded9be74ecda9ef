"""What one tenant's objects can do to the operator and to another tenant's engines, found by a review
of issues 22/24/28 (each failed before its fix): a weight-cache record of the wrong shape or forged
hashes, a hostile termination message, a headless worker's log without an API server."""

from __future__ import annotations

import json
import os
from pathlib import Path

from qdd.controller.startup_logs import StartupLogs, startup_status
from qdd.controller.weight_cache import labels_to_set
from qdd.weightcache.program import check, hash_tree, manifest_digest, prefetch, select

DATA = Path(__file__).resolve().parent / "data"


def _src(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "model.safetensors").write_bytes(os.urandom(4096))
    return root


# 1. weights-select must exit 0 and fall back whatever it finds (program.py docstring); a record whose
#    file entry is not an object makes check() raise AttributeError, which select() did not catch:
#    the engine's init container failed, on every tray holding such a record, for every deployment of
#    that digest (the folder is shared).
def test_select_falls_back_on_a_malformed_record(tmp_path: Path):
    src = _src(tmp_path / "src")
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    assert prefetch(src, cache, digest)[0] == 0
    rec = json.loads((cache / "verified.json").read_text())
    rec["files"] = {p: "x" for p in rec["files"]}
    (cache / "verified.json").write_text(json.dumps(rec))
    out = select(cache, digest, src, tmp_path / "pod" / "model")  # raised AttributeError
    assert out["source"] == "remote"


# 2. The quick check did not tie the record to the pinned digest: a record naming the digest, with the
#    right file set and stats but sha256 values that are not the digest's (written by another
#    deployment's prefetch pod - the CR author's image - into the shared <root>/<digest> folder) is
#    accepted, so other tenants' engines load bytes that never hashed to their digest.
def test_quick_check_refuses_a_record_whose_hashes_are_not_the_digest(tmp_path: Path):
    src = _src(tmp_path / "src")
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    assert prefetch(src, cache, digest)[0] == 0
    f = cache / "files" / "model.safetensors"
    f.chmod(0o644)
    f.write_bytes(os.urandom(4096))  # other bytes, then a record forged to match them
    rec = json.loads((cache / "verified.json").read_text())
    for p in rec["files"]:
        st = (cache / "files" / p).stat()
        rec["files"][p] = {"sha256": "0" * 64, "stat": [st.st_size, st.st_mtime_ns]}
    (cache / "verified.json").write_text(json.dumps(rec))
    assert check(cache, digest, "quick") is not None


# 3. A prefetch pod's termination message (written by the engine image the CR author picks, or by any
#    pod labelled role=weight-cache: genuine() does not filter non-engine pods) was parsed with json.loads,
#    which raised RecursionError (not ValueError) on a 4 KiB nested array: every pass of the deployment
#    raised in _label_trays / status.
def test_a_deeply_nested_termination_message_does_not_raise():
    msg = "[" * 2048 + "]" * 2048
    pod = {"kind": "Pod", "metadata": {"name": "p", "labels": {"qdd.dev/role": "weight-cache"}}, "spec": {"nodeName": "n"},
           "status": {"initContainerStatuses": [{"name": "prefetch", "state": {"terminated": {"exitCode": 0, "message": msg}}}]}}
    assert labels_to_set([pod]) == [("p", {"qdd.dev/weight-cache": "fetching"})]


# 4. A headless DP worker runs no API server, so its log never has "Starting vLLM server on": its read was
#    counted as "no complete start-up", retried 3 times (3 MiB each) and listed in status.startup.errors
#    for every worker pod of every multi-pod endpoint.
def test_a_headless_worker_start_up_is_not_an_error():
    full = (DATA / "vllm-0.32.0-cpu-start-cold.log").read_text()
    headless = "\n".join(line for line in full.splitlines() if "APIServer" not in line)  # no API server process

    def pod(name: str, group_role: str) -> dict:
        return {"kind": "Pod", "metadata": {"name": name, "uid": name, "labels": {
                    "qdd.dev/role": "decode", "qdd.dev/endpoint": "0", "qdd.dev/group-role": group_role}},
                "spec": {"nodeName": "n1"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "containerStatuses": [{"name": "vllm", "restartCount": 0}]}}

    s = StartupLogs(read=lambda ns, name, *a: full if name == "leader" else headless, workers=0)
    pods = [pod("leader", "leader"), pod("worker", "worker")]
    s.track("ns", "d", pods)
    st = startup_status(s.entries("ns", "d"), pods)
    assert not st.get("errors"), st.get("errors")
