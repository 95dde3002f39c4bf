"""Build a task's ``environment/Dockerfile`` into cached overlay layers, without Docker.

* The base (``FROM debian:bookworm*`` / ``debian:12*``, any registry prefix, tag suffix
  or digest) is a Debian root filesystem made once by ``mmdebstrap --variant=minbase``
  (close to ``debian:bookworm-slim``) and cached under ``<cache>/base/<suite>``: it needs
  no registry. Any other base (``python:3.12-slim``, ``ghcr.io/o/r@sha256:…``) is pulled
  with the registry API (:mod:`evokit.sandbox.image_pull`), each of its layers unpacked once
  into ``<cache>/layers/oci1-<digest>`` (:mod:`evokit.sandbox.oci_layers`); see
  :func:`use_mmdebstrap` for the precedence and :func:`pull_image`.
* Multi-stage builds: each ``FROM`` starts a stage (``AS name``); ``FROM <stage>`` continues
  from an earlier one and ``COPY --from=<stage|index|image>`` copies out of it
  (:mod:`evokit.sandbox.stages`); the last stage is the image.
* Every ``RUN``, ``COPY``/``ADD`` and ``WORKDIR`` becomes one layer: the upper directory
  of an overlay mounted over the layers below it, kept under ``<cache>/layers/<key>``.
  The key chains the parent key with the instruction, the build variables in force and
  (for ``COPY``) the bytes copied, so an unchanged Dockerfile rebuilds in milliseconds
  and an edit rebuilds only from the changed line down.
* ``COPY`` streams a tar (:mod:`evokit.sandbox.copy_layer`) into ``tar -x`` running *inside*
  the image, so symlinks such as Debian's merged ``/bin -> usr/bin`` are honoured exactly as
  Docker honours them. Each step runs in a sandbox of its own (:mod:`evokit.sandbox.build_step`),
  and what it stores is neutralised (no set-uid bits, no device nodes).
* Concurrency: a layer is built under a per-key ``flock`` into a private temp dir and
  published by an atomic ``rename``; two processes building the same image get one
  correct cache entry, and a killed build leaves only a temp dir that is never read.

Deviation from Docker (stated here, checked by tests): ``RUN`` steps have outbound network
access (their own namespace through slirp4netns, never the host's) and run as root with
Docker's default capabilities; the seccomp filter refuses the keyring syscalls only
(:mod:`evokit.sandbox.seccomp`), not Docker's whole list; a Debian bookworm base is minbase from Debian's archive, not the registry's image
bytes (unless ``$EVOKIT_DEBIAN_SOURCE=registry``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from evokit.sandbox import dockerfile as df
from evokit.sandbox.build_step import ImageBuildError, neutralise_layer, run_step
from evokit.sandbox.bwrap import require_tools
from evokit.sandbox.copy_layer import copy_tar, is_dir, owner
from evokit.sandbox.image_pull import RegistryConfig, RegistryError, parse_reference, pull
from evokit.sandbox.oci_layers import LAYER_FORMAT, LayerError, layer_rel, unpack_layer
from evokit.sandbox.process import run_capped
from evokit.sandbox.stages import EXTRACT_ARGV, CopyFromError, copy_from_tar

BASE_FORMAT = 1  # bump to invalidate every cached base rootfs
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker Hub's official image only: `debian`, `library/debian`, or a registry host (a name
# with a dot or a port, or localhost) then `debian` or `[.../]library/debian`; tag bookworm
# or 12 with an optional -suffix/.suffix. `someuser/debian:bookworm` is someone else's image.
_DEBIAN = re.compile(
    r"^(?:(?:[\w-]+\.[\w.-]+|localhost|[\w.-]+:\d+)/(?:(?:[\w.-]+/)*library/)?|library/)?"
    r"debian:(bookworm|12)(?:[-.][\w.-]*)?(?:@sha256:[0-9a-f]{64})?$"
)


def cache_root() -> Path:
    """``$EVOKIT_CACHE`` or ``~/.cache/evokit``: base rootfs, layers and locks live here."""
    return Path(os.environ.get("EVOKIT_CACHE") or Path.home() / ".cache" / "evokit")


def secure_cache_root(root: Path) -> Path:
    """Make ``root`` (if missing) mode 0700 and narrow it to 0700 if it is wider.

    Why (host files): the cache holds whole root filesystems with Debian's own
    set-uid binaries (``su``, ``mount``), written as root; under a world-readable path an
    unprivileged host user could run them. A root owned by another user is refused: they
    could swap the layers the sandboxes run on.
    """
    root = Path(root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = root.stat()
    if st.st_uid != os.geteuid():
        raise ImageBuildError(f"layer cache {root} belongs to uid {st.st_uid}, not to this user "
                              f"(uid {os.geteuid()}); refusing to use it: set $EVOKIT_CACHE to a directory of yours")
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)
    return root


@dataclass(frozen=True)
class Image:
    """A built image: overlay lower dirs (relative to ``root``, top first) plus run config."""

    key: str
    root: Path
    lowerdirs: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str | None = None
    shell: tuple[str, ...] = ("/bin/sh", "-c")

    def find(self, path: str) -> Path | None:
        """The host path of ``path`` in the top-most layer that has it (read-only use)."""
        rel = path.lstrip("/")
        for layer in self.lowerdirs:
            p = self.root / layer / rel
            if os.path.lexists(p):
                return p
        return None


def debian_suite(image_ref: str, where: str = "Dockerfile") -> str:
    """``debian:bookworm-slim`` → ``bookworm``; anything else is a clear error."""
    ref = image_ref.split()[0]
    m = _DEBIAN.match(ref)
    if not m:
        raise df.DockerfileError(f"{where}: base image {ref!r} is not supported; {df.DOCKER_BACKEND_HINT}")
    return "bookworm"


def _from_args(text: str, where: str) -> tuple[str, str | None]:
    """``[--platform=P] IMAGE [AS NAME]`` → (IMAGE, NAME) (a platform other than the host's is refused)."""
    tokens = text.split()
    while tokens and tokens[0].startswith("--"):
        flag = tokens.pop(0)
        name, _, value = flag.partition("=")
        host = RegistryConfig()
        if name != "--platform":
            raise df.DockerfileError(f"{where}: FROM {flag} is not supported; {df.DOCKER_BACKEND_HINT}")
        if value.split("/")[:2] != [host.os, host.architecture] and "$" not in value:
            raise df.DockerfileError(f"{where}: FROM --platform={value}: the local sandbox runs only the "
                                     f"host's platform {host.os}/{host.architecture}")
    if len(tokens) == 1 or (len(tokens) == 3 and tokens[1].lower() == "as"):
        return tokens[0], (tokens[2] if len(tokens) == 3 else None)
    raise df.DockerfileError(f"{where}: cannot parse FROM {text!r} (expected FROM IMAGE [AS NAME])")


def use_mmdebstrap(from_args: str) -> bool:
    """Whether ``FROM`` builds Debian's minbase offline with mmdebstrap instead of pulling.

    Precedence: ``debian:bookworm*``/``debian:12*`` (Docker Hub's official image, under any
    registry prefix) keeps the offline mmdebstrap base, so machines without registry access
    still build Debian tasks; ``$EVOKIT_DEBIAN_SOURCE=registry`` pulls it like any other image.
    """
    ref = from_args.split()[0] if from_args.split() else ""
    return bool(_DEBIAN.match(ref)) and os.environ.get("EVOKIT_DEBIAN_SOURCE", "mmdebstrap") != "registry"


def pull_image(image_ref: str, *, root: Path | None = None, where: str = "FROM",
               log: Callable[[str], None] = lambda s: None) -> Image:
    """A registry image (``FROM`` or ``[environment].docker_image``) as cached overlay layers.

    Pulled with :func:`evokit.sandbox.image_pull.pull` and unpacked by
    :func:`evokit.sandbox.oci_layers.unpack_layer`. Like ``docker build`` without ``--pull``,
    a reference is resolved once per cache and then reused offline; ``$EVOKIT_PULL=always``
    resolves it again. The image config's ``Env``, ``WorkingDir``, ``User`` and ``Shell``
    apply; ``Cmd``/``Entrypoint`` do not (a sandbox runs its own init, as Harbor's does).
    """
    root = secure_cache_root(Path(root or cache_root()))
    name, _ = _from_args(image_ref, where)
    config = RegistryConfig.from_env()
    try:
        ref = parse_reference(name)
        record = root / "images" / (_hash(str(ref), config.endpoint(ref.registry), config.os,
                                          config.architecture, LAYER_FORMAT) + ".json")
        with _Lock(root / "locks" / f"pull-{record.stem}.lock"):
            if not record.is_file() or os.environ.get("EVOKIT_PULL") == "always":
                pulled = pull(name, root / "blobs", config, log,
                              have=lambda d: (root / layer_rel(d.digest)).is_dir())
                if not pulled.layers:
                    raise RegistryError(f"image {name!r} has no layers; nothing to build on")
                layers = [layer_rel(d.digest) if path is None else
                          unpack_layer(path, d.digest, root, image=name,
                                       finish=lambda tmp: neutralise_layer(tmp, where))
                          for d, path in zip(pulled.layers, pulled.blob_paths, strict=True)]
                for path in filter(None, pulled.blob_paths):  # unpacked: the compressed copy is not needed
                    path.unlink(missing_ok=True)
                record.parent.mkdir(parents=True, exist_ok=True)
                tmp = record.with_name(f".tmp-{uuid.uuid4().hex[:8]}")
                tmp.write_text(json.dumps({"reference": str(ref), "manifest": pulled.manifest_digest,
                                           "layers": layers, "config": pulled.config}))
                os.rename(tmp, record)
    except (RegistryError, LayerError) as e:
        raise ImageBuildError(f"{where}: {e}") from None
    saved = json.loads(record.read_text())
    cfg = saved["config"].get("config") or {}
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    shell = cfg.get("Shell")
    return Image(key=_hash("oci", saved["manifest"], LAYER_FORMAT), root=root,
                 lowerdirs=tuple(reversed(saved["layers"])), env=env,
                 workdir=cfg.get("WorkingDir") or "/", user=cfg.get("User") or None,
                 shell=tuple(shell) if isinstance(shell, list) and shell else ("/bin/sh", "-c"))


class _Lock:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a+")

    def __enter__(self):
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def ensure_base(suite: str, root: Path, log: Callable[[str], None] = lambda s: None) -> str:
    """Make (once) the minbase rootfs of ``suite``; return its dir relative to ``root``."""
    rel = f"base/{suite}-minbase-v{BASE_FORMAT}"
    final = secure_cache_root(root) / rel
    if final.is_dir():
        return rel
    require_tools("mmdebstrap")
    with _Lock(root / "locks" / f"base-{suite}.lock"):
        if final.is_dir():
            return rel
        tmp = root / "base" / f".tmp-{suite}-{uuid.uuid4().hex[:8]}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        log(f"building the {suite} base rootfs with mmdebstrap (once, ~1 min)")
        res = run_capped(["mmdebstrap", "--variant=minbase", "--mode=root", suite, str(tmp)],
                         timeout_sec=1800)
        if res.return_code != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ImageBuildError(f"mmdebstrap {suite} failed (exit {res.return_code}):\n{res.stderr[-3000:]}")
        os.rename(tmp, final)
    return rel


@dataclass
class _State:
    """What the Dockerfile has declared so far."""

    args: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=lambda: {"PATH": DEFAULT_PATH})
    workdir: str = "/"
    user: str | None = None
    shell: tuple[str, ...] = ("/bin/sh", "-c")

    def variables(self) -> dict[str, str]:
        return {**self.args, **self.env}


def build_image(
    environment_dir: str | Path,
    *,
    root: Path | None = None,
    build_args: dict[str, str] | None = None,
    step_timeout_sec: float = 1800,
    log: Callable[[str], None] = lambda s: None,
) -> Image:
    """Build ``environment_dir/Dockerfile`` (context = ``environment_dir``) into an :class:`Image`."""
    context = Path(environment_dir)
    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        raise df.DockerfileError(f"{dockerfile}: no Dockerfile (docker-compose tasks need Harbor's docker backend)")
    root = secure_cache_root(Path(root or cache_root()))
    instructions = df.parse(dockerfile.read_text(), dockerfile)
    state = _State()
    lowerdirs: list[str] = []
    key = ""
    stages: list[Image] = []  # the finished stages of a multi-stage build (evokit.sandbox.stages)
    stage_names: dict[str, int] = {}
    for n, ins in enumerate(instructions, 1):
        where = f"{dockerfile}:{ins.line}"
        if ins.keyword == "FROM":
            if lowerdirs:  # a stage ends here
                stages.append(Image(key=key, root=root, lowerdirs=tuple(lowerdirs), env=dict(state.env),
                                    workdir=state.workdir, user=state.user, shell=state.shell))
            ref, alias = _from_args(df.substitute(ins.args, state.args), where)
            state = _State(args=dict(state.args))
            if (stage := _stage(ref, stages, stage_names, where, required=False)) is not None:
                lowerdirs, key = list(stage.lowerdirs), stage.key
                state.env, state.workdir = dict(stage.env), stage.workdir
                state.user, state.shell = stage.user, stage.shell
            elif use_mmdebstrap(ref):
                lowerdirs = [ensure_base(debian_suite(ref, where), root, log)]
                key = _hash("base", lowerdirs[0])
            else:
                base = pull_image(ref, root=root, where=where, log=log)
                lowerdirs, key = list(base.lowerdirs), base.key
                state.env = {"PATH": DEFAULT_PATH, **base.env}
                state.workdir, state.user, state.shell = base.workdir, base.user, base.shell
            if alias:
                stage_names[alias.lower()] = len(stages)
        elif ins.keyword == "ARG":
            for name, value in df.parse_key_values(ins.args, "ARG", where).items():
                state.args[name] = (build_args or {}).get(name, df.substitute(value, state.variables()))
        elif ins.keyword == "ENV":
            for name, value in df.parse_key_values(ins.args, "ENV", where).items():
                state.env[name] = df.substitute(value, state.variables())
        elif ins.keyword == "USER":
            state.user = df.substitute(ins.args.strip(), state.variables())
        elif ins.keyword == "SHELL":
            cmd = df.parse_command(ins.args)
            if not isinstance(cmd, list):
                raise df.DockerfileError(f"{where}: SHELL needs the JSON form, e.g. SHELL [\"/bin/bash\", \"-c\"]")
            state.shell = tuple(cmd)
        elif ins.keyword == "WORKDIR":
            path = df.substitute(ins.args.strip(), state.variables())
            state.workdir = str(PurePosixPath(state.workdir) / path)
            key = _layer(root, lowerdirs, key, ["WORKDIR", state.workdir],
                         ["mkdir", "-p", state.workdir], None, state, where, step_timeout_sec, log, n)
        elif ins.keyword == "RUN":
            cmd = ins.heredoc if ins.heredoc is not None else df.parse_command(ins.args)
            argv = list(cmd) if isinstance(cmd, list) else [*state.shell, cmd]
            key = _layer(root, lowerdirs, key, ["RUN", argv, state.variables(), state.workdir, state.user],
                         as_user(argv, state.user), None, state, where, step_timeout_sec, log, n)
        elif ins.keyword in {"COPY", "ADD"}:
            if "from" in ins.flags:
                payload, digest = _copy_from(ins, state, lowerdirs, root, where, stages, stage_names, log)
                extract = list(EXTRACT_ARGV)
            else:
                payload, digest = copy_tar(context, ins, state.variables(), state.workdir,
                                           Image("", root, tuple(lowerdirs)), root, where)
                extract = ["tar", "-x", "-p", "--keep-directory-symlink", "-f", "-", "-C", "/"]
            with payload:  # a temp file, fed to the step's stdin: never held in memory
                key = _layer(root, lowerdirs, key, [ins.keyword, digest], extract, payload,
                             state, where, step_timeout_sec, log, n)
    return Image(key=key, root=root, lowerdirs=tuple(lowerdirs), env=dict(state.env),
                 workdir=state.workdir, user=state.user, shell=state.shell)


def _stage(ref: str, stages: list[Image], names: dict[str, int], where: str, *,
           required: bool) -> Image | None:
    """The earlier stage ``ref`` names (``AS`` name, or index for ``COPY --from``), else None."""
    index = names.get(ref.lower())
    if index is None and required and ref.isdigit():
        index = int(ref)
    if index is None:
        return None
    if index >= len(stages):
        raise df.DockerfileError(f"{where}: stage {ref!r} is not an earlier stage of this Dockerfile")
    return stages[index]


def _copy_from(ins: df.Instruction, state: _State, lowerdirs: list[str], root: Path, where: str,
               stages: list[Image], names: dict[str, int], log: Callable[[str], None]):
    """``COPY --from=<stage|index|image>``: the stream from :func:`evokit.sandbox.stages.copy_from_tar`."""
    src = df.substitute(ins.flags["from"], state.variables())
    source = _stage(src, stages, names, where, required=True) or pull_image(src, root=root, where=where, log=log)
    if ins.flags.get("chmod"):
        raise df.DockerfileError(f"{where}: COPY --from with --chmod is not supported; {df.DOCKER_BACKEND_HINT}")
    sources, dest = df.parse_copy_args(df.substitute(ins.args, state.variables()))
    if not dest.startswith("/"):  # relative to WORKDIR; keep a trailing "/" (it means "a dir")
        dest = str(PurePosixPath(state.workdir) / dest) + ("/" if dest.endswith("/") else "")
    image = Image("", root, tuple(lowerdirs))
    dest_is_dir = dest.endswith("/") or len(sources) > 1 or is_dir(image, dest)
    ids = owner(ins.flags["chown"], image, where) if ins.flags.get("chown") else None
    try:
        return copy_from_tar(root, source.lowerdirs, sources, dest, dest_is_dir, owner=ids, where=where)
    except CopyFromError as e:
        raise ImageBuildError(str(e)) from None


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def as_user(argv: list[str], user: str | None) -> list[str]:
    """Prefix ``argv`` so that it runs as ``user`` (``name``, ``uid`` or ``uid:gid``)."""
    if user in (None, "", "root", "0", "0:0"):
        return argv
    uid, _, gid = user.partition(":")
    if not gid and not uid.isdigit():
        # A bare name runs with its primary group from the image's passwd (Docker's rule),
        # looked up inside the sandbox: `nobody`'s group is `nogroup`, not `nobody`.
        return ["sh", "-c", 'exec setpriv --reuid="$0" --regid="$(id -g "$0")" --init-groups -- "$@"',
                uid, *argv]
    return ["setpriv", f"--reuid={uid}", f"--regid={gid or uid}", "--init-groups" if not uid.isdigit()
            else "--clear-groups", "--", *argv]


def _layer(root: Path, lowerdirs: list[str], parent: str, spec: list, argv: list[str],
           stdin: bytes | None, state: _State, where: str, timeout: float,
           log: Callable[[str], None], n: int) -> str:
    """Build (or reuse) one layer on top of ``lowerdirs``; push it there; return its key."""
    key = _hash(parent, spec)
    rel = f"layers/{key}"
    if not (root / rel).is_dir():
        with _Lock(root / "locks" / f"{key}.lock"):
            if not (root / rel).is_dir():
                log(f"step {n}: {where}")
                run_step(root, lowerdirs, rel, argv, stdin, state.variables(), state.workdir, where, timeout)
    lowerdirs.insert(0, rel)
    return key


