"""EE's environment-ensemble baseline (§5.1): "recursively merge all 2- and 3-combinations of failed
seeds into larger environments", verified and stored as the other methods' environments are
(:mod:`evokit.evolve.baselines`).

Merging is defined for evokit's procedural tasks, whose plan and render seed sit in
``[metadata.evokit]``: the merged plan is the concatenation of the parts' plans (``input`` links
renumbered), each step keeping its parameters and its data. Data are kept through a step parameter
``data_seed`` (the part's render seed), which :func:`evokit.plan.compose` must honour: the parts were
rendered with different seeds, and a step's ``data`` key alone fixes its data only under one seed. A
foreign task (no plan in its metadata) raises :class:`~evokit.evolve.baselines.BaselineError`;
extract a plan first.

Where the paper is silent, the choice is a parameter (:class:`EnsembleConfig`), stated next to it.
Departures: (a) a round is exhausted before the next (deeper) round starts, unless
``EnsembleConfig.max_per_round`` caps it; (b) merges whose parts share a seed, or that repeat a set
of seeds already merged, are skipped (they would duplicate steps or whole environments).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from evokit.difficulty import catalog_reference, score
from evokit.evolve.baselines import BaselineError, plan_and_seed, store_task
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import Plan, PlanError, Step, compose, render
from evokit.tasks import Lineage, content_hash
from evokit.verify import VerifyConfig, verify_task


@dataclass(frozen=True)
class EnsembleConfig:
    """Environment ensemble (EE §5.1). The paper gives no cap on size and no order; these are ours."""

    sizes: tuple[int, ...] = (2, 3)  # EE §5.1: "all 2- and 3-combinations"
    max_steps: int = 12  # merges longer than this are skipped (evolution's MAX_PLAN is 12 too)
    max_per_round: int | None = None  # None: exhaust round r before merging merged tasks in round r+1
    enumerate_limit: int = 200_000  # above this many candidates a round samples combinations instead
    lineage: str = "ensemble"

    def validate(self) -> None:
        if not self.sizes or any(k < 2 for k in self.sizes):
            raise ValueError(f"sizes must be combination sizes ≥ 2, not {self.sizes}")
        if self.max_steps < 2:
            raise ValueError(f"max_steps must be ≥ 2, not {self.max_steps}")


@dataclass(frozen=True)
class _Unit:
    """A task that can be merged: a failed seed (depth 0) or an earlier merge (depth ≥ 1)."""

    name: str
    content_hash: str
    plan: Plan  # each own-data step carries the seed its data was made with ("data_seed")
    bases: tuple[str, ...]  # names of the seeds it is made of, in order
    depth: int


def _pin_data(plan: Plan, seed: int) -> Plan:
    """Give every step that makes its own data an explicit ``data_seed`` (its render seed by default)."""
    steps = []
    for st in plan.steps:
        params = dict(st.params)
        if st.input is None:
            params.setdefault("data_seed", seed)
        steps.append(st.with_params(params))
    return Plan(tuple(steps), plan.goal)


@functools.cache
def _require_data_seed() -> None:
    """Merging needs :func:`~evokit.plan.compose` to honour a step's ``data_seed``; say so if it does not."""
    probe = Plan((Step("access-log", "topk-count", (("data", 1), ("data_seed", 5))),))
    if compose(probe, 1).environment_files != compose(probe, 2).environment_files:
        raise RuntimeError("evokit.plan.compose ignores the step parameter 'data_seed', so a merged task "
                           "cannot keep its parts' data; make compose seed a step's data with "
                           "params.get('data_seed', seed)")


def _seed_unit(path: Path) -> _Unit:
    plan, seed = plan_and_seed(path)
    return _Unit(path.name, content_hash(path), _pin_data(plan, seed), (path.name,), 0)


def merge_plans(plans: Sequence[Plan]) -> Plan:
    """Concatenate plans; ``input`` links are shifted by the steps before them, parameters kept.

    Each step keeps its ``data`` key and its ``data_seed``, so it is rendered from the same data as in
    its own task whatever seed renders the merged one; (data_seed, data, scenario) stays unique across
    the merged plan as long as the parts come from different seeds.
    """
    steps: list[Step] = []
    for plan in plans:
        offset = len(steps)
        steps += [Step(s.scenario, s.skill, s.params, None if s.input is None else s.input + offset)
                  for s in plan.steps]
    goals = [p.goal for p in plans if p.goal]
    return Plan(tuple(steps), "\n\n".join(goals))


def _combinations(pool: list[_Unit], depth: int, cfg: EnsembleConfig, rng: random.Random) -> Iterator[tuple[int, ...]]:
    """Index tuples of round ``depth``: every combination with at least one member of depth ``depth - 1``.

    ``pool`` is ordered by depth. Small rounds are enumerated and shuffled (each combination once);
    large ones are sampled uniformly without repeats until ``enumerate_limit`` draws in a row find
    nothing new.
    """
    n, n_old = len(pool), sum(u.depth < depth - 1 for u in pool)
    counts = {k: math.comb(n, k) - math.comb(n_old, k) for k in cfg.sizes}
    if sum(counts.values()) <= cfg.enumerate_limit:
        combos = [c for k in cfg.sizes for c in itertools.combinations(range(n), k) if c[-1] >= n_old]
        rng.shuffle(combos)
        yield from combos
        return
    seen: set[tuple[int, ...]] = set()
    misses = 0
    sizes, weights = list(counts), list(counts.values())
    while misses < cfg.enumerate_limit:
        c = tuple(sorted(rng.sample(range(n), rng.choices(sizes, weights)[0])))
        if c[-1] < n_old or c in seen:
            misses += 1
            continue
        misses = 0
        seen.add(c)
        yield c


def ensemble(failed: Sequence[str | Path], store: LineageStore, *, budget: int, seed: int,
             verify: VerifyConfig = VerifyConfig(), config: EnsembleConfig = EnsembleConfig()) -> list[EnvRecord]:
    """Merge 2- and 3-combinations of ``failed`` seeds (then of merges) until ``budget`` environments exist.

    Round r (generation r of lineage ``config.lineage``) merges combinations in which at least one
    part comes from round r−1 (round 1: the seeds), in an order shuffled by ``seed``. Each merged
    plan is rendered with a seed derived from ``seed`` and the parts, verified, and added to
    ``store`` with ``data["merged"]`` (parts' names), ``data["merged_hashes"]`` and ``data["seeds"]``.
    A merge that fails verification is logged as a ``reject`` record and skipped. Resumable: a merge
    already in the store (same parts) is reused. Returns the records, fewer than ``budget`` only when
    every combination is used up. Merging needs evokit's procedural tasks: a folder without a plan
    in its metadata raises :class:`BaselineError`.
    """
    config.validate()
    if budget < 0:
        raise ValueError(f"budget must be ≥ 0, not {budget}")
    pool = sorted((_seed_unit(Path(p)) for p in failed), key=lambda u: (u.name, u.content_hash))
    if len({u.content_hash for u in pool}) < len(pool) or len({u.name for u in pool}) < len(pool):
        raise BaselineError("the failed seeds contain the same task (or folder name) twice; names identify "
                            "the parts in data['merged'], so pass each task once under a distinct name")
    _require_data_seed()
    done = {tuple(e.data["merged_hashes"]): e for e in store.lineage(config.lineage)}
    made_sets = {frozenset(u.bases) for u in pool}
    out: list[EnvRecord] = []
    depth = 1
    while len(out) < budget:
        rng = random.Random(f"evokit-ensemble:{seed}:{depth}")
        new: list[_Unit] = []
        for candidate, combo in enumerate(_combinations(pool, depth, config, rng)):
            if len(out) >= budget or (config.max_per_round is not None and len(new) >= config.max_per_round):
                break
            parts = [pool[i] for i in combo]
            bases = tuple(b for u in parts for b in u.bases)
            if len(set(bases)) < len(bases) or frozenset(bases) in made_sets:
                continue  # a seed twice in one task, or an environment of these seeds already exists
            plan = merge_plans([u.plan for u in parts])
            if len(plan) > config.max_steps:
                continue
            key = tuple(u.content_hash for u in parts)
            rec = done.get(key) or _merge_one(store, parts, plan, depth, sum(e.generation == depth for e in out),
                                             candidate, seed, verify, config)
            if rec is None:
                continue
            made_sets.add(frozenset(bases))
            out.append(rec)
            new.append(_Unit(rec.task, rec.content_hash, Plan.from_records(rec.data["plan"]), bases, depth))
        if not new:
            break  # nothing left to merge
        pool += new
        depth += 1
    return out


def _merge_one(store: LineageStore, parts: list[_Unit], plan: Plan, depth: int, k: int, candidate: int,
               seed: int, verify: VerifyConfig, config: EnsembleConfig) -> EnvRecord | None:
    t0 = time.monotonic()
    names = [u.name for u in parts]
    render_seed = random.Random(f"evokit-ensemble:{seed}:{'+'.join(u.content_hash for u in parts)}").randrange(2**31)
    with tempfile.TemporaryDirectory(dir=store.root, prefix=".work-") as work:
        try:
            folder = render(plan, render_seed, Path(work) / "task", difficulty=score(plan, catalog_reference()).as_dict(),
                            lineage=Lineage(generation=depth, lineage_id=config.lineage))
        except PlanError as e:
            reasons = [f"render: {e}"]
        else:
            verdict = verify_task(folder, verify)
            if verdict.passed:
                return store_task(store, folder, config.lineage, depth, k, verdict, t0, {
                    "merged": names, "merged_hashes": [u.content_hash for u in parts],
                    "seeds": [b for u in parts for b in u.bases], "render_seed": render_seed})
            reasons = [f"{c.name}: {c.reason}" for c in verdict.failures]
    store.append({"kind": "reject", "lineage": config.lineage, "generation": depth, "k": f"candidate-{candidate}",
                  "stage": "verify", "merged": names, "reasons": reasons[-6:]})
    return None


__all__ = ["EnsembleConfig", "ensemble", "merge_plans"]
