"""The node-local weight cache (spec.model.cache): the pods' program on real files, what render makes
of the field, the API's rule, and the status the controller reads from the pods (issue 28 item 1)."""

from __future__ import annotations

import copy
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from qdd.api import parse_resource
from qdd.controller.weight_cache import labels_to_set, tray_state, weight_cache_events, weight_cache_status
from qdd.errors import SpecError
from qdd.plan.weight_cache import DEFAULT_ROOT, MODEL_LINK
from qdd.render import render_all
from qdd.weightcache import program
from qdd.weightcache.program import check, hash_tree, manifest_digest, prefetch, select

from .helpers import plan_of

PROGRAM = Path(program.__file__)


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(70_000))
    (root / "sub" / "tokenizer.json").write_text("{}")
    (root / ".cache").mkdir()
    (root / ".cache" / "x.lock").write_text("left out")
    (root / ".gitattributes").write_text("left out")
    (root / "model-00002-of-00002.safetensors").symlink_to(root / "sub" / "tokenizer.json")  # followed
    return root


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return _tree(tmp_path / "src")


PIPELINE = ("find -L . -type f ! -path '*/.*' | sed 's|^\\./||' | LC_ALL=C sort | xargs -r -d '\\n' sha256sum | sha256sum")


def _pipeline_digest(folder: Path) -> str:
    out = subprocess.run(["bash", "-c", PIPELINE], cwd=folder, capture_output=True, text=True, check=True).stdout
    return "sha256:" + out.split()[0]


def test_digest_is_the_documented_coreutils_pipeline(src: Path):
    """``qdd weights digest`` and the sha256sum recipe of docs/cold-start.md agree; dot paths are left out."""
    ours = manifest_digest(hash_tree(src))
    assert ours == _pipeline_digest(src)
    assert sorted(hash_tree(src)) == ["config.json", "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors", "sub/tokenizer.json"]
    cli = subprocess.run([str(Path(sys.executable).parent / "qdd"), "weights", "digest", str(src)],
                         capture_output=True, text=True, check=True)
    assert cli.stdout.strip() == ours


def test_the_documented_pipeline_is_the_one_in_the_docs():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cold-start.md").read_text()
    assert f"`cd DIR && {PIPELINE}`" in docs
    assert PIPELINE in (program.__doc__ or "")


def test_a_folder_reached_through_two_paths_counts_under_both_like_find(tmp_path: Path):
    """A link to a sibling folder is walked (find -L lists its files under both paths), a link back up
    to an ancestor is not (find -L: a file-system loop), a broken link and dot paths are no files."""
    root = tmp_path / "ckpt"
    (root / "shards" / "deep").mkdir(parents=True)
    (root / "shards" / "a.safetensors").write_bytes(b"a" * 1000)
    (root / "shards" / "deep" / "b.safetensors").write_bytes(b"b" * 10)
    (root / "config.json").write_text("{}")
    (root / "same").symlink_to("shards")  # the same folder by another name
    (root / "shards" / "deep" / "up").symlink_to("..")  # a loop: the folder's own ancestor
    (root / "broken.json").symlink_to("nowhere")
    (root / ".cache").mkdir()
    (root / ".cache" / "x").write_text("left out")
    assert sorted(hash_tree(root)) == ["config.json", "same/a.safetensors", "same/deep/b.safetensors",
                                       "shards/a.safetensors", "shards/deep/b.safetensors"]
    ours = manifest_digest(hash_tree(root))
    assert ours == _pipeline_digest(root)
    manifest = "".join(f"{hash_tree(root)[p]}  {p}\n" for p in sorted(hash_tree(root)))
    assert ours == "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
    # a fetch installs the folder's files under both paths, as regular files, and verifies
    cache = tmp_path / "tray"
    code, out = prefetch(root, cache, ours)
    assert code == 0 and out["files"] == 5
    assert not (cache / "files" / "same").is_symlink() and manifest_digest(hash_tree(cache / "files")) == ours


def test_an_empty_folder_has_the_digest_of_an_empty_manifest(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    assert manifest_digest(hash_tree(tmp_path / "empty")) == _pipeline_digest(tmp_path / "empty") == \
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# --- one prefetch at a time per folder, and every failure a report -------------------------------

def _prefetch_in_thread(src: Path, cache: Path, digest: str) -> tuple[threading.Thread, list]:
    result: list = []
    th = threading.Thread(target=lambda: result.append(prefetch(src, cache, digest)), daemon=True)
    th.start()
    return th, result


def test_a_second_prefetch_waits_for_the_lock(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    cache.mkdir()
    with open(cache / ".lock", "w") as held:  # another prefetch of this folder holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        th, result = _prefetch_in_thread(src, cache, digest)
        time.sleep(0.5)
        assert th.is_alive() and result == [], "it waits"
        assert sorted(p.name for p in cache.iterdir()) == [".lock"], "and writes nothing meanwhile"
        fcntl.flock(held, fcntl.LOCK_UN)
        th.join(30)
    [(code, out)] = result
    assert code == 0 and out["state"] == "warm" and out["fetched"] is True
    assert out["lockWaitSeconds"] >= 0.4
    assert manifest_digest(hash_tree(cache / "files")) == digest


def test_two_prefetches_of_one_folder_at_once_one_fetches_the_other_verifies(src: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    """Two deployments of one digest (or a restarted pod) on one tray: the same folder, one pid in each
    container. The second waits, then finds the first's copy and hashes it in full."""
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    real = program._hash_file

    def slow(path: Path, copy_to: Path | None = None) -> str:
        time.sleep(0.05)
        return real(path, copy_to)

    monkeypatch.setattr(program, "_hash_file", slow)
    runs = [_prefetch_in_thread(src, cache, digest) for _ in range(2)]
    for th, _ in runs:
        th.join(30)
    outs = [r[0] for _, r in runs]
    assert [code for code, _ in outs] == [0, 0] and {o["state"] for _, o in outs} == {"warm"}
    assert sorted(o["fetched"] for _, o in outs) == [False, True]
    waited = [o for _, o in outs if "lockWaitSeconds" in o]
    assert len(waited) == 1 and waited[0]["fetched"] is False
    assert manifest_digest(hash_tree(cache / "files")) == digest
    assert json.loads((cache / "verified.json").read_text())["digest"] == digest
    assert sorted(p.name for p in cache.iterdir()) == [".lock", "files", "verified.json"]


def _raise(exc: BaseException):
    def f(*_a, **_k):
        raise exc
    return f


@pytest.mark.parametrize(("target", "exc", "error"), [
    # the disk fills while the copy is written
    ("_hash_file", OSError(errno.ENOSPC, "No space left on device"), "copying the source"),
    # the record cannot be written after the files were renamed into place: the folder is not warm
    ("_write_record", OSError(errno.ENOSPC, "No space left on device"), "OSError: [Errno 28] No space left on device"),
    # anything else
    ("_read_only", RuntimeError("boom"), "RuntimeError: boom"),
])
def test_any_error_ends_in_a_failed_report_and_no_copy(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       target: str, exc: BaseException, error: str):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    monkeypatch.setattr(program, target, _raise(exc))
    term = tmp_path / "termination-log"
    code = program.main(["prefetch", "--source", str(src), "--cache", str(cache), "--digest", digest,
                         "--termination-log", str(term)])
    report = json.loads(term.read_text())
    assert code == 1 and report["state"] == "failed" and report["digest"] == digest and error in report["error"]
    if target == "_hash_file":
        assert "No space left on device" in report["error"]
    assert sorted(p.name for p in cache.iterdir()) == [".lock"], "no record, no files, no temporary folder"
    monkeypatch.undo()
    assert select(cache, digest, src, tmp_path / "link")["source"] == "remote"
    code, again = prefetch(src, cache, digest)  # the kubelet's retry starts from nothing
    assert code == 0 and again["fetched"] is True and again["refused"] is None


def test_a_copy_that_cannot_be_read_is_discarded(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An I/O error while hashing a verified copy: failed, and the copy is gone (the record first), so
    no engine reads it."""
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    assert prefetch(src, cache, digest)[0] == 0
    monkeypatch.setattr(program, "_hash_file", _raise(OSError(errno.EIO, "Input/output error")))
    code, out = prefetch(src, cache, digest)
    assert code == 1 and out == {"state": "failed", "digest": digest, "refused": None,
                                 "error": "OSError: [Errno 5] Input/output error"}
    assert not (cache / "verified.json").exists() and not (cache / "files").exists()


def test_a_killed_run_s_temporaries_are_deleted(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    (cache / ".incoming-7" / "sub").mkdir(parents=True)
    (cache / ".incoming-7" / "sub" / "half.safetensors").write_bytes(b"x" * 100)
    (cache / ".verified.json.7").write_text("{")
    assert prefetch(src, cache, digest)[0] == 0
    assert sorted(p.name for p in cache.iterdir()) == [".lock", "files", "verified.json"]


def test_a_lock_that_cannot_be_opened_is_a_failed_report(src: Path, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out = prefetch(src, blocker / "tray", "sha256:" + "0" * 64)
    assert code == 1 and out["state"] == "failed" and out["error"].startswith(f"opening the lock {blocker}/tray/.lock:")


def test_prefetch_installs_verified_bytes_and_keeps_them(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    code, out = prefetch(src, cache, digest)
    assert code == 0 and out["state"] == "warm" and out["fetched"] is True and out["files"] == 4
    assert out["bytes"] == sum((src / p).stat().st_size for p in hash_tree(src))
    assert manifest_digest(hash_tree(cache / "files")) == digest
    assert not os.access(cache / "files" / "config.json", os.W_OK) or os.geteuid() == 0
    assert oct((cache / "files" / "config.json").stat().st_mode & 0o777) == "0o444"
    record = json.loads((cache / "verified.json").read_text())
    assert record["digest"] == digest and set(record["files"]) == set(hash_tree(src))
    code, again = prefetch(src, cache, digest)
    assert code == 0 and again["fetched"] is False and "refused" not in again  # verified in full, kept


def test_a_corrupted_cache_is_refused_and_fetched_again(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    prefetch(src, cache, digest)
    shard = cache / "files" / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[5] ^= 1
    shard.chmod(0o644)
    shard.write_bytes(bytes(data))
    code, out = prefetch(src, cache, digest)
    assert code == 0 and out["fetched"] is True
    assert out["refused"] == "sha256 of model-00001-of-00002.safetensors differs from the record"
    assert manifest_digest(hash_tree(cache / "files")) == digest
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == [".lock"]  # nothing left aside


def test_a_source_of_another_digest_installs_nothing(src: Path, tmp_path: Path):
    cache = tmp_path / "tray"
    code, out = prefetch(src, cache, "sha256:" + "0" * 64)
    assert code == 1 and out["state"] == "failed" and "not the pinned sha256:000" in out["error"]
    assert not (cache / "files").exists() and not (cache / "verified.json").exists()


def test_select_reads_a_verified_copy_else_the_claim_and_says_why(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache, link = tmp_path / "tray", tmp_path / "pod" / "model"
    out = select(cache, digest, src, link)
    assert out["source"] == "remote" and out["reason"] == "no verified cache on this tray"
    assert os.readlink(link) == str(src)
    prefetch(src, cache, digest)
    out = select(cache, digest, src, link)
    assert out["source"] == "cache" and "reason" not in out and os.readlink(link) == str(cache / "files")
    assert (link / "config.json").read_text() == '{"a": 1}'
    # another digest pinned: that copy is not this one
    assert check(cache, "sha256:" + "1" * 64) == f"refused: the cache on this tray is of {digest}, not sha256:{'1' * 64}"
    # a file that grew since it was hashed
    tok = cache / "files" / "sub" / "tokenizer.json"
    tok.chmod(0o644)
    tok.write_text("{} ")
    out = select(cache, digest, src, link)
    assert out["source"] == "remote" and out["reason"].startswith("refused: sub/tokenizer.json changed since verification")
    assert os.readlink(link) == str(src)


def test_quick_check_misses_what_keeps_size_and_mtime_full_catches_it(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    prefetch(src, cache, digest)
    f = cache / "files" / "config.json"
    st = f.stat()
    f.chmod(0o644)
    f.write_text('{"a": 2}')  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    f.chmod(0o444)
    assert check(cache, digest, "quick") is None  # documented: docs/cold-start.md
    assert check(cache, digest, "full") == "refused: sha256 of config.json differs from the record"


def test_an_added_file_is_refused(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache = tmp_path / "tray"
    prefetch(src, cache, digest)
    (cache / "files").chmod(0o755)
    (cache / "files" / "extra.safetensors").write_bytes(b"x")
    assert check(cache, digest) == "refused: added extra.safetensors since verification"


def test_the_program_runs_as_a_file_and_writes_its_termination_message(src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    term = tmp_path / "termination-log"
    p = subprocess.run(["python3", str(PROGRAM), "prefetch", "--source", str(src), "--cache", str(tmp_path / "c"),
                        "--digest", digest, "--termination-log", str(term)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(term.read_text()) == json.loads(p.stdout) and json.loads(p.stdout)["state"] == "warm"
    p = subprocess.run(["python3", str(PROGRAM), "select", "--source", str(src), "--cache", str(tmp_path / "none"),
                        "--digest", digest, "--link", str(tmp_path / "l"), "--termination-log", str(term)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(term.read_text())["source"] == "remote"


# --- the API and render ------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


def _cached(seed_cr: dict, **cache) -> dict:
    seed_cr = copy.deepcopy(seed_cr)
    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "subPath": "q"}}
    seed_cr["spec"]["model"]["cache"] = {"digest": DIGEST, **cache}
    return seed_cr


def test_the_cache_needs_a_claim_and_a_sha256_digest(seed_cr: dict):
    seed_cr["spec"]["model"]["cache"] = {"digest": DIGEST}
    with pytest.raises(Exception, match="cache needs source.pvc"):
        parse_resource(seed_cr)
    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models"}}
    seed_cr["spec"]["model"]["cache"] = {"digest": "sha256:ABC"}
    with pytest.raises(Exception, match="digest"):
        parse_resource(seed_cr)


def test_unset_renders_nothing_of_it(seed_cr: dict):
    objs = render_all(plan_of(seed_cr))
    assert not [o for o in objs if o["kind"] in ("DaemonSet", "ConfigMap")]
    text = json.dumps(objs)
    assert "weight-cache" not in text and "hostPath" not in text


def test_render_prefetch_daemonset_and_engine_pods(seed_cr: dict):
    plan = plan_of(_cached(seed_cr, nodeSelector={"example.com/disk": "nvme"}))
    objs = render_all(plan, weight_cache_root="/data/qdd")
    [cm] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["data"]["program.py"] == PROGRAM.read_text()
    [ds] = [o for o in objs if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64", "nvidia.com/gpu.product": "NVIDIA-GB200",
                                   "example.com/disk": "nvme"}
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.clique", "operator": "Exists"}]}]
    [init] = pod["initContainers"]
    assert init["command"][2:] == ["prefetch", "--source", "/models", "--cache", "/weight-cache", "--digest", DIGEST,
                                   "--termination-log", "/dev/termination-log"]
    assert {v["name"]: v for v in pod["volumes"]}["weight-cache"]["hostPath"] == {
        "path": f"/data/qdd/{plan.namespace}/" + "ab" * 32, "type": "DirectoryOrCreate"}
    assert ds["spec"]["template"]["metadata"]["labels"]["qdd.dev/weights"] == "ab" * 16
    for c in pod["initContainers"] + pod["containers"]:
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                        "readOnlyRootFilesystem": True}
    assert pod["automountServiceAccountToken"] is False
    engines = [o["spec"]["template"]["spec"] if o["kind"] == "StatefulSet" else o["spec"]
               for o in objs if o["kind"] in ("StatefulSet", "Pod") and o["metadata"]["labels"].get("qdd.dev/role") in ("prefill", "decode")]
    assert len(engines) == 3
    for spec in engines:
        vllm = spec["containers"][0]
        assert vllm["args"][0] == MODEL_LINK
        mounts = {m["name"]: m for m in vllm["volumeMounts"]}
        assert mounts["weight-cache"]["readOnly"] is True and mounts["qdd-model"]["readOnly"] is True
        [select_] = spec["initContainers"]
        assert select_["name"] == "weights-select" and "--link" in select_["command"]
        assert [m.get("readOnly") for m in select_["volumeMounts"] if m["name"] == "weight-cache"] == [True]
        [term] = spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
            "matchLabels": {"qdd.dev/role": "weight-cache", "qdd.dev/weights": "ab" * 16,
                            "qdd.dev/weight-cache": "verified"}}}}
        # a preference only: the one required pod affinity is the tray-claim pin of a StatefulSet
        # pod under gang scheduling (qdd.render.trayclaims), never the cache
        required = spec["affinity"]["podAffinity"].get("requiredDuringSchedulingIgnoredDuringExecution", [])
        assert all(t.get("matchLabelKeys") == ["qdd.dev/tray-claim"] for t in required), required


def test_without_gang_scheduling_the_preference_joins_the_required_clique_affinity(seed_cr: dict):
    objs = render_all(plan_of(_cached(seed_cr)), gang=False)
    [sts] = [o for o in objs if o["kind"] == "StatefulSet"]
    pa = sts["spec"]["template"]["spec"]["affinity"]["podAffinity"]
    assert len(pa["requiredDuringSchedulingIgnoredDuringExecution"]) == 1
    assert len(pa["preferredDuringSchedulingIgnoredDuringExecution"]) == 1


def test_a_pod_without_node_conditions_gets_the_preference_alone(seed_cr: dict):
    """sameNVLinkDomain false and no nodeAffinity: the engine template has no affinity of its own."""
    cr = _cached(seed_cr)
    cr["spec"]["cluster"]["sameNVLinkDomain"] = False
    [sts] = [o for o in render_all(plan_of(cr)) if o["kind"] == "StatefulSet"]
    assert list(sts["spec"]["template"]["spec"]["affinity"]) == ["podAffinity"]


def test_the_cache_does_not_change_the_generation(seed_cr: dict):
    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "subPath": "q"}}
    before = plan_of(seed_cr).generation
    assert plan_of(_cached(seed_cr)).generation == before


def test_default_root(seed_cr: dict):
    [ds] = [o for o in render_all(plan_of(_cached(seed_cr))) if o["kind"] == "DaemonSet"]
    [v] = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v]
    # one folder per namespace: a tenant never shares (nor can poison) another's copy
    assert v["hostPath"]["path"] == f"{DEFAULT_ROOT}/{seed_cr['metadata']['namespace']}/{'ab' * 32}"


# --- what the controller reads from the pods ---------------------------------------------------

def _prefetch_pod(name: str, node: str, state: dict | None, code: int | None = None, label: str | None = None) -> dict:
    init: dict = {"name": "prefetch"}
    if state is None:
        init["state"] = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
    elif code == 0:
        init["state"] = {"terminated": {"exitCode": 0, "message": json.dumps(state)}}
    else:
        init["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        init["lastState"] = {"terminated": {"exitCode": code, "message": json.dumps(state)}}
    lab = {"qdd.dev/role": "weight-cache", **({"qdd.dev/weight-cache": label} if label else {})}
    return {"kind": "Pod", "metadata": {"name": name, "labels": lab}, "spec": {"nodeName": node},
            "status": {"initContainerStatuses": [init]}}


def _engine_pod(name: str, node: str, report: dict | None) -> dict:
    inits = [] if report is None else [{"name": "weights-select", "state": {"terminated": {
        "exitCode": 0, "message": json.dumps(report)}}}]
    return {"kind": "Pod", "metadata": {"name": name, "labels": {"qdd.dev/role": "prefill"}}, "spec": {"nodeName": node},
            "status": {"initContainerStatuses": inits}}


def test_tray_states_labels_and_status(seed_cr: dict):
    pods = [
        _prefetch_pod("p1", "n1", {"state": "warm", "fetched": True}, 0, label="verified"),
        _prefetch_pod("p2", "n2", {"state": "warm", "fetched": True, "refused": "sha256 of a differs from the record"}, 0),
        _prefetch_pod("p3", "n3", None),
        _prefetch_pod("p4", "n4", {"state": "failed", "error": "the source /models has digest sha256:x"}, 1),
        _engine_pod("e1", "n1", {"source": "cache"}),
        _engine_pod("e2", "n9", {"source": "remote", "reason": "no verified cache on this tray"}),
        _engine_pod("e3", "n2", None),  # its init container has not run yet
    ]
    assert [tray_state(p).state for p in pods[:4]] == ["verified", "verified", "fetching", "failed"]
    assert labels_to_set(pods) == [("p2", {"qdd.dev/weight-cache": "verified"}), ("p3", {"qdd.dev/weight-cache": "fetching"}),
                                   ("p4", {"qdd.dev/weight-cache": "failed"})]
    st = weight_cache_status(plan_of(_cached(seed_cr)), pods)
    assert st == {"digest": DIGEST, "trays": 4, "verified": 2, "fetching": 1, "failed": 1, "verifiedTrays": ["n1", "n2"],
                  "enginesFromCache": 1, "enginesFromClaim": 1,
                  "refused": ["n2: sha256 of a differs from the record (fetched again from the claim)"],
                  "failures": ["n4: the source /models has digest sha256:x"],
                  "fallbacks": ["e2 on n9: no verified cache on this tray"]}
    assert weight_cache_status(plan_of(seed_cr), pods) is None


def test_status_lists_are_bounded(seed_cr: dict):
    pods = [_prefetch_pod(f"p{i}", f"n{i:03d}", {"state": "warm", "refused": "x" * 500}, 0) for i in range(100)]
    pods += [_engine_pod(f"e{i}", f"m{i}", {"source": "remote", "reason": "y" * 500}) for i in range(20)]
    st = weight_cache_status(plan_of(_cached(seed_cr)), pods)
    assert st["verified"] == 100 and len(st["verifiedTrays"]) == 64
    assert len(st["refused"]) == 8 and len(st["fallbacks"]) == 8
    assert max(len(x) for x in st["refused"] + st["fallbacks"]) < 300


def test_a_spec_error_names_the_field(seed_cr: dict):
    seed_cr["spec"]["model"]["cache"] = {"digest": DIGEST}
    with pytest.raises((SpecError, ValueError), match="cache needs source.pvc"):
        plan_of(seed_cr)


def test_copy_is_not_left_half_installed(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fetch that fails midway (a read error) leaves no files and no record: the next start falls back."""
    digest = manifest_digest(hash_tree(src))
    calls = {"n": 0}
    real = program._hash_file

    def flaky(path: Path, copy_to: Path | None = None) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("input/output error")
        return real(path, copy_to)

    monkeypatch.setattr(program, "_hash_file", flaky)
    monkeypatch.setattr(program, "THREADS", 1)
    code, out = prefetch(src, tmp_path / "tray", digest)
    assert code == 1 and "input/output error" in out["error"]
    assert not (tmp_path / "tray" / "files").exists() and not (tmp_path / "tray" / "verified.json").exists()
    shutil.rmtree(tmp_path / "tray")


def test_a_refusal_is_a_warning_event_once():
    old = {"weightCache": {"refused": ["n1: sha256 of a differs from the record (fetched again from the claim)"]}}
    new = {"weightCache": {"refused": old["weightCache"]["refused"] + ["n2: record of another digest (fetched again from the claim)"],
                           "fallbacks": ["e1 on n3: no verified cache on this tray",
                                         "e2 on n4: refused: a changed since verification (size, mtime [1, 2] -> [2, 3])"]}}
    assert weight_cache_events(old, new) == [
        ("Warning", "WeightCacheRefused", "node-local weight cache refused: n2: record of another digest (fetched again from the claim)"),
        ("Warning", "WeightCacheRefused", "node-local weight cache refused: e2 on n4: refused: a changed since verification "
                                          "(size, mtime [1, 2] -> [2, 3])")]
    assert weight_cache_events(new, new) == []


def test_a_failed_prefetch_is_a_warning_event_once_that_names_the_fix_for_a_wrong_digest(src: Path, tmp_path: Path):
    code, report = prefetch(src, tmp_path / "tray", "sha256:" + "0" * 64)  # the new user's mistyped digest
    assert code == 1
    text = f"n1: {report['error']}"
    new = {"weightCache": {"failures": [text]}}
    [(kind, reason, message)] = weight_cache_events({}, new)
    assert (kind, reason) == ("Warning", "WeightCacheFailed")
    assert f"has digest {manifest_digest(hash_tree(src))}, not the pinned sha256:000" in message
    assert "engines on that tray read the claim" in message and "pin the claim's digest" in message
    assert weight_cache_events(new, new) == []


def test_the_cache_selector_narrows_the_engines_and_never_contradicts_them(seed_cr: dict):
    from qdd.errors import SpecError

    seed_cr["spec"]["cluster"]["nodeSelector"] = {"pool": "gb"}
    with pytest.raises(SpecError) as e:
        plan_of(_cached(seed_cr, nodeSelector={"pool": "other", "kubernetes.io/arch": "amd64", "disk": "nvme"}))
    assert sorted(f.field for f in e.value.errors) == ["spec.model.cache.nodeSelector.kubernetes.io/arch",
                                                       "spec.model.cache.nodeSelector.pool"]
    assert "differs from the engines' pool='gb'" in str(e.value)
    plan = plan_of(_cached(seed_cr, nodeSelector={"pool": "gb", "disk": "nvme"}))
    [ds] = [o for o in render_all(plan) if o["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {
        "kubernetes.io/arch": "arm64", "nvidia.com/gpu.product": "NVIDIA-GB200", "pool": "gb", "disk": "nvme"}


def test_a_digest_without_its_prefix_is_refused_with_the_form_and_the_fix(seed_cr: dict):
    from qdd.errors import SpecError

    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models"}}
    seed_cr["spec"]["model"]["cache"] = {"digest": "ab" * 32}  # what the coreutils pipeline prints
    with pytest.raises(SpecError) as e:
        parse_resource(seed_cr)
    [err] = e.value.errors
    assert err.field == "spec.model.cache.digest"
    assert "'sha256:' and 64 lower-case hex digits" in err.message and "put 'sha256:' before them" in err.message


def test_the_compile_cache_may_not_be_the_models_claim(seed_cr: dict):
    from qdd.errors import SpecError

    seed_cr["spec"]["model"]["source"] = {"pvc": {"claimName": "models"}}
    seed_cr["spec"]["engine"]["compileCache"] = {"claimName": "models"}
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    [err] = e.value.errors
    assert err.field == "spec.engine.compileCache.claimName" and "mount read-write" in err.message
    seed_cr["spec"]["engine"]["compileCache"] = {"claimName": "compile"}
    assert plan_of(seed_cr).spec.engine.compile_cache.claim_name == "compile"


def test_qdd_weights_digest_refuses_a_folder_without_files(tmp_path, capsys):
    from qdd.cli import main as cli

    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(SystemExit) as e:
        cli(["weights", "digest", str(tmp_path / "empty")])
    assert "holds no files" in str(e.value.code)
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "config.json").write_text("{}")
    cli(["weights", "digest", str(src)])
    assert capsys.readouterr().out.strip() == manifest_digest(hash_tree(src))


def test_qdd_render_takes_the_operators_weight_cache_root(seed_cr: dict, tmp_path, capsys, monkeypatch):
    from qdd.cli import main as cli

    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(_cached(seed_cr)))
    folder = f"{seed_cr['metadata']['namespace']}/{'ab' * 32}"

    def paths() -> set[str]:
        return {v["hostPath"]["path"] for o in yaml.safe_load_all(capsys.readouterr().out) if o and o["kind"] in
                ("DaemonSet", "StatefulSet") for v in o["spec"]["template"]["spec"].get("volumes", []) if "hostPath" in v}
    monkeypatch.delenv("QDD_WEIGHT_CACHE_ROOT", raising=False)
    cli(["render", "-f", str(f)])
    assert paths() == {f"{DEFAULT_ROOT}/{folder}"}
    monkeypatch.setenv("QDD_WEIGHT_CACHE_ROOT", "/data/qdd")
    cli(["render", "-f", str(f)])
    assert paths() == {f"/data/qdd/{folder}"}
    cli(["render", "-f", str(f), "--weight-cache-root", "/nvme/w"])
    assert paths() == {f"/nvme/w/{folder}"}
    with pytest.raises(SystemExit, match="absolute path without"):
        cli(["render", "-f", str(f), "--weight-cache-root", "/a/../etc"])


def test_select_reads_the_claim_while_a_prefetch_holds_the_lock_and_the_cache_once_it_is_released(
        src: Path, tmp_path: Path):
    digest = manifest_digest(hash_tree(src))
    cache, link = tmp_path / "tray", tmp_path / "pod" / "model"
    prefetch(src, cache, digest)
    held = os.open(cache / program.LOCK, os.O_RDWR)  # another open file: flock conflicts as across processes
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        out = select(cache, digest, src, link)
        assert out["source"] == "remote" and os.readlink(link) == str(src)
        assert out["reason"] == "a prefetch is verifying or rewriting the cache on this tray right now"
    finally:
        os.close(held)
    (cache / program.LOCK).chmod(0o444)  # the engine's mount is read-only: a read-only open suffices
    out = select(cache, digest, src, link)
    assert out["source"] == "cache" and os.readlink(link) == str(cache / "files")
    # select's shared lock is gone once it returns: a prefetch takes the lock without waiting
    code, again = prefetch(src, cache, digest)
    assert code == 0 and again["state"] == "warm" and not again.get("lockWaitSeconds")
