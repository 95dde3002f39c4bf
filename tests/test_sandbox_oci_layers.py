"""Tests for evokit.sandbox.oci_layers: registry layers are untrusted archives, unpacked confined.

Each test writes a layer tar the way a hostile image publisher could (``tarfile`` *writing*
is safe), unpacks it with :func:`unpack_layer` and checks the result on disk: OCI whiteouts and
opaque markers become overlayfs whiteouts and the opaque xattr, gzip / zstd / plain layers
are detected by their bytes, device nodes are dropped, and no path, symlink or hard link in
the archive writes or reads anything outside the new layer dir (attacks: ``../``, absolute
names, a symlink to a host dir then a file through it, a hard link to a host file).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from registry_support import gzip_bytes, layer_tar, zstd_bytes

from evokit.sandbox.oci_layers import LayerError, compression, unpack_layer

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
