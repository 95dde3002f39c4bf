"""bubblewrap command lines over an overlay stack of image layers.

Debian 12 ships bubblewrap 0.8, which has no ``--overlay`` option, so the overlay is
mounted by a tiny shell prelude that runs under ``unshare --mount``: the mounts live
in a private mount namespace and vanish with its last process, so nothing is ever
left mounted on the host (not even after SIGKILL). bwrap then binds the merged tree
as ``/`` of the sandbox.

Two kinds of upper layer:

* **build**: a directory on disk that becomes a cached image layer (``RUN``, ``COPY``);
* **runtime**: a size-limited tmpfs (the task's ``storage_mb``) so that an agent that
  fills the disk fills only its own tmpfs, whose pages are charged to the sandbox's
  memory cgroup.

Why not user namespaces: ``apt-get`` fails inside one (setgroups, the ``_apt`` user);
like Docker we run as real root with Docker's default capability set instead, in
fresh mount/pid/ipc/uts/network namespaces (outbound access, where allowed, comes from
:mod:`evokit.sandbox.netns`), under a seccomp filter for the keyrings that real root would
otherwise share with the host (:mod:`evokit.sandbox.seccomp`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from evokit.errors import Unavailable

#: Docker's default capability set (moby/oci/caps/defaults.go): enough for apt, chown,
#: su; not enough to mount, load modules, trace host processes or change the clock.
DOCKER_DEFAULT_CAPS = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
)

PROC_READ_ONLY = ("--ro-bind-try", "/proc/sys", "/proc/sys",
                  "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger")
#: /proc files masked with /dev/null (unreadable: bwrap binds it nodev), as Docker masks
#: /proc/keys: they list the keys (names, owners) every process of a uid may view, without any
#: keyring syscall, which :mod:`evokit.sandbox.seccomp` refuses.
MASKED_PROC = ("--ro-bind", "/dev/null", "/proc/keys", "--ro-bind", "/dev/null", "/proc/key-users")

# $1 mode (disk|tmpfs)  $2 cwd for relative lowerdirs  $3 lowerdir list  $4 upper root
# $5 tmpfs size in bytes (tmpfs mode)  then: the bwrap argv, in which @MERGED@ is the
# merged root. In disk mode $4 holds upper/ and work/; in tmpfs mode a tmpfs is
# mounted on $4 first.
_PRELUDE = r"""
set -e
mode=$1; cd "$2"; lower=$3; root=$4; size=$5; shift 5
if [ "$mode" = tmpfs ]; then
  mount -t tmpfs -o "size=$size,mode=0755" evokit-rw "$root"
  mkdir "$root/upper" "$root/work"
fi
mkdir -p "$root/merged"
mount -t overlay evokit -o "lowerdir=$lower,upperdir=$root/upper,workdir=$root/work" "$root/merged"
exec "$@"
"""


class SandboxUnavailableError(Unavailable, RuntimeError):
    """The host lacks a tool the local sandbox needs; the message says how to install it."""


def host_env() -> dict[str, str]:
    """The environment for the host-side tools (unshare, nsenter, bwrap) of a sandbox: PATH only.

    Not the caller's environment: bwrap's pid 1 inside the sandbox keeps the environment it
    was started with, and any process there can read it from ``/proc/1/environ`` (API keys!).
    """
    return {"PATH": os.environ.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def require_tools(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise SandboxUnavailableError(
            f"the local sandbox needs {', '.join(missing)} on PATH; install with "
            "`apt-get install -y bubblewrap mmdebstrap util-linux slirp4netns` (as root), "
            "or use Harbor's docker backend"
        )


def overlay_argv(
    *,
    cache_root: Path,
    lowerdirs: Sequence[str],
    upper_root: Path,
    tmpfs_bytes: int | None,
    inner: Sequence[str],
) -> list[str]:
    """``unshare --mount`` + overlay prelude + ``inner`` (a bwrap argv using ``@MERGED@``)."""
    require_tools("unshare", "bwrap")
    merged = str(upper_root / "merged")
    inner = [merged if a == "@MERGED@" else a for a in inner]
    mode = "tmpfs" if tmpfs_bytes else "disk"
    return [
        "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _PRELUDE, "evokit-prelude",
        mode, str(cache_root), ":".join(lowerdirs), str(upper_root), str(tmpfs_bytes or 0), *inner,
    ]


def bwrap_base(
    *,
    resolv_conf: str | None,
    seccomp_fd: int,
    cwd: str,
    env: dict[str, str],
    caps: Sequence[str] = DOCKER_DEFAULT_CAPS,
    die_with_parent: bool = False,
) -> list[str]:
    """The bwrap options shared by build steps, the sandbox init and every exec.

    ``die_with_parent`` is for the sandbox's init only. On a per-command bwrap it made a few
    percent of commands die with SIGKILL when many sandboxes ran in threads (measured: 8 of
    80 verifications failed with exit 137, 0 without it). The init's flag is enough for
    cleanup: if evokit dies, the init dies, and with it the pid namespace every command runs in.

    ``resolv_conf``: for a process in a network namespace that :mod:`evokit.sandbox.netns`
    connects to the outside, the host file with that namespace's resolver (else ``None``).
    ``seccomp_fd``: a readable fd holding the filter (:func:`evokit.sandbox.seccomp.fd`), one
    per bwrap (bwrap reads it to EOF); the caller passes it to the child.
    """
    argv = ["bwrap", "--bind", "@MERGED@", "/", "--dev", "/dev",
            # Docker's /dev/shm: 64 MiB, world-writable (bwrap's is a root-only dir).
            "--perms", "1777", "--size", str(64 * 1024 * 1024), "--tmpfs", "/dev/shm",
            "--proc", "/proc",
            # Read-only /proc/sys and /proc/sysrq-trigger, as Docker does: as real root with
            # CAP_DAC_OVERRIDE the sandbox could otherwise write host sysctls (core_pattern
            # runs a host program as root). bwrap 0.8 skips /proc/sys because the kernel
            # answers EACCES to access(W_OK) on that directory, though its files are writable.
            *PROC_READ_ONLY, *MASKED_PROC,
            "--seccomp", str(seccomp_fd),
            "--cap-drop", "ALL"]
    for cap in caps:
        argv += ["--cap-add", cap]
    if resolv_conf:
        # The image's resolv.conf would point at nothing; use the namespace's DNS forwarder.
        argv += ["--ro-bind", resolv_conf, "/etc/resolv.conf"]
    if die_with_parent:
        argv.append("--die-with-parent")
    argv += ["--clearenv", "--chdir", cwd]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv
