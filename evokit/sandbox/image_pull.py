"""Pull OCI / Docker images with the registry HTTP API v2 (no Docker, no skopeo at run time).

Why: most Terminal-Bench 2 tasks start ``FROM golang:…``, ``python:…-slim``, ``ubuntu:…``;
the local sandbox builds them from the registry's own bytes. This module only
*fetches*: references → manifest → config and layer blobs, verified and stored on disk.
Unpacking the layers is :mod:`evokit.sandbox.oci_layers`.

* **References** follow Docker's normalisation: ``python:3.12-slim`` →
  ``docker.io/library/python:3.12-slim``; a first component with a dot, a port or
  ``localhost`` is a registry host; ``@sha256:…`` pins a manifest digest.
* **Where**: ``docker.io`` is served by ``registry-1.docker.io``. ``$EVOKIT_REGISTRY_MIRRORS``
  (``docker.io=http://127.0.0.1:5000,ghcr.io=https://mirror.example``; a bare URL means
  ``docker.io``) sends a registry's pulls to a mirror. Plain ``http`` is used for loopback
  hosts (as Docker treats 127.0.0.0/8 as insecure) and for hosts in
  ``$EVOKIT_INSECURE_REGISTRIES``; everything else is https.
* **Auth**: anonymous Bearer tokens, as Docker Hub, ghcr.io and public.ecr.aws hand them out:
  a 401 with ``WWW-Authenticate: Bearer realm=…,service=…,scope=…`` → GET the realm →
  ``token``/``access_token`` → retry. Basic auth / credentials are not supported (stated).
* **Platform**: a manifest list / OCI index resolves to the host's ``linux/<arch>``.
* **Integrity**: every manifest fetched by digest and every blob is hashed while it streams
  to disk (64 KiB chunks, never a whole layer in memory) and refused unless it matches its
  digest and size; a blob is published by an atomic rename, so the cache only holds
  verified bytes and a killed pull leaves only a temp file.
* **Caps** (:class:`evokit.sandbox.oci_layers.LayerLimits`, the disk-filling class): an image
  of more than ``max_layers`` layers, or a layer whose declared (compressed) size is over
  ``max_bytes``, is refused from its manifest, before any blob is fetched; a blob is never
  read past its declared size. What a layer expands to is capped while it unpacks
  (:mod:`evokit.sandbox.oci_layers`).

Errors are :class:`RegistryError`, one line naming the image, the registry, the HTTP status
and what to do.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import platform
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from evokit.errors import UserError
from evokit.sandbox.oci_layers import LayerLimits, env_var

DOCKER_HUB = "docker.io"
DOCKER_HUB_ENDPOINT = "https://registry-1.docker.io"

INDEX_TYPES = frozenset({
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
})
MANIFEST_TYPES = frozenset({
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
})
ACCEPT = ", ".join(sorted(INDEX_TYPES | MANIFEST_TYPES))
_CHUNK = 64 * 1024
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MAX_MANIFEST = 4 * 1024 * 1024  # a manifest is JSON of a few KiB; refuse a flood
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
         "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


class RegistryError(UserError, RuntimeError):
    """A pull failed; the one-line message names image, registry, HTTP status and the fix."""


@dataclass(frozen=True)
class ImageRef:
    """A normalised image reference: ``registry/repository[:tag][@digest]``."""

    registry: str  # "docker.io", "ghcr.io", "127.0.0.1:5000"
    repository: str  # "library/python"
    tag: str | None = None
    digest: str | None = None

    @property
    def ref(self) -> str:
        """What to ask the manifests endpoint for: the digest if pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return (f"{self.registry}/{self.repository}" + (f":{self.tag}" if self.tag else "")
                + (f"@{self.digest}" if self.digest else ""))


_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                   r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")


def parse_reference(text: str) -> ImageRef:
    """Docker's normalisation of an image name (``python:3.12-slim``, ``ghcr.io/o/r@sha256:…``)."""
    s = text.strip()
    digest = None
    if "@" in s:
        s, _, digest = s.partition("@")
        if not _DIGEST.match(digest):
            raise RegistryError(f"image {text!r}: digest {digest!r} is not sha256:<64 hex digits>")
    first, slash, rest = s.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
        if not _HOST.match(registry):
            raise RegistryError(f"image {text!r}: {registry!r} is not a registry HOST[:PORT]")
    else:
        registry, path = DOCKER_HUB, s
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
        if not _TAG.match(tag):
            raise RegistryError(f"image {text!r}: tag {tag!r} is not a valid tag")
    if registry in (DOCKER_HUB, "index.docker.io", "registry-1.docker.io"):
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    if not _NAME.match(path):
        raise RegistryError(f"image {text!r}: {path!r} is not a valid repository name "
                            "(lower-case letters, digits, . _ - and /)")
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry, path, tag, digest)


def _mirror_map(value: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in filter(None, (p.strip() for p in value.split(","))):
        name, eq, url = item.partition("=")
        if not eq:
            name, url = DOCKER_HUB, item
        if not re.match(r"^https?://[^/]+", url):
            raise RegistryError(f"$EVOKIT_REGISTRY_MIRRORS: {item!r} is not REGISTRY=http(s)://HOST[:PORT]")
        out.append((name.strip(), url.rstrip("/")))
    return tuple(out)


@dataclass(frozen=True)
class RegistryConfig:
    """Where pulls go and for which platform; :meth:`from_env` reads the ``EVOKIT_*`` variables."""

    #: (registry, base URL) pairs: pulls of ``registry`` go to the URL instead.
    mirrors: tuple[tuple[str, str], ...] = ()
    #: registry hosts reached over plain http (loopback hosts always are).
    insecure: tuple[str, ...] = ()
    #: the platform a manifest list resolves to; default the host's.
    os: str = "linux"
    architecture: str = field(default_factory=lambda: _ARCH.get(platform.machine(), platform.machine()))
    timeout_sec: float = 60.0

    @classmethod
    def from_env(cls) -> RegistryConfig:
        insecure = tuple(filter(None, (h.strip() for h in
                                       os.environ.get("EVOKIT_INSECURE_REGISTRIES", "").split(","))))
        return cls(mirrors=_mirror_map(os.environ.get("EVOKIT_REGISTRY_MIRRORS", "")), insecure=insecure)

    def endpoint(self, registry: str) -> str:
        """The base URL serving ``registry`` (a mirror, or the registry itself)."""
        for name, url in self.mirrors:
            if name == registry:
                return url
        if registry == DOCKER_HUB:
            return DOCKER_HUB_ENDPOINT
        host = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry
        scheme = "http" if registry in self.insecure or _is_loopback(host) else "https"
        return f"{scheme}://{registry}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor (a blob named by its digest)."""

    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class PulledImage:
    """A resolved image: its manifest digest, its config JSON and its layer blobs (bottom first)."""

    reference: ImageRef
    manifest_digest: str
    config: dict
    layers: tuple[Descriptor, ...]
    blob_paths: tuple[Path | None, ...]  # None: a layer the caller already has


class _Client:
    """One registry session: remembers the Bearer token for the repository it pulls."""

    def __init__(self, ref: ImageRef, config: RegistryConfig, image: str):
        self.ref, self.config, self.image = ref, config, image
        self.base = config.endpoint(ref.registry)
        self.token: str | None = None
        host = urllib.parse.urlsplit(self.base).hostname or ""
        # Loopback registries must not go through $http_proxy (it cannot reach our 127.0.0.1).
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(host) else []
        self.opener = urllib.request.build_opener(*handlers)

    def where(self) -> str:
        return f"image {self.image!r} from {self.base}"

    def get(self, path: str, accept: str | None = None):
        url = f"{self.base}/v2/{self.ref.repository}/{path}"
        for attempt in range(2):
            req = urllib.request.Request(url)
            if accept:
                req.add_header("Accept", accept)
            if self.token:
                # Unredirected: blob storage behind a redirect (S3, a CDN) rejects our token.
                req.add_unredirected_header("Authorization", f"Bearer {self.token}")
            try:
                return self.opener.open(req, timeout=self.config.timeout_sec)
            except urllib.error.HTTPError as e:
                if e.code == 401 and attempt == 0:  # no token yet, or it expired (Docker Hub: 5 min)
                    self.token = self._fetch_token(e.headers.get("WWW-Authenticate", ""))
                    continue
                raise RegistryError(self._http_message(e, path)) from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                raise RegistryError(f"{self.where()}: cannot reach the registry ({reason}); check the "
                                    "network or set $EVOKIT_REGISTRY_MIRRORS to a reachable mirror") from None
        raise RegistryError(f"{self.where()}: HTTP 401 even with a token; the image may be private "
                            "(credentials are not supported by the local sandbox)")

    def _http_message(self, e: urllib.error.HTTPError, path: str) -> str:
        if e.code == 404 and self.ref.digest and path == f"manifests/{self.ref.digest}":
            # A pin names bytes, not a name: only a registry holding that very manifest can serve it
            # (a mirror that copied the tag later, or never pulled it, has other digests or none).
            return (f"{self.where()}: HTTP 404, this registry holds no manifest {self.ref.digest} for "
                    f"{self.ref.repository}; a FROM pinned to a digest needs a registry that has that digest: a "
                    f"pull-through mirror of {self.ref.registry} ($EVOKIT_REGISTRY_MIRRORS={self.ref.registry}="
                    "http://HOST:PORT) or a local registry the image was pushed to")
        what = {401: "unauthorized (a private image? credentials are not supported)",
                403: "forbidden", 404: "not found (check the name, tag or digest)",
                429: "rate limited (retry later or use a mirror: $EVOKIT_REGISTRY_MIRRORS)"}
        return f"{self.where()}: HTTP {e.code} {what.get(e.code, e.reason)} for /v2/{self.ref.repository}/{path}"

    def _fetch_token(self, challenge: str) -> str:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise RegistryError(f"{self.where()}: the registry asks for {scheme or 'unknown'} auth; only "
                                "anonymous Bearer tokens are supported (use a public image or a mirror)")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.pop("realm", None)
        if not realm or not realm.startswith(("http://", "https://")):
            raise RegistryError(f"{self.where()}: Bearer challenge without a valid realm: {challenge!r}")
        fields.setdefault("scope", f"repository:{self.ref.repository}:pull")
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(fields)
        host = urllib.parse.urlsplit(realm).hostname or ""
        opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if _is_loopback(host) else []))
        try:
            with opener.open(url, timeout=self.config.timeout_sec) as resp:
                body = json.loads(resp.read(_MAX_MANIFEST))
        except urllib.error.HTTPError as e:
            raise RegistryError(f"{self.where()}: token server {realm} answered HTTP {e.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"{self.where()}: no token from {realm} ({getattr(e, 'reason', e)})") from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{self.where()}: token server {realm} returned no token")
        return token


def _check_digest(data: bytes, digest: str, what: str) -> None:
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != digest:
        raise RegistryError(f"{what}: digest mismatch: expected {digest}, got {got}; the registry or a "
                            "proxy served other bytes than the reference pins (refused)")


def _manifest(client: _Client, ref: str) -> tuple[dict, str]:
    """GET a manifest; verify it against ``ref`` when that is a digest; return (json, digest)."""
    with client.get(f"manifests/{ref}", ACCEPT) as resp:
        data = resp.read(_MAX_MANIFEST + 1)
        media = (resp.headers.get("Content-Type") or "").split(";")[0].strip()
    if len(data) > _MAX_MANIFEST:
        raise RegistryError(f"{client.where()}: manifest {ref} is larger than {_MAX_MANIFEST} bytes (refused)")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if ref.startswith("sha256:"):
        _check_digest(data, ref, f"{client.where()}: manifest")
    try:
        doc = json.loads(data)
    except ValueError:
        raise RegistryError(f"{client.where()}: manifest {ref} is not JSON") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{client.where()}: manifest {ref} is not a JSON object")
    doc.setdefault("mediaType", media)
    return doc, digest


def _pick_platform(index: dict, config: RegistryConfig, where: str) -> str:
    entries = [m for m in index.get("manifests") or [] if isinstance(m, dict)]
    for m in entries:
        p = m.get("platform") or {}
        if p.get("os") == config.os and p.get("architecture") == config.architecture:
            digest = m.get("digest", "")
            if not _DIGEST.match(digest):
                break
            return digest
    offered = sorted({f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                      for m in entries})
    raise RegistryError(f"{where}: no {config.os}/{config.architecture} image in its manifest list "
                        f"(offers {', '.join(offered) or 'nothing'}); pick another tag")


def _descriptor(d: object, where: str) -> Descriptor:
    if not isinstance(d, dict) or not _DIGEST.match(str(d.get("digest", ""))) \
            or not isinstance(d.get("size"), int) or d["size"] < 0:
        raise RegistryError(f"{where}: malformed descriptor in the manifest: {str(d)[:200]}")
    return Descriptor(str(d.get("mediaType", "")), d["digest"], d["size"])


def fetch_blob(client: _Client, desc: Descriptor, blobs: Path) -> Path:
    """Stream one blob to ``blobs/sha256/<hex>`` (verified, atomic); reuse it if already there."""
    final = blobs / "sha256" / desc.digest.removeprefix("sha256:")
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{uuid.uuid4().hex[:12]}")
    h, n = hashlib.sha256(), 0
    try:
        with client.get(f"blobs/{desc.digest}") as resp, open(tmp, "wb") as out:
            while chunk := resp.read(_CHUNK):
                n += len(chunk)
                if n > desc.size:
                    raise RegistryError(f"{client.where()}: blob {desc.digest} is larger than the "
                                        f"{desc.size} bytes its manifest declares (refused)")
                h.update(chunk)
                out.write(chunk)
        got = "sha256:" + h.hexdigest()
        if got != desc.digest or n != desc.size:
            raise RegistryError(f"{client.where()}: blob digest mismatch: expected {desc.digest} "
                                f"({desc.size} bytes), got {got} ({n} bytes); refused")
        os.rename(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def check_limits(layers: tuple[Descriptor, ...], limits: LayerLimits, where: str) -> None:
    """Refuse, from the manifest alone, an image of too many layers or a layer too large to fetch.

    A compressed layer cannot expand to less than about its own size (deflate and zstd add a
    few bytes per block at worst), so one declared over ``max_bytes`` would be refused after
    unpacking anyway: it is refused before its bytes reach the disk.
    """
    if len(layers) > limits.max_layers:
        raise RegistryError(f"{where}: {len(layers)} layers, over the cap LayerLimits.max_layers="
                            f"{limits.max_layers} (${env_var('max_layers')} raises it); refused")
    for d in layers:
        if d.size > limits.max_bytes:
            raise RegistryError(f"{where}: layer {d.digest} is {d.size} bytes compressed, over the cap "
                                f"LayerLimits.max_bytes={limits.max_bytes} (${env_var('max_bytes')} raises it); "
                                "refused before download")


def pull(image: str, blobs: Path, config: RegistryConfig | None = None,
         log=lambda s: None, have=lambda desc: False, limits: LayerLimits | None = None) -> PulledImage:
    """Resolve ``image`` for the configured platform and fetch its config and layers into ``blobs``.

    Layers for which ``have(descriptor)`` is true (already unpacked, e.g. a base shared with
    another image) are not downloaded; their entry in ``blob_paths`` is ``None``. ``limits``
    (default :meth:`LayerLimits.from_env`) is checked against the manifest first (:func:`check_limits`).
    """
    config = config or RegistryConfig.from_env()
    limits = limits or LayerLimits.from_env()
    ref = parse_reference(image)
    client = _Client(ref, config, image)
    doc, digest = _manifest(client, ref.ref)
    if doc.get("mediaType") in INDEX_TYPES or ("manifests" in doc and "layers" not in doc):
        digest = _pick_platform(doc, config, client.where())
        doc, _ = _manifest(client, digest)
    media = doc.get("mediaType")
    if doc.get("schemaVersion") != 2 or "layers" not in doc or (media and media not in MANIFEST_TYPES):
        raise RegistryError(f"{client.where()}: unsupported manifest (mediaType {media!r}, schemaVersion "
                            f"{doc.get('schemaVersion')!r}); only OCI and Docker v2 schema 2 images")
    cfg_desc = _descriptor(doc.get("config"), client.where())
    if cfg_desc.size > _MAX_MANIFEST:  # read whole as JSON below: a few KiB in practice
        raise RegistryError(f"{client.where()}: image config of {cfg_desc.size} bytes is larger than "
                            f"{_MAX_MANIFEST} (refused)")
    layers = tuple(_descriptor(d, client.where()) for d in doc.get("layers") or [])
    check_limits(layers, limits, client.where())
    log(f"pulling {ref} ({len(layers)} layers, {sum(d.size for d in layers) / 1e6:.1f} MB) from {client.base}")
    cfg_path = fetch_blob(client, cfg_desc, blobs)
    try:
        cfg = json.loads(cfg_path.read_bytes())
    except ValueError:
        raise RegistryError(f"{client.where()}: image config {cfg_desc.digest} is not JSON") from None
    paths = tuple(None if have(d) else fetch_blob(client, d, blobs) for d in layers)
    return PulledImage(ref, digest, cfg if isinstance(cfg, dict) else {}, layers, paths)
