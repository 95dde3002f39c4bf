"""What the isolation layers cost: seccomp filter + /proc masks, own network namespace,
slirp4netns. Ratios against baselines measured in the same run, interleaved round by round so that
load from other processes hits every variant alike (random order per round, seed 0).

Variants (the "before" ones rebuild the command lines without those layers by editing this
process's argv builders: the library has no switch that turns them off):

* ``exec``: ``true`` in a started no-network sandbox through ``evokit-enter`` (as evokit runs it), the same
  with an allow-everything filter (``exec_nofilter``: what the keyring filter costs), and through
  an exec path without the helper (``exec_nsenter``: a cgroup-joining ``sh``, ``nsenter`` and a
  fresh ``bwrap --pidns``, rebuilt here), against a raw ``bwrap ... true`` (target:
  exec ≤ 1× raw bwrap);
* ``start``: start + stop of a no-network sandbox with / without the filter; of a public one
  with its own namespace + slirp4netns (as evokit runs it) and in the host's namespace, no filter (before);
* ``exec public``: ``true`` in a started public sandbox (it enters the slirp namespace).

Usage: ``python benchmarks/bench_isolation.py [--n 30] [--task examples/tasks/pipes-top-ips]``.
Prints a table and writes ``results/bench/isolation.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")

from evokit.sandbox import Sandbox, runtime, seccomp  # noqa: E402
from evokit.sandbox.bwrap import DOCKER_DEFAULT_CAPS, MASKED_PROC, bwrap_base, host_env  # noqa: E402
from evokit.sandbox.process import run_capped  # noqa: E402
from evokit.sandbox.task_env import image_for_task  # noqa: E402
from evokit.tasks import load_task  # noqa: E402


def _strip(argv: list[str], *, seccomp: bool, netns: bool) -> list[str]:
    out, i = [], 0
    masked = list(MASKED_PROC)
    while i < len(argv):
        if not seccomp and argv[i] == "--seccomp":
            i += 2
            continue
        if not seccomp and argv[i:i + len(masked)] == masked:
            i += len(masked)
            continue
        if not netns and argv[i] == "--unshare-net":
            i += 1
            continue
        out.append(argv[i])
        i += 1
    return out


@contextlib.contextmanager
def before(*, netns: bool = True):
    """The argv builders without the isolation layers: no filter, no masks (and host netns)."""
    orig_base, orig_overlay = runtime.bwrap_base, runtime.overlay_argv
    runtime.bwrap_base = lambda **kw: _strip(orig_base(**kw), seccomp=False, netns=True)
    runtime.overlay_argv = lambda **kw: orig_overlay(**{**kw, "inner": _strip(list(kw["inner"]), seccomp=False,
                                                                               netns=netns)})
    outbound = runtime.netns.Outbound
    if not netns:
        class NoSlirp:  # the host's namespace needs no slirp
            pid = -1

            def __init__(self, *a, **k):
                pass

            def wait_ready(self):
                pass

            def close(self):
                pass

        runtime.netns.Outbound = NoSlirp
    try:
        yield
    finally:
        runtime.bwrap_base, runtime.overlay_argv, runtime.netns.Outbound = orig_base, orig_overlay, outbound


def exec_nsenter(sb: Sandbox, argv: list[str]) -> None:
    """An exec without ``evokit-enter``: cgroup ``sh`` + ``nsenter`` + ``bwrap --pidns``."""
    filter_fd, pidns = seccomp.fd(), os.open(sb._ns["pid"], os.O_RDONLY)
    try:
        inner = bwrap_base(resolv_conf=None, seccomp_fd=filter_fd, cwd=sb.workdir,
                           env={**sb.env, "HOME": "/root"}, caps=DOCKER_DEFAULT_CAPS)
        inner[2] = str(sb.state_dir / "merged")
        full = ["nsenter", f"--mount={sb._ns['mnt']}", f"--net={sb._ns['net']}", f"--uts={sb._ns['uts']}",
                f"--ipc={sb._ns['ipc']}", "--", *inner, "--pidns", str(pidns), "--", *argv]
        r = run_capped(sb.cgroup.wrap(full), pass_fds=(pidns, filter_fd), env=host_env())
        assert r.return_code == 0, r.stderr
    finally:
        os.close(filter_fd)
        os.close(pidns)


@contextlib.contextmanager
def allow_all_filter():
    """seccomp.fd() handing out a one-instruction allow-everything program (no keyring rules)."""
    orig = seccomp.fd

    def fd():
        r, w = os.pipe()
        os.write(w, seccomp._insn(seccomp.RET, seccomp.SECCOMP_RET_ALLOW))
        os.close(w)
        return r

    seccomp.fd = fd
    try:
        yield
    finally:
        seccomp.fd = orig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--task", type=Path, default=Path("examples/tasks/pipes-top-ips"))
    ap.add_argument("--out", type=Path, default=Path("results/bench/isolation.json"))
    args = ap.parse_args()
    image = image_for_task(load_task(args.task))
    base_rootfs = str(image.root / image.lowerdirs[-1])
    raw = ["bwrap", "--ro-bind", base_rootfs, "/", "--dev", "/dev", "--proc", "/proc",
           "--unshare-all", "--die-with-parent", "true"]
    xs: dict[str, list[float]] = {k: [] for k in (
        "bwrap_direct", "exec", "exec_nofilter", "exec_nsenter", "exec_public", "start_nonet", "start_nonet_before",
        "start_public", "start_public_before")}

    def timed(key, fn):
        t = time.perf_counter()
        fn()
        xs[key].append(time.perf_counter() - t)

    def start_stop(**kw):
        Sandbox(image, **kw).start().stop()

    def exec_nofilter(sb):
        with allow_all_filter():
            sb.exec(["true"])

    def start_before(*, network: bool, own_netns: bool):
        with before(netns=own_netns):
            start_stop(network=network)

    now, pub = Sandbox(image).start(), Sandbox(image, network=True).start()
    # the same sandbox for exec with and without the helper: only the exec's own command line differs
    steps = [("bwrap_direct", lambda: subprocess.run(raw, check=True)), ("exec", lambda: now.exec(["true"])),
             ("exec_nofilter", lambda: exec_nofilter(now)), ("exec_nsenter", lambda: exec_nsenter(now, ["true"])),
             ("exec_public", lambda: pub.exec(["true"]))] * 3 + [
            ("start_nonet", lambda: start_stop()), ("start_nonet_before", lambda: start_before(network=False, own_netns=True)),
            ("start_public", lambda: start_stop(network=True)),
            ("start_public_before", lambda: start_before(network=True, own_netns=False))]
    try:
        rng = random.Random(0)
        for r in range(args.n + 1):  # round 0 is a warm-up; a fresh random order every round
            order = steps[:]  # (a rotation kept "exec" right after the costly raw bwrap: +30 %)
            rng.shuffle(order)
            for key, fn in order:
                timed(key, fn)
            if r == 0:
                for v in xs.values():
                    v.clear()
    finally:
        for s in (now, pub):
            s.stop()
    ms = {k: statistics.median(v) * 1000 for k, v in xs.items()}
    rows = {
        "exec_vs_bwrap": {"bwrap_direct_ms": ms["bwrap_direct"], "exec_ms": ms["exec"],
                          "ratio": ms["exec"] / ms["bwrap_direct"], "target": "<= 1"},
        "exec_filter_cost": {"exec_ms": ms["exec"], "exec_nofilter_ms": ms["exec_nofilter"],
                             "ratio": ms["exec"] / ms["exec_nofilter"]},
        "exec_vs_nsenter_path": {"exec_ms": ms["exec"], "exec_nsenter_ms": ms["exec_nsenter"],
                                 "ratio": ms["exec"] / ms["exec_nsenter"]},
        "exec_public": {"exec_public_ms": ms["exec_public"], "ratio_vs_bwrap": ms["exec_public"] / ms["bwrap_direct"]},
        "start_nonet": {"start_stop_ms": ms["start_nonet"], "before_ms": ms["start_nonet_before"],
                        "ratio": ms["start_nonet"] / ms["start_nonet_before"]},
        "start_public": {"start_stop_ms": ms["start_public"], "before_ms": ms["start_public_before"],
                         "ratio": ms["start_public"] / ms["start_public_before"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    for name, row in rows.items():
        print(f"{name:18s} " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()))


if __name__ == "__main__":
    main()
