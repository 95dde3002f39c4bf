"""Tests for evokit.sandbox.image_pull (and the FROM path of evokit.sandbox.image): real pulls.

Everything is pulled from a real registry server on 127.0.0.1 (Debian's ``docker-registry``,
started by the fixture, storage in a temp dir), holding images this module pushes itself with
the registry API (``registry_support.py``): a Debian image (the mmdebstrap base as its bottom
layer, a gzip layer with whiteouts and an opaque dir, a zstd layer), a pinned digest, an OCI
index with two platforms, a registry that demands a Bearer token, a mirror for Docker Hub
short names, a proxy that serves wrong bytes, hostile images over the layer caps (a gzip bomb,
too many layers, a layer too large to fetch), and Harbor tasks built on these images whose
oracle passes and whose null run fails under :func:`evokit.verify.verify_task`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from registry_support import (
    LAYER_GZIP,
    LAYER_ZSTD,
    OCI_INDEX,
    LocalRegistry,
    TamperingProxy,
    TokenServer,
    free_port,
    gzip_bytes,
    image_config,
    layer_tar,
    mount_blob,
    push_blob,
    push_image,
    push_manifest,
    rootfs_layer,
    zstd_bytes,
)
from sandbox_support import link_base, make_context, running

from evokit.sandbox import ImageBuildError, build_image
from evokit.sandbox.image import pull_image, use_mmdebstrap
from evokit.sandbox.image_pull import RegistryConfig, RegistryError, parse_reference

HOST_ARCH = RegistryConfig().architecture
OTHER_ARCH = "arm64" if HOST_ARCH != "arm64" else "amd64"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/tools"


@dataclass
class Registry:
    """The module's registries and what was pushed into them."""

    open: LocalRegistry
    token: LocalRegistry
    tokens: TokenServer
    storage: Path  # both registries serve this one storage dir
    foo_digest: str  # evokit/foo:1, the Debian-based image
    tiny_digest: str  # evokit/tiny:1, one small layer, no shell


def sh(sandbox, command: str) -> str:
    res = sandbox.exec(command)
    assert res.ok, f"{command!r} failed ({res.return_code}): {res.stderr}"
    return res.stdout.strip()


@pytest.fixture(scope="module")
def reg(tmp_path_factory, sandbox_cache) -> Registry:
    work = tmp_path_factory.mktemp("registry")
    storage = work / "storage"
    tokens = TokenServer(work / "token")
    open_reg = LocalRegistry(work / "open", storage)
    token_reg = LocalRegistry(work / "token-reg", storage, token=tokens)  # same storage, auth on
    url = open_reg.url
    try:
        base_dir = (sandbox_cache / "base").resolve()
        rootfs = next(p for p in base_dir.iterdir() if p.name.startswith("bookworm")).resolve()
        base = push_blob(url, "evokit/foo", rootfs_layer(rootfs, work / "base.tar.gz"), LAYER_GZIP)
        changes = gzip_bytes(layer_tar([
            ("etc/.wh.motd", "file", "", 0o644),  # whiteout: the base's /etc/motd is deleted
            ("usr/share/doc", "dir", None, 0o755),
            ("usr/share/doc/.wh..wh..opq", "file", "", 0o644),  # opaque: the base's docs hidden
            ("usr/share/doc/only.txt", "file", "the only doc\n", 0o644),
            ("srv/app", "dir", None, 0o755),
            ("opt/tools", "dir", None, 0o755),
            ("opt/tools/hello", "file", "#!/bin/sh\necho hello from the image\n", 0o755),
        ]))
        layer2 = push_blob(url, "evokit/foo", changes, LAYER_GZIP)
        layer3 = push_blob(url, "evokit/foo", zstd_bytes(layer_tar([
            ("opt/zstd.txt", "file", "from a zstd layer\n", 0o644)])), LAYER_ZSTD)
        cfg = image_config({"PATH": IMAGE_PATH, "IMG_VAR": "from-registry"}, workdir="/srv/app",
                           arch=HOST_ARCH)
        layers = [base, layer2, layer3]
        foo = push_image(url, "evokit/foo", "1", layers, cfg)
        # Docker Hub's "library/" namespace, for the short-name mirror test.
        for blob in layers:
            mount_blob(url, "library/pyfake", blob, "evokit/foo")
        push_image(url, "library/pyfake", "3.12-slim", layers, cfg)

        tiny = push_blob(url, "evokit/tiny", gzip_bytes(layer_tar([
            ("opt/platform.txt", "file", f"linux/{HOST_ARCH}\n", 0o644)])), LAYER_GZIP)
        tiny_digest = push_image(url, "evokit/tiny", "1", [tiny], image_config(arch=HOST_ARCH))
        # An index with two platforms: the host's and another whose layer says so.
        other = push_blob(url, "evokit/tiny", gzip_bytes(layer_tar([
            ("opt/platform.txt", "file", f"linux/{OTHER_ARCH}\n", 0o644)])), LAYER_GZIP)
        other_digest = push_image(url, "evokit/tiny", None, [other], image_config(arch=OTHER_ARCH))
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": s,
             "platform": {"os": "linux", "architecture": a}}
            for d, s, a in ((other_digest, _size(url, "evokit/tiny", other_digest), OTHER_ARCH),
                            (tiny_digest, _size(url, "evokit/tiny", tiny_digest), HOST_ARCH))]}
        push_manifest(url, "evokit/tiny", "multi", index)
        yield Registry(open_reg, token_reg, tokens, storage, foo, tiny_digest)
    finally:
        token_reg.close()
        open_reg.close()
        tokens.close()


def _size(url: str, repo: str, digest: str) -> int:
    req = urllib.request.Request(f"{url}/v2/{repo}/manifests/{digest}", method="HEAD", headers={
        "Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req) as resp:
        return int(resp.headers["Content-Length"])


@pytest.fixture(scope="module")
def pulled_cache(tmp_path_factory) -> Path:
    """One cache for the module's Debian-image builds (the base layer is unpacked once)."""
    return link_base(tmp_path_factory.mktemp("pull-cache"))


# --- references and configuration (no server) ---

@pytest.mark.parametrize("text,want", [
    ("python:3.12-slim", ("docker.io", "library/python", "3.12-slim", None)),
    ("ubuntu", ("docker.io", "library/ubuntu", "latest", None)),
    ("golang:1.26-bookworm", ("docker.io", "library/golang", "1.26-bookworm", None)),
    ("eclipse-temurin:25-jdk", ("docker.io", "library/eclipse-temurin", "25-jdk", None)),
    ("someuser/tool:v2", ("docker.io", "someuser/tool", "v2", None)),
    ("ghcr.io/owner/repo/sub:tag", ("ghcr.io", "owner/repo/sub", "tag", None)),
    ("public.ecr.aws/docker/library/python:3.12", ("public.ecr.aws", "docker/library/python", "3.12", None)),
    ("127.0.0.1:5000/foo", ("127.0.0.1:5000", "foo", "latest", None)),
    ("localhost/foo:1", ("localhost", "foo", "1", None)),
    ("index.docker.io/debian:12", ("docker.io", "library/debian", "12", None)),
    ("ghcr.io/o/r@sha256:" + "a" * 64, ("ghcr.io", "o/r", None, "sha256:" + "a" * 64)),
    ("o/r:1@sha256:" + "b" * 64, ("docker.io", "o/r", "1", "sha256:" + "b" * 64)),
])
def test_parse_reference_normalises_like_docker(text, want):
    r = parse_reference(text)
    assert (r.registry, r.repository, r.tag, r.digest) == want


@pytest.mark.parametrize("text,needle", [
    ("Python:3", "not a valid repository name"),
    ("foo@sha256:abc", "is not sha256:<64 hex digits>"),
    ("foo:bad/tag:x", "'foo:bad' is not a registry HOST"),
    ("foo:-x", "tag '-x' is not a valid tag"),
])
def test_parse_reference_refuses_bad_names(text, needle):
    with pytest.raises(RegistryError, match=needle):
        parse_reference(text)


def test_endpoints_mirrors_and_insecure_hosts(monkeypatch):
    """Docker Hub → registry-1 (or its mirror); loopback and listed hosts over http, others https."""
    monkeypatch.setenv("EVOKIT_REGISTRY_MIRRORS", "http://127.0.0.1:5999, ghcr.io=https://m.example:8443/")
    monkeypatch.setenv("EVOKIT_INSECURE_REGISTRIES", "reg.lan:5000")
    c = RegistryConfig.from_env()
    assert c.endpoint("docker.io") == "http://127.0.0.1:5999"
    assert c.endpoint("ghcr.io") == "https://m.example:8443"
    assert c.endpoint("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert c.endpoint("localhost:5000") == "http://localhost:5000"
    assert c.endpoint("reg.lan:5000") == "http://reg.lan:5000"
    assert c.endpoint("quay.io") == "https://quay.io"
    assert RegistryConfig().endpoint("docker.io") == "https://registry-1.docker.io"
    monkeypatch.setenv("EVOKIT_REGISTRY_MIRRORS", "docker.io=127.0.0.1:5000")
    with pytest.raises(RegistryError, match="EVOKIT_REGISTRY_MIRRORS.*REGISTRY=http"):
        RegistryConfig.from_env()


def test_debian_precedence(monkeypatch):
    """debian:bookworm* stays on the offline mmdebstrap path unless EVOKIT_DEBIAN_SOURCE=registry."""
    assert use_mmdebstrap("debian:bookworm-slim") and use_mmdebstrap("debian:12 AS build")
    assert not use_mmdebstrap("debian:trixie-slim") and not use_mmdebstrap("python:3.12-slim")
    monkeypatch.setenv("EVOKIT_DEBIAN_SOURCE", "registry")
    assert not use_mmdebstrap("debian:bookworm-slim")


# --- pulls and builds against the local registry ---

def test_from_tag_applies_layers_whiteouts_and_config(reg, pulled_cache, tmp_path):
    """FROM a tag: gzip and zstd layers stack, whiteouts and the opaque dir hide base files, the image
    config's Env/WorkingDir apply, and the task's own ENV/RUN/COPY/WORKDIR apply on top."""
    ctx = make_context(tmp_path / "ctx", f"""\
FROM {reg.open.host}/evokit/foo:1
ENV TASK_VAR=from-task
RUN hello > /srv/app/built.txt && echo "$IMG_VAR" >> /srv/app/built.txt
COPY data.txt ./data.txt
WORKDIR /work
""", {"data.txt": "copied\n"})
    image = build_image(ctx, root=pulled_cache)
    assert image.env["IMG_VAR"] == "from-registry" and image.env["PATH"] == IMAGE_PATH
    with running(image) as s:
        assert sh(s, "cat /srv/app/built.txt") == "hello from the image\nfrom-registry"
        assert sh(s, "cat /srv/app/data.txt") == "copied"  # relative COPY: the image's WorkingDir
        assert sh(s, "pwd") == "/work"
        assert sh(s, "cat /opt/zstd.txt") == "from a zstd layer"
        assert sh(s, "test ! -e /etc/motd && echo gone") == "gone"
        assert sh(s, "ls -A /usr/share/doc") == "only.txt"
        assert sh(s, "echo $TASK_VAR $IMG_VAR") == "from-task from-registry"
        assert sh(s, "test -e /etc/os-release && echo base") == "base"  # the base layer is below


def test_layers_are_overlay_lowerdirs_with_whiteouts(reg, pulled_cache):
    """Each registry layer is one cached lower dir; OCI whiteouts became overlay whiteouts."""
    image = pull_image(f"{reg.open.host}/evokit/foo:1", root=pulled_cache)
    assert len(image.lowerdirs) == 3 and all(d.startswith("layers/oci1-") for d in image.lowerdirs)
    changes = pulled_cache / image.lowerdirs[1]
    motd = os.lstat(changes / "etc" / "motd")
    assert stat.S_ISCHR(motd.st_mode) and motd.st_rdev == os.makedev(0, 0)
    assert os.getxattr(changes / "usr" / "share" / "doc", "trusted.overlay.opaque") == b"y"
    assert not list(changes.rglob(".wh.*"))
    assert (pulled_cache / image.lowerdirs[2] / "etc" / "motd").is_file()  # the base itself is intact
    assert not list((pulled_cache / "blobs").rglob(".tmp-*"))
    again = pull_image(f"{reg.open.host}/evokit/foo@{reg.foo_digest}", root=pulled_cache)
    assert again.key == image.key and again.lowerdirs == image.lowerdirs  # pinned digest: same layers


def test_pinned_digest_builds(reg, pulled_cache, tmp_path):
    ctx = make_context(tmp_path / "ctx", f"FROM {reg.open.host}/evokit/foo@{reg.foo_digest}\n"
                                         "RUN echo pinned > /pinned.txt\n")
    with running(build_image(ctx, root=pulled_cache)) as s:
        assert sh(s, "cat /pinned.txt") == "pinned"


def test_index_resolves_to_the_host_platform(reg, tmp_path):
    image = pull_image(f"{reg.open.host}/evokit/tiny:multi", root=tmp_path / "cache")
    assert image.find("/opt/platform.txt").read_text() == f"linux/{HOST_ARCH}\n"
    same = pull_image(f"{reg.open.host}/evokit/tiny@{reg.tiny_digest}", root=tmp_path / "cache")
    assert same.key == image.key


def test_other_platform_only_is_a_clear_error(reg, tmp_path, monkeypatch):
    monkeypatch.setattr(RegistryConfig, "__init__", _config_for("s390x"))
    with pytest.raises(ImageBuildError, match=r"no linux/s390x image in its manifest list \(offers "):
        pull_image(f"{reg.open.host}/evokit/tiny:multi", root=tmp_path / "cache")


def _config_for(arch):
    init = RegistryConfig.__init__

    def patched(self, *a, **kw):
        init(self, *a, **{**kw, "architecture": arch})
    return patched


def test_image_made_by_umoci_and_pushed_by_skopeo(reg, tmp_path):
    """Real tools' bytes, not this module's hand-written manifests: ``umoci repack`` computes the
    whiteouts of a changed rootfs (a deleted file, a deleted dir), ``skopeo copy --format v2s2``
    pushes the image with Docker's media types (the format Docker Hub serves most images in)."""
    layout, bundle = tmp_path / "layout", tmp_path / "bundle"

    def run(*argv):
        res = subprocess.run(argv, capture_output=True, text=True)
        assert res.returncode == 0, f"{argv}: {res.stderr}"

    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:t")
    run("umoci", "unpack", "--image", f"{layout}:t", str(bundle))
    rootfs = bundle / "rootfs"
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "motd").write_text("motd\n")
    (rootfs / "usr" / "share" / "doc" / "pkg").mkdir(parents=True)
    (rootfs / "usr" / "share" / "doc" / "pkg" / "README").write_text("doc\n")
    run("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:t", str(bundle))  # next diff from here
    (rootfs / "etc" / "motd").unlink()
    shutil.rmtree(rootfs / "usr" / "share" / "doc" / "pkg")
    (rootfs / "etc" / "new").write_text("new\n")
    run("umoci", "repack", "--image", f"{layout}:t", str(bundle))
    run("umoci", "config", "--image", f"{layout}:t", "--config.env", "IMG_VAR=umoci",
        "--config.workingdir", "/srv")
    run("skopeo", "--insecure-policy", "copy", "--format", "v2s2", "--dest-tls-verify=false",
        f"oci:{layout}:t", f"docker://{reg.open.host}/umoci/img:1")
    req = urllib.request.Request(f"{reg.open.url}/v2/umoci/img/manifests/1", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req) as resp:
        assert resp.headers["Content-Type"] == "application/vnd.docker.distribution.manifest.v2+json"

    image = pull_image(f"{reg.open.host}/umoci/img:1", root=tmp_path / "cache")
    assert image.env["IMG_VAR"] == "umoci" and image.workdir == "/srv"
    top, bottom = (tmp_path / "cache" / d for d in image.lowerdirs[:2])
    for gone in ("etc/motd", "usr/share/doc/pkg"):
        st = os.lstat(top / gone)
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0, gone
    assert (top / "etc" / "new").read_text() == "new\n"
    assert (bottom / "etc" / "motd").read_text() == "motd\n"


def test_pulled_layers_are_neutralised_like_run_layers(reg, tmp_path):
    """A registry layer's set-uid root file loses its bit in the cache, as a RUN layer's does."""
    layer = push_blob(reg.open.url, "evokit/suid", gzip_bytes(layer_tar([
        ("usr/bin/rootshell", "file", "#!/bin/sh\n", 0o4755), ("usr/bin/group", "file", "x", 0o2755)])),
        LAYER_GZIP)
    push_image(reg.open.url, "evokit/suid", "1", [layer], image_config(arch=HOST_ARCH))
    image = pull_image(f"{reg.open.host}/evokit/suid:1", root=tmp_path / "cache")
    assert stat.S_IMODE(image.find("/usr/bin/rootshell").stat().st_mode) == 0o755
    assert stat.S_IMODE(image.find("/usr/bin/group").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700  # the cache root is private


def test_token_auth(reg, tmp_path):
    """A registry that answers 401 + Bearer challenge: the pull fetches a token for its scope."""
    req = urllib.request.Request(f"{reg.token.url}/v2/evokit/tiny/manifests/1")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req)
    assert e.value.code == 401 and "Bearer realm=" in e.value.headers["WWW-Authenticate"]
    n = len(reg.tokens.requests)
    image = pull_image(f"{reg.token.host}/evokit/tiny:multi", root=tmp_path / "cache")
    assert image.find("/opt/platform.txt").read_text() == f"linux/{HOST_ARCH}\n"
    asked = reg.tokens.requests[n:]
    assert asked and all("scope=repository%3Aevokit%2Ftiny%3Apull" in q for q in asked)


def test_short_name_goes_to_the_docker_hub_mirror(reg, pulled_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKIT_REGISTRY_MIRRORS", f"docker.io={reg.open.url}")
    ctx = make_context(tmp_path / "ctx", "FROM pyfake:3.12-slim\nRUN cat /opt/zstd.txt > /copy.txt\n")
    with running(build_image(ctx, root=pulled_cache)) as s:
        assert sh(s, "cat /copy.txt") == "from a zstd layer"


def test_layers_already_unpacked_are_not_downloaded_again(reg, pulled_cache):
    """Another image on the same layers (here the same image under Docker Hub's library/ name)
    fetches its manifest only (config blobs are kept), and shares the cached layer dirs."""
    first = pull_image(f"{reg.open.host}/evokit/foo:1", root=pulled_cache)
    proxy = TamperingProxy(reg.open.url, tamper_blobs=False, tamper_manifests=False)
    try:
        second = pull_image(f"{proxy.host}/library/pyfake:3.12-slim", root=pulled_cache)
    finally:
        proxy.close()
    assert second.lowerdirs == first.lowerdirs
    assert any("/library/pyfake/manifests/3.12-slim" in p for p in proxy.paths)  # it did resolve
    assert not [p for p in proxy.paths if "/blobs/" in p]  # no layer (and the config is cached)


@pytest.mark.parametrize("blobs,manifests", [(True, False), (False, True)])
def test_wrong_digest_is_refused_and_nothing_cached(reg, tmp_path, blobs, manifests):
    """A proxy (or a broken mirror) that serves other bytes than the digests name: refused."""
    proxy = TamperingProxy(reg.open.url, tamper_blobs=blobs, tamper_manifests=manifests)
    cache = tmp_path / "cache"
    try:
        ref = f"{proxy.host}/evokit/tiny" + (f"@{reg.tiny_digest}" if manifests else ":1")
        with pytest.raises(ImageBuildError, match="digest mismatch") as e:
            pull_image(ref, root=cache)
    finally:
        proxy.close()
    assert "\n" not in str(e.value) and proxy.host in str(e.value)
    assert not list(cache.rglob("sha256/*")) and not list(cache.glob("layers/oci*"))
    assert not list(cache.glob("images/*.json"))


def test_registry_errors_are_one_clear_line(reg, tmp_path):
    with pytest.raises(ImageBuildError) as e:
        pull_image(f"{reg.open.host}/evokit/nope:1", root=tmp_path / "c")
    msg = str(e.value)
    assert "\n" not in msg and "HTTP 404" in msg and "evokit/nope" in msg and reg.open.url in msg
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(ImageBuildError, match=r"cannot reach the registry.*EVOKIT_REGISTRY_MIRRORS"):
        pull_image(f"{dead}/evokit/tiny:1", root=tmp_path / "c")
    ctx = make_context(tmp_path / "ctx", "FROM --platform=linux/s390x python:3\n")
    with pytest.raises(Exception, match=r"Dockerfile:1: FROM --platform=linux/s390x"):
        build_image(ctx, root=tmp_path / "c")


def test_a_digest_the_registry_lacks_asks_for_a_mirror_holding_it(reg, tmp_path):
    """A FROM pinned to a digest the registry does not hold (the repository exists, the digest is
    another image's) fails naming the image, the digest and the kind of registry that would serve it."""
    missing = "sha256:" + "0" * 64
    ctx = make_context(tmp_path / "ctx", f"FROM {reg.open.host}/evokit/foo@{missing}\n")
    with pytest.raises(ImageBuildError) as e:
        build_image(ctx, root=tmp_path / "c")
    msg = str(e.value)
    assert "\n" not in msg and "HTTP 404" in msg and f"evokit/foo@{missing}" in msg, msg
    assert f"holds no manifest {missing}" in msg and "pull-through mirror" in msg, msg
    assert f"EVOKIT_REGISTRY_MIRRORS={reg.open.host}=" in msg and "local registry" in msg, msg


def test_multi_stage_from_a_registry_image(reg, pulled_cache, tmp_path):
    """A pulled image as a build stage and as a COPY --from source, into a Debian (mmdebstrap) stage."""
    ctx = make_context(tmp_path / "ctx", f"""\
FROM {reg.open.host}/evokit/foo:1 AS tools
RUN hello > /srv/app/greeting.txt

FROM debian:bookworm-slim
COPY --from=tools /srv/app/greeting.txt /greeting.txt
COPY --from={reg.open.host}/evokit/foo:1 /opt/zstd.txt /opt/
""")
    image = build_image(ctx, root=pulled_cache)
    assert image.lowerdirs[-1].startswith("base/bookworm")
    with running(image) as s:
        assert sh(s, "cat /greeting.txt /opt/zstd.txt") == "hello from the image\nfrom a zstd layer"
        assert sh(s, "test ! -e /opt/tools && echo only-copied") == "only-copied"


def test_a_pulled_reference_is_reused_offline(reg, tmp_path):
    """Like ``docker build`` without --pull: once pulled, a tag builds with the registry gone."""
    short = LocalRegistry(tmp_path / "short", reg.storage)
    cache = tmp_path / "cache"
    try:
        first = pull_image(f"{short.host}/evokit/tiny:1", root=cache)
    finally:
        short.close()
    again = pull_image(f"{short.host}/evokit/tiny:1", root=cache)
    assert again == first


# --- caps on what a registry image may put on disk (LayerLimits) ---

@dataclass
class Hostile:
    """A registry of its own (no Debian base needed) holding hostile images and one plain image."""

    registry: LocalRegistry
    bomb_layer: str  # digest of the 1 MiB gzip layer that expands to 1 GiB
    big_layer: str  # digest of a 64 KiB incompressible layer


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Hostile:
    from test_sandbox_oci_layers import gzip_bomb

    work = tmp_path_factory.mktemp("hostile-registry")
    registry = LocalRegistry(work / "reg", work / "storage")
    try:
        url = registry.url
        bomb = push_blob(url, "evokit/bomb", gzip_bomb(1024), LAYER_GZIP)
        push_image(url, "evokit/bomb", "1", [bomb], image_config(arch=HOST_ARCH))
        layers = [push_blob(url, "evokit/deep", gzip_bytes(layer_tar([(f"opt/{i}.txt", "file", f"{i}\n", 0o644)])),
                            LAYER_GZIP) for i in range(129)]
        push_image(url, "evokit/deep", "1", layers, image_config(arch=HOST_ARCH))
        plain = push_blob(url, "evokit/plain", gzip_bytes(layer_tar([("opt/one.txt", "file", "1\n", 0o644)])),
                          LAYER_GZIP)
        push_image(url, "evokit/plain", "1", [plain], image_config(arch=HOST_ARCH))
        big = push_blob(url, "evokit/big", gzip_bytes(layer_tar([("opt/noise", "file", os.urandom(64 << 10),
                                                                    0o644)])), LAYER_GZIP)
        push_image(url, "evokit/big", "1", [big], image_config(arch=HOST_ARCH))
        yield Hostile(registry, bomb.digest, big.digest)
    finally:
        registry.close()


def test_gzip_bomb_layer_is_refused_while_it_decompresses(hostile, tmp_path, monkeypatch):
    """Attack: an image whose one layer is 1 MiB of gzip expanding to 1 GiB, pulled from the real
    registry into a cache on a 256 MiB tmpfs with a 64 MiB cap. Refused with the limit error naming
    the image and the layer, in seconds; had the whole expansion been written first, tar would have
    hit ENOSPC instead. Nothing is left: no layer, no temp dir, no image record."""
    import time

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "evokit-test-small", str(small)], check=True)
    try:
        monkeypatch.setenv("EVOKIT_LAYER_MAX_BYTES", str(64 << 20))
        ref = f"{hostile.registry.host}/evokit/bomb:1"
        t0 = time.monotonic()
        with pytest.raises(ImageBuildError) as e:
            pull_image(ref, root=small / "cache")
        seconds = time.monotonic() - t0
        msg = str(e.value)
        assert "\n" not in msg and ref in msg and hostile.bomb_layer in msg
        assert f"more than {64 << 20} decompressed bytes" in msg and "EVOKIT_LAYER_MAX_BYTES" in msg
        assert seconds < 30, seconds
        cache = small / "cache"
        assert not list((cache / "layers").iterdir()) and not list(cache.glob("images/*.json"))
    finally:
        subprocess.run(["umount", "-l", str(small)], check=True)


def test_too_many_layers_or_a_layer_too_large_is_refused_before_download(hostile, tmp_path, monkeypatch):
    """An image of 129 layers (cap 128), and a 64 KiB layer under a 32 KiB cap, are refused from the
    manifest: a recording proxy sees no blob request at all."""
    proxy = TamperingProxy(hostile.registry.url, tamper_blobs=False, tamper_manifests=False)
    try:
        with pytest.raises(ImageBuildError, match=r"129 layers, over the cap LayerLimits.max_layers=128"):
            pull_image(f"{proxy.host}/evokit/deep:1", root=tmp_path / "cache")
        monkeypatch.setenv("EVOKIT_LAYER_MAX_BYTES", str(32 << 10))
        with pytest.raises(ImageBuildError) as e:
            pull_image(f"{proxy.host}/evokit/big:1", root=tmp_path / "cache")
    finally:
        proxy.close()
    assert hostile.big_layer in str(e.value) and "refused before download" in str(e.value)
    assert [p for p in proxy.paths if "/manifests/" in p] and not [p for p in proxy.paths if "/blobs/" in p]
    assert not list((tmp_path / "cache").rglob("sha256/*"))


def test_a_plain_image_still_pulls_under_the_default_caps(hostile, tmp_path):
    """The caps do not get in the way of an ordinary image (the Debian image above pulls too)."""
    image = pull_image(f"{hostile.registry.host}/evokit/plain:1", root=tmp_path / "cache")
    assert image.find("/opt/one.txt").read_text() == "1\n"


# --- whole tasks: build, oracle 1, null 0 ---

def _task(root: Path, *, dockerfile: str | None, docker_image: str | None = None) -> Path:
    env = root / "environment"
    env.mkdir(parents=True)
    if dockerfile:
        (env / "Dockerfile").write_text(dockerfile)
    (root / "instruction.md").write_text("Write the output of `hello` to /srv/app/out.txt.\n")
    image_line = f'docker_image = "{docker_image}"\n' if docker_image else ""
    (root / "task.toml").write_text(
        'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        f'[environment]\nnetwork_mode = "no-network"\nmemory_mb = 512\nstorage_mb = 256\n{image_line}')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        'if [ "$(cat /srv/app/out.txt 2>/dev/null)" = "hello from the image" ]; then r=1; else r=0; fi\n'
        "echo $r > /logs/verifier/reward.txt\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\nhello > /srv/app/out.txt\n")
    return root


@pytest.mark.parametrize("how", ["FROM", "docker_image"])
def test_task_on_a_registry_image_verifies(reg, pulled_cache, tmp_path, monkeypatch, how):
    """A Harbor task on a pulled (non-Debian-path) image: oracle 1, null 0, under evokit.verify."""
    from evokit.verify import verify_task

    monkeypatch.setenv("EVOKIT_CACHE", str(pulled_cache))
    ref = f"{reg.open.host}/evokit/foo:1"
    task = _task(tmp_path / "task", dockerfile=f"FROM {ref}\nWORKDIR /srv/app\n" if how == "FROM" else None,
                 docker_image=ref if how == "docker_image" else None)
    v = verify_task(task)
    checks = {c.name: c for c in v.checks}
    assert "build" not in checks, checks.get("build")
    assert checks["oracle"].passed, checks["oracle"].reason
    assert checks["null"].passed, checks["null"].reason


@pytest.mark.parametrize("agent,expected", [("oracle", 1.0), ("nop", 0.0)])
def test_harbor_trial_on_a_prebuilt_docker_image(reg, pulled_cache, tmp_path, monkeypatch, agent, expected):
    """Harbor's own Trial API on our environment (``evokit.sandbox:BubblewrapEnvironment``) runs a
    task that has only ``[environment].docker_image`` (no Dockerfile): pulled, oracle 1, nop 0."""
    import asyncio

    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    monkeypatch.setenv("EVOKIT_CACHE", str(pulled_cache))
    task = _task(tmp_path / "task", dockerfile=None, docker_image=f"{reg.open.host}/evokit/foo:1")
    config = TrialConfig(task=TaskConfig(path=task), trials_dir=tmp_path / "trials",
                         agent=AgentConfig(name=agent),
                         environment=EnvironmentConfig(import_path="evokit.sandbox:BubblewrapEnvironment"))

    async def go():
        return await (await Trial.create(config)).run()

    result = asyncio.run(go())
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": expected}
