"""Who owns a sandbox's host state, and the removal of state whose owner is gone.

A sandbox (and every build step) leaves state on the host while it runs: a state dir under
``RUN_DIR`` (the mountpoint of its private tmpfs), ``evokit-<id>`` cgroups, a slirp4netns process
and, for a build step, a temp dir in the layer cache. ``stop()`` removes all of it; a SIGKILLed
harness cannot. So each owner first takes a **lease**: ``RUN_DIR/<id>.lock``, created exclusively,
``flock``-ed for as long as the state lives, holding a JSON record of what it will create
(owner pid, state dir, cgroup dirs, temp dir). The kernel drops the flock when the owner dies,
however it dies, so "lock free" means "owner gone", and a pid check could not be fooled by pid
reuse. :func:`clean` removes the state of free leases only, never of a held one (another live
harness's sandboxes), and state dirs / ``evokit-*`` cgroups from before leases existed only when
nothing uses them: no process in the cgroup, no process that sees a mount of the dir, older than
:data:`GRACE_SEC`.

Order that keeps :func:`clean` safe against a lease being taken at the same moment: the owner
creates and locks the lease, then writes its record, then creates the state; a cleaner that gets
the lock of an empty (unwritten) lease backs off. ``release`` removes the state, then the lease.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from evokit.sandbox.cgroup import kill_members

RUN_DIR = Path(os.environ.get("EVOKIT_RUN_DIR", "/run/evokit"))
#: State older than this without a lease (made by an evokit from before leases) may be removed.
GRACE_SEC = 60.0
_ID = re.compile(r"^(?:build-)?[0-9a-f]{12}$")


class Lease:
    """A held lock on ``run_dir/<id>.lock`` whose record names what this process creates.

    Call :meth:`record` with each thing before creating it, and :meth:`release` after removing it.
    """

    def __init__(self, run_dir: Path, id: str):
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.id, self.path = id, run_dir / f"{id}.lock"
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                                       | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.data: dict = {"pid": os.getpid(), "created": time.time()}
        self.record()

    def record(self, **fields) -> None:
        """Add ``fields`` (paths as str, lists of str) to the record, rewritten in place."""
        self.data.update(fields)
        raw = json.dumps(self.data).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, raw, 0)

    def release(self) -> None:
        """Remove the lease (its state must already be gone); idempotent."""
        if self._fd is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class Entry:
    """One piece of evokit host state as :func:`scan` found it."""

    id: str
    status: str  # "live" (lease held), "stale" (lease free), "orphan" (no lease, unused, old)
    pid: int | None  # the owner that created it, from the lease
    state_dir: str | None
    cgroup_dirs: tuple[str, ...]
    tmp_dir: str | None


def _locked_by_someone(path: Path) -> tuple[bool, dict | None]:
    """(held, record) of a lease file; ``(True, None)`` for one being written right now."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return True, None  # vanished (released) or not ours to judge
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 1 << 16, 0)
            try:
                return True, json.loads(raw)
            except ValueError:
                return True, None
        raw = os.pread(fd, 1 << 16, 0)
        try:
            return False, json.loads(raw)
        except ValueError:  # created but not yet written: its owner is about to lock it
            return True, None
    finally:
        os.close(fd)  # drops our lock, if we got it


def _cgroup_parents() -> list[Path]:
    from evokit.sandbox.cgroup import parent_dirs

    return parent_dirs()


def _cgroup_busy(d: Path) -> bool:
    try:
        return bool((d / "cgroup.procs").read_text().split())
    except OSError:
        return False


def _mounted_anywhere(path: str) -> bool:
    """Whether any process sees a mount at or under ``path`` (a live sandbox's private tmpfs)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/mountinfo") as f:
                for line in f:
                    mnt = line.split()[4]
                    if mnt == path or mnt.startswith(path.rstrip("/") + "/"):
                        return True
        except (OSError, IndexError):
            pass
    return False


def _age(p: Path) -> float:
    try:
        return time.time() - p.stat().st_mtime
    except OSError:
        return 0.0


def scan(run_dir: Path | None = None) -> list[Entry]:
    """Every lease in ``run_dir`` and every lease-less state dir / ``evokit-*`` cgroup, with status."""
    run_dir = Path(run_dir or RUN_DIR)
    entries: dict[str, Entry] = {}
    names = sorted(os.listdir(run_dir)) if run_dir.is_dir() else []
    for name in names:
        if not name.endswith(".lock") or not _ID.match(name[:-5]):
            continue
        id = name[:-5]
        held, rec = _locked_by_someone(run_dir / name)
        rec = rec or {}
        entries[id] = Entry(id, "live" if held else "stale", rec.get("pid"), rec.get("state_dir"),
                            tuple(rec.get("cgroup_dirs", ())), rec.get("tmp_dir"))
    # State from before leases (or whose lease was lost): a state dir or a cgroup named by an id.
    loose_dirs = {n: run_dir / n for n in names if _ID.match(n) and (run_dir / n).is_dir() and n not in entries}
    loose_cgroups: dict[str, list[Path]] = {}
    for parent in _cgroup_parents():
        try:
            children = list(parent.iterdir())
        except OSError:
            continue
        for d in children:
            id = d.name.removeprefix("evokit-")
            if d.name.startswith("evokit-") and _ID.match(id) and id not in entries and d.is_dir():
                loose_cgroups.setdefault(id, []).append(d)
    for id in sorted(set(loose_dirs) | set(loose_cgroups)):
        sd, cgs = loose_dirs.get(id), loose_cgroups.get(id, [])
        used = any(_cgroup_busy(d) for d in cgs) or (sd is not None and _mounted_anywhere(str(sd)))
        young = any(_age(p) < GRACE_SEC for p in [*cgs, *([sd] if sd else [])])
        entries[id] = Entry(id, "live" if used or young else "orphan", None, str(sd) if sd else None,
                            tuple(map(str, cgs)), None)
    return sorted(entries.values(), key=lambda e: e.id)


def remove(entry: Entry, run_dir: Path | None = None) -> list[str]:
    """Remove the state of a not-live ``entry``: kill its cgroups' processes, rmdir; return what went."""
    if entry.status == "live":
        raise ValueError(f"sandbox state {entry.id} is in use; not removed")
    run_dir = Path(run_dir or RUN_DIR)
    lease = run_dir / f"{entry.id}.lock"
    fd = None
    if entry.status == "stale":  # hold its lock while we clean, so that no second cleaner races us
        try:
            fd = os.open(lease, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (OSError, BlockingIOError):
            if fd is not None:
                os.close(fd)
            return []
    done = []
    try:
        for d in map(Path, entry.cgroup_dirs):
            if d.name != f"evokit-{entry.id}":
                continue  # a record names only its own cgroups; never follow anything else
            kill_members(d, timeout=1.0)
            for _ in range(50):
                try:
                    d.rmdir()
                    done.append(f"cgroup {d}")
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        if entry.state_dir and Path(entry.state_dir).parent == run_dir and Path(entry.state_dir).name == entry.id:
            sd = Path(entry.state_dir)
            if not _mounted_anywhere(str(sd)):
                for d in (sd / "merged", sd / "upper", sd / "work", sd):
                    try:
                        d.rmdir()
                        if d == sd:
                            done.append(f"state dir {sd}")
                    except OSError:
                        pass
        if entry.tmp_dir and Path(entry.tmp_dir).name.startswith(".tmp-") and Path(entry.tmp_dir).parent.name == "layers":
            if os.path.lexists(entry.tmp_dir) and not _mounted_anywhere(entry.tmp_dir):
                shutil.rmtree(entry.tmp_dir, ignore_errors=True)
                done.append(f"build dir {entry.tmp_dir}")
        if entry.status == "stale":
            try:
                lease.unlink()
                done.append(f"lease {lease}")
            except FileNotFoundError:
                pass
    finally:
        if fd is not None:
            os.close(fd)
    return done


def clean(run_dir: Path | None = None) -> list[str]:
    """Remove every stale or orphaned piece of state in ``run_dir``; return what was removed."""
    out = []
    for e in scan(run_dir):
        if e.status != "live":
            out += remove(e, run_dir)
    return out


_cleaned: set[str] = set()
_cleaned_lock = threading.Lock()


def clean_once(run_dir: Path | None = None) -> None:
    """:func:`clean` the first time a process starts a sandbox or build step (per run dir)."""
    key = str(run_dir or RUN_DIR)
    with _cleaned_lock:
        if key in _cleaned:
            return
        _cleaned.add(key)
    try:
        clean(run_dir)
    except OSError:
        pass  # best effort: never fail a start because someone else's state is odd


def leases_of(pid: int, run_dir: Path | None = None) -> list[Entry]:
    """The leases that process ``pid`` took and has not released (its unstopped sandboxes)."""
    return [e for e in scan(run_dir) if e.pid == pid and e.status in ("live", "stale")]
