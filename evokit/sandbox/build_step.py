"""One step of an image build (a ``RUN``, ``COPY``/``ADD`` or ``WORKDIR``) in a sandbox of its own,
and what a stored layer may keep (:func:`neutralise_layer`).

:mod:`evokit.sandbox.image` turns a Dockerfile into layers; each layer is the upper directory a
step leaves behind. A step is a generated Dockerfile's code running as root, so it gets what a
task's sandbox gets: its own namespaces, its own cgroup with a process cap, the keyring filter,
outbound network through slirp4netns only, and a lease so a killed build is cleaned up later.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import uuid
from pathlib import Path

from evokit.errors import UserError
from evokit.sandbox import netns, seccomp, stale
from evokit.sandbox.bwrap import bwrap_base, host_env, overlay_argv
from evokit.sandbox.cgroup import Cgroup
from evokit.sandbox.cgroup import parent_dirs as cgroup_parent_dirs
from evokit.sandbox.process import run_capped
from evokit.tasks.limits import Limits

#: Build steps run in their own cgroup: a RUN (possibly from a generated Dockerfile) that
#: fork-bombs stops at this many processes instead of taking the host down.
BUILD_LIMITS = Limits(pids=4096, storage_mb=None)
_PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
#: Where build steps see the host's CA bundle. Networks that intercept TLS (corporate
#: proxies, this project's CI) re-sign registry certificates with a CA that only the host
#: trusts; Docker users add it to their daemon, we hand it to the build step. It lives on a
#: tmpfs, so it never becomes part of a layer, and it does not change a layer's key.
_BUILD_CA_DIR = "/run/evokit-host-ca"
_CA_ENV = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
           "NODE_EXTRA_CA_CERTS", "UV_NATIVE_TLS")


def host_ca_bundle() -> Path | None:
    """``$EVOKIT_CA_BUNDLE``, else the host's system bundle, if present ('' disables)."""
    value = os.environ.get("EVOKIT_CA_BUNDLE")
    if value is not None:
        return Path(value) if value else None
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


class ImageBuildError(UserError, RuntimeError):
    """A build step failed; the message names the Dockerfile line and ends with its output."""


def run_step(root: Path, lowerdirs: list[str], rel: str, argv: list[str], stdin: io.BufferedRandom | None,
             variables: dict[str, str], workdir: str, where: str, timeout: float) -> None:
    """Run ``argv`` (in ``workdir``, the build ``variables`` in its environment) on ``lowerdirs`` in a
    sandbox of its own and store its upper dir, neutralised, as the layer ``root/rel``: its own network
    namespace with outbound access (slirp4netns, host loopback refused: :mod:`evokit.sandbox.netns`),
    the keyring filter (:mod:`evokit.sandbox.seccomp`), its own cgroup, under a lease
    (:mod:`evokit.sandbox.stale`) so that a killed build's temp dir and cgroup are removed by the next run."""
    build_id = uuid.uuid4().hex[:12]
    tmp = root / "layers" / f".tmp-{build_id}"
    stale.clean_once(stale.RUN_DIR)
    lease = stale.Lease(stale.RUN_DIR, f"build-{build_id}")
    lease.record(tmp_dir=str(tmp), cgroup_dirs=[str(d / f"evokit-build-{build_id}") for d in cgroup_parent_dirs()])
    cgroup = outbound = None
    fds: list[int] = []
    try:
        (tmp / "upper").mkdir(parents=True)
        (tmp / "work").mkdir()
        env = {**{k: v for k, v in os.environ.items() if k in _PROXY_VARS}, **variables}
        env.setdefault("HOME", "/root")
        ca_args: list[str] = []
        if ca := host_ca_bundle():
            ca_args = ["--tmpfs", _BUILD_CA_DIR, "--ro-bind", str(ca), f"{_BUILD_CA_DIR}/ca.crt"]
            for var in _CA_ENV:
                env.setdefault(var, "1" if var == "UV_NATIVE_TLS" else f"{_BUILD_CA_DIR}/ca.crt")
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        filter_fd = seccomp.fd()
        fds = [info_r, info_w, ready_r, ready_w, go_r, go_w, filter_fd]
        # Handshake: once bwrap has set the namespace up (its loopback included) the step's shell
        # says so on ready_w and waits on go_r until slirp4netns has configured the network.
        # (bwrap's --block-fd is no sync point: slirp would race bwrap's own loopback setup.)
        # Through /proc/self/fd: dash redirects only fds 0-9.
        gate = (f"echo > /proc/self/fd/{ready_w} && read _ < /proc/self/fd/{go_r}; "
                'mkdir -p "$0" && cd "$0" && exec "$@"')
        inner = bwrap_base(resolv_conf=str(netns.resolv_conf()), seccomp_fd=filter_fd, cwd="/", env=env) + ca_args + [
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--hostname", "evokit-build",
            "--info-fd", str(info_w), "--", "/bin/sh", "-c", gate, workdir, *argv,
        ]
        cgroup = Cgroup(f"evokit-build-{build_id}", BUILD_LIMITS)

        def connect(proc) -> None:
            nonlocal outbound
            for fd in (info_w, ready_w, go_r, filter_fd):  # the child has its copies now
                os.close(fd)
                fds.remove(fd)
            raw = b""  # EOF at once if bwrap failed before setting up
            while chunk := os.read(info_r, 4096):
                raw += chunk
            if raw and os.read(ready_r, 1):  # b"" if the step died before its gate
                outbound = netns.Outbound(json.loads(raw)["child-pid"], wrap=cgroup.wrap)
                outbound.wait_ready()
            try:
                os.write(go_w, b"x\n")
            except BrokenPipeError:  # the step already failed; run_capped reports how
                pass

        res = run_capped(cgroup.wrap(overlay_argv(cache_root=root, lowerdirs=lowerdirs, upper_root=tmp,
                                                  tmpfs_bytes=None, inner=inner)),
                         stdin=stdin, timeout_sec=timeout, max_output_bytes=256 * 1024, env=host_env(),
                         pass_fds=(info_w, ready_w, go_r, filter_fd), on_start=connect)
        if res.timed_out or res.return_code != 0:
            why = f"timed out after {timeout:.0f}s" if res.timed_out else f"exit code {res.return_code}"
            raise ImageBuildError(f"{where}: build step failed ({why}); fix that step of the Dockerfile. "
                                  f"Its output ends:\n{(res.stdout + res.stderr)[-4000:]}")
        if ca_args:  # the tmpfs mountpoint bwrap made is ours, not the step's
            shutil.rmtree(tmp / "upper" / _BUILD_CA_DIR.lstrip("/"), ignore_errors=True)
        neutralise_layer(tmp / "upper", where)
        try:
            os.rename(tmp / "upper", root / rel)
        except OSError:
            if not (root / rel).is_dir():  # lost a race to an identical layer: fine
                raise
    finally:
        for fd in fds:
            os.close(fd)
        if outbound is not None:
            outbound.close()
        if cgroup is not None:
            cgroup.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        lease.release()


def neutralise_layer(upper: Path, where: str = "") -> list[str]:
    """Strip what a build step must not leave in the host's layer cache; return what it changed.

    Why (host files): a ``RUN chmod u+s /bin/bash`` or ``RUN mknod`` would store a set-uid root
    shell or a device node on the host's disk. In every layer a step stores:

    * set-uid / set-gid bits of files are cleared (a set-gid *directory* only sets the group
      of new files, and keeps it), and ``security.capability`` (``setcap``) is removed;
    * device nodes are deleted, except overlayfs whiteouts (character device 0/0), which
      are how a layer records a deletion.

    Decided (stated in docs/sandbox.md): this is also what the sandbox sees, so a set-uid
    program *installed by a RUN step* (``apt-get install sudo``) runs without its bit
    inside the sandbox, as under ``docker run --security-opt no-new-privileges``. Debian's
    own base rootfs (``su``, ``mount``, ``passwd``) keeps its bits: it is made by mmdebstrap,
    not by a task, and the cache root is 0700, so no host user can reach them.
    """
    changed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            if kind in (stat.S_IFCHR, stat.S_IFBLK):
                if kind == stat.S_IFCHR and st.st_rdev == 0:
                    continue  # an overlayfs whiteout
                os.unlink(path)
                changed.append(f"removed device node {path}")
                continue
            if kind == stat.S_IFLNK:
                continue
            bits = stat.S_ISUID | (0 if kind == stat.S_IFDIR else stat.S_ISGID)  # set-gid dirs only group files
            if st.st_mode & bits:
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~bits)
                changed.append(f"cleared set-uid/set-gid on {path}")
            try:
                os.removexattr(path, "security.capability", follow_symlinks=False)
                changed.append(f"removed file capabilities of {path}")
            except OSError:
                pass
    return changed
