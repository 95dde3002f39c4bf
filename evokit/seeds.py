"""Seed tasks: a verified, domain-balanced pool spanning a range of D_T (EE's 500-seed pool, small).

EE starts evolution from 500 seeds balanced over domains. ``make_seeds(n, seed, out)`` writes
``n`` procedural tasks of 2–5 steps (``min_steps``/``max_steps``): seed i's first scenario comes from domain ``i mod D`` (so
domains are balanced), its length cycles through 2..5, and half of the seeds draw their skills
from p_T while the other half draw uniformly among compatible skills, which spreads D_T from
common to rare. Later steps either consume the previous step's output (a dependent step) or
start from a fresh scenario. Every seed is verified (oracle, null, rubric) before it is
published into ``out``; a seed that fails is regenerated with the next attempt number, never
written. ``out/seeds.jsonl`` indexes them.

EE then keeps only hard seeds: a frontier model passes a kept seed at most 4 of 8 times (and it
needs ≥ 30 turns). evokit admits a seed by a band on the model whose pass rate a claim reads,
1/8 ≤ p̂ ≤ 4/8 (:class:`SeedBand`, :func:`admit_seeds`): EE's upper bound, and a lower bound for
measurability (docs/preregistration.md, "Seed admission"); the training studies' band on their own
student starts at 2/8 (:data:`evokit.studies.warm_start.STUDENT_BAND`). :func:`measure_seeds` measures
candidates with a data-pretrained :mod:`evokit.cpu_agent.solvers` member.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.catalog import SCENARIOS, pair_weight, skills_for
from evokit.catalog.registry import load_catalog
from evokit.difficulty import catalog_reference, score
from evokit.plan import Plan, PlanError, Step, compose, render
from evokit.tasks import Lineage, content_hash
from evokit.verify import VerifyConfig, verify_task

MIN_STEPS, MAX_STEPS = 2, 5


@dataclass(frozen=True)
class SeedSpec:
    index: int
    domain: str
    length: int
    rare: bool  # uniform skill choice (rarer on average) instead of p_T


def _choose_skill(rng: random.Random, scenario: str, rare: bool) -> str:
    options = skills_for(scenario)
    weights = [1.0 if rare else pair_weight(scenario, k) for k in options]
    return rng.choices(options, weights)[0]


def sample_plan(spec: SeedSpec, rng: random.Random, render_seed: int) -> Plan:
    """A random plan for one seed (rendering checks each dependency as it grows)."""
    load_catalog()
    in_domain = sorted(s for s, v in SCENARIOS.items() if v.domain == spec.domain)
    scen = rng.choice(in_domain)
    steps = [Step(scen, _choose_skill(rng, scen, spec.rare))]
    while len(steps) < spec.length:
        last = compose(Plan(tuple(steps)), render_seed).specs[-1].output_dataset
        if last is not None and rng.random() < 0.5:
            steps.append(Step(last.scenario, _choose_skill(rng, last.scenario, spec.rare), input=len(steps)))
        else:
            names = sorted(SCENARIOS)
            scen = rng.choices(names, [SCENARIOS[s].prior for s in names])[0]
            steps.append(Step(scen, _choose_skill(rng, scen, spec.rare)))
    return Plan(tuple(steps))


#: The seed namespace of EE's seed pools: every random choice of a seed is keyed by it, so another
#: namespace (:mod:`evokit.benchmark`'s) draws tasks independent of every seed pool, whatever the seeds.
NAMESPACE = "evokit-seed"


def seed_specs(n: int, seed: int, min_steps: int = MIN_STEPS, max_steps: int = MAX_STEPS, *,
               namespace: str = NAMESPACE) -> list[SeedSpec]:
    """Seed i: domain ``i mod D`` (shuffled order), length cycling ``min_steps..max_steps``, rare on odd i."""
    load_catalog()
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    domains = sorted({s.domain for s in SCENARIOS.values()})
    rng = random.Random(f"{namespace}s:{seed}")  # "evokit-seeds:<seed>" for EE's pools
    order = domains[:]
    rng.shuffle(order)
    return [SeedSpec(i, order[i % len(order)], min_steps + (i // len(order)) % (max_steps - min_steps + 1),
                     rare=bool(i % 2)) for i in range(n)]


def make_one(spec: SeedSpec, seed: int, out: Path, config: VerifyConfig, max_attempts: int = 8, *,
             namespace: str = NAMESPACE, prefix: str = "seed") -> dict:
    """Generate, verify and publish seed ``spec.index`` as ``out/<prefix>-NNNN``; returns its index row."""
    ref = catalog_reference()
    dest = out / f"{prefix}-{spec.index:04d}"
    reasons = []
    for attempt in range(max_attempts):
        rng = random.Random(f"{namespace}:{seed}:{spec.index}:{attempt}")
        render_seed = rng.randrange(2**31)
        try:
            plan = sample_plan(spec, rng, render_seed)
        except PlanError as e:
            reasons.append(str(e))
            continue
        diff = score(plan, ref).as_dict()
        with tempfile.TemporaryDirectory(dir=out, prefix=".tmp-") as tmp:
            task = render(plan, render_seed, Path(tmp) / dest.name, difficulty=diff,
                          lineage=Lineage(generation=0, lineage_id=dest.name))
            verdict = verify_task(task, config)
            if not verdict.passed:
                reasons.append("; ".join(f"{c.name}: {c.reason}" for c in verdict.failures))
                continue
            shutil.move(str(task), dest)
        return {"name": dest.name, "domain": spec.domain, "verify_seconds": round(verdict.timings.get("total", 0), 3), "length": len(plan), "rare": spec.rare,
                "render_seed": render_seed, "attempts": attempt + 1, "content_hash": content_hash(dest),
                "plan": plan.to_records(), "difficulty": diff}
    raise RuntimeError(f"seed {spec.index}: no verified task after {max_attempts} attempts: {reasons[-3:]}")


def _make_and_index(spec: SeedSpec, seed: int, out: Path, config: VerifyConfig, namespace: str = NAMESPACE,
                    prefix: str = "seed") -> dict:
    row = make_one(spec, seed, out, config, namespace=namespace, prefix=prefix)
    with open(out / "seeds.jsonl", "a") as f:  # the job logs its own seed: a crash loses nothing
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return row


def seed_dirs(out: str | Path) -> list[Path]:
    """The seed task folders (``seed-NNNN``) that :func:`make_seeds` wrote into ``out``, in order."""
    return sorted(p for p in Path(out).iterdir() if p.name.startswith("seed-") and p.is_dir())


def make_seeds(n: int, seed: int, out: str | Path, *, workers: int = 2, config: VerifyConfig = VerifyConfig(),
               progress: bool = True, executor=None, min_steps: int = MIN_STEPS,
               max_steps: int = MAX_STEPS, namespace: str = NAMESPACE, prefix: str = "seed") -> list[dict]:
    """Write ``n`` verified seeds into ``out`` (existing ones are kept and reused: resumable).

    Seeds are made ``workers`` at a time, or through ``executor`` (an :mod:`evokit.parallel`
    executor, e.g. Ray; on a cluster ``out`` must be on a disk every node sees). ``namespace``
    keys every random choice (:data:`NAMESPACE` for EE's seed pools) and ``prefix`` names the
    folders (``<prefix>-NNNN``); :mod:`evokit.benchmark` uses its own of both.
    """
    from evokit.parallel import LocalExecutor

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "seeds.jsonl"
    done = {}
    if index_path.exists():
        for line in index_path.read_text().splitlines():
            row = json.loads(line)
            if (out / row["name"]).is_dir():
                done[row["name"]] = row
    todo = [s for s in seed_specs(n, seed, min_steps, max_steps, namespace=namespace)
            if f"{prefix}-{s.index:04d}" not in done]
    executor = executor or LocalExecutor(workers)
    with tqdm(total=n, initial=n - len(todo), desc="seeds", unit="task", disable=not progress) as bar:
        rows = executor.map(functools.partial(_make_and_index, seed=seed, out=out, config=config,
                                              namespace=namespace, prefix=prefix), todo,
                            progress=bar)
    done.update((row["name"], row) for row in rows)
    rows = [done[k] for k in sorted(done)]
    # Jobs append in the order they finish; the final index lists the seeds in order.
    tmp = index_path.with_name(".seeds.jsonl.tmp")
    tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    os.replace(tmp, index_path)
    return rows


# ------------------------------------------------------------------------------ seed admission
MAX_SEED_PASS = 4 / 8  # EE: a frontier model passes a kept seed at most 4 of 8 times
SEED_ROLLOUTS = 8  # EE: pass rates over 8 rollouts


@dataclass(frozen=True)
class SeedBand:
    """The registered admission band ``lo ≤ p̂ ≤ hi`` on the measuring model's pass rate over 8 rollouts.

    evokit's, not EE's (docs/preregistration.md, "Seed admission"): EE keeps seeds a frontier
    model passes ≤ 4/8 (``hi``) and sets no lower bound. The lower bound is measurability: a pass
    rate that starts at 0 has nowhere to fall, and a seed the student never passes gives only
    all-fail GRPO groups, which EL cannot leave. Measured with the model whose pass rate the
    claim reads (for the training studies the run's own student at its training temperature).
    """

    lo: float = 1 / SEED_ROLLOUTS
    hi: float = MAX_SEED_PASS

    def __post_init__(self):
        if not 0 <= self.lo <= self.hi <= 1:
            raise ValueError(f"SeedBand: need 0 ≤ lo ≤ hi ≤ 1, got lo={self.lo}, hi={self.hi}")

    def admits(self, pass_rate: float) -> bool:
        return self.lo <= pass_rate <= self.hi


def admit_seeds(measured: Sequence[dict], band: SeedBand = SeedBand()) -> list[dict]:
    """The measured seeds whose pass rate lies in ``band``, longest plan first.

    Ties are broken by mean turns on *successful* trajectories (``success_turns``; a failed
    rollout ends early, so turns over all rollouts would rank by failure), then by name (the seed
    index). Rows as :func:`measure_seeds` returns them.

    >>> rows = [{"name": "a", "pass_rate": .25, "success_turns": 3.0, "length": 2},
    ...         {"name": "b", "pass_rate": 0.0, "success_turns": None, "length": 3},
    ...         {"name": "c", "pass_rate": .5, "success_turns": 5.0, "length": 2}]
    >>> [r["name"] for r in admit_seeds(rows)]
    ['c', 'a']
    """
    kept = [r for r in measured if band.admits(r["pass_rate"])]
    return sorted(kept, key=lambda r: (-r["length"], -(r.get("success_turns") or 0.0), r["name"]))


def measure_seeds(rows: Sequence[dict], out: Path, solver, *, seed: int, attempts: int, cache: Path,
                  rollouts: int = SEED_ROLLOUTS, workers: int = 2, groups_at_once: int = 1) -> list[dict]:
    """``rows`` (from :func:`make_seeds`) with the pass rate and mean turns of ``solver`` (a
    :class:`evokit.cpu_agent.solvers.Solver`, acting with ``attempts`` and its judge) over ``rollouts`` rollouts,
    and the mean turns of its successful rollouts (``success_turns``, None if none succeeded).

    Measured once per seed and kept in ``cache`` (JSONL by content hash; a cached row is what
    measuring again would give: the rollouts are seeded by ``seed`` and the seed's index).
    """
    from evokit.cpu_agent.policy import collect_groups
    from evokit.grpo import group_stats

    known = {}
    if cache.exists():
        known = {r["content_hash"]: r for r in map(json.loads, cache.read_text().splitlines())}
    todo = [r for r in rows if r["content_hash"] not in known]
    groups = collect_groups(solver.policy, [out / r["name"] for r in todo], group_size=rollouts, workers=workers,
                            seeds=[seed * 100_003 + int(r["name"].rsplit("-", 1)[1]) for r in todo],
                            attempts=attempts, judge=solver.judge, groups_at_once=groups_at_once)
    with open(cache, "a") as f:
        for r, g in zip(todo, groups, strict=True):
            st = group_stats(g)
            if not st.n:
                raise RuntimeError(f"seed {r['name']}: every rollout of the measuring solver was masked: {g[0].error}")
            known[r["content_hash"]] = m = {"content_hash": r["content_hash"], "pass_rate": st.mean_reward,
                                            "turns": sum(x.n_turns for x in g) / len(g), "solver": solver.config.name,
                                            "success_turns": _mean([x.n_turns for x in g if not x.masked
                                                                    and (x.reward or 0.0) >= st.success])}
            f.write(json.dumps(m, sort_keys=True) + "\n")
    return [{**r, **known[r["content_hash"]]} for r in rows]


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
