"""Multi-stage builds: ``FROM … AS name``, ``FROM <stage>`` and ``COPY --from=<stage|image>``.

A stage is just the :class:`~evokit.sandbox.image.Image` its instructions built (overlay lower
dirs plus run config); the image builder keeps the list. This module makes the one thing a
stage boundary needs: the tar stream that ``COPY --from`` extracts into the current stage.

Why a host GNU tar *creates* it, confined: the source stage's files are spread over overlay
layers with whiteouts, so the stream is read from the merged view, mounted read-only in a
private mount namespace (:func:`evokit.sandbox.bwrap.overlay_argv`) and bound at ``/src`` of
a bubblewrap where nothing is writable. Creating an archive never follows the links inside
it; the path *named* in ``COPY --from`` is resolved in that namespace, so an absolute symlink
on the way leads into its empty root (or the host's read-only ``/usr``, public distro files),
never to host data. The stream is written to an unnamed temp file (never held in memory) and
extracted in the current stage by the same ``tar -x`` inside the image as every ``COPY``.

Docker's rules kept: a directory source copies its *contents* into the destination; a file
goes to ``dest/<name>`` when the destination is a directory (trailing ``/``, several sources,
or an existing directory) and to ``dest`` otherwise; ``--chown`` applies. Deviations (clear
errors naming the line): wildcards in ``COPY --from`` sources and ``--chmod`` with ``--from``.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import IO

from evokit.errors import UserError
from evokit.sandbox.bwrap import host_env, overlay_argv
from evokit.sandbox.copy_layer import sealed
from evokit.sandbox.oci_layers import system_binds

#: What the extracting side runs (``-i``: one tar stream per source, concatenated).
EXTRACT_ARGV = ("tar", "-x", "-i", "-p", "--keep-directory-symlink", "-f", "-", "-C", "/")

# $1.. are triples: source path (absolute, in /src), target dir (dir source), target file
# (file source) as tar --transform expressions. Exit 3 names a missing source.
_SCRIPT = r"""
set -e
while [ $# -gt 0 ]; do
  src=$1; as_dir=$2; as_file=$3; shift 3
  if [ -d "/src$src" ] && [ ! -L "/src$src" ]; then
    tar -C "/src$src" -c --numeric-owner $OWNER --transform "$as_dir" -f - .
  elif [ -e "/src$src" ] || [ -L "/src$src" ]; then
    tar -C "/src$(dirname "$src")" -c --numeric-owner $OWNER --transform "$as_file" -f - -- "$(basename "$src")"
  else
    echo "COPY --from source $src does not exist in the source stage" >&2; exit 3
  fi
done
"""


class CopyFromError(UserError, RuntimeError):
    """The ``COPY --from`` stream could not be made; the message names the line and the source."""


def _sed_literal(text: str) -> str:
    """``text`` as a literal in a sed replacement with ``,`` delimiters."""
    return re.sub(r"([\\,&])", r"\\\1", text)


def _sed_regex(text: str) -> str:
    """``text`` as a literal in a sed basic regular expression with ``,`` delimiters."""
    return re.sub(r"([\\,.\[\]*^$])", r"\\\1", text)


def copy_from_tar(root: Path, lowerdirs: tuple[str, ...] | list[str], sources: list[str], dest: str,
                  dest_is_dir: bool, *, owner: tuple[int, int] | None, where: str,
                  timeout_sec: float = 1800) -> tuple[IO[bytes], str]:
    """The tar stream (an open temp file at offset 0) and its sha256 for ``COPY --from``.

    ``lowerdirs`` is the source stage's (or image's) layer stack under cache ``root``;
    ``dest`` is absolute (the caller resolved it against ``WORKDIR``).
    """
    triples: list[str] = []
    for src in sources:
        if any(c in src for c in "*?["):
            raise CopyFromError(f"{where}: COPY --from with a wildcard ({src!r}) is not supported; "
                                "name the files or directories")
        path = posixpath.normpath("/" + src.lstrip("/"))
        base = posixpath.basename(path) or "."
        target_dir = dest.strip("/") or "."
        file_target = (posixpath.join(dest, base) if dest_is_dir else dest).lstrip("/")
        triples += [path if path != "/" else "",
                    f"s,^\\.,{_sed_literal(target_dir)},S",
                    f"s,^{_sed_regex(base)},{_sed_literal(file_target)},S"]
    owner_flags = f"--owner={owner[0]} --group={owner[1]}" if owner else ""
    tmp = root / "layers" / f".tmp-from-{uuid.uuid4().hex[:12]}"
    (tmp / "upper").mkdir(parents=True)
    (tmp / "work").mkdir()
    inner = ["bwrap", *system_binds(), "--ro-bind", "@MERGED@", "/src", "--dev", "/dev", "--tmpfs", "/tmp",
             "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--new-session",
             "--die-with-parent", "--cap-drop", "ALL", "--cap-add", "CAP_DAC_READ_SEARCH",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "OWNER", owner_flags,
             "--", "/bin/sh", "-c", _SCRIPT, "evokit-copy-from", *triples]
    out = tempfile.TemporaryFile(dir=root / "layers")
    try:
        try:
            res = subprocess.run(overlay_argv(cache_root=root, lowerdirs=list(lowerdirs), upper_root=tmp,
                                              tmpfs_bytes=None, inner=inner),
                                 stdout=out, stderr=subprocess.PIPE, env=host_env(), timeout=timeout_sec,
                                 start_new_session=True)
        except subprocess.TimeoutExpired:
            raise CopyFromError(f"{where}: COPY --from timed out after {timeout_sec:.0f}s") from None
        if res.returncode != 0:
            why = " ".join(res.stderr.decode(errors="replace").split())[-400:]
            raise CopyFromError(f"{where}: COPY --from failed: {why}")
        return sealed(out)
    except BaseException:
        out.close()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
