"""The node-local weight cache's program: run in the pods with the engine image's python, as a file.

Standard library only (qdd renders this file into the ConfigMap ``<cr>-weight-cache``; the pods run
``python3 program.py ...``; docs/cold-start.md#node-local-weight-cache). Commands:

``digest DIR``
    Prints the checkpoint digest of a folder: ``sha256:`` + SHA-256 of its manifest, the lines
    ``<sha256 of the file>  <path>\\n`` of every file below DIR, paths relative to DIR with ``/``,
    in byte order of their UTF-8 form; symbolic links followed, a file reached by two paths listed
    under both; a link to a folder that is one of its own ancestors (a loop) not walked again; any
    path with a component starting with ``.`` left out (``.git``, ``.cache``, lock files). The same
    as ``cd DIR && find -L . -type f ! -path '*/.*' | sed 's|^\\./||' | LC_ALL=C sort | xargs -r -d '\\n' sha256sum | sha256sum``
    (GNU find, which also walks every path and skips only loops, by device and inode of the
    ancestors; file names with a newline or a backslash are escaped by sha256sum and not covered).

``prefetch --source SRC --cache DIR --digest sha256:HEX``
    The prefetch pods' init container (one per tray). ``DIR`` is this tray's cache folder of this
    digest (a hostPath). Everything below runs holding an exclusive lock, ``flock`` on
    ``DIR/.lock``: a second prefetch of the same folder (another deployment of the same digest, a
    restarted pod) waits for the first, then finds its copy and verifies it. Temporary folders a
    killed run left are deleted first. A cache already there is verified in full (every byte
    hashed): it is kept when its digest is the pinned one, else *refused* (moved aside and deleted)
    and the checkpoint is fetched again from ``SRC`` (the remote copy, read-only). A fetch copies
    into a temporary folder while hashing, compares the digest with the pinned one (a source that
    differs is never installed: exit 1), makes the files read-only, renames the folder into place
    and writes ``verified.json`` (each file's sha256, size and modification time) last. Exit 0: the
    tray is warm. Any error (the source unreadable, another digest, a full disk, anything else)
    ends in exit 1 and a ``failed`` report with the reason and, once the lock is held, leaves no
    copy: the record, the files and the temporary folders are deleted, so no engine reads a
    half-filled folder.

``select --cache DIR --digest sha256:HEX --source SRC --link PATH [--verify quick|full]``
    The engine pods' init container: points ``PATH`` (a symbolic link in an emptyDir the engine
    reads the model from) at ``DIR/files`` when this tray holds a verified cache of the pinned
    digest, else at ``SRC``, and says which and why. ``quick`` (the default) checks the record:
    the digest, the same set of files, each with the size and modification time it had when it was
    hashed (a file rewritten, truncated, added or removed since is caught; a change that keeps both
    is not: only ``full``, which hashes every byte again, catches that). Exits 0 whatever it
    finds: a missing or refused cache falls back to the remote copy, never stops the engine. It
    checks holding ``DIR/.lock`` shared, without waiting: while a prefetch holds it (a fetch or a
    refusal under way) the engine reads the remote copy.

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
import errno
import fcntl
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
LOCK = ".lock"
"""``flock``-ed exclusively by every prefetch of the folder for its whole run; ``select`` takes it
shared, without waiting, for its check (the engines' mount is read-only: opened read-only)."""
TEMPORARY = (".incoming-", ".refused-", f".{RECORD}.")
"""Prefixes of what a prefetch writes before it renames it into place."""
MESSAGE_LIMIT = 4096
"""Bytes the kubelet keeps of a termination message."""


def _walk(root: Path) -> list[str]:
    """Relative paths (``/``-separated) of every file below ``root``, in byte order: what
    ``find -L . -type f ! -path '*/.*'`` lists. Links are followed, so a file or folder reached by
    two paths is listed under both; a folder that is one of its own ancestors (same device and
    inode: a link back up) is not walked again, as GNU find skips a file-system loop; a broken link
    or one that cannot be followed is not a file; dot paths are left out."""
    out: list[str] = []

    def visit(folder: Path, rel: str, ancestors: frozenset[tuple[int, int]]) -> None:
        with os.scandir(folder) as it:
            names = sorted(e.name for e in it if not e.name.startswith("."))
        for n in names:
            path, sub = folder / n, f"{rel}{n}"
            try:
                st = os.stat(path)  # follows links
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) not in ancestors:
                    visit(path, sub + "/", ancestors | {(st.st_dev, st.st_ino)})
            elif stat.S_ISREG(st.st_mode):
                out.append(sub)

    top = os.stat(root)
    visit(root, "", frozenset({(top.st_dev, top.st_ino)}))
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


def _lock(fd: int, cache: Path) -> float | None:
    """Take the exclusive lock on ``fd``, waiting for another holder; the seconds waited, None
    when nobody held it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
    t0 = time.monotonic()
    print(f"another prefetch holds {cache / LOCK}: waiting for it", file=sys.stderr, flush=True)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return round(time.monotonic() - t0, 1)


def _delete(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        _remove(p)
    else:
        p.unlink(missing_ok=True)


def _remove_temporaries(cache: Path) -> None:
    for p in [c for c in cache.iterdir() if c.name.startswith(TEMPORARY)]:
        _delete(p)


def _discard(cache: Path) -> None:
    """After a failure (lock held): no record, no files, no temporary folder; best effort, the record
    first (without it no engine reads the folder)."""
    for step in (lambda: _delete(cache / RECORD), lambda: _delete(cache / FILES), lambda: _remove_temporaries(cache)):
        with contextlib.suppress(OSError):
            step()


def prefetch(source: Path, cache: Path, digest: str) -> tuple[int, dict[str, object]]:
    """(exit code, report) of one prefetch, holding ``cache/.lock``; see the module docstring. Never
    raises: an error is a ``failed`` report with the reason, and the folder is left empty."""
    t0 = time.monotonic()
    seen: dict[str, object] = {}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd = os.open(cache / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        return 1, {"state": "failed", "digest": digest, "error": f"opening the lock {cache / LOCK}: {e}"}
    try:
        try:
            waited = _lock(fd, cache)
        except OSError as e:
            return 1, {"state": "failed", "digest": digest, "error": f"locking {cache / LOCK}: {e}"}
        try:
            code, out = _prefetch_locked(source, cache, digest, t0, seen)
        except Exception as e:  # any error is a failed report, never a traceback
            code, out = 1, {"state": "failed", "digest": digest, "refused": seen.get("refused"),
                            "error": f"{type(e).__name__}: {e}"}
        if code != 0:
            _discard(cache)
        if waited is not None:
            out["lockWaitSeconds"] = waited
        return code, out
    finally:
        os.close(fd)  # releases the lock


def _prefetch_locked(source: Path, cache: Path, digest: str, t0: float,
                     seen: dict[str, object]) -> tuple[int, dict[str, object]]:
    _remove_temporaries(cache)  # a killed run's
    files = cache / FILES
    refused = None
    rec = _read_record(cache)
    if rec is not None and files.is_dir():
        hashes = hash_tree(files)
        if rec.get("digest") == digest and manifest_digest(hashes) == digest:
            stats = _stats(files, list(hashes))
            _write_record(cache, {**rec, "files": {p: {**rec["files"][p], "stat": s} for p, s in stats.items()}})
            return 0, {"state": "warm", "digest": digest, "files": len(hashes), "fetched": False,
                       "bytes": sum(s[0] for s in stats.values()), "seconds": round(time.monotonic() - t0, 1)}
        want = {p: str(v.get("sha256", "")) for p, v in rec["files"].items() if isinstance(v, dict)}
        refused = ("record of another digest" if rec.get("digest") != digest else _first_difference(want, hashes))
    elif files.exists():
        refused = f"{RECORD} missing or unreadable"
    seen["refused"] = refused
    if files.exists():
        aside = cache / f".refused-{os.getpid()}"
        (cache / RECORD).unlink(missing_ok=True)
        os.rename(files, aside)
        _remove(aside)
    incoming = cache / f".incoming-{os.getpid()}"
    try:
        hashes = hash_tree(source, copy_to=incoming)
    except OSError as e:
        return 1, {"state": "failed", "digest": digest, "refused": refused,
                   "error": f"copying the source {source}: {e}"}
    got = manifest_digest(hashes)
    if got != digest:
        return 1, {"state": "failed", "digest": digest, "refused": refused,
                   "error": f"the source {source} has digest {got}, not the pinned {digest}: nothing installed"}
    stats = _stats(incoming, list(hashes))
    _read_only(incoming)
    os.rename(incoming, files)
    _write_record(cache, {"digest": digest, "verifiedAt": int(time.time()), "files": {
        p: {"sha256": h, "stat": stats[p]} for p, h in hashes.items()}})
    return 0, {"state": "warm", "digest": digest, "files": len(hashes), "fetched": True, "refused": refused,
               "bytes": sum(s[0] for s in stats.values()), "seconds": round(time.monotonic() - t0, 1)}


def _write_record(cache: Path, record: dict[str, object]) -> None:
    """``verified.json``, whole or not at all (a temporary file renamed over it)."""
    tmp = cache / f".{RECORD}.{os.getpid()}"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, cache / RECORD)


def check(cache: Path, digest: str, verify: str = "quick") -> str | None:
    """None when ``cache`` holds a verified copy of ``digest``; else why not."""
    rec = _read_record(cache)
    files = cache / FILES
    if rec is None or not files.is_dir():
        return "no verified cache on this tray"
    if rec.get("digest") != digest:
        return f"refused: the cache on this tray is of {rec.get('digest')}, not {digest}"
    want = rec["files"]
    if not isinstance(want, dict) or not all(isinstance(v, dict) for v in want.values()):
        return "refused: a malformed record"
    # The record's own hashes must make the digest: a record written to match another folder's
    # files is refused before any file is looked at.
    if manifest_digest({p: str(v.get("sha256")) for p, v in want.items()}) != digest:
        return "refused: the record's hashes do not make the digest"
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


def _shared_lock(cache: Path) -> tuple[int | None, str | None]:
    """(fd holding a shared ``flock`` on ``cache/.lock``, None) or (None, why not). The engine's
    mount is read-only, so ``select`` opens the lock read-only (flock needs no write access); no
    lock file: no prefetch ever ran here (:func:`check` says so). A prefetch holds the lock
    exclusively for its whole run: a held lock means the folder may be being refused, renamed or
    filled right now, so ``select`` does not wait for it (a fetch takes minutes) and reads the claim."""
    try:
        fd = os.open(cache / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"refused: opening {LOCK} ({type(e).__name__}: {e})"[:500]
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, "a prefetch is verifying or rewriting the cache on this tray right now"
    except OSError as e:
        os.close(fd)
        return None, f"refused: locking {LOCK} ({type(e).__name__}: {e})"[:500]
    return fd, None


def select(cache: Path, digest: str, source: Path, link: Path, verify: str = "quick") -> dict[str, object]:
    t0 = time.monotonic()
    fd, why = _shared_lock(cache)
    try:
        if why is None:
            why = check(cache, digest, verify)
    except Exception as e:  # noqa: BLE001 — whatever the folder holds, the engine falls back to the claim
        why = f"refused: unreadable cache ({type(e).__name__}: {e})"[:500]
    finally:
        # Held through the check only: the engine's later reads are covered by the prefetch's own
        # rule, which refuses (renames away) a copy only when it no longer hashes to the digest.
        if fd is not None:
            os.close(fd)
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
