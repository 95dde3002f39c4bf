"""A real OCI registry on 127.0.0.1 for the pull tests, and the images the tests push into it.

* :class:`LocalRegistry` runs Debian's ``docker-registry`` (CNCF distribution 2.8) on a free
  port with its storage in a temp dir, optionally with token auth (a real Bearer flow: the
  registry answers 401 with ``WWW-Authenticate: Bearer realm=…``, :class:`TokenServer` signs
  an RS256 JWT with ``openssl``, the registry verifies it against the test's certificate);
* :func:`push_image` writes an image with the registry HTTP API (blob uploads, manifest
  PUT) — the same protocol ``docker push`` speaks;
* :class:`TamperingProxy` sits in front of a registry and flips bytes of what it forwards,
  to check that a wrong digest is refused.

Images are hand-written OCI layouts: layers are tars the tests make themselves (writing a
tar with ``tarfile`` is safe; only *extracting* untrusted ones is not), the bottom layer is
the Debian minbase rootfs that evokit's mmdebstrap path already builds.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import io
import json
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            _NO_PROXY.open(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # 401 from a token registry: it is up
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout}s: {log.read_text()[-2000:]}")


class TokenServer:
    """A Bearer token server: signs a JWT (RS256, ``openssl dgst``) granting the asked scope."""

    def __init__(self, workdir: Path, service: str = "evokit-test", issuer: str = "evokit-test-issuer"):
        self.dir, self.service, self.issuer = workdir, service, issuer
        workdir.mkdir(parents=True, exist_ok=True)
        self.key, self.cert = workdir / "key.pem", workdir / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key),
                        "-out", str(self.cert), "-days", "2", "-subj", "/CN=evokit-test-token"],
                       check=True, capture_output=True)
        spki = subprocess.run(["openssl", "pkey", "-in", str(self.key), "-pubout", "-outform", "DER"],
                              check=True, capture_output=True).stdout
        # libtrust's key id (what distribution matches a JWT's "kid" against).
        b32 = base64.b32encode(hashlib.sha256(spki).digest()[:30]).decode().rstrip("=")
        self.kid = ":".join(b32[i:i + 4] for i in range(0, len(b32), 4))
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                from urllib.parse import parse_qs, urlsplit
                q = parse_qs(urlsplit(self.path).query)
                scope = q.get("scope", [""])[0]
                body = json.dumps({"token": server.sign(scope), "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def sign(self, scope: str) -> str:
        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).decode().rstrip("=")

        access = []
        if scope.count(":") >= 2:
            kind, rest = scope.split(":", 1)
            name, actions = rest.rsplit(":", 1)
            access = [{"type": kind, "name": name, "actions": actions.split(",")}]
        now = int(time.time())
        header = b64(json.dumps({"typ": "JWT", "alg": "RS256", "kid": self.kid}).encode())
        claims = b64(json.dumps({"iss": self.issuer, "sub": "anonymous", "aud": self.service, "exp": now + 300,
                                 "nbf": now - 10, "iat": now, "jti": str(now), "access": access}).encode())
        signing_input = f"{header}.{claims}".encode()
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input,
                             check=True, capture_output=True).stdout
        return f"{header}.{claims}.{b64(sig)}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LocalRegistry:
    """``docker-registry serve`` on 127.0.0.1:<free port>; storage under ``workdir``."""

    def __init__(self, workdir: Path, storage: Path, token: TokenServer | None = None):
        if shutil.which("docker-registry") is None:
            raise RuntimeError("docker-registry is not installed (scripts/setup.sh: apt-get install docker-registry)")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        auth = ""
        if token:
            auth = (f"auth:\n  token:\n    realm: {token.url}\n    service: {token.service}\n"
                    f"    issuer: {token.issuer}\n    rootcertbundle: {token.cert}\n")
        config = workdir / "config.yml"
        config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n"
                          f"  delete:\n    enabled: true\nhttp:\n  addr: {self.host}\n{auth}")
        self.log = workdir / "registry.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(f"{self.url}/v2/", self.proc, self.log)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass(frozen=True)
class Blob:
    media_type: str
    digest: str
    size: int

    def descriptor(self, **extra) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


def _request(method: str, url: str, data=None, headers: dict | None = None, length: int | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if length is not None:
        req.add_header("Content-Length", str(length))
    with _NO_PROXY.open(req, timeout=300) as resp:
        return resp.status, dict(resp.headers), resp.read()


def push_blob(registry_url: str, repo: str, source: bytes | Path, media_type: str) -> Blob:
    """Monolithic blob upload: POST an upload session, PUT the bytes with their digest."""
    if isinstance(source, Path):
        h = hashlib.sha256()
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        digest, size = "sha256:" + h.hexdigest(), source.stat().st_size
    else:
        digest, size = sha256(source), len(source)
    _, headers, _ = _request("POST", f"{registry_url}/v2/{repo}/blobs/uploads/", b"")
    location = headers["Location"]
    if location.startswith("/"):
        location = registry_url + location
    sep = "&" if "?" in location else "?"
    if isinstance(source, Path):
        with open(source, "rb") as f:
            _request("PUT", f"{location}{sep}digest={digest}", f,
                     {"Content-Type": "application/octet-stream"}, size)
    else:
        _request("PUT", f"{location}{sep}digest={digest}", source, {"Content-Type": "application/octet-stream"})
    return Blob(media_type, digest, size)


def mount_blob(registry_url: str, repo: str, blob: Blob, source_repo: str) -> Blob:
    """Cross-repository blob mount (``POST …/blobs/uploads/?mount=…&from=…``): no re-upload."""
    status, _, _ = _request("POST", f"{registry_url}/v2/{repo}/blobs/uploads/?mount={blob.digest}"
                                    f"&from={source_repo}", b"")
    assert status == 201, f"mount of {blob.digest} into {repo} answered {status}"
    return blob


def push_manifest(registry_url: str, repo: str, ref: str, doc: dict) -> str:
    data = json.dumps(doc).encode()
    _request("PUT", f"{registry_url}/v2/{repo}/manifests/{ref}", data, {"Content-Type": doc["mediaType"]})
    return sha256(data)


def image_config(env: dict[str, str] | None = None, workdir: str = "", user: str = "",
                 arch: str = "amd64") -> bytes:
    cfg = {"Env": [f"{k}={v}" for k, v in (env or {}).items()], "WorkingDir": workdir, "User": user,
           "Cmd": ["/bin/bash"]}
    return json.dumps({"architecture": arch, "os": "linux", "config": cfg,
                       "rootfs": {"type": "layers", "diff_ids": []}}).encode()


def push_image(registry_url: str, repo: str, tag: str | None, layers: list[Blob], config: bytes) -> str:
    """Push config + manifest (layers already pushed, bottom first); return the manifest digest."""
    cfg = push_blob(registry_url, repo, config, OCI_CONFIG)
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg.descriptor(),
           "layers": [b.descriptor() for b in layers]}
    data = json.dumps(doc).encode()
    digest = sha256(data)
    push_manifest(registry_url, repo, tag or digest, doc)
    return digest


def layer_tar(entries: list[tuple]) -> bytes:
    """An uncompressed layer tar from ``(name, kind, payload, mode)``; kinds: file, dir, symlink,
    hardlink, chr, blk (payload = (major, minor))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 0
            data = None
            if kind == "file":
                data = payload.encode() if isinstance(payload, str) else payload
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, payload
            elif kind in ("chr", "blk"):
                info.type = tarfile.CHRTYPE if kind == "chr" else tarfile.BLKTYPE
                info.devmajor, info.devminor = payload
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


def zstd_bytes(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, check=True, capture_output=True).stdout


def rootfs_layer(rootfs: Path, out: Path) -> Path:
    """The rootfs dir as one gzip layer, made by the host's GNU tar (we trust our own base)."""
    if not out.is_file():
        tmp = out.with_suffix(".tmp")
        subprocess.run(f"tar -C {rootfs} --numeric-owner -cf - . | gzip -1 > {tmp}", shell=True, check=True)
        tmp.rename(out)
    return out


class TamperingProxy:
    """Forwards GETs to ``upstream`` and records their paths; flips bytes of blob and by-digest
    manifest bodies when asked to (with both flags off it is a plain recording proxy)."""

    def __init__(self, upstream: str, *, tamper_blobs: bool = True, tamper_manifests: bool = True):
        proxy = self
        self.upstream = upstream
        self.paths: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.paths.append(self.path)
                req = urllib.request.Request(upstream + self.path, headers={
                    k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")})
                try:
                    with _NO_PROXY.open(req, timeout=60) as resp:
                        status, headers, body = resp.status, resp.headers, resp.read()
                except urllib.error.HTTPError as e:
                    status, headers, body = e.code, e.headers, e.read()
                by_digest = "/manifests/sha256:" in self.path
                if status == 200 and body and ((tamper_blobs and "/blobs/" in self.path)
                                               or (tamper_manifests and by_digest)):
                    if by_digest:  # the same JSON, other bytes: a digest mismatch all the same
                        body = json.dumps(json.loads(body), indent=1).encode()
                    else:
                        body = body[:-1] + bytes([body[-1] ^ 0xFF])
                self.send_response(status)
                for k in ("Content-Type", "Docker-Content-Digest", "WWW-Authenticate"):
                    if headers.get(k):
                        self.send_header(k, headers[k])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
