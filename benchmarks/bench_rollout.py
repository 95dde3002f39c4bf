"""Speed of one GRPO group with the CPU-scale learner, the EL scheduler's cost next to it, and the
learner's render memo.

A. A group of G = 8 rollouts of a verified 3-step procedural task by the CPU learner
   (:class:`evokit.cpu_agent.policy.SkillPolicy`), each rollout a real episode in a fresh sandbox judged by
   the task's own tests, then one GRPO update on the group:
   * wall time of the group with ``--workers`` sandboxes in flight (default 2, the machine's cores);
   * the split, measured serially (one rollout at a time, so wall time = time waiting on sandbox
     processes + evokit's own Python): the sandbox share is the floor no policy code can remove.
B. The EL scheduler (:mod:`evokit.curriculum`) at the paper's full size (500 lineages × 15
   generations): the cost of one training step's scheduling (sample B tasks, apply B pass rates)
   as a ratio of one rollout's wall time (target: negligible).
C. The learner's step commands (:func:`evokit.cpu_agent.policy.step_command`): every step × every skill of
   its scenario for ``--plans`` seed plans, rendered with one task's shared step renders (as the
   learner does) against the same renders from scratch, alternating, as a ratio (same process).
D. The same memo in a measurement as the EE studies make it (:func:`evokit.studies.population.measure`:
   solver A, 8 rollouts per environment, 4 environments at once) of ``--envs`` environments evolved
   from 4 seeds (5 high-effort generations), with the memo and with a fresh one per command,
   alternating in this process; the measurements must be identical.

    .venv/bin/python benchmarks/bench_rollout.py [--repeats 3] [--workers 2]

Prints a table and writes results/bench/rollout.json. Torch runs on one thread (on a shared 2-core
host OpenMP's spin-waiting makes two threads much slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from evokit import curriculum as C  # noqa: E402
from evokit.catalog import skills_for  # noqa: E402
from evokit.cpu_agent.policy import (  # noqa: E402
    PolicyConfig,
    SkillPolicy,
    collect_groups,
    grpo_update,
    render_command,
)
from evokit.evolve import EvolveConfig, evolve  # noqa: E402
from evokit.plan import RenderCache, compose  # noqa: E402
from evokit.sandbox.process import SUBPROCESS_CLOCK  # noqa: E402
from evokit.seeds import make_seeds, sample_plan, seed_dirs, seed_specs  # noqa: E402
from evokit.sources import Run  # noqa: E402


def three_step_task(root: Path) -> Path:
    """One verified seed with exactly three chained steps."""
    make_seeds(1, 7, root, min_steps=3, max_steps=3, progress=False)
    (task,) = seed_dirs(root)
    return task


def group_and_update(policy: SkillPolicy, opt, task: Path, *, workers: int, seed: int) -> tuple[float, float]:
    """(wall seconds, sandbox seconds) of one group of 8 and its GRPO update."""
    s0, t0 = SUBPROCESS_CLOCK.seconds, time.monotonic()
    groups = collect_groups(policy, [task], group_size=8, workers=workers, seed=seed)
    grpo_update(policy, opt, groups)
    return time.monotonic() - t0, SUBPROCESS_CLOCK.seconds - s0


def scheduler_step_seconds(n_lineages: int = 500, generations: int = 15, batch: int = 8, steps: int = 200) -> float:
    """Mean seconds of one step of EL scheduling: sample ``batch`` envs, apply their pass rates."""
    el = C.EL(tuple(C.EnvRow(f"L{i:03d}", g, 1) for i in range(n_lineages) for g in range(1, generations + 1)))
    state, rng = el.init(Run(batch)), np.random.default_rng(0)
    t0 = time.monotonic()
    for _ in range(steps):
        state, envs = el.draw(state, rng, batch)
        for env in envs:
            state = el.feed(state, env, float(rng.random()))
    return (time.monotonic() - t0) / steps


def command_render_seconds(n_plans: int, repeats: int) -> tuple[float, float]:
    """(seconds with one shared render memo per task, seconds from scratch): the learner's candidate
    commands of ``n_plans`` seed plans, medians over ``repeats`` alternating rounds."""
    import random

    filled = [compose(sample_plan(sp, random.Random(sp.index), 3), 3).plan for sp in seed_specs(n_plans, 1)]
    asks = [(p.to_json(), i, k) for p in filled for i, st in enumerate(p.steps) for k in skills_for(st.scenario)]
    shared, fresh = [], []
    for _ in range(repeats):
        memo: dict[str, RenderCache] = {}
        t0 = time.monotonic()
        a = [render_command(p, 3, i, k, cache=memo.setdefault(p, RenderCache())) for p, i, k in asks]
        shared.append(time.monotonic() - t0)
        t0 = time.monotonic()
        b = [render_command(p, 3, i, k) for p, i, k in asks]
        fresh.append(time.monotonic() - t0)
        assert a == b, "the shared renders changed a command"
    return statistics.median(shared), statistics.median(fresh)


def measurement_seconds(n_envs: int, repeats: int) -> tuple[float, float]:
    """(seconds with the learner's per-task render memo, seconds with none): one population
    measurement of ``n_envs`` evolved environments by solver A from an empty cache, medians over alternating rounds."""
    import shutil

    import evokit.cpu_agent.policy as learners
    from evokit.cpu_agent.solvers import build_solver
    from evokit.studies.population import measure

    root = Path(tempfile.mkdtemp(prefix="evokit-bench-measure-"))
    # Evolved environments, as the EE studies measure (their plans grow over generations, and each
    # step's candidate commands render the prefix before it): 4 seeds × 5 high-effort generations.
    make_seeds(4, 5, root / "seeds", progress=False)
    store = evolve(seed_dirs(root / "seeds"), root / "store", EvolveConfig(generations=5, effort="high", seed=0),
                   workers=2, progress=False)
    tasks = {e.content_hash: store.path(e) for e in store.envs()[:n_envs]}
    solver = build_solver("A")
    memo = learners._task_renders
    times: dict[bool, list[float]] = {True: [], False: []}
    results = []
    for r in range(repeats):
        for shared in (True, False):
            learners._task_renders = memo if shared else (lambda plan_json, seed: RenderCache())
            learners.step_command.cache_clear()
            memo.cache_clear()
            cache = root / f"cache-{r}-{shared}"
            shutil.rmtree(cache, ignore_errors=True)
            t0 = time.monotonic()
            results.append(measure({"A": solver}, tasks, cache, workers=4, progress=False))
            times[shared].append(time.monotonic() - t0)
    learners._task_renders = memo
    assert all(m == results[0] for m in results), "the render memo changed a measurement"
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--plans", type=int, default=40)
    ap.add_argument("--envs", type=int, default=24)
    ap.add_argument("--out", type=Path, default=Path("results/bench/rollout.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    task = three_step_task(Path(tempfile.mkdtemp(prefix="evokit-bench-rollout-")))
    policy = SkillPolicy(PolicyConfig(seed=0))
    opt = torch.optim.Adam(policy.parameters(), lr=0.03)
    group_and_update(policy, opt, task, workers=args.workers, seed=99)  # warm the image cache and torch

    serial = [group_and_update(policy, opt, task, workers=1, seed=r) for r in range(args.repeats)]
    parallel = [group_and_update(policy, opt, task, workers=args.workers, seed=100 + r) for r in range(args.repeats)]
    wall_s, sandbox_s = sum(w for w, _ in serial), sum(s for _, s in serial)
    rollout_s = statistics.median(w for w, _ in parallel) / 8
    sched_s = scheduler_step_seconds()
    shared_s, fresh_s = command_render_seconds(args.plans, args.repeats)
    measure_memo_s, measure_fresh_s = measurement_seconds(args.envs, max(2, args.repeats - 1))
    row = {
        "task": task.name,
        "group_wall_s": round(statistics.median(w for w, _ in parallel), 3),
        "workers": args.workers,
        "serial_group_wall_s": round(statistics.median(w for w, _ in serial), 3),
        "sandbox_share": round(sandbox_s / wall_s, 3),
        "python_share": round(1 - sandbox_s / wall_s, 3),
        "el_step_s": round(sched_s, 6),
        "el_step_over_one_rollout": round(sched_s / rollout_s, 5),
        "commands_shared_renders_s": round(shared_s, 3),
        "commands_fresh_renders_s": round(fresh_s, 3),
        "commands_speedup": round(fresh_s / shared_s, 2),
        "measurement_envs": args.envs,
        "measurement_memo_s": round(measure_memo_s, 2),
        "measurement_fresh_s": round(measure_fresh_s, 2),
        "measurement_speedup": round(measure_fresh_s / measure_memo_s, 2),
    }
    print(f"group of 8 rollouts (3-step task {task.name}), {args.workers} workers: {row['group_wall_s']:.2f} s "
          f"(serial {row['serial_group_wall_s']:.2f} s)")
    print(f"  serial split: sandbox {row['sandbox_share']:.0%} / Python {row['python_share']:.0%} "
          "(Python includes the learner's forward passes and the GRPO update)")
    print(f"EL scheduling of one step (500 lineages x 15 generations, B = 8): {sched_s * 1e3:.3f} ms = "
          f"{row['el_step_over_one_rollout']:.2e} x one rollout")
    print(f"the learner's candidate commands of {args.plans} seed plans: {shared_s:.2f} s with each task's shared "
          f"renders, {fresh_s:.2f} s from scratch ({row['commands_speedup']:.1f}x)")
    print(f"a population measurement of {args.envs} evolved environments (solver A, 8 rollouts each): {measure_memo_s:.1f} s with "
          f"the memo, {measure_fresh_s:.1f} s without ({row['measurement_speedup']:.2f}x, identical measurements)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
