"""Tests for evokit.sandbox.oci_layers: registry layers are untrusted archives, unpacked confined.

Each test writes a layer tar the way a hostile image publisher could (``tarfile`` *writing*
is safe), unpacks it with :func:`unpack_layer` and checks the result on disk: OCI whiteouts and
opaque markers become overlayfs whiteouts and the opaque xattr, gzip / zstd / plain layers
are detected by their bytes, device nodes are dropped, and no path, symlink or hard link in
the archive writes or reads anything outside the new layer dir (attacks: ``../``, absolute
names, a symlink to a host dir then a file through it, a hard link to a host file). The caps
(:class:`LayerLimits`) are attacked with a real gzip bomb into a cache too small to hold its
expansion, too many entries (flat and through parent dirs), names too deep, depth gained through
the archive's own symlinks, a tree deeper than Python's ``rmtree`` can remove, and a device node
past ``PATH_MAX``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from registry_support import gzip_bytes, layer_tar, zstd_bytes

from evokit.sandbox.oci_layers import (
    LayerError,
    LayerLimitError,
    LayerLimits,
    compression,
    remove_tree,
    unpack_layer,
)

DIGEST = "sha256:" + "ab" * 32


def unpack(tmp_path: Path, data: bytes, digest: str = DIGEST) -> Path:
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    root = tmp_path / "cache"
    return root / unpack_layer(blob, digest, root, image="test/image:1")


@pytest.mark.parametrize("pack,kind", [(gzip_bytes, "gzip"), (zstd_bytes, "zstd"), (lambda b: b, "none")])
def test_whiteouts_become_overlay_format(tmp_path, pack, kind):
    data = pack(layer_tar([
        ("etc/.wh.motd", "file", "", 0o644),
        ("usr/share/doc", "dir", None, 0o755),
        ("usr/share/doc/.wh..wh..opq", "file", "", 0o644),
        ("usr/share/doc/new.txt", "file", "new\n", 0o640),
        ("bin/tool", "file", "#!/bin/sh\n", 0o755),
    ]))
    (tmp_path / "probe").write_bytes(data)
    assert compression(tmp_path / "probe") == kind
    layer = unpack(tmp_path, data)
    assert layer.name == "oci1-" + "ab" * 20
    st = os.lstat(layer / "etc" / "motd")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0)
    assert os.getxattr(layer / "usr" / "share" / "doc", "trusted.overlay.opaque") == b"y"
    assert sorted(p.name for p in (layer / "usr" / "share" / "doc").iterdir()) == ["new.txt"]
    assert stat.S_IMODE(os.stat(layer / "usr/share/doc/new.txt").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(layer / "bin/tool").st_mode) == 0o755
    assert not list(layer.rglob(".wh.*"))
    assert not list((tmp_path / "cache" / "layers").glob(".tmp-*"))


def test_owners_are_numeric_and_kept(tmp_path):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("home/agent/owned.txt")
        info.uid, info.gid, info.uname, info.gname, info.size = 1234, 4321, "root", "root", 2
        tar.addfile(info, io.BytesIO(b"hi"))
    layer = unpack(tmp_path, gzip_bytes(buf.getvalue()))
    st = os.stat(layer / "home/agent/owned.txt")
    assert (st.st_uid, st.st_gid) == (1234, 4321)  # the ids, not the host's "root" by name


def test_device_nodes_are_dropped(tmp_path):
    """A block device for the host's disk (8:0) or /dev/mem (1:1) in a lower layer would be one
    open() away from the sandbox: the archive's device nodes are not kept."""
    layer = unpack(tmp_path, layer_tar([
        ("dev/sda", "blk", (8, 0), 0o666), ("dev/mem", "chr", (1, 1), 0o666),
        ("dev/whiteout-lookalike", "chr", (0, 0), 0o666), ("ok.txt", "file", "ok", 0o644),
    ]))
    assert sorted(p.name for p in (layer / "dev").iterdir()) == []
    assert (layer / "ok.txt").read_text() == "ok"


def test_absolute_names_stay_inside(tmp_path):
    layer = unpack(tmp_path, layer_tar([(str(tmp_path / "abs-escape.txt"), "file", "x", 0o644)]))
    assert not (tmp_path / "abs-escape.txt").exists()
    assert (layer / str(tmp_path / "abs-escape.txt").lstrip("/")).read_text() == "x"


@pytest.mark.parametrize("attack", ["dotdot", "symlink-dir", "symlink-file", "hardlink"])
def test_escapes_are_refused_and_touch_nothing_outside(tmp_path, attack):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("host data\n")
    entries = {
        "dotdot": [("../../../" + str(outside).lstrip("/") + "/pwned", "file", "p", 0o644),
                   ("a/../../pwned2", "file", "p", 0o644)],
        # a link to a host dir, then a file "inside" it
        "symlink-dir": [("evil", "symlink", str(outside), 0o777), ("evil/pwned", "file", "p", 0o644)],
        # a link to a host file, then the same name as a file: overwrite through the link?
        "symlink-file": [("v", "symlink", str(victim), 0o777), ("v", "file", "overwritten", 0o644)],
        "hardlink": [("hl", "hardlink", str(victim), 0o644)],
    }[attack]
    try:
        layer = unpack(tmp_path, gzip_bytes(layer_tar(entries)))
    except LayerError as e:
        assert "test/image:1" in str(e) and DIGEST in str(e) and "\n" not in str(e)
        assert not list((tmp_path / "cache" / "layers").iterdir())  # nothing published, no temp dir
    else:  # extracted: only inside the layer
        for p in layer.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert p.stat().st_ino != victim.stat().st_ino
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert victim.read_text() == "host data\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_corrupt_layer_is_a_clear_error(tmp_path):
    with pytest.raises(LayerError, match=r"image 'test/image:1': cannot unpack layer sha256:abab"):
        unpack(tmp_path, gzip_bytes(b"not a tar archive at all" * 100)[:-20])
    assert not list((tmp_path / "cache" / "layers").iterdir())


# --- caps: the decompression-bomb class (LayerLimits) ---

def gzip_bomb(mib: int) -> bytes:
    """A gzip layer of one ``mib`` MiB file of zeros, about 1 KB compressed per MiB: the tar
    header, then the same 1 MiB-of-zeros gzip member ``mib`` times (gzip streams concatenate),
    then the end-of-archive blocks. Made without ever holding the expanded bytes."""
    import gzip
    import tarfile

    info = tarfile.TarInfo("zeros")
    info.size = mib << 20
    member = gzip.compress(b"\0" * (1 << 20), 9, mtime=0)
    return (gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT), 9, mtime=0) + member * mib
            + gzip.compress(b"\0" * 1024, 9, mtime=0))


@pytest.fixture
def small_disk(tmp_path):
    """A 256 MiB tmpfs for the cache: a layer that wrote its whole expansion first would hit ENOSPC
    (a tar error), so only a cap enforced while decompressing gives the limit error there."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "evokit-test-small", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def refused(tmp_path: Path, data: bytes, limits: LayerLimits, root: Path | None = None) -> str:
    """Unpack ``data`` under ``limits``; assert a LayerLimitError naming image and digest, and an empty cache."""
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    root = root or tmp_path / "cache"
    with pytest.raises(LayerLimitError) as e:
        unpack_layer(blob, DIGEST, root, image="test/image:1", limits=limits)
    msg = str(e.value)
    assert "test/image:1" in msg and DIGEST in msg and "\n" not in msg
    assert not list((root / "layers").iterdir())  # nothing published, no temp dir
    return msg


def test_gzip_bomb_is_stopped_while_it_decompresses(tmp_path, small_disk):
    """Attack: 1 MB of gzip that expands to 1 GiB, unpacked into a 256 MiB cache with a 64 MiB cap.
    The pump stops at the cap (the limit error, not tar's ENOSPC), within seconds."""
    import time

    data = gzip_bomb(1024)
    assert len(data) < 2 << 20
    t0 = time.monotonic()
    msg = refused(tmp_path, data, LayerLimits(max_bytes=64 << 20), root=small_disk / "cache")
    assert time.monotonic() - t0 < 20
    assert f"more than {64 << 20} decompressed bytes" in msg and "EVOKIT_LAYER_MAX_BYTES" in msg
    assert os.statvfs(small_disk).f_bfree * os.statvfs(small_disk).f_frsize > 250 << 20  # the space is back


def test_the_byte_cap_counts_decompressed_bytes_of_every_format(tmp_path):
    """zstd and plain tar layers are capped like gzip: 3 MiB of content over a 2 MiB cap is refused."""
    big = layer_tar([("big.bin", "file", b"\1" * (3 << 20), 0o644)])
    for pack in (zstd_bytes, lambda b: b):
        refused(tmp_path, pack(big), LayerLimits(max_bytes=2 << 20))
    layer = unpack(tmp_path, zstd_bytes(big))  # the default cap lets it through
    assert (layer / "big.bin").stat().st_size == 3 << 20


def test_too_many_entries_are_refused(tmp_path):
    """A layer of 20 000 empty files over a cap of 1 000 entries; and 100 members whose names create
    1 000 parent dirs between them (each distinct prefix is an entry tar makes) over the same cap."""
    flat = layer_tar([(f"f{i}", "file", "", 0o644) for i in range(20_000)])
    assert "more than 1000 entries" in refused(tmp_path, gzip_bytes(flat), LayerLimits(max_files=1000))
    nested = layer_tar([("/".join(f"m{i}-{j}" for j in range(10)) + "/f", "file", "", 0o644) for i in range(100)])
    refused(tmp_path, gzip_bytes(nested), LayerLimits(max_files=1000))
    layer = unpack(tmp_path, gzip_bytes(layer_tar([(f"f{i}", "file", "", 0o644) for i in range(999)])))
    assert len(list(layer.iterdir())) == 999  # under the cap: kept


def test_too_deep_names_are_refused(tmp_path):
    """A member 200 levels deep against the default cap (128); 128 levels is kept."""
    deep = "/".join(["d"] * 199) + "/f"
    assert "a member 200 levels deep" in refused(tmp_path, gzip_bytes(layer_tar([(deep, "file", "x", 0o644)])),
                                                 LayerLimits())
    ok = "/".join(["d"] * 127) + "/f"
    layer = unpack(tmp_path, gzip_bytes(layer_tar([(ok, "file", "x", 0o644)])))
    assert (layer / ok).read_text() == "x"


def test_depth_through_an_archive_symlink_is_counted_on_disk(tmp_path):
    """Attack: every name is shallow (101 and 62 levels) but tar follows the archive's own relative
    symlink ``l -> a0/…/a99``, so ``l/b0/…/f`` lands 161 levels deep: the walk on disk refuses it."""
    chain = "/".join(f"a{i}" for i in range(100))
    entries = [(chain, "dir", None, 0o755), ("l", "symlink", chain, 0o777),
               ("l/" + "/".join(f"b{i}" for i in range(60)) + "/f", "file", "x", 0o644)]
    assert "levels deep on disk" in refused(tmp_path, gzip_bytes(layer_tar(entries)), LayerLimits())


def test_a_refused_tree_deeper_than_rmtree_can_remove_leaves_nothing(tmp_path):
    """Attack: twelve symlink hops build a tree ~1 300 levels deep (Python's recursive rmtree raises
    RecursionError there); refused over a 512 cap, and the temp dir is still removed whole."""
    entries = [("/".join(f"a{i}" for i in range(100)), "dir", None, 0o755),
               ("l0", "symlink", "/".join(f"a{i}" for i in range(100)), 0o777)]
    sub = "/".join(f"b{i}" for i in range(100))
    for h in range(1, 13):
        entries += [(f"l{h - 1}/{sub}", "dir", None, 0o755), (f"l{h}", "symlink", f"l{h - 1}/{sub}", 0o777)]
    entries.append(("l12/f", "file", "x", 0o644))
    refused(tmp_path, gzip_bytes(layer_tar(entries)), LayerLimits(max_depth=512))


def test_remove_tree_removes_what_rmtree_cannot(tmp_path):
    """remove_tree on a 1 200-level tree (made fd by fd): shutil.rmtree gives up, rm -rf does not."""
    import shutil

    def deep(top: Path) -> None:
        top.mkdir()
        fd = os.open(top, os.O_RDONLY)
        for _ in range(1200):
            os.mkdir("d", dir_fd=fd)
            fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        os.close(fd)

    deep(tmp_path / "probe")
    with pytest.raises(RecursionError):
        shutil.rmtree(tmp_path / "probe")
    deep(tmp_path / "tree")
    remove_tree(tmp_path / "tree")
    assert not os.path.lexists(tmp_path / "tree")
    remove_tree(tmp_path / "probe")
    assert not os.path.lexists(tmp_path / "probe")


def test_a_device_node_past_path_max_is_still_dropped(tmp_path):
    """Attack: a block device at the end of a symlink chain whose full path is longer than PATH_MAX
    (no path names that dir to a system call); the walk by directory fd still reaches and drops it."""
    name = "x" * 60
    entries = [("/".join([name] * 30), "dir", None, 0o755), ("l0", "symlink", "/".join([name] * 30), 0o777)]
    for h in range(1, 4):
        entries += [(f"l{h - 1}/" + "/".join([name] * 30), "dir", None, 0o755),
                    (f"l{h}", "symlink", f"l{h - 1}/" + "/".join([name] * 30), 0o777)]
    entries.append(("l3/sda", "blk", (8, 0), 0o666))
    blob = tmp_path / "blob"
    blob.write_bytes(gzip_bytes(layer_tar(entries)))
    layer = tmp_path / "cache" / unpack_layer(blob, DIGEST, tmp_path / "cache", image="test/image:1",
                                              limits=LayerLimits(max_depth=200))
    devices, longest = [], 0
    for dirpath, _dirs, filenames, dfd in os.fwalk(layer, follow_symlinks=False):
        longest = max(longest, len(dirpath))
        devices += [n for n in filenames if stat.S_ISBLK(os.lstat(n, dir_fd=dfd).st_mode)]
    assert longest > 4096 and not devices


def test_limits_are_settings_with_clear_errors(monkeypatch):
    """Defaults, $EVOKIT_LAYER_* overrides, and one-line refusals of bad values."""
    assert LayerLimits() == LayerLimits(16 << 30, 1_000_000, 128, 128)
    monkeypatch.setenv("EVOKIT_LAYER_MAX_FILES", "5000")
    assert LayerLimits.from_env().max_files == 5000
    monkeypatch.setenv("EVOKIT_LAYER_MAX_BYTES", "8G")
    with pytest.raises(LayerError, match=r"\$EVOKIT_LAYER_MAX_BYTES='8G': must be a positive integer"):
        LayerLimits.from_env()
    for bad in (dict(max_files=0), dict(max_depth=513), dict(max_bytes=True)):
        with pytest.raises(LayerError, match="LayerLimits.max_"):
            LayerLimits(**bad)
