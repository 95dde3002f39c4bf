"""Ray vs the local pool on the same machine and the same workloads: Ray's overhead within 1.5×.

Two workloads, each through ``LocalExecutor(workers)`` (threads) and ``RayExecutor(workers)``
(a local Ray instance started by this script), warm caches on both sides:

1. ``verify``: oracle + null + rubric verification of ``--copies`` copies of each bundled
   example task (``evokit.verify.verify_many``), i.e. jobs that mostly wait on sandboxes;
2. ``evolve``: ``--seeds`` seeds × ``--generations`` generations with the procedural backend
   (``evokit.evolve.evolve``), each run into a fresh store; jobs mix sandboxes and Python.

Each side runs ``--repeats`` times, alternating local and Ray; the ratio is median(Ray) /
median(local) (target ≤ 1.5). Ray's one-time start (``ray.init``) is reported apart
(``ray_init_s``) and not in the ratio; ``ratio_with_init`` adds it to one Ray run.

Usage: ``python benchmarks/bench_parallel.py [--workers 2] [--repeats 3]``; prints a table and
writes ``results/bench/parallel.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")

from evokit.evolve import EvolveConfig, evolve  # noqa: E402
from evokit.parallel import LocalExecutor, RayExecutor  # noqa: E402
from evokit.seeds import make_seeds, seed_dirs  # noqa: E402
from evokit.verify import verify_many  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def compare(name: str, run, executors: dict, repeats: int, ray_init: float, **info) -> dict:
    """Time ``run(executor, i)`` ``repeats`` times per executor, alternating; one warm-up each."""
    for ex in executors.values():
        run(ex, -1)
    times = {k: [] for k in executors}
    for i in range(repeats):
        for k, ex in executors.items():
            times[k].append(seconds(lambda ex=ex, i=i: run(ex, i)))
    local, ray = statistics.median(times["local"]), statistics.median(times["ray"])
    return {"workload": name, **info, "local_s": local, "ray_s": ray, "ratio": ray / local,
            "ratio_with_init": (ray + ray_init) / local, "local_runs_s": times["local"],
            "ray_runs_s": times["ray"], "target": "ratio <= 1.5"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=2, help="copies of each bundled example task")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "parallel.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evokit-bench-parallel-"))
    try:
        examples = sorted(p for p in (ROOT / "examples" / "tasks").iterdir() if (p / "task.toml").is_file())
        tasks = []
        for c in range(args.copies):
            for p in examples:
                tasks.append(tmp / "tasks" / f"{p.name}-{c}")
                shutil.copytree(p, tasks[-1])
        make_seeds(args.seeds, 0, tmp / "seeds", progress=False)
        seeds = seed_dirs(tmp / "seeds")

        t = time.perf_counter()
        ray = RayExecutor(args.workers)
        ray_init = time.perf_counter() - t
        executors = {"local": LocalExecutor(args.workers), "ray": ray}

        def run_verify(ex, i):
            verdicts = verify_many(tasks, executor=ex, progress=False)
            assert all(v.passed for v in verdicts), [v.failures for v in verdicts if not v.passed]

        cfg = EvolveConfig(generations=args.generations)

        def run_evolve(ex, i):
            store = tmp / f"store-{type(ex).__name__}-{i}"
            evolve(seeds, store, cfg, executor=ex, progress=False)
            shutil.rmtree(store)

        rows = {"machine": {"cpus": os.cpu_count(), "workers": args.workers, "repeats": args.repeats,
                            "ray_init_s": ray_init},
                "verify": compare("verify", run_verify, executors, args.repeats, ray_init, tasks=len(tasks)),
                "evolve": compare("evolve", run_evolve, executors, args.repeats, ray_init,
                                  seeds=len(seeds), generations=args.generations)}
        ray.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    for name, row in rows.items():
        print(f"{name:8s} " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in row.items() if not k.endswith("_runs_s")))


if __name__ == "__main__":
    main()
