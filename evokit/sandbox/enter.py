"""``evokit-enter`` and ``evokit-anchor``: the two small C programs of the local sandbox.

``evokit-enter`` runs each ``exec`` inside a started sandbox. Why a compiled helper (speed):
an exec as three program launches — a shell that joins the sandbox's cgroups, ``nsenter`` into
its namespaces, and a fresh ``bwrap`` that rebuilds a mount namespace over the sandbox's root —
costs 1.3× to 3× one raw ``bwrap true``; doing the same from Python (``preexec_fn``) forces a
full fork of the interpreter and was slower still (measured 1.19–1.39×). ``evokit-enter``
(``enter.c`` beside this file) is one statically linked launch that:

1. joins the sandbox's cgroups (so the command is counted, limited and killed with it);
2. enters the mount, net, uts, ipc and pid namespaces of the sandbox's pid 1 with one
   ``setns(pidfd, …)`` — a pidfd, so a recycled pid can never send a command elsewhere;
3. forks (a pid namespace applies to children), and the child chroots to pid 1's root, changes
   directory, sets ``no_new_privs``, keeps Docker's default capability set (bounding,
   inheritable, permitted, effective and ambient: what ``bwrap --cap-add`` gives root), loads
   the keyring seccomp filter (:mod:`evokit.sandbox.seccomp`) last, and execs the command.

The command therefore lives in the sandbox's own mount namespace, as with ``docker exec``:
``/dev/shm`` and every other mount is the one the init set up. Seccomp, capability set,
``no_new_privs``, namespaces and cgroups are checked per exec in ``tests/test_sandbox_enter.py``,
``tests/test_sandbox_runtime.py`` and ``tests/test_reward_integrity.py``.

The same helper runs the **verifier's exec** (``mounts=``): the sandbox's files, network,
hostname and IPC, but a pid namespace that is a sibling of the sandbox's (no sandbox process can
name, signal or ptrace a verifier process) and a private mount namespace in which the host's
own tmpfs mounts sit at ``/tests`` and ``/logs/verifier`` (:mod:`evokit.sandbox.verifier_ns`).

``evokit-anchor`` (``anchor.c``) is pid 1 of every sandbox: see :func:`anchor` for why.

Safety of the helper itself: it is started with an **empty environment** (the command's
environment travels as arguments), so a task's ``LD_PRELOAD`` or ``PATH`` cannot act on the host
side; it is linked statically where the host has ``libc.a`` (no dynamic loader runs on the host
side at all). Both programs are compiled once per source version into ``<cache>/bin/`` under the
0700 layer cache (:func:`evokit.sandbox.image.secure_cache_root`): a binary that root runs must
not be writable by anyone else. Building needs a C compiler (``cc``/``gcc``); without one the
sandbox says so in one line.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from evokit.sandbox.bwrap import SandboxUnavailableError
from evokit.sandbox.image import cache_root, secure_cache_root

SOURCE = Path(__file__).with_name("enter.c")

#: Capability numbers (<linux/capability.h>) of the names evokit uses.
CAP_NUMBERS = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
    "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_LINUX_IMMUTABLE": 9,
    "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13,
    "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15, "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17,
    "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21,
    "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25,
    "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27, "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29,
    "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
}


def cap_mask(caps: Sequence[str]) -> int:
    """The bit mask of capability names (``/proc/<pid>/status``'s ``CapEff`` format).

    >>> hex(cap_mask(["CAP_CHOWN", "CAP_KILL"]))
    '0x21'
    """
    unknown = [c for c in caps if c not in CAP_NUMBERS]
    if unknown:
        raise ValueError(f"unknown capability name(s): {', '.join(unknown)}")
    return sum(1 << CAP_NUMBERS[c] for c in caps)


def _compiler() -> str:
    for name in ("cc", "gcc", "clang"):
        if path := shutil.which(name):
            return path
    raise SandboxUnavailableError(
        "the local sandbox builds a small C helper (evokit-enter) and needs a C compiler: "
        "`apt-get install -y gcc libc6-dev` (as root)")


#: Flags of the anchor (:data:`ANCHOR_SOURCE`): freestanding and static, so that it runs in any
#: image (glibc, musl or none) without loading a byte of the sandbox's filesystem.
ANCHOR_FLAGS = ["-static", "-nostdlib", "-ffreestanding", "-fno-stack-protector", "-fno-pie", "-no-pie",
                "-fno-asynchronous-unwind-tables", "-fno-builtin"]
ANCHOR_SOURCE = SOURCE.with_name("anchor.c")


def _build(source: Path, stem: str, flag_sets: Sequence[Sequence[str]], what: str) -> Path:
    """Compile ``source`` once per source version into the 0700 cache's ``bin/`` (first flag set that works)."""
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    bin_dir = secure_cache_root(cache_root()) / "bin"
    bin_dir.mkdir(mode=0o700, exist_ok=True)
    target = bin_dir / f"{stem}-{key}"
    if target.is_file() and target.stat().st_uid == os.geteuid():
        return target
    cc = _compiler()
    with tempfile.TemporaryDirectory(dir=bin_dir) as tmp:
        out = Path(tmp) / stem
        errors = ""
        for flags in flag_sets:
            r = subprocess.run([cc, "-O2", *flags, "-o", str(out), str(source)],
                               capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            if r.returncode == 0:
                break
            errors = r.stderr.strip()
        else:
            raise SandboxUnavailableError(f"could not build {what} with {cc}: "
                                          f"{errors.splitlines()[-1] if errors else 'no output'}")
        os.chmod(out, 0o700)
        # First builder wins: a finished binary's inode never changes under a process that
        # compares a running program with it (the anchor check), so a concurrent builder keeps
        # the file already there rather than replacing it.
        try:
            os.link(out, target)
        except FileExistsError:
            pass
    return target


@functools.cache
def helper() -> Path:
    """The path of the compiled helper for this source (built on first use, then cached).

    Static where the host has ``libc.a``, else dynamic (it runs on the host, with an empty environment).
    """
    return _build(SOURCE, "evokit-enter", (["-static"], []), "the sandbox's exec helper")


@functools.cache
def anchor() -> Path:
    """The path of the compiled anchor (``anchor.c``): pid 1 of every sandbox.

    Why a binary of evokit's own rather than ``sleep infinity`` (the borrowed-process class): the
    process that keeps a sandbox's namespaces alive runs inside them, as root. A ``sleep`` there
    is dumpable, so an agent with the same uid and capabilities can ``ptrace`` it (or write its
    ``/proc/<pid>/mem``), make it run its own code, and keep a process the harness spares by
    design: one that survives :meth:`~evokit.sandbox.runtime.Sandbox.kill_commands` and can
    rewrite a reward or the work being copied. The anchor makes itself non-dumpable as its first
    act, which no sandbox process can undo without ``CAP_SYS_PTRACE`` (none holds it), and as pid
    1 of the sandbox's pid namespace it cannot be signalled from inside either. ``execve`` resets
    the dumpable flag, so it has to be this process's own code, not a wrapper around another
    program. Freestanding (x86_64 and aarch64): no libc, so it runs in any image.
    """
    return _build(ANCHOR_SOURCE, "evokit-anchor", (ANCHOR_FLAGS,), "the sandbox's anchor")


def argv(*, pidfd: int, rootfd: int, seccomp_fd: int, cwd: str, caps: Sequence[str],
         cgroup_procs: Sequence[Path | str], env: Mapping[str, str], command: Sequence[str],
         mounts: Mapping[str, int] | None = None) -> list[str]:
    """The helper's command line for one exec (pass the three fds to the child, start it with ``env={}``).

    ``mounts`` (``{target: detached mount fd}``, pass those fds too) makes it the verifier's exec:
    its own mount and pid namespaces, with each mount attached at its target (``enter.c``).
    """
    bad = [k for k in env if not k or "=" in k or "\0" in k]
    if bad:
        raise ValueError(f"environment names may not be empty or contain '=': {bad!r}")
    mounts = dict(mounts or {})
    if any(not t.startswith("/") or "=" in t for t in mounts):
        raise ValueError(f"mount targets must be absolute paths without '=': {sorted(mounts)!r}")
    return [str(helper()), str(pidfd), str(rootfd), str(seccomp_fd), cwd, f"{cap_mask(caps):x}",
            str(len(cgroup_procs)), *map(str, cgroup_procs),
            str(len(mounts)), *(f"{fd}={t}" for t, fd in mounts.items()),
            str(len(env)), *(f"{k}={v}" for k, v in env.items()), "--", *command]
