"""Scoring D_T for 100,000 plans (target: under 1 s), against a per-plan Python loop in the same run.

Usage: ``python benchmarks/bench_difficulty.py [--n 100000]``; writes results/bench/difficulty.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from evokit.catalog import pairs
from evokit.difficulty import catalog_reference, score, score_arrays
from evokit.plan import Plan, Step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=Path("results/bench/difficulty.json"))
    args = ap.parse_args()
    rng = random.Random(0)
    ps = pairs()
    plans = [Plan(tuple(Step(*rng.choice(ps)) for _ in range(rng.randint(2, 8)))) for _ in range(args.n)]
    ref = catalog_reference()

    t = time.perf_counter()
    encoded = ref.encode(plans)
    t_encode = time.perf_counter() - t
    t = time.perf_counter()
    scores = score_arrays(ref, *encoded)
    t_score = time.perf_counter() - t
    sample = plans[:2000]
    t = time.perf_counter()
    for p in sample:
        score(p, ref)
    t_loop = (time.perf_counter() - t) * args.n / len(sample)
    row = {"plans": args.n, "encode_s": t_encode, "score_s": t_score, "total_s": t_encode + t_score,
           "per_plan_loop_s_extrapolated": t_loop, "speedup_vs_loop": t_loop / (t_encode + t_score),
           "mean_D_T": float(scores["total"].mean()), "target": "total_s < 1"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(row, indent=2))
    print("  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
