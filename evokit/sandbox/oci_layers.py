"""Unpack OCI / Docker image layers into the layer cache, confined, with whiteouts converted.

A layer from a registry is an *untrusted archive*: whoever published the image chose every
path, link and device node in it. The installed Pythons carry tarfile's filter bypass
(CVE-2025-4517), so the host's ``tarfile`` never touches one. Instead GNU tar runs under
bubblewrap in a mount namespace where the only writable place is the new layer's temp dir
(and the blob is bound read-only): a ``../`` path or a symlink to ``/etc`` can only ever land
inside that dir or fail on a read-only bind.

Each layer becomes one overlay *lower* dir, in the format the cache already uses for RUN
layers (an overlayfs upper dir, see :mod:`evokit.sandbox.image`), so that an image's layers
stack as ``lowerdir=top:…:bottom``:

* an OCI whiteout ``dir/.wh.NAME`` (NAME deleted) → a ``0:0`` character device ``dir/NAME``;
* an opaque marker ``dir/.wh..wh..opq`` (lower contents of ``dir`` hidden) → the xattr
  ``trusted.overlay.opaque=y`` on ``dir``;
* device nodes the archive itself carries are dropped *before* the whiteouts are made (a
  block device for the host's disk inside a lower layer would be one ``open()`` away from
  the sandbox, and an archive's own ``0:0`` node must not pass for a whiteout); other
  special files (fifos) stay. Set-uid bits and file capabilities are the image builder's
  business (``finish``), as for every other stored layer.

The conversion runs inside the same confinement (the host's Python in isolated mode,
``-I -S``, walking without following symlinks). Deviations: extended attributes and file
capabilities in layers are not restored (GNU tar without ``--xattrs``), as with
``docker export``; ownership and modes are (``--numeric-owner --same-owner``).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from evokit.sandbox.bwrap import host_env, require_tools
from evokit.sandbox.process import run_capped

#: Bump to invalidate every unpacked registry layer (the blob cache stays valid).
LAYER_FORMAT = 1
GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
#: What tar and the fixup may do as root in their namespace: own and mode files, make the
#: 0:0 whiteout devices, set trusted.* xattrs (CAP_SYS_ADMIN; the namespace has nothing
#: else to mount or reach: no network, no host paths writable but the layer dir).
_UNPACK_CAPS = ("CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_MKNOD",
                "CAP_SETFCAP", "CAP_SYS_ADMIN")

# argv[1]: the layer root. Runs inside the confinement: whiteouts → overlay format.
_FIXUP = r"""
import os, stat, sys
root = sys.argv[1]
for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
    names = dirnames + filenames
    for name in names:
        p = os.path.join(dirpath, name)
        st = os.lstat(p)
        if stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode):
            os.unlink(p)  # the archive's own device nodes: dropped
    for name in names:
        if not name.startswith(".wh."):
            continue
        p = os.path.join(dirpath, name)
        if os.path.isdir(p) and not os.path.islink(p):
            raise SystemExit(f"whiteout {p[len(root):]!r} is a directory")
        os.unlink(p)
        if name == ".wh..wh..opq":
            os.setxattr(dirpath, "trusted.overlay.opaque", b"y", follow_symlinks=False)
            continue
        target = os.path.join(dirpath, name[4:])
        if os.path.lexists(target):
            raise SystemExit(f"layer has both {target[len(root):]!r} and its whiteout")
        os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    dirnames[:] = [d for d in dirnames if not d.startswith(".wh.")]
"""


class LayerError(RuntimeError):
    """A layer could not be unpacked; the message names the layer digest and the image."""


def compression(blob: Path) -> str:
    """``gzip``, ``zstd`` or ``none``, from the blob's magic bytes (media types are often wrong)."""
    with open(blob, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head == ZSTD_MAGIC:
        return "zstd"
    return "none"


def system_binds() -> list[str]:
    """Read-only /usr (and /bin, /lib… as links or binds) so tar, gzip, zstd and Python run."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for d in ("bin", "sbin", "lib", "lib64", "lib32"):
        p = Path("/") / d
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), f"/{d}"]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), f"/{d}"]
    prefix = Path(sys.base_prefix).resolve()
    if not prefix.is_relative_to("/usr"):  # e.g. a pyenv Python under /root
        argv += ["--ro-bind", str(prefix), str(prefix)]
    return argv


def unpack_argv(blob: Path, out: Path) -> list[str]:
    """The confined command that unpacks ``blob`` into ``out`` and converts its whiteouts."""
    require_tools("bwrap", "tar")
    kind = compression(blob)
    if kind == "zstd":
        require_tools("zstd")
    decompress = {"gzip": ["-z"], "zstd": ["--zstd"], "none": []}[kind]
    python = str(Path(sys.base_prefix).resolve() / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if not Path(python).exists():
        python = str(Path(sys.executable).resolve())
    argv = ["bwrap", *system_binds(), "--dev", "/dev", "--tmpfs", "/tmp",
            "--ro-bind", str(blob), "/layer.blob", "--bind", str(out), "/out",
            "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    for cap in _UNPACK_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/usr/sbin:/bin:/sbin", "--chdir", "/",
             "--", "/bin/sh", "-c",
             'tar -x "$@" -f /layer.blob -C /out --numeric-owner --same-owner -p --no-overwrite-dir '
             '&& exec "$0" -I -S -c "$FIXUP" /out', python, *decompress]
    # The fixup's source reaches the inner sh through the environment, not a writable file.
    i = argv.index("--chdir")
    argv[i:i] = ["--setenv", "FIXUP", _FIXUP]
    return argv


def layer_rel(digest: str) -> str:
    """Where the layer of blob ``digest`` lives in the cache, relative to its root."""
    return f"layers/oci{LAYER_FORMAT}-{digest.removeprefix('sha256:')[:40]}"


def unpack_layer(blob: Path, digest: str, root: Path, *, image: str = "",
                 finish: Callable[[Path], object] | None = None, timeout_sec: float = 1800) -> str:
    """Unpack (once) the layer blob ``digest`` into ``root/layers/``; return its dir relative to ``root``.

    Content-keyed by the blob digest (already verified by :mod:`evokit.sandbox.registry`),
    so two images sharing a base layer share its dir. Built in a temp dir and published by
    an atomic rename, like every other cache entry; ``finish`` runs on the temp dir just
    before (the image builder passes its ``neutralise_layer``: the same set-uid / file
    capability stripping as every RUN layer).
    """
    rel = layer_rel(digest)
    final = root / rel
    if final.is_dir():
        return rel
    tmp = root / "layers" / f".tmp-oci-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    os.chmod(tmp, 0o755)
    try:
        res = run_capped(unpack_argv(blob, tmp), timeout_sec=timeout_sec, max_output_bytes=64 * 1024,
                         env=host_env())
        if (res.timed_out or res.return_code != 0) and final.is_dir():
            return rel  # another process published it (and may have removed the blob) meanwhile
        if res.timed_out or res.return_code != 0:
            why = "timed out" if res.timed_out else f"exit {res.return_code}"
            tail = " ".join((res.stdout + res.stderr).split())[-400:]
            raise LayerError(f"image {image!r}: cannot unpack layer {digest} ({why}): {tail}")
        if finish is not None:
            finish(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # lost a race to the same layer: fine
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return rel
