"""False-positive rate of every rubric rule on correct third-party-style tasks (EE §4.1's rubric verifier).

Each task of the corpus (default tests/data/tb2_style: tasks written in Terminal-Bench 2's style, all
correct) is verified in the local sandbox: build, oracle (``--determinism-runs`` times), null, rubric.
On a correct task every failed rule is a false positive, so a rule's FP rate is the share of corpus
tasks it fails. Also printed: each task's build, oracle and null outcome (a task that does not reach
oracle 1 / null 0 is not a usable corpus task, and the table says so).

``--baseline-rubric FILE`` also evaluates the static rules of another rubric.py (e.g. an older
revision: ``git show main~5:evokit/verify/rubric.py > /tmp/old_rubric.py``) on the same tasks, for a
before/after row.

Usage: ``python benchmarks/bench_rubric.py [--corpus DIR] [--baseline-rubric FILE]``; writes
results/bench/rubric.json and prints the markdown tables for docs/verifiers.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from evokit.tasks import load_task
from evokit.verify import VerifyConfig, verify_many
from evokit.verify.rubric import DEFAULT_RUBRIC

ROOT = Path(__file__).resolve().parents[1]


def baseline_static(path: Path, tasks: list[Path]) -> dict[str, list[str]]:
    """Rule name → tasks it fails, under the static rules of the rubric module at ``path``."""
    spec = importlib.util.spec_from_file_location("evokit_baseline_rubric", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    fails: dict[str, list[str]] = {r.name: [] for r in mod.DEFAULT_RUBRIC.rules if not r.needs_runs}
    for t in tasks:
        for rule, ok, _ in mod.DEFAULT_RUBRIC.evaluate(mod.RubricContext(load_task(t)), runs=False):
            if not ok:
                fails[rule.name].append(t.name)
    return fails


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "tb2_style")
    ap.add_argument("--determinism-runs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--baseline-rubric", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("results/bench/rubric.json"))
    args = ap.parse_args()
    tasks = sorted(p for p in args.corpus.iterdir() if (p / "task.toml").is_file())
    before = baseline_static(args.baseline_rubric, tasks) if args.baseline_rubric else None
    t0 = time.perf_counter()
    verdicts = verify_many(tasks, VerifyConfig(determinism_runs=args.determinism_runs), workers=args.workers)
    seconds = time.perf_counter() - t0

    per_task = []
    fails: dict[str, list[str]] = {r.name: [] for r in DEFAULT_RUBRIC.rules}
    for t, v in zip(tasks, verdicts, strict=True):
        by = {c.name: c for c in v.checks}
        for name in fails:
            c = by.get(f"rubric:{name}")
            if c is not None and not c.passed:
                fails[name].append(t.name)
        per_task.append({"task": t.name, "build_s": round(v.timings.get("build", 0), 2),
                         "oracle": v.rewards.get("oracle"), "null": v.rewards.get("null"),
                         "passed": v.passed, "failures": [f"{c.name}: {c.reason}" for c in v.failures]})
    n = len(tasks)

    print(f"\n{n} correct third-party-style tasks ({args.corpus.relative_to(ROOT) if args.corpus.is_relative_to(ROOT) else args.corpus}), "
          f"verified in {seconds:.0f} s\n")
    head = "| rule | false positives | FP rate |" + (" before |" if before else "")
    print(head)
    print("|" + "---|" * (4 if before else 3))
    for rule in DEFAULT_RUBRIC.rules:
        f = fails[rule.name]
        row = f"| {rule.name} | {len(f)}/{n}{' (' + ', '.join(f) + ')' if f else ''} | {len(f) / n:.0%} |"
        if before:
            b = before.get(rule.name)
            row += (" (runs)" if rule.needs_runs else
                    f" {len(b)}/{n}{' (' + ', '.join(b) + ')' if b else ''} |" if b is not None else " new |")
            row = row if row.endswith("|") else row + " |"
        print(row)
    print("\n| task | build (s) | oracle | null | verdict |\n|---|---|---|---|---|")
    for r in per_task:
        oracle = [x.get("reward") if x else None for x in r["oracle"] or []]
        null = [x.get("reward") if x else None for x in r["null"] or []]
        print(f"| {r['task']} | {r['build_s']} | {oracle} | {null} | {'PASS' if r['passed'] else 'FAIL'} |")
    for r in per_task:
        for f in r["failures"]:
            print(f"  ✗ {r['task']}: {f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks": per_task, "false_positives": fails, "baseline": before,
                                    "seconds": seconds}, indent=2, default=str))


if __name__ == "__main__":
    main()
