"""Outbound network for a sandbox in its own network namespace: slirp4netns, host loopback refused.

Why not the host's network namespace (what ``public`` tasks and every build step had before):
in it an agent reaches every host service bound to 127.0.0.1 (a model endpoint, a database),
the host's abstract unix sockets (they are per network namespace, not per mount namespace),
and with CAP_NET_RAW it sniffs the host's loopback through AF_PACKET. Docker gives each
container its own namespace behind a bridge; without a daemon, the rootless-container answer
is a user-mode TCP/IP stack: ``slirp4netns`` (Debian package ``slirp4netns``) attaches a tap
device to the namespace and makes the sandbox's connections as ordinary sockets of a host
process, so outbound access (apt, pip, git) works and nothing inside can see the host's
interfaces. Flags, and why:

* ``--disable-host-loopback``: slirp maps its gateway 10.0.2.2 to the host's 127.0.0.1 unless
  told not to; with the flag a connection there is refused, which is the point of this module;
* ``--enable-sandbox --enable-seccomp``: slirp parses packets an agent writes, as root on the
  host, so it runs in its own mount namespace with no capabilities and a syscall filter;
* ``--exit-fd``: slirp4netns outlives the namespace's processes otherwise; it exits when the
  harness closes (or dies and the kernel closes) the pipe's other end;
* ``--mtu=65520``: the largest, which is what makes slirp's throughput reasonable.

Inside, the namespace has ``lo`` (up: a task may run a local server) and ``tap0`` with 10.0.2.100,
default route via 10.0.2.2, and a DNS forwarder at 10.0.2.3 that asks the host's resolver
(:func:`resolv_conf`). Not isolated (stated, as with Docker's bridge): the host's *external*
addresses are ordinary outbound destinations, so a host service listening on 0.0.0.0 is
reachable through them; bind host services to 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from evokit.errors import EvokitError
from evokit.sandbox.bwrap import host_env, require_tools

SLIRP_DNS = "10.0.2.3"


class NetworkSetupError(EvokitError, RuntimeError):
    """slirp4netns could not connect a sandbox's network namespace; the message has its stderr."""


def resolv_conf() -> Path:
    """The host file bound read-only as the sandbox's /etc/resolv.conf: slirp's DNS forwarder.

    Shipped with the package (root-owned where evokit is installed), so nothing is written at
    run time and no host user can swap it.
    """
    return Path(__file__).with_name("slirp_resolv.txt")


class Outbound:
    """One slirp4netns process connecting the network namespace of ``pid`` to the outside.

    Args:
        pid: any process in the namespace (the sandbox's pid 1).
        wrap: prefixes the command line, e.g. :meth:`evokit.sandbox.cgroup.Cgroup.wrap`, so that
            slirp's memory and pids count against the sandbox and ``Cgroup.kill`` reaches it.

    Spawns slirp4netns and returns; :meth:`wait_ready` returns once the interface is configured
    (slirp's ready fd), so a command run after it already has its route and DNS. (Split so that
    a caller can overlap slirp's start with its own.)
    """

    def __init__(self, pid: int, wrap: Callable[[list[str]], list[str]] = lambda argv: argv):
        require_tools("slirp4netns", "unshare")
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        # In a mount namespace of its own whose every mount is private: slirp4netns 1.2.0's
        # --enable-sandbox makes only "/" private before it pivots and detaches the old root, so
        # that detach propagated to the host's shared mounts and unmounted them (measured: every
        # Docker overlay under /var/lib/docker, shared by dockerd, so running containers lost
        # their root on the host; a systemd host shares "/" itself).
        argv = ["unshare", "--mount", "--propagation", "private", "--",
                "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                "--enable-sandbox", "--enable-seccomp", "--ready-fd", str(ready_w),
                "--exit-fd", str(exit_r), str(pid), "tap0"]
        try:
            self.proc = subprocess.Popen(wrap(argv), pass_fds=(ready_w, exit_r), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         start_new_session=True, env=host_env())
        except BaseException:
            for fd in (ready_r, ready_w, exit_r, self._exit_w):
                os.close(fd)
            raise
        os.close(ready_w)
        os.close(exit_r)
        self._ready_r: int | None = ready_r
        self.pid = self.proc.pid

    def wait_ready(self) -> None:
        """Block until slirp4netns has configured the namespace; raise (and stop it) if it failed."""
        if self._ready_r is None:
            return
        with os.fdopen(self._ready_r, "rb") as f:
            self._ready_r = None
            ready = f.read(1)  # EOF instead if slirp4netns exits first
        if ready != b"1":
            self.close()
            err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
            raise NetworkSetupError(f"slirp4netns could not connect the sandbox's network: {err or 'no output'}")

    def close(self) -> None:
        """Stop slirp4netns: SIGKILL (it keeps no state; waiting for it to notice its exit fd cost
        ~40 ms per stop), then reap it. The exit fd stays the guard for a harness that dies."""
        if self._ready_r is not None:
            os.close(self._ready_r)
            self._ready_r = None
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait()
        if self._exit_w is not None:
            os.close(self._exit_w)
            self._exit_w = None
        if self.proc.stderr:
            self.proc.stderr.close()
