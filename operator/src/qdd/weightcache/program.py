"""The node-local weight cache's program: run in the pods with the engine image's python, as a file.

Standard library only (qdd renders this file into the ConfigMap ``<cr>-weight-cache``; the pods run
``python3 program.py ...``; docs/cold-start.md#node-local-weight-cache). Commands:

``digest DIR``
    Prints the checkpoint digest of a folder: ``sha256:`` + SHA-256 of its manifest, the lines
    ``<sha256 of the file>  <path>\\n`` of every file below DIR, paths relative to DIR with ``/``,
    in byte order of their UTF-8 form; symbolic links followed; any path with a component starting
    with ``.`` left out (``.git``, ``.cache``, lock files). The same as
    ``cd DIR && find -L . -type f ! -path '*/.*' | sed 's|^\\./||' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum``.

``prefetch --source SRC --cache DIR --digest sha256:HEX``
    The prefetch pods' init container (one per tray). ``DIR`` is this tray's cache folder of this
    digest (a hostPath). A cache already there is verified in full (every byte hashed): it is kept
    when its digest is the pinned one, else *refused* (moved aside and deleted) and the checkpoint
    is fetched again from ``SRC`` (the remote copy, read-only). A fetch copies into a temporary
    folder while hashing, compares the digest with the pinned one (a source that differs is never
    installed: exit 1), makes the files read-only, renames the folder into place and writes
    ``verified.json`` (each file's sha256, size and modification time) last. Exit 0: the tray is
    warm.

``select --cache DIR --digest sha256:HEX --source SRC --link PATH [--verify quick|full]``
    The engine pods' init container: points ``PATH`` (a symbolic link in an emptyDir the engine
    reads the model from) at ``DIR/files`` when this tray holds a verified cache of the pinned
    digest, else at ``SRC``, and says which and why. ``quick`` (the default) checks the record:
    the digest, the same set of files, each with the size and modification time it had when it was
    hashed (a file rewritten, truncated, added or removed since is caught; a change that keeps both
    is not: only ``full``, which hashes every byte again, catches that). Exits 0 whatever it
    finds: a missing or refused cache falls back to the remote copy, never stops the engine.

``hold``
    The prefetch pods' main container: waits for SIGTERM (the pod keeps the tray in the DaemonSet).

Every command but ``hold`` prints one JSON line, which ``--termination-log FILE`` also writes (the
kubelet's ``/dev/termination-log``, at most 4,096 bytes: the operator reads it from the pod's
status): ``{"state": "warm"|"failed", ...}`` for prefetch, ``{"source": "cache"|"remote", ...}``
for select.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 16 << 20
"""Bytes per read: large enough that hashing runs at the disk's speed with the GIL released."""
THREADS = 8
"""Files hashed or copied at once: a checkpoint is tens of multi-GB shards."""
FILES = "files"
RECORD = "verified.json"
MESSAGE_LIMIT = 4096
"""Bytes the kubelet keeps of a termination message."""


def _walk(root: Path) -> list[str]:
    """Relative paths (``/``-separated) of every file below ``root``, links followed, dot paths left
    out, in byte order."""
    out: list[str] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back up: do not walk it twice
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in files:
            p = Path(top) / f
            if not f.startswith(".") and p.is_file():
                out.append(p.relative_to(root).as_posix())
    return sorted(out, key=lambda s: s.encode())


def _hash_file(path: Path, copy_to: Path | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as src:
        if copy_to is None:
            while chunk := src.read(CHUNK):
                h.update(chunk)
        else:
            copy_to.parent.mkdir(parents=True, exist_ok=True)
            with open(copy_to, "wb") as dst:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
    return h.hexdigest()


def manifest_digest(hashes: dict[str, str]) -> str:
    """``sha256:`` + the SHA-256 of the manifest of ``{path: sha256}`` (module docstring)."""
    text = "".join(f"{hashes[p]}  {p}\n" for p in sorted(hashes, key=lambda s: s.encode()))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def hash_tree(root: Path, copy_to: Path | None = None) -> dict[str, str]:
    """``{path: sha256}`` of every file below ``root`` (copied below ``copy_to`` while hashed)."""
    paths = _walk(root)
    with ThreadPoolExecutor(THREADS) as pool:
        hashes = pool.map(lambda p: _hash_file(root / p, None if copy_to is None else copy_to / p), paths)
        return dict(zip(paths, hashes, strict=True))


def _stats(root: Path, paths: list[str]) -> dict[str, list[int]]:
    return {p: [(st := (root / p).stat()).st_size, st.st_mtime_ns] for p in paths}


def _say(out: dict[str, object], termination_log: str | None) -> None:
    line = json.dumps(out, sort_keys=True)
    if len(line.encode()) > MESSAGE_LIMIT:
        out = {k: (v[:512] if isinstance(v, str) else v) for k, v in out.items()}
        line = json.dumps(out, sort_keys=True)[:MESSAGE_LIMIT]
    print(line, flush=True)
    if termination_log:
        with contextlib.suppress(OSError):  # not in a pod: stdout is enough
            Path(termination_log).write_text(line)


def _read_record(cache: Path) -> dict | None:
    try:
        rec = json.loads((cache / RECORD).read_text())
        return rec if isinstance(rec, dict) and isinstance(rec.get("files"), dict) else None
    except (OSError, ValueError):
        return None


def _first_difference(want: dict[str, str], got: dict[str, str]) -> str:
    for p in sorted(set(want) | set(got)):
        if p not in got:
            return f"{p} is missing"
        if p not in want:
            return f"{p} is not in the record"
        if want[p] != got[p]:
            return f"sha256 of {p} differs from the record"
    return "the files match the record, the record not the pinned digest"


def _read_only(root: Path) -> None:
    for top, dirs, files in os.walk(root):
        for f in files:
            os.chmod(Path(top) / f, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        for d in dirs:
            os.chmod(Path(top) / d, 0o555)
    os.chmod(root, 0o555)


def _remove(path: Path) -> None:
    """Delete a tree made read-only by :func:`_read_only`."""
    if not path.exists():
        return
    for top, dirs, _ in os.walk(path):
        os.chmod(top, 0o755)
        for d in dirs:
            os.chmod(Path(top) / d, 0o755)
    shutil.rmtree(path)


def prefetch(source: Path, cache: Path, digest: str) -> tuple[int, dict[str, object]]:
    """(exit code, report) of one prefetch; see the module docstring."""
    t0 = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    files = cache / FILES
    refused = None
    rec = _read_record(cache)
    if rec is not None and files.is_dir():
        hashes = hash_tree(files)
        if rec.get("digest") == digest and manifest_digest(hashes) == digest:
            (cache / RECORD).write_text(json.dumps({**rec, "files": {
                p: {**rec["files"][p], "stat": s} for p, s in _stats(files, list(hashes)).items()}}))
            return 0, {"state": "warm", "digest": digest, "files": len(hashes), "fetched": False,
                       "bytes": sum(s[0] for s in _stats(files, list(hashes)).values()),
                       "seconds": round(time.monotonic() - t0, 1)}
        want = {p: str(v.get("sha256", "")) for p, v in rec["files"].items() if isinstance(v, dict)}
        refused = ("record of another digest" if rec.get("digest") != digest else _first_difference(want, hashes))
    elif files.exists():
        refused = f"{RECORD} missing or unreadable"
    if files.exists():
        aside = cache / f".refused-{os.getpid()}"
        _remove(aside)
        (cache / RECORD).unlink(missing_ok=True)
        os.rename(files, aside)
        _remove(aside)
    incoming = cache / f".incoming-{os.getpid()}"
    _remove(incoming)
    try:
        hashes = hash_tree(source, copy_to=incoming)
    except OSError as e:
        _remove(incoming)
        return 1, {"state": "failed", "digest": digest, "refused": refused,
                   "error": f"reading the source {source}: {e}"}
    got = manifest_digest(hashes)
    if got != digest:
        _remove(incoming)
        return 1, {"state": "failed", "digest": digest, "refused": refused,
                   "error": f"the source {source} has digest {got}, not the pinned {digest}: nothing installed"}
    stats = _stats(incoming, list(hashes))
    _read_only(incoming)
    os.rename(incoming, files)
    tmp = cache / f".{RECORD}.{os.getpid()}"
    tmp.write_text(json.dumps({"digest": digest, "verifiedAt": int(time.time()), "files": {
        p: {"sha256": h, "stat": stats[p]} for p, h in hashes.items()}}))
    os.replace(tmp, cache / RECORD)
    return 0, {"state": "warm", "digest": digest, "files": len(hashes), "fetched": True, "refused": refused,
               "bytes": sum(s[0] for s in stats.values()), "seconds": round(time.monotonic() - t0, 1)}


def check(cache: Path, digest: str, verify: str = "quick") -> str | None:
    """None when ``cache`` holds a verified copy of ``digest``; else why not."""
    rec = _read_record(cache)
    files = cache / FILES
    if rec is None or not files.is_dir():
        return "no verified cache on this tray"
    if rec.get("digest") != digest:
        return f"refused: the cache on this tray is of {rec.get('digest')}, not {digest}"
    want = rec["files"]
    paths = _walk(files)
    if set(paths) != set(want):
        extra, missing = sorted(set(paths) - set(want)), sorted(set(want) - set(paths))
        return f"refused: {'added ' + extra[0] if extra else 'missing ' + missing[0]} since verification"
    if verify == "full":
        hashes = hash_tree(files)
        if manifest_digest(hashes) != digest:
            return "refused: " + _first_difference({p: str(v.get("sha256")) for p, v in want.items()}, hashes)
        return None
    for p, s in _stats(files, paths).items():
        if list(want[p].get("stat") or []) != s:
            return f"refused: {p} changed since verification (size, mtime {want[p].get('stat')} -> {s})"
    return None


def select(cache: Path, digest: str, source: Path, link: Path, verify: str = "quick") -> dict[str, object]:
    t0 = time.monotonic()
    try:
        why = check(cache, digest, verify)
    except (OSError, ValueError, TypeError) as e:
        why = f"refused: unreadable cache ({e})"
    target = cache / FILES if why is None else source
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
    out: dict[str, object] = {"source": "cache" if why is None else "remote", "digest": digest, "verify": verify,
                              "seconds": round(time.monotonic() - t0, 2)}
    if why is not None:
        out["reason"] = why
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="program.py", description="qdd's node-local weight cache")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("digest")
    d.add_argument("dir")
    p = sub.add_parser("prefetch")
    s = sub.add_parser("select")
    for x in (p, s):
        x.add_argument("--source", required=True)
        x.add_argument("--cache", required=True)
        x.add_argument("--digest", required=True)
        x.add_argument("--termination-log")
    s.add_argument("--link", required=True)
    s.add_argument("--verify", choices=("quick", "full"), default="quick")
    sub.add_parser("hold")
    a = ap.parse_args(argv)
    if a.cmd == "digest":
        print(manifest_digest(hash_tree(Path(a.dir))))
        return 0
    if a.cmd == "hold":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    if a.cmd == "prefetch":
        code, out = prefetch(Path(a.source), Path(a.cache), a.digest)
        _say(out, a.termination_log)
        return code
    _say(select(Path(a.cache), a.digest, Path(a.source), Path(a.link), a.verify), a.termination_log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
