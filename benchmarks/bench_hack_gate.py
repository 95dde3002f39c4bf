"""What the hack gate costs: `evokit verify` with the gate against the same verify without it.

For each bundled example (examples/tasks/*), ``verify_task`` runs with the default config (the
gate on) and with ``hack_gate=None``, interleaved round by round in a random order per round
(seed 0), so that load from other processes hits both alike; images are built once before the
first round. The ratio is median(with gate) / median(without) per task, and over the sums of
the medians. The target is a ratio ≤ 2.

Usage: ``python benchmarks/bench_hack_gate.py [--n 5] [TASK ...]``. Prints a table and writes
``results/bench/hack_gate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")

from evokit.sandbox.task_env import image_for_task  # noqa: E402
from evokit.tasks import load_task  # noqa: E402
from evokit.verify import VerifyConfig, verify_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"verify": VerifyConfig(hack_gate=None), "verify+gate": VerifyConfig()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tasks", nargs="*", type=Path)
    ap.add_argument("--n", type=int, default=5, help="rounds")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "hack_gate.json")
    args = ap.parse_args()
    tasks = args.tasks or sorted(p for p in (ROOT / "examples" / "tasks").iterdir() if (p / "task.toml").is_file())
    for t in tasks:
        image_for_task(load_task(t))  # built (or found in the cache) before any timing
    times: dict[tuple[str, str], list[float]] = {}
    rng = random.Random(0)
    for _ in range(args.n):
        jobs = [(t, v) for t in tasks for v in VARIANTS]
        rng.shuffle(jobs)
        for t, v in jobs:
            t0 = time.monotonic()
            verdict = verify_task(t, VARIANTS[v])
            times.setdefault((t.name, v), []).append(time.monotonic() - t0)
            if not verdict.passed:
                raise SystemExit(f"{t.name} ({v}) did not pass: {[(c.name, c.reason) for c in verdict.failures]}")
    rows = []
    for t in tasks:
        base, gate = (statistics.median(times[(t.name, v)]) for v in VARIANTS)
        rows.append({"task": t.name, "verify_s": round(base, 3), "verify_gate_s": round(gate, 3),
                     "ratio": round(gate / base, 2)})
    total = {"verify_s": round(sum(r["verify_s"] for r in rows), 3),
             "verify_gate_s": round(sum(r["verify_gate_s"] for r in rows), 3)}
    total["ratio"] = round(total["verify_gate_s"] / total["verify_s"], 2)
    print(f"{'task':24} {'verify (s)':>11} {'+gate (s)':>10} {'ratio':>6}")
    for r in rows + [{"task": "all (sum of medians)", **total}]:
        print(f"{r['task']:24} {r['verify_s']:11.3f} {r['verify_gate_s']:10.3f} {r['ratio']:6.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rounds": args.n, "cpus": os.cpu_count(), "load": os.getloadavg(),
                                    "tasks": rows, "total": total}, indent=2))


if __name__ == "__main__":
    main()
