"""Unpack OCI / Docker image layers into the layer cache, confined, capped, with whiteouts converted.

A layer from a registry is an *untrusted archive*: whoever published the image chose every
path, link and device node in it, and how far it expands. The installed Pythons carry
tarfile's filter bypass (CVE-2025-4517), so the host's ``tarfile`` never touches one. Instead
GNU tar runs under bubblewrap in a mount namespace where the only writable place is the new
layer's temp dir (and the blob is bound read-only): a ``../`` path or a symlink to ``/etc`` can
only ever land inside that dir or fail on a read-only bind.

**Caps** (:class:`LayerLimits`; the decompression-bomb class: a 1 MB gzip layer of zeros
expands to 1 GiB). Inside the same confinement a small Python pump sits between the
decompressor (``gzip -dc`` / ``zstd -dc``) and ``tar -x -v``: it counts the decompressed bytes
as they pass and stops both the moment the count passes ``max_bytes``, so what reaches the disk
is bounded *during* decompression (a sparse member writes no more than the stream carries). It
also reads tar's member list as tar writes it and stops past ``max_files`` entries (each
distinct name prefix counts, since a member creates its missing parent dirs) or at a name
deeper than ``max_depth``. Names are not the whole story (tar follows a relative symlink the
archive made earlier, so ``l/x`` can land deeper than its name says), so the conversion walk
below counts entries and depth again on what is on disk, by directory fd (no ``PATH_MAX``
limit), and refuses over either cap. A refused or failed layer leaves nothing in the cache:
the temp dir goes (by ``rm -rf`` if Python's recursive ``rmtree`` cannot), and only an atomic
rename ever publishes a layer. Refusals are :class:`LayerLimitError`, naming the image, the
layer digest, the cap and the setting that raises it.

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

The pump and the conversion run inside the confinement (the host's Python in isolated mode,
``-I -S``, walking without following symlinks). Deviations: extended attributes and file
capabilities in layers are not restored (GNU tar without ``--xattrs``), as with
``docker export``; ownership and modes are (``--numeric-owner --same-owner``). Docker caps
none of bytes, members or depth; the defaults are set far above real images (see
:class:`LayerLimits`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from evokit.errors import UserError
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
#: Exit status of the confined unpack when a cap stopped it (GNU tar itself exits 0, 1 or 2).
_LIMIT_EXIT = 3
_LIMIT_LINE = re.compile(r"evokit-layer-limit: (max_bytes|max_files|max_depth) (\d+): ([^\n]*)")
#: Python's recursion limit (1000) bounds os.fwalk, which recurses per directory level.
_MAX_DEPTH_CEILING = 512


class LayerError(UserError, RuntimeError):
    """A layer could not be unpacked; the message names the layer digest and the image."""


class LayerLimitError(LayerError):
    """A layer (or an image's layer list) is over a :class:`LayerLimits` cap; nothing of it is kept."""


@dataclass(frozen=True)
class LayerLimits:
    """Caps on what one registry layer may unpack to, and on how many layers an image may have.

    Docker has none of these; each default sits far above real images, so that only a hostile
    or broken one meets it:

    * ``max_bytes`` (16 GiB): decompressed tar bytes of one layer, counted while they stream; a
      compressed blob declared larger is refused before it is downloaded. The largest single
      layers of real images (CUDA / PyTorch devel stacks) are a few GiB to about 10 GiB.
    * ``max_files`` (1 000 000): entries of one layer (files, dirs, links). A whole Debian or
      Ubuntu base holds about 10 000; a layer with a conda env or a big ``node_modules`` a few
      hundred thousand. An inode costs the host even when the file is empty.
    * ``max_depth`` (128): path components below the layer root. The deepest real trees (nested
      ``node_modules``) reach a few dozen; 128 keeps every path far from ``PATH_MAX`` (4096)
      and from Python's recursion limit, which ``shutil.rmtree`` and ``os.fwalk`` recurse into
      per level (at most 512 is accepted).
    * ``max_layers`` (128): layers per image: Docker's overlay2 driver refuses to mount more
      (``max depth exceeded``), so no image Docker runs is refused; with the per-layer caps it
      bounds what one image can put on disk.

    :meth:`from_env` reads ``$EVOKIT_LAYER_MAX_BYTES``, ``$EVOKIT_LAYER_MAX_FILES``,
    ``$EVOKIT_LAYER_MAX_DEPTH`` and ``$EVOKIT_LAYER_MAX_LAYERS`` (positive integers) over these.
    """

    max_bytes: int = 16 << 30
    max_files: int = 1_000_000
    max_depth: int = 128
    max_layers: int = 128

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayerError(f"LayerLimits.{f.name}={value!r}: must be a positive integer")
        if self.max_depth > _MAX_DEPTH_CEILING:
            raise LayerError(f"LayerLimits.max_depth={self.max_depth}: at most {_MAX_DEPTH_CEILING} "
                             "(the conversion walk recurses per directory level)")

    @classmethod
    def from_env(cls) -> LayerLimits:
        """The defaults, each overridden by its ``$EVOKIT_LAYER_<FIELD>`` variable when set."""
        values = {}
        for f in fields(cls):
            var = env_var(f.name)
            raw = os.environ.get(var, "").strip()
            if raw:
                if not raw.isdigit():
                    raise LayerError(f"${var}={raw!r}: must be a positive integer")
                values[f.name] = int(raw)
        return cls(**values)


def env_var(field_name: str) -> str:
    """The environment variable that sets :class:`LayerLimits` field ``field_name``."""
    return f"EVOKIT_LAYER_{field_name.upper()}"


# argv: KIND MAX_BYTES MAX_FILES MAX_DEPTH. Runs inside the confinement: pumps the decompressed
# stream into tar with the caps, then converts whiteouts to the overlay format and counts again.
_UNPACK = r"""
import os, stat, subprocess, sys, threading
kind, max_bytes, max_files, max_depth = sys.argv[1], *map(int, sys.argv[2:5])
root = "/out"
stop = []
def refuse(line):
    print(line, file=sys.stderr, flush=True)
    sys.exit(3)
def limit(cap, value, what):
    if not stop:
        stop.append(f"evokit-layer-limit: {cap} {value}: {what}")
    for p in procs:
        try:
            p.kill()
        except OSError:
            pass
procs = []
if kind == "none":
    src, dec = os.open("/layer.blob", os.O_RDONLY), None
else:
    argv = {"gzip": ["gzip", "-dc"], "zstd": ["zstd", "-dcq"]}[kind]
    dec = subprocess.Popen([*argv, "/layer.blob"], stdout=subprocess.PIPE)
    procs.append(dec)
    src = dec.stdout.fileno()
tar = subprocess.Popen(["tar", "-x", "-v", "--quoting-style=escape", "-f", "-", "-C", root, "--numeric-owner",
                        "--same-owner", "-p", "--no-overwrite-dir"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
procs.append(tar)
def names():
    # every distinct name prefix is an entry tar may create (a member creates its missing parents)
    seen = set()
    for line in tar.stdout:
        parts = [c for c in line.rstrip(b"\n").split(b"/") if c not in (b"", b".")]
        if len(parts) > max_depth:
            return limit("max_depth", max_depth, f"a member {len(parts)} levels deep")
        for i in range(len(parts)):
            seen.add(hash(b"/".join(parts[:i + 1])))
        if len(seen) > max_files:
            return limit("max_files", max_files, f"more than {max_files} entries")
reader = threading.Thread(target=names, daemon=True)
reader.start()
def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
total, sink = 0, tar.stdin.fileno()
while not stop:
    chunk = os.read(src, 1 << 20)
    if not chunk:
        break
    total += len(chunk)
    if total > max_bytes:
        limit("max_bytes", max_bytes, f"more than {max_bytes} decompressed bytes")
        break
    if sink is not None:
        try:
            write_all(sink, chunk)
        except BrokenPipeError:
            sink = None  # tar stopped reading (end of archive): drain the rest, still counted
try:
    tar.stdin.close()
except BrokenPipeError:
    pass
rc = tar.wait()
reader.join()
dec_rc = dec.wait() if dec else 0
if stop:
    refuse(stop[0])
if rc:
    sys.exit(rc)
if dec_rc:
    sys.exit(f"{kind} -d exited {dec_rc}")

def fail(e):
    raise e
n = 0
for dirpath, dirnames, filenames, dfd in os.fwalk(root, follow_symlinks=False, onerror=fail):
    rel = dirpath[len(root):].strip("/")
    depth = rel.count("/") + 1 if rel else 0
    names = dirnames + filenames
    n += len(names)
    if n > max_files:
        refuse(f"evokit-layer-limit: max_files {max_files}: more than {max_files} entries on disk")
    if names and depth + 1 > max_depth:
        refuse(f"evokit-layer-limit: max_depth {max_depth}: an entry {depth + 1} levels deep on disk")
    for name in names:
        st = os.lstat(name, dir_fd=dfd)
        if stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode):
            os.unlink(name, dir_fd=dfd)  # the archive's own device nodes: dropped
    for name in names:
        if not name.startswith(".wh."):
            continue
        where = "/" + os.path.join(rel, name)
        if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
            sys.exit(f"whiteout {where!r} is a directory")
        os.unlink(name, dir_fd=dfd)
        if name == ".wh..wh..opq":
            os.setxattr(dfd, "trusted.overlay.opaque", b"y")
            continue
        target = name[4:]
        try:
            os.lstat(target, dir_fd=dfd)
        except FileNotFoundError:
            pass
        else:
            sys.exit(f"layer has both {'/' + os.path.join(rel, target)!r} and its whiteout")
        os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0), dir_fd=dfd)
    dirnames[:] = [d for d in dirnames if not d.startswith(".wh.")]
"""


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


def unpack_argv(blob: Path, out: Path, limits: LayerLimits | None = None) -> list[str]:
    """The confined command that unpacks ``blob`` into ``out`` under ``limits`` and converts its whiteouts."""
    limits = limits or LayerLimits()
    require_tools("bwrap", "tar")
    kind = compression(blob)
    require_tools(*{"gzip": ["gzip"], "zstd": ["zstd"], "none": []}[kind])
    python = str(Path(sys.base_prefix).resolve() / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if not Path(python).exists():
        python = str(Path(sys.executable).resolve())
    argv = ["bwrap", *system_binds(), "--dev", "/dev", "--tmpfs", "/tmp",
            "--ro-bind", str(blob), "/layer.blob", "--bind", str(out), "/out",
            "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    for cap in _UNPACK_CAPS:
        argv += ["--cap-add", cap]
    # The script's source is an argument, not a writable file.
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/usr/sbin:/bin:/sbin", "--chdir", "/",
             "--", python, "-I", "-S", "-c", _UNPACK, kind,
             str(limits.max_bytes), str(limits.max_files), str(limits.max_depth)]
    return argv


def layer_rel(digest: str) -> str:
    """Where the layer of blob ``digest`` lives in the cache, relative to its root."""
    return f"layers/oci{LAYER_FORMAT}-{digest.removeprefix('sha256:')[:40]}"


def unpack_layer(blob: Path, digest: str, root: Path, *, image: str = "",
                 finish: Callable[[Path], object] | None = None, timeout_sec: float = 1800,
                 limits: LayerLimits | None = None) -> str:
    """Unpack (once) the layer blob ``digest`` into ``root/layers/``; return its dir relative to ``root``.

    Content-keyed by the blob digest (already verified by :mod:`evokit.sandbox.image_pull`),
    so two images sharing a base layer share its dir. Built in a temp dir and published by
    an atomic rename, like every other cache entry; ``finish`` runs on the temp dir just
    before (the image builder passes its ``neutralise_layer``: the same set-uid / file
    capability stripping as every RUN layer). ``limits`` (default :meth:`LayerLimits.from_env`)
    caps the unpack while it runs; over a cap it raises :class:`LayerLimitError` and the temp
    dir is removed.
    """
    limits = limits or LayerLimits.from_env()
    rel = layer_rel(digest)
    final = root / rel
    if final.is_dir():
        return rel
    tmp = root / "layers" / f".tmp-oci-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    os.chmod(tmp, 0o755)
    try:
        res = run_capped(unpack_argv(blob, tmp, limits), timeout_sec=timeout_sec, max_output_bytes=64 * 1024,
                         env=host_env())
        if (res.timed_out or res.return_code != 0) and final.is_dir():
            return rel  # another process published it (and may have removed the blob) meanwhile
        output = res.stdout + res.stderr
        if res.return_code == _LIMIT_EXIT and (m := _LIMIT_LINE.search(output)):
            cap, value, what = m.groups()
            raise LayerLimitError(f"image {image!r}: layer {digest} refused: {what}, over the cap "
                                  f"LayerLimits.{cap}={value} (${env_var(cap)} raises it)")
        if res.timed_out or res.return_code != 0:
            why = "timed out" if res.timed_out else f"exit {res.return_code}"
            tail = " ".join(output.split())[-400:]
            raise LayerError(f"image {image!r}: cannot unpack layer {digest} ({why}): {tail}")
        if finish is not None:
            finish(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # lost a race to the same layer: fine
                raise
    finally:
        remove_tree(tmp)
    return rel


def remove_tree(path: Path) -> None:
    """Remove ``path`` (a temp layer dir) whatever its depth: ``shutil.rmtree`` recurses per level
    and gives up past Python's recursion limit, GNU ``rm -rf`` does not."""
    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)
