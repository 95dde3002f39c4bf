"""``COPY``/``ADD`` from the build context as one tar stream, owners and modes as Docker sets them.

:mod:`evokit.sandbox.image` extracts the stream with ``tar -x`` *inside* the build step's sandbox
(:mod:`evokit.sandbox.build_step`), so symlinks such as Debian's merged ``/bin -> usr/bin`` are
honoured as Docker honours them, and nothing is ever extracted on the host. The stream goes
through an unnamed temp file in the (0700) layer cache, never through memory, and its sha256 is
part of the layer's key, so unchanged bytes reuse the layer. Only files, directories and
symlinks are copied; the total is capped (:data:`MAX_COPY_BYTES`).
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from evokit.sandbox import dockerfile as df

if TYPE_CHECKING:
    from evokit.sandbox.image import Image

#: Cap on the bytes one ``COPY``/``ADD`` may carry (apparent sizes: a sparse file counts in
#: full, since the layer stores it whole). Docker has none; a generated Dockerfile that
#: copies a 1 TB sparse file must fail with a clear error, not fill the host's disk.
MAX_COPY_BYTES = 8 << 30


@dataclass
class _CopySize:
    """The running total of one ``COPY``/``ADD`` against :data:`MAX_COPY_BYTES`."""

    where: str
    total: int = 0

    def add(self, src: Path, size: int) -> None:
        self.total += size
        if self.total > MAX_COPY_BYTES:
            raise df.DockerfileError(f"{self.where}: {src} ({size} bytes) takes this COPY/ADD past its cap of "
                                     f"{MAX_COPY_BYTES} bytes (evokit.sandbox.copy_layer.MAX_COPY_BYTES)")


def copy_tar(context: Path, ins: df.Instruction, variables: dict[str, str], workdir: str, image: Image,
             root: Path, where: str) -> tuple[io.BufferedRandom, str]:
    """The tar stream that ``COPY``/``ADD`` extracts at ``/`` of ``image`` (the layers so far), and its sha256.

    Written to an unnamed temp file in the (0700) cache, never to memory (host files: in memory
    a 1 GiB sparse file costs 1 GiB of host RSS); the caller closes it.
    """
    sources, dest = df.parse_copy_args(df.substitute(ins.args, variables))
    if not dest.startswith("/"):  # relative to WORKDIR; keep a trailing "/" (it means "a dir")
        dest = str(PurePosixPath(workdir) / dest) + ("/" if dest.endswith("/") else "")
    dest_is_dir = dest.endswith("/") or len(sources) > 1 or is_dir(image, dest)
    uid, gid = owner(ins.flags.get("chown"), image, where)
    mode = int(ins.flags["chmod"], 8) if ins.flags.get("chmod") else None
    size = _CopySize(where)
    out = tempfile.TemporaryFile(dir=root)
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for pattern in sources:
                matches = sorted(glob.glob(str(context / pattern), recursive=False))
                if not matches:
                    raise df.DockerfileError(f"{where}: {ins.keyword} source {pattern!r} not found in {context}")
                for src in map(Path, matches):
                    if not src.resolve().is_relative_to(context.resolve()):
                        raise df.DockerfileError(f"{where}: {pattern!r} points outside the build context")
                    _check_source(src, where)
                    if ins.keyword == "ADD" and src.is_file() and tarfile.is_tarfile(src):
                        _add_archive(tar, src, dest, uid, gid, size)
                    elif src.is_dir():
                        _add_tree(tar, src, dest, uid, gid, mode, size)
                    else:
                        target = str(PurePosixPath(dest) / src.name) if dest_is_dir else dest
                        _add_file(tar, src, target, uid, gid, mode, size)
        return sealed(out)
    except BaseException:
        out.close()
        raise


def sealed[F: IO[bytes]](out: F) -> tuple[F, str]:
    """A finished layer's tar stream, rewound for reading, with its sha256: the digest that keys
    the layer in the cache (shared by COPY/ADD and ``COPY --from``)."""
    out.seek(0)
    digest = hashlib.file_digest(out, "sha256").hexdigest()
    out.seek(0)
    return out, digest


def _check_source(src: Path, where: str) -> None:
    """Only files, directories and symlinks are copied: opening a FIFO would hang the build
    (past ``step_timeout_sec``: the read happens before the step starts), and a device or a
    socket is nothing a layer can hold."""
    st = src.lstat()
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(st.st_mode), "a special file")
        raise df.DockerfileError(f"{where}: COPY/ADD source {src} is {kind}; only files, directories and "
                                 "symlinks can be copied into an image")


def is_dir(image: Image, path: str) -> bool:
    """Whether ``path`` is a directory in ``image``'s layers."""
    p = image.find(path.rstrip("/") or "/")
    return p is not None and p.is_dir()


def owner(chown: str | None, image: Image, where: str) -> tuple[int, int]:
    """``--chown=user[:group]`` → (uid, gid), names looked up in the image's ``/etc/passwd`` and ``/etc/group``."""
    if not chown:
        return 0, 0
    user, _, group = chown.partition(":")

    def lookup(name: str, db: str) -> int:
        if name.isdigit():
            return int(name)
        f = image.find(f"/etc/{db}")
        for line in (f.read_text().splitlines() if f else []):
            fields = line.split(":")
            if fields[0] == name:
                return int(fields[2])
        raise df.DockerfileError(f"{where}: --chown {name!r} is not in the image's /etc/{db}")

    uid = lookup(user, "passwd")
    return uid, lookup(group, "group") if group else uid


def _info(name: str, st: os.stat_result, uid: int, gid: int, mode: int | None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.uid, info.gid, info.mtime = uid, gid, 0  # mtime 0: same bytes → same layer key
    info.mode = mode if mode is not None else (st.st_mode & 0o7777)
    return info


def _add_file(tar: tarfile.TarFile, src: Path, target: str, uid: int, gid: int, mode: int | None,
              size: _CopySize) -> None:
    st = src.lstat()
    info = _info(target, st, uid, gid, mode)
    if stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(src)
        tar.addfile(info)
        return
    _check_source(src, size.where)
    size.add(src, st.st_size)
    info.size = st.st_size
    # O_NOFOLLOW|O_NONBLOCK: a file swapped for a link or a FIFO after the lstat is not
    # followed and does not block; fstat checks it is still the regular file we sized.
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_size != st.st_size:
            raise df.DockerfileError(f"{size.where}: COPY/ADD source {src} changed while it was being read")
        tar.addfile(info, f)


def _add_tree(tar: tarfile.TarFile, src: Path, dest: str, uid: int, gid: int, mode: int | None,
              size: _CopySize) -> None:
    tar.addfile(_dir_info(dest, src.stat(), uid, gid, mode))
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        rel = Path(dirpath).relative_to(src)
        for d in dirnames:
            path, name = Path(dirpath) / d, str(PurePosixPath(dest) / rel / d)
            if path.is_symlink():  # a link to a dir stays a link (os.walk lists, never enters it)
                _add_file(tar, path, name, uid, gid, mode, size)
            else:
                tar.addfile(_dir_info(name, path.stat(), uid, gid, mode))
        for name in sorted(filenames):
            _add_file(tar, Path(dirpath) / name, str(PurePosixPath(dest) / rel / name), uid, gid, mode, size)


def _dir_info(name: str, st: os.stat_result, uid: int, gid: int, mode: int | None) -> tarfile.TarInfo:
    info = _info(name, st, uid, gid, mode)
    info.type = tarfile.DIRTYPE
    return info


def _add_archive(tar: tarfile.TarFile, src: Path, dest: str, uid: int, gid: int, size: _CopySize) -> None:
    """``ADD local.tar.gz /dir/`` unpacks the archive, as Docker does.

    Its members are only re-packed here (streamed, never extracted on the host); the build
    step's tar unpacks them inside the step's sandbox, and the stored layer is neutralised.
    """
    with tarfile.open(src) as archive:
        for member in archive:  # streamed: getmembers() would hold every header at once
            if member.isfile():
                size.add(src / member.name, member.size)
            data = archive.extractfile(member) if member.isfile() else None
            member.name = str(PurePosixPath(dest) / member.name).lstrip("/")
            tar.addfile(member, data)
