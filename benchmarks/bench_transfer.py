"""File-transfer speed: evokit's host-safe transfers vs tar-based ones, in one run.

In :mod:`evokit.sandbox.transfer` the host walks the sandbox's root with ``openat2``, never
"tar inside the sandbox, ``tarfile`` on the host" (agent-replaceable tar, CVE-2025-4517, whole
archives in host memory). The target is that this safety makes transfers no notably slower.
The baseline ("old" in the table) is the tar method, reproduced here through the public
``Sandbox.exec`` (the package has no tar path), measured alternately with ``transfer`` ("new")
on the same sandbox:

* ``upload_dir`` of a task-sized tree (300 files of 4 KiB + one 20 MiB file);
* ``download_dir`` of the same tree back to the host;
* ``read_file`` of a 1 MiB file;
* peak host RSS growth of a 256 MiB download (old: the archive in memory; new: streamed).

Usage: ``python benchmarks/bench_transfer.py [--n 15]``. Prints a table and writes
``results/bench/transfer.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sandbox_support import link_base, make_context  # noqa: E402

from evokit.sandbox import Sandbox, build_image  # noqa: E402


# ------------------------------------------------------------------ the baseline: tar in the sandbox, tarfile on the host
def old_upload_dir(s: Sandbox, source: Path, target: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(source.iterdir()):
            tar.add(child, arcname=child.name)
    res = s.exec(["sh", "-c", 'mkdir -p "$1" && tar -x -f - -C "$1" --no-same-owner', "sh", target],
                 stdin=buf.getvalue(), user="root", cwd="/", timeout_sec=300)
    assert res.ok, res.stderr


def _old_tar_out(s: Sandbox, parent: str, name: str, max_bytes: int = 1 << 30) -> bytes:
    res = s.exec(["tar", "-c", "-f", "-", "-C", parent, name], user="root", cwd="/", timeout_sec=300,
                 max_output_bytes=2 * max_bytes, keep_bytes=True)
    assert res.ok and not res.truncated_bytes, res.stderr
    return res.stdout_bytes


def old_download_dir(s: Sandbox, source: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(_old_tar_out(s, source, "."))) as tar:
        tar.extractall(target, filter="data")


def old_read_file(s: Sandbox, source: str) -> bytes:
    parent, name = source.rsplit("/", 1)
    with tarfile.open(fileobj=io.BytesIO(_old_tar_out(s, parent or "/", name))) as tar:
        return tar.extractfile(tar.next()).read()


# ------------------------------------------------------------------ measurement
def alternate(old, new, n: int) -> dict:
    old(), new()  # warm-up
    xs: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(n):
        for name, fn in (("old", old), ("new", new)):
            t = time.perf_counter()
            fn()
            xs[name].append(time.perf_counter() - t)
    o, w = (statistics.median(xs[k]) * 1000 for k in ("old", "new"))
    return {"old_ms": round(o, 2), "new_ms": round(w, 2), "ratio": round(w / o, 3)}


def peak_rss_growth(fn) -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM

    def hwm() -> int:
        return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))

    before = hwm()
    fn()
    return hwm() - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=15)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evokit-bench-transfer-"))
    try:
        cache = link_base(work / "cache")
        image = build_image(make_context(work / "ctx", "FROM debian:bookworm-slim\nWORKDIR /app\n"), root=cache)
        tree = work / "tree"
        for i in range(300):
            (tree / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
            (tree / f"d{i % 10}" / f"f{i}.txt").write_bytes(os.urandom(4096))
        (tree / "big.bin").write_bytes(os.urandom(20 << 20))
        rows = {}
        with Sandbox(image) as s:
            rows["upload_dir"] = alternate(lambda: old_upload_dir(s, tree, "/up_old"),
                                           lambda: s.upload_dir(tree, "/up_new"), args.n)

            def fresh(name: str) -> Path:
                shutil.rmtree(work / name, ignore_errors=True)
                return work / name

            rows["download_dir"] = alternate(lambda: old_download_dir(s, "/up_new", fresh("dl_old")),
                                             lambda: s.download_dir("/up_new", fresh("dl_new")), args.n)
            assert s.exec("head -c 1048576 /dev/urandom > /app/one.bin").ok
            assert old_read_file(s, "/app/one.bin") == s.read_file("/app/one.bin")
            rows["read_file_1mib"] = alternate(lambda: old_read_file(s, "/app/one.bin"),
                                               lambda: s.read_file("/app/one.bin"), args.n)
            assert s.exec("mkdir -p /logs/agent/big && head -c 268435456 /dev/urandom > /logs/agent/big/log").ok
            rows["download_256mib_peak_rss_mib"] = {
                "old": round(peak_rss_growth(lambda: old_download_dir(s, "/logs/agent", fresh("rss_old"))) / 2**20, 1),
                "new": round(peak_rss_growth(lambda: s.download_dir("/logs/agent", fresh("rss_new"))) / 2**20, 1),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, row in rows.items():
        print(f"{name:32s} {row}")
    out = Path("results/bench/transfer.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
