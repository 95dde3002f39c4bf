"""``evokit-enter``: the small C program that runs each ``exec`` inside a started sandbox.

Why a compiled helper (issue 11, speed): an exec used to be three program launches — a shell
that joined the sandbox's cgroups, ``nsenter`` into its namespaces, and a fresh ``bwrap`` that
rebuilt a mount namespace over the sandbox's root — 1.3× to 3× the cost of one raw ``bwrap
true``. Doing the same from Python (``preexec_fn``) forces a full fork of the interpreter and
was slower still (measured 1.19–1.39×). ``evokit-enter`` (``enter.c`` beside this file, about
150 lines) is one statically linked launch that:

1. joins the sandbox's cgroups (so the command is counted, limited and killed with it);
2. enters the mount, net, uts, ipc and pid namespaces of the sandbox's pid 1 with one
   ``setns(pidfd, …)`` — a pidfd, so a recycled pid can never send a command elsewhere;
3. forks (a pid namespace applies to children), and the child chroots to pid 1's root, changes
   directory, sets ``no_new_privs``, keeps Docker's default capability set (bounding,
   inheritable, permitted, effective and ambient: what ``bwrap --cap-add`` gave for root), loads
   the keyring seccomp filter (:mod:`evokit.sandbox.seccomp`) last, and execs the command.

The command therefore lives in the sandbox's own mount namespace, as with ``docker exec``:
``/dev/shm`` and every other mount is the one the init set up (before, each exec had a
private ``/dev/shm``). The confinement is the same as before: seccomp, capability set,
``no_new_privs``, namespaces and cgroups are checked per exec in
``tests/test_sandbox_runtime.py`` and ``tests/test_reward_integrity.py``.

Safety of the helper itself: it is started with an **empty environment** (the command's
environment travels as arguments), so a task's ``LD_PRELOAD`` or ``PATH`` cannot act on the host
side; it is linked statically where the host has ``libc.a`` (no dynamic loader runs on the host
side at all). It is compiled once per source version into ``<cache>/bin/`` under the 0700 layer
cache (:func:`evokit.sandbox.image.secure_cache_root`): a binary that root runs must not be
writable by anyone else. Building needs a C compiler (``cc``/``gcc``); without one the sandbox
says so in one line.
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


@functools.cache
def helper() -> Path:
    """The path of the compiled helper for this source (built on first use, then cached)."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source).hexdigest()[:16]
    bin_dir = secure_cache_root(cache_root()) / "bin"
    bin_dir.mkdir(mode=0o700, exist_ok=True)
    target = bin_dir / f"evokit-enter-{key}"
    if target.is_file() and target.stat().st_uid == os.geteuid():
        return target
    cc = _compiler()
    with tempfile.TemporaryDirectory(dir=bin_dir) as tmp:
        out = Path(tmp) / "evokit-enter"
        errors = ""
        for flags in (["-static"], []):  # static where the host has libc.a; else dynamic (empty env anyway)
            r = subprocess.run([cc, "-O2", *flags, "-o", str(out), str(SOURCE)],
                               capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            if r.returncode == 0:
                break
            errors = r.stderr.strip()
        else:
            raise SandboxUnavailableError(f"could not build the sandbox's exec helper with {cc}: "
                                          f"{errors.splitlines()[-1] if errors else 'no output'}")
        os.chmod(out, 0o700)
        os.replace(out, target)  # atomic: a concurrent builder's identical file is as good
    return target


def argv(*, pidfd: int, rootfd: int, seccomp_fd: int, cwd: str, caps: Sequence[str],
         cgroup_procs: Sequence[Path | str], env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    """The helper's command line for one exec (pass the three fds to the child, start it with ``env={}``)."""
    bad = [k for k in env if not k or "=" in k or "\0" in k]
    if bad:
        raise ValueError(f"environment names may not be empty or contain '=': {bad!r}")
    return [str(helper()), str(pidfd), str(rootfd), str(seccomp_fd), cwd, f"{cap_mask(caps):x}",
            str(len(cgroup_procs)), *map(str, cgroup_procs),
            str(len(env)), *(f"{k}={v}" for k, v in env.items()), "--", *command]
