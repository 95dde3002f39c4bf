"""Host-safe file transfers: host → sandbox, sandbox → host, and sandbox → sandbox.

Why not tar (the trojaned-tool, host-write and host-memory classes): a tar made *inside* the
sandbox is made by the agent's ``/usr/bin/tar`` (which a root agent can replace), and a host
binary run inside the sandbox's root still loads the agent's libc; a tar *parsed on the host*
runs into Python's ``tarfile`` filter bypass (CVE-2025-4517, unfixed in the interpreters here);
and reading it into one ``bytes`` cost 8 GiB of host RAM for a 3 GiB sparse log. So no archive
is made or parsed at all, and no program of the sandbox runs. The host process walks the
sandbox's root directly, the way ``docker cp`` does, through ``/proc/<pid 1>/root``, with every
path resolved by ``openat2(2)``:

* ``RESOLVE_IN_ROOT``: ``..`` and absolute symlinks stay inside the sandbox's root, so a
  planted ``/out -> /etc`` means the *sandbox's* ``/etc``, never the host's;
* ``RESOLVE_NO_XDEV``: never crosses a mount (the sandbox's ``/proc``, ``/dev``, ``/dev/shm``);
* ``RESOLVE_NO_MAGICLINKS``: no ``/proc/self/root``-style jumps;
* every entry is first opened ``O_PATH | O_NOFOLLOW`` and classified with ``fstat``: only
  regular files, directories and symlinks are transferred. Opening a FIFO would hang and
  opening a device node (an agent with ``CAP_MKNOD`` can make ``/app/sda``) would read host
  hardware, so they are skipped and reported, never opened.

**Links are resolved, never carried** (the answer-key-through-a-link class). Where a symlink
leads is decided by the kernel that follows it, in the filesystem it is followed in, and the
kernel applies ``..`` *after* following the links before it. A link's text therefore says
nothing reliable: ``a/b/up/../../../tests/key`` reads as ``<dir>/tests/key``, but with
``a/b/up -> /app`` the kernel lands on ``/tests/key``: the verifier's answer key, once the
link is recreated in the verifier's sandbox. So :func:`copy_between` and :func:`download`
(of a directory) create no symlink at all, and no decision anywhere rests on a link's text.
Each link met in the source is resolved by the kernel inside the *source* sandbox's root
(``openat2`` with ``RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV``, links
followed), and what it resolves to crosses only if it is itself part of what is being copied:
its inode (``st_dev``, ``st_ino``) is one met while walking the copied paths with no link
followed. That index is built once per transfer, when the first link is met, so a tree
without links pays nothing for it. A link to such a regular file arrives as a regular file
with its bytes, read from the very fd the kernel resolved (the file checked is the file
read); anything else (dangling, a loop, a crossed mount, a magic link, a FIFO, a file or
directory outside the copied paths, a path deeper than ``PATH_MAX``) is dropped and listed in
``TransferReport.refused`` with the reason. Identity rather than location also covers a link
to a hard link: a file outside the paths that shares its inode with one inside crosses,
because its bytes cross anyway.

Links to directories: copied as a real directory holding the target directory's contents
(entries checked by the same rules), because work that reaches files through a directory
link (``current -> releases/v2``, pnpm's ``node_modules`` layout, a venv's ``lib64 -> lib``)
keeps the paths the tests read. Loop protection: a directory link whose target is already
being copied on the way to the link (its own ancestor, or a directory being expanded through
another link) is refused as a loop, so no directory is expanded inside itself and the
expansion is finite; the duplication it can still cause is bounded by ``max_files`` and
``max_bytes`` (over them: :class:`TransferError`, the agent's failure).

Compatibility cost, stated: a link among the agent's files becomes a copy. A
``node_modules/.bin/tool`` is a regular file with the tool's bytes (a script that finds its
package through its own real path, as Node's module resolution does, runs from the copy's
place instead), a directory link is a second copy counted in the caps, and a link to a file
outside the copied paths is dropped even where the verifier's image holds the same file (a
venv's ``bin/python -> /usr/bin/python3``): tasks that need such links made should have their
tests make them, or use the shared verifier mode.

Data is moved with ``sendfile`` (in the kernel, a fixed-size window at a time) and holes are
kept (``SEEK_DATA``/``SEEK_HOLE``), so host memory stays bounded whatever the file size; the
size of every file is fixed by ``fstat`` before copying (a file that grows meanwhile is cut
there) and the sum is capped by ``max_bytes`` with a clear error. Set-uid/set-gid bits are
never carried; files written on the host get ``0644``/``0755`` and no agent-chosen owner.

Deviation (stated): pages written into a sandbox's tmpfs by these functions are charged to
the host process's memory cgroup, not the sandbox's; the tmpfs size (``storage_mb``) and
``max_bytes`` still bound them.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evokit.errors import EvokitError

if TYPE_CHECKING:
    from evokit.sandbox.runtime import Sandbox

_SYS_OPENAT2 = 437  # the same number on every architecture (added after the syscall table merge)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH, RESOLVE_IN_ROOT = 1, 2, 4, 8, 16
#: Resolution of a path given from the sandbox's root: links followed, but only inside it.
_IN_ROOT = RESOLVE_IN_ROOT | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS
#: Resolution of one name inside an open directory: never leaves it, never follows a link.
_BENEATH = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS
_CHUNK = 1 << 20  # sendfile window
DEFAULT_MAX_FILES = 200_000  # entries per transfer: an agent's million empty files stop here
#: Paths ``copy_between`` never carries (or carries over): what the verifier side uploads or
#: writes itself (tests, the oracle's solution, the reward) and the kernel's mounts.
VERIFIER_ONLY = ("/tests", "/solution", "/logs/verifier", "/proc", "/sys", "/dev")


class TransferError(EvokitError, RuntimeError):
    """A transfer was refused (too large, a source that may not be copied, a bad path)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """``openat2(2)``: open ``path`` relative to ``dirfd`` under the ``resolve`` restrictions."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    for _ in range(100):  # EAGAIN: a concurrent rename somewhere in the tree; retry
        fd = _libc.syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


@dataclass(frozen=True)
class TransferReport:
    """What a transfer did: paths written (as in the destination), entries refused and why, bytes."""

    copied: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]
    bytes: int


class _Budget:
    def __init__(self, max_bytes: int, max_files: int, what: str):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes, self.max_files, self.what = max_bytes, max_files, what
        self.bytes = self.files = 0
        self.copied: list[str] = []
        self.refused: list[tuple[str, str]] = []

    def entry(self, path: str) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise TransferError(f"{self.what}: more than {self.max_files} files and directories (at {path}); "
                                "stopped there")

    def take(self, path: str, size: int) -> None:
        if self.bytes + size > self.max_bytes:
            raise TransferError(f"{self.what}: {path} ({size} bytes) would take the transfer past its cap of "
                                f"{self.max_bytes} bytes ({self.bytes} already copied); stopped there")
        self.bytes += size

    def report(self) -> TransferReport:
        return TransferReport(tuple(self.copied), tuple(self.refused), self.bytes)


def _reopen(fd: int, flags: int) -> int:
    """A real fd (``O_RDONLY``...) for the inode an ``O_PATH`` fd holds: no second path lookup."""
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(mode), "a special file")


def copy_data(src_fd: int, dst_fd: int, size: int) -> None:
    """Copy the first ``size`` bytes of ``src_fd`` into ``dst_fd`` in the kernel, keeping holes."""
    off = 0
    while off < size:
        try:
            start = os.lseek(src_fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: only a hole is left
                raise
            break
        if start >= size:
            break
        end = min(os.lseek(src_fd, start, os.SEEK_HOLE), size)
        os.lseek(dst_fd, start, os.SEEK_SET)
        pos = start
        while pos < end:
            n = os.sendfile(dst_fd, src_fd, pos, min(_CHUNK, end - pos))
            if n == 0:  # the file shrank under us
                end = pos
                break
            pos += n
        off = end
    os.ftruncate(dst_fd, size)


# ------------------------------------------------------------------ sources
@dataclass
class _Node:
    """One entry of a source tree, held open as an ``O_PATH`` fd (so it cannot be swapped)."""

    fd: int
    st: os.stat_result
    kind: str


def _open_node(dirfd: int, name: str, resolve: int, follow: bool = False, close_dir: bool = False) -> _Node:
    try:
        fd = openat2(dirfd, name, os.O_PATH | (0 if follow else os.O_NOFOLLOW), resolve)
    finally:
        if close_dir:
            os.close(dirfd)
    st = os.fstat(fd)
    return _Node(fd, st, _kind(st.st_mode))


def _children(node: _Node, path: str, budget: _Budget) -> Iterator[tuple[str, str, _Node]]:
    """``(path, name, opened node)`` for each entry of the directory ``node``, each node closed after its
    turn; an entry that cannot be opened beneath it (EXDEV: a mount point, never the agent's files) is
    refused and skipped."""
    for child in _list(node):
        cpath = f"{path.rstrip('/')}/{child}"
        try:
            cnode = _open_node(node.fd, child, _BENEATH)
        except OSError as e:
            budget.refused.append((cpath, f"cannot be opened: {e.strerror}"))
            continue
        try:
            yield cpath, child, cnode
        finally:
            os.close(cnode.fd)


def _list(node: _Node) -> Iterator[str]:
    """The names in a directory, streamed (an agent's directory of millions of empty files
    is never held as one list; the transfer's ``max_files`` stops the walk)."""
    fd = _reopen(node.fd, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(fd) as it:
            for entry in it:
                yield entry.name
    finally:
        os.close(fd)


def _norm(path: str) -> str:
    """An absolute, normalised sandbox path, or a clear error."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise ValueError(f"sandbox path {path!r} must be absolute")
    if ".." in path.split("/"):
        raise ValueError(f"sandbox path {path!r} must not contain '..'")
    return posixpath.normpath(path).replace("//", "/")


# ------------------------------------------------------------------ destinations
class _Dest:
    """The policy for modes and owners of what is written.

    ``host``: files on the host get 0644/0755 and the host process's owner (never one the
    agent chose); otherwise (a sandbox) permission bits are kept and the owner is the
    source's (``keep_owner``) or root (uploads from the host).
    """

    def __init__(self, host: bool, keep_owner: bool = True):
        self.host, self.keep_owner = host, keep_owner

    def file_mode(self, st: os.stat_result) -> int:
        if self.host:
            return 0o755 if st.st_mode & 0o111 else 0o644
        return st.st_mode & 0o777  # no set-uid/set-gid/sticky on files

    def dir_mode(self, st: os.stat_result) -> int:
        return 0o755 if self.host else st.st_mode & 0o1777

    def own(self, fd: int, st: os.stat_result | None) -> None:
        if not self.host:
            uid, gid = (st.st_uid, st.st_gid) if self.keep_owner and st is not None else (0, 0)
            os.fchown(fd, uid, gid)


def _remove(dirfd: int, name: str) -> None:
    """Remove ``name`` (anything, a whole tree too) inside ``dirfd`` without following links."""
    try:
        st = os.lstat(name, dir_fd=dirfd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        try:
            for child in os.listdir(fd):
                _remove(fd, child)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dirfd)
    else:
        os.unlink(name, dir_fd=dirfd)


def _mkdir_at(dirfd: int, name: str, mode: int) -> int:
    """A directory ``name`` in ``dirfd`` (made if missing; a non-directory there is replaced)."""
    try:
        os.mkdir(name, mode, dir_fd=dirfd)
    except FileExistsError:
        st = os.lstat(name, dir_fd=dirfd)
        if not stat.S_ISDIR(st.st_mode):
            _remove(dirfd, name)
            os.mkdir(name, mode, dir_fd=dirfd)
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)


def _write_file(src: _Node, dirfd: int, name: str, dest: _Dest, budget: _Budget, where: str) -> None:
    size = src.st.st_size
    budget.take(where, size)
    _remove(dirfd, name)
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
    try:
        inp = _reopen(src.fd, os.O_RDONLY)
        try:
            copy_data(inp, out, size)
        finally:
            os.close(inp)
        dest.own(out, src.st)
        os.fchmod(out, dest.file_mode(src.st))  # after chown: chown clears mode bits
        os.utime(out, ns=(src.st.st_atime_ns, src.st.st_mtime_ns))
    finally:
        os.close(out)
    if not dest.host:
        settle(dirfd, name, where)
    budget.copied.append(where)


SETTLE_SECONDS = 10.0  # how long a file written into a sandbox may stay open for writing elsewhere


def settle(dirfd: int, name: str, where: str, timeout: float = SETTLE_SECONDS) -> None:
    """Return once no process holds ``name`` (in ``dirfd``) open for writing, so that it can be executed.

    This process has closed its write descriptor, but a child it forked meanwhile in another thread
    (a sandbox starting, any subprocess) holds a copy until that child's exec. Executing the file
    while it does fails with ETXTBSY, and a task's ``test.sh`` run at once then scores 0 ("Text file
    busy"). A read lease is granted only while no writable open of the file exists (fcntl(2),
    F_SETLEASE), so it is the test. Once it passes, no new writer can come from this process. A
    filesystem without leases is left as it is.
    """
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EBUSY):
                    return  # no leases on this filesystem: nothing to wait on
                if time.monotonic() > deadline:
                    raise TransferError(f"{where}: still open for writing by another process after {timeout:g} s") from None
                time.sleep(0.002)
                continue
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            return
    finally:
        os.close(fd)


def _make_link(target: str, dirfd: int, name: str, dest: _Dest, st: os.stat_result, budget: _Budget,
               where: str) -> None:
    _remove(dirfd, name)
    os.symlink(target, name, dir_fd=dirfd)
    if not dest.host and dest.keep_owner:
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dirfd, follow_symlinks=False)
    budget.copied.append(where)


def _finish_dir(fd: int, st: os.stat_result, dest: _Dest) -> None:
    dest.own(fd, st)
    os.fchmod(fd, dest.dir_mode(st))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


# ------------------------------------------------------------------ sandbox roots
@contextmanager
def _root(sandbox: Sandbox) -> Iterator[int]:
    fd = sandbox.open_root()
    try:
        yield fd
    finally:
        os.close(fd)


def _resolve_dir(root: int, path: str, create: bool) -> int:
    """An fd of the directory ``path`` inside ``root`` (links followed inside it); ``mkdir -p``."""
    try:
        return openat2(root, path, os.O_RDONLY | os.O_DIRECTORY, _IN_ROOT)
    except FileNotFoundError:
        if not create or path == "/":
            raise
    parent, name = posixpath.split(path)
    pfd = _resolve_dir(root, parent, create)
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            pass
        try:
            return openat2(pfd, name, os.O_RDONLY | os.O_DIRECTORY, _BENEATH)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            # a dangling link or a file where the harness needs a directory (an agent's
            # `ln -s /nowhere /tests`): replaced by a real directory, never written through
            _remove(pfd, name)
            os.mkdir(name, 0o755, dir_fd=pfd)
            return openat2(pfd, name, os.O_RDONLY | os.O_DIRECTORY, _BENEATH)
    except OSError as e:
        raise TransferError(f"cannot create directory {path} in the sandbox: {e.strerror}") from None
    finally:
        os.close(pfd)


# ------------------------------------------------------------------ walking a source tree
def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class _Copier:
    """Copies source nodes into destination directories; links and special files by policy.

    ``stack`` holds the identities of the directories being copied, outermost first (real
    ones and those reached through a directory link): :class:`_Links` refuses a link to one
    of them, which is what keeps a directory from being expanded inside itself.
    """

    def __init__(self, dest: _Dest, budget: _Budget, on_link: Callable[..., None],
                 on_special: Callable[[_Node, str], None]):
        self.dest, self.budget, self.on_link, self.on_special = dest, budget, on_link, on_special
        self.stack: list[tuple[int, int]] = []

    def node(self, node: _Node, path: str, dirfd: int, name: str) -> None:
        """Copy ``node`` (shown as ``path``) to ``name`` in ``dirfd``."""
        self.budget.entry(path)
        if node.kind == "link":
            self.on_link(self, node, path, dirfd, name)
        elif node.kind == "file":
            _write_file(node, dirfd, name, self.dest, self.budget, path)
        elif node.kind == "dir":
            self.dir(node, path, dirfd, name)
        else:
            self.on_special(node, path)

    def dir(self, node: _Node, path: str, dirfd: int, name: str) -> None:
        """A real directory ``name`` in ``dirfd`` holding the entries of the directory ``node``."""
        fd = _mkdir_at(dirfd, name, 0o700)
        self.stack.append(_key(node.st))
        try:
            self.budget.copied.append(path)
            self.contents(node, path, fd)
            _finish_dir(fd, node.st, self.dest)
        finally:
            self.stack.pop()
            os.close(fd)

    def contents(self, node: _Node, path: str, fd: int) -> None:
        for cpath, child, cnode in _children(node, path, self.budget):
            self.node(cnode, cpath, fd, child)


def _skip_special(budget: _Budget) -> Callable[[_Node, str], None]:
    def skip(node: _Node, path: str) -> None:
        budget.refused.append((path, f"is {node.kind}; not copied"))
    return skip


class _Links:
    """The link rule of :func:`copy_between` and :func:`download` (see the module docstring).

    A link is resolved by the kernel inside ``root`` (the source sandbox's ``/``, links
    followed) from its full sandbox path, and what it resolves to is copied only if its
    ``(st_dev, st_ino)`` is in the index of the inodes under ``tops`` (walked with no link
    followed, the same way the copy walks them): a regular file as a regular file, a directory
    as a real directory (unless it is on the copier's stack: a loop). Everything else is
    refused with the reason. No symlink is ever created.
    """

    def __init__(self, root: int, tops: Sequence[_Node], budget: _Budget):
        self.root, self.tops, self.budget = root, tops, budget
        self._index: set[tuple[int, int]] | None = None

    def index(self) -> set[tuple[int, int]]:
        """Identities of the regular files and directories under ``tops`` (built on first use)."""
        if self._index is None:
            seen: set[tuple[int, int]] = set()
            count = [0]
            for top in self.tops:
                self._walk(top, seen, count)
            self._index = seen
        return self._index

    def _walk(self, node: _Node, seen: set[tuple[int, int]], count: list[int]) -> None:
        count[0] += 1
        if count[0] > self.budget.max_files:
            raise TransferError(f"{self.budget.what}: more than {self.budget.max_files} entries under the "
                                "copied paths (walking them to resolve links); stopped there")
        if node.kind in ("file", "dir"):
            seen.add(_key(node.st))
        if node.kind != "dir":
            return
        for child in _list(node):
            try:
                cnode = _open_node(node.fd, child, _BENEATH)
            except OSError:
                continue  # a mount point (EXDEV): the copy refuses it too
            try:
                self._walk(cnode, seen, count)
            finally:
                os.close(cnode.fd)

    def __call__(self, copier: _Copier, node: _Node, path: str, dirfd: int, name: str) -> None:
        shown = f"symlink to {_readlink(node)!r}"  # for the reason only: nothing is decided on it
        try:
            resolved = _open_node(self.root, path, _IN_ROOT, follow=True)
        except OSError as e:
            why = {errno.ENOENT: "dangling", errno.ELOOP: "a loop or a magic link",
                   errno.EXDEV: "it leaves the sandbox's root mount",
                   errno.ENAMETOOLONG: "too deep to resolve"}.get(e.errno, e.strerror)
            self.budget.refused.append((path, f"{shown}: {why}; not copied"))
            return
        try:
            if resolved.kind not in ("file", "dir"):
                self.budget.refused.append((path, f"{shown}: resolves to {resolved.kind}; not copied"))
            elif _key(resolved.st) not in self.index():
                what = "a regular file" if resolved.kind == "file" else "a directory"
                self.budget.refused.append((path, f"{shown}: resolves to {what} outside the copied paths; "
                                                  "not copied"))
            elif resolved.kind == "file":
                _write_file(resolved, dirfd, name, copier.dest, self.budget, path)
            elif _key(resolved.st) in copier.stack:
                self.budget.refused.append((path, f"{shown}: a directory that contains the link (a loop); "
                                                  "not copied"))
            else:
                copier.dir(resolved, path, dirfd, name)
        finally:
            os.close(resolved.fd)


def _readlink(node: _Node) -> str:
    # readlinkat(fd, "") reads the link an O_PATH|O_NOFOLLOW fd holds (no path lookup)
    return os.readlink("", dir_fd=node.fd)


# ------------------------------------------------------------------ sandbox → sandbox
def copy_between(src: Sandbox, dst: Sandbox, paths: Sequence[str], *, max_bytes: int,
                 max_files: int = DEFAULT_MAX_FILES) -> TransferReport:
    """Copy the agent's work ``paths`` (absolute; files or dirs) from ``src`` into ``dst``, same paths.

    The separate-verifier mode (against the answer-key-link, trojaned-tool and planted-daemon
    classes): ``dst`` is a fresh sandbox of the task's image and only these paths cross, so
    trojaned tools, planted daemons, dotfiles and links into ``/tests`` stay behind. Call it
    after ``src.kill_commands()`` (nothing of the agent may still be writing). What exists at
    a path in ``dst`` is replaced by ``src``'s version (a path missing in ``src`` is removed
    from ``dst``, as the agent left it).

    * ``dst`` receives regular files and directories only, never a symlink: each link is
      resolved by the kernel inside ``src``'s root and copied as the regular file or directory
      it resolves to when that is itself under ``paths`` (by inode identity), else refused
      and listed in ``refused`` (see the module docstring);
    * FIFOs, sockets and device nodes are skipped (listed in ``refused``), never opened;
    * set-uid/set-gid bits are dropped; owners, permission bits and mtimes are kept;
    * more than ``max_bytes`` in all (apparent sizes) or ``max_files`` entries raises
      :class:`TransferError` naming the path where it stopped;
    * a path that is, is inside or contains one of :data:`VERIFIER_ONLY` (``/tests``,
      ``/logs/verifier``...) is a ``ValueError``: an agent must not pre-seed the verifier's files.
    """
    budget = _Budget(max_bytes, max_files, "copy between sandboxes")
    norm = sorted({_norm(p) for p in paths})
    if "/" in norm:
        raise ValueError("copy_between cannot copy the whole root '/'; name the agent's paths")
    for p in norm:
        for r in VERIFIER_ONLY:
            if p == r or p.startswith(r + "/") or r.startswith(p + "/"):
                raise ValueError(f"copy_between: {p} overlaps {r}, which only the harness writes; "
                                 "the agent's work may not be copied there")
    tops = [p for p in norm if not any(p != q and p.startswith(q + "/") for q in norm)]
    with _root(src) as sroot, _root(dst) as droot:
        opened: dict[str, _Node | None] = {}
        try:
            for path in tops:
                try:
                    opened[path] = _open_node(sroot, path, _IN_ROOT)
                except FileNotFoundError:
                    opened[path] = None
                except OSError as e:
                    budget.refused.append((path, f"cannot be opened in the source: {e.strerror}"))
            links = _Links(sroot, [n for n in opened.values() if n is not None], budget)
            copier = _Copier(_Dest(host=False), budget, links, _skip_special(budget))
            for path, node in opened.items():
                parent, name = posixpath.split(path)
                pfd = _resolve_dir(droot, parent, create=True)
                try:
                    _remove(pfd, name)  # replaced, not merged: the agent may have deleted files
                    if node is None:
                        budget.refused.append((path, "missing in the source (removed in the destination)"))
                    else:
                        copier.node(node, path, pfd, name)
                finally:
                    os.close(pfd)
        finally:
            for node in opened.values():
                if node is not None:
                    os.close(node.fd)
    return budget.report()


# ------------------------------------------------------------------ host → sandbox
def check_upload_source(source: Path, *, as_file: bool) -> None:
    """Refuse a host source that is a symlink (its target would be uploaded) or of the wrong kind."""
    try:
        st = source.lstat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{source}: no such file or directory to upload") from None
    if stat.S_ISLNK(st.st_mode):
        raise TransferError(f"{source} is a symlink (to {os.readlink(source)!r}); refusing to upload what it "
                            "points to: make it a real " + ("file" if as_file else "directory"))
    want = stat.S_ISREG if as_file else stat.S_ISDIR
    if not want(st.st_mode):
        raise TransferError(f"{source} is {_kind(st.st_mode)}, not a " + ("regular file" if as_file else
                                                                           "directory") + "; not uploaded")


def upload(source: Path, sandbox: Sandbox, target: str, *, as_file: bool) -> TransferReport:
    """Copy the host file or the *contents* of the host dir ``source`` to ``target`` in ``sandbox``.

    Links inside ``source`` are copied as links (they resolve inside the sandbox, never on the
    host); a FIFO, socket or device node in it is an error naming it (opening it could hang).
    Everything is owned by root; permission bits are kept, set-uid/set-gid bits dropped.
    """
    check_upload_source(source, as_file=as_file)
    target = _norm(target)
    budget = _Budget(1 << 62, 1 << 62, f"upload of {source}")
    dest = _Dest(host=False, keep_owner=False)

    def on_link(copier: _Copier, node: _Node, path: str, dirfd: int, name: str) -> None:
        _make_link(_readlink(node), dirfd, name, dest, node.st, budget, path)

    def on_special(node: _Node, path: str) -> None:
        raise TransferError(f"{path} is {node.kind}; only files, directories and symlinks can be uploaded")

    copier = _Copier(dest, budget, on_link, on_special)

    node = _open_node(os.open(source.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), source.name, _BENEATH,
                      close_dir=True)
    try:
        with _root(sandbox) as root:
            if as_file:
                parent, name = posixpath.split(target)
                pfd = _resolve_dir(root, parent, create=True)
                try:
                    copier.node(node, str(source), pfd, name)
                finally:
                    os.close(pfd)
            else:
                tfd = _resolve_dir(root, target, create=True)
                try:
                    for child in _list(node):
                        cnode = _open_node(node.fd, child, _BENEATH)
                        try:
                            copier.node(cnode, str(source / child), tfd, child)
                        finally:
                            os.close(cnode.fd)
                finally:
                    os.close(tfd)
    finally:
        os.close(node.fd)
    return budget.report()


def write_bytes(sandbox: Sandbox, target: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the file ``target`` in ``sandbox`` (parents made), owned by root."""
    target = _norm(target)
    parent, name = posixpath.split(target)
    with _root(sandbox) as root:
        pfd = _resolve_dir(root, parent, create=True)
        try:
            _remove(pfd, name)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=pfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchown(fd, 0, 0)
                os.fchmod(fd, mode & 0o777)
            finally:
                os.close(fd)
            settle(pfd, name, target)
        finally:
            os.close(pfd)


# ------------------------------------------------------------------ sandbox → host
def _source_node(root: int, source: str, follow: bool) -> _Node:
    try:
        return _open_node(root, _norm(source), _IN_ROOT, follow=follow)
    except FileNotFoundError:
        raise FileNotFoundError(f"{source}: no such file or directory in the sandbox") from None
    except OSError as e:
        raise FileNotFoundError(f"{source} cannot be read in the sandbox: {e.strerror}") from None


def read_bytes(sandbox: Sandbox, source: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``source`` (a final symlink is not followed), at most ``max_bytes``."""
    with _root(sandbox) as root:
        node = _source_node(root, source, follow=False)
    try:
        if node.kind != "file":
            raise FileNotFoundError(f"{source} is not a regular file in the sandbox (it is "
                                    f"{'a ' + node.kind if node.kind in ('dir', 'link') else node.kind})")
        size = node.st.st_size
        if size > max_bytes:
            raise TransferError(f"{source} is {size} bytes, over the cap of {max_bytes} bytes; not read")
        fd = _reopen(node.fd, os.O_RDONLY)
        try:
            chunks, left = [], size
            while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        os.close(node.fd)


def download(sandbox: Sandbox, source: str, target: Path, max_bytes: int, *, as_file: bool,
             max_files: int = DEFAULT_MAX_FILES, select: Callable[[str], bool] | None = None) -> TransferReport:
    """Stream the file ``source`` to the host file ``target``, or the dir's *contents* into ``target``.

    Nothing is written outside ``target`` and no symlink is written at all: entries are
    created with ``O_NOFOLLOW``/``O_EXCL`` relative to directory fds the host made; a link in
    the sandbox is resolved by the kernel inside the sandbox's root and arrives as the regular
    file (or directory) it resolves to only when that is itself inside the downloaded tree
    (by inode identity), else it is skipped (the rule of :func:`copy_between`, module
    docstring); a ``source`` file that is a link is refused; FIFOs, sockets and device nodes
    are skipped (all listed in ``refused``). ``select`` (a directory download only) keeps just
    the regular files whose path relative to ``source`` it accepts, and no links: Harbor's
    filtered download (``find -type f``).
    """
    budget = _Budget(max_bytes, max_files, f"download of {source}")
    dest = _Dest(host=True)
    with _root(sandbox) as root:
        node = _source_node(root, source, follow=not as_file)
        try:
            want = "file" if as_file else "dir"
            if node.kind != want:
                raise FileNotFoundError(f"{source} is not a {'regular file' if as_file else 'directory'} in the "
                                        f"sandbox (it is {'a ' + node.kind if node.kind in ('dir', 'link', 'file') else node.kind})")
            top = target.parent if as_file else target
            top.mkdir(parents=True, exist_ok=True)
            tfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                if as_file:
                    _write_file(node, tfd, target.name, dest, budget, source)
                    return budget.report()
                base = _norm(source)
                if select is not None:
                    for cpath, child, cnode in _children(node, base, budget):
                        _copy_selected(cnode, cpath, base, tfd, child, dest, budget, select)
                    return budget.report()
                copier = _Copier(dest, budget, _Links(root, [node], budget), _skip_special(budget))
                copier.stack.append(_key(node.st))  # the downloaded dir itself: a link to it is a loop
                copier.contents(node, base, tfd)
            finally:
                os.close(tfd)
        finally:
            os.close(node.fd)
    return budget.report()


def _copy_selected(node: _Node, path: str, base: str, dirfd: int, name: str, dest: _Dest, budget: _Budget,
                   select: Callable[[str], bool]) -> None:
    """:meth:`_Copier.node` for a filtered download: selected regular files, their dirs made on demand."""
    budget.entry(path)
    rel = posixpath.relpath(path, base)
    if node.kind == "file":
        if select(rel):
            _write_file(node, dirfd, name, dest, budget, path)
    elif node.kind == "dir":
        fd: int | None = None
        try:
            for cpath, child, cnode in _children(node, path, budget):
                if cnode.kind == "dir" or (cnode.kind == "file" and select(posixpath.relpath(cpath, base))):
                    if fd is None:
                        fd = _mkdir_at(dirfd, name, 0o755)
                    _copy_selected(cnode, cpath, base, fd, child, dest, budget, select)
                elif cnode.kind != "file":
                    budget.refused.append((cpath, f"is {cnode.kind}; a filtered download takes regular files only"))
        finally:
            if fd is not None:
                os.close(fd)
    else:
        budget.refused.append((path, f"is {node.kind}; a filtered download takes regular files only"))
