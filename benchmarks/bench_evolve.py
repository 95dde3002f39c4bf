"""Throughput of seeding and evolution on this machine, and where the time goes.

* seeds: render + verify ``--seeds`` seed tasks: seeds per minute, and the share of wall time
  spent waiting on sandbox processes (the floor) vs in evokit's own Python;
* evolution: ``--lineages`` × ``--generations`` with the procedural backend: accepted offspring
  per minute and the same split.

The split is measured serially (one worker: wall time = sandbox waits + Python), the
throughput with ``--workers`` (default 2). Usage:
``python benchmarks/bench_evolve.py [--seeds 200] [--lineages 12 --generations 5]``;
writes results/bench/evolve.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from evokit.evolve import EvolveConfig, evolve
from evokit.sandbox.process import SUBPROCESS_CLOCK
from evokit.seeds import make_seeds, seed_dirs
from evokit.verify import VerifyConfig


def timed(fn):
    s0, t0 = SUBPROCESS_CLOCK.seconds, time.monotonic()
    out = fn()
    wall = time.monotonic() - t0
    return out, wall, (SUBPROCESS_CLOCK.seconds - s0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--lineages", type=int, default=12)
    ap.add_argument("--generations", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/bench/evolve.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evokit-bench-"))
    rows = {}
    try:
        # serial split on a small sample, then throughput with all workers
        serial = VerifyConfig(parallel=False)  # one process at a time: wall = sandbox waits + Python
        _, wall1, sand1 = timed(lambda: make_seeds(10, 99, tmp / "serial", workers=1, progress=False, config=serial))
        seeds, wall, _ = timed(lambda: make_seeds(args.seeds, 0, tmp / "seeds", workers=args.workers))
        rows["seeds"] = {"n": len(seeds), "minutes": wall / 60, "seeds_per_minute": len(seeds) / wall * 60,
                         "sandbox_share_serial": sand1 / wall1, "python_share_serial": 1 - sand1 / wall1,
                         "scenarios": len({s["scenario"] for r in seeds for s in r["plan"]}),
                         "skills": len({s["skill"] for r in seeds for s in r["plan"]})}
        dirs = seed_dirs(tmp / "seeds")[: args.lineages]
        cfg = EvolveConfig(generations=args.generations)
        _, wall1, sand1 = timed(lambda: evolve(dirs[:2], tmp / "serial-store", EvolveConfig(
            generations=args.generations, verify=serial), workers=1, progress=False))
        store, wall, _ = timed(lambda: evolve(dirs, tmp / "store", cfg, workers=args.workers))
        children = [e for e in store.envs() if e.generation > 0]
        rows["evolve"] = {"lineages": len(dirs), "generations": args.generations, "offspring": len(children),
                          "minutes": wall / 60, "offspring_per_minute": len(children) / wall * 60,
                          "sandbox_share_serial": sand1 / wall1, "python_share_serial": 1 - sand1 / wall1}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    for name, row in rows.items():
        print(f"{name:8s} " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
