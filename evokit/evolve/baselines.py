"""EE's two baselines (§5.1), producing verified tasks through the same verifiers and store as evolution.

The paper compares evolution with two baselines "with the same synthesiser and the same total number
of environments" (papers.md, "experimental setup"). Both write Harbor task folders that pass
:func:`~evokit.verify.verify_task` into a :class:`~evokit.lineage.LineageStore`, one
:class:`~evokit.lineage.EnvRecord` each, so a training run consumes all three methods the same way.

1. **Environment ensemble** (:func:`ensemble`): "recursively merge all 2- and 3-combinations of
   failed seeds into larger environments". Merging is defined for evokit's procedural tasks, whose
   plan and render seed sit in ``[metadata.evokit]``: the merged plan is the concatenation of the
   parts' plans (``input`` links renumbered), each step keeping its parameters and its data. Data
   are kept through a step parameter ``data_seed`` (the part's render seed), which
   :func:`evokit.plan.compose` must honour: the parts were rendered with different seeds, and a
   step's ``data`` key alone fixes its data only under one seed. A foreign task (no plan in its
   metadata) raises :class:`BaselineError`; extract a plan first.
2. **Co-evolution** (:class:`WeaknessBank`, :func:`update_bank`, :func:`synthesize`,
   :func:`coevolve_round`): "build a weakness bank from failed trajectories, synthesise from it,
   redo every 50 RL steps". The bank counts, per (scenario, skill) pair, the steps the policy got
   wrong: EE's weakness-driven signal Σ_t e_t·[−log p_θ(κ_t | σ_{t−1}, g)]. New plans are built
   around the weakest pairs *inside the seed scenarios*, with the seeds' lengths: the paper's point
   is that co-evolution mines skill-selection errors there and neither lengthens tasks
   systematically nor introduces rarer scenarios.

Where the paper is silent, the choice is a parameter (:class:`EnsembleConfig`,
:class:`CoevolutionConfig`), stated next to it. Departures: (a) steps that read the output of a
failed step are not counted in the bank (their failure says nothing about their own pair);
(b) an ensemble round is exhausted before the next (deeper) round starts, unless
``EnsembleConfig.max_per_round`` caps it; (c) merges whose parts share a seed, or that repeat a set
of seeds already merged, are skipped (they would duplicate steps or whole environments).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evokit.catalog import skills_for
from evokit.difficulty import catalog_reference, score
from evokit.errors import UserError
from evokit.evolve.harness import verdict_summary
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import Plan, PlanError, Step, compose, render
from evokit.seeds import MAX_STEPS, MIN_STEPS
from evokit.tasks import Lineage, content_hash, read_metadata
from evokit.verify import VerifyConfig, verify_task

Pair = tuple[str, str]  # (scenario σ, skill κ)


class BaselineError(UserError, ValueError):
    """A task a baseline cannot use (no evokit plan), or a malformed rollout record."""


def _plan_and_seed(task_dir: Path) -> tuple[Plan, int]:
    meta = read_metadata(task_dir)
    if meta is None or not meta.plan or meta.seed is None:
        raise BaselineError(f"{task_dir}: no plan and seed in [metadata.evokit]; the baselines merge and mine "
                            "evokit's procedural tasks only (extract a plan with evokit.extract first)")
    return Plan.from_records(meta.plan, meta.goal or ""), meta.seed


def _store_task(store: LineageStore, folder: Path, lineage: str, generation: int, k: int, verdict,
                t0: float, extra: dict) -> EnvRecord:
    """Move a verified folder into the store and log its record (the fields evolution records, plus ``extra``)."""
    plan = Plan.from_records(read_metadata(folder).plan)  # the filled plan, as rendered
    name, h = store.add_task(folder)
    rec = EnvRecord(lineage, generation, k, name, h, None, None, None, {
        "plan": plan.to_records(), "difficulty": score(plan, catalog_reference()).as_dict(),
        "verdict": verdict_summary(verdict), "seconds": round(time.monotonic() - t0, 3), **extra})
    store.add_env(rec)
    return rec


# ============================================================================ environment ensemble
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
    plan, seed = _plan_and_seed(path)
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
                return _store_task(store, folder, config.lineage, depth, k, verdict, t0, {
                    "merged": names, "merged_hashes": [u.content_hash for u in parts],
                    "seeds": [b for u in parts for b in u.bases], "render_seed": render_seed})
            reasons = [f"{c.name}: {c.reason}" for c in verdict.failures]
    store.append({"kind": "reject", "lineage": config.lineage, "generation": depth, "k": f"candidate-{candidate}",
                  "stage": "verify", "merged": names, "reasons": reasons[-6:]})
    return None


# ============================================================================ co-evolution
@dataclass(frozen=True)
class CoevolutionConfig:
    """Co-evolution baseline (EE §5.1); the paper names only the refresh period."""

    refresh_every: int = 50  # EE §5.1: rebuild the bank and synthesise anew every 50 RL steps
    smoothing: float = 1.0  # pseudo-steps pulling a pair's failure rate toward the bank-wide rate (ours)
    decay: float = 1.0  # weight kept by old counts at each update: 1 accumulates, 0 keeps the last window (ours)
    dependent_prob: float = 0.5  # chance a step reads the previous step's output, as in evokit.seeds
    max_attempts: int = 8  # plans tried per task before the slot is logged as a reject
    lineage: str = "coevolution"

    def validate(self) -> None:
        if self.refresh_every < 1:
            raise ValueError(f"refresh_every must be ≥ 1 RL step, not {self.refresh_every}")
        if self.smoothing <= 0:
            raise ValueError(f"smoothing must be > 0 (unseen pairs need a rate), not {self.smoothing}")
        if not 0 <= self.decay <= 1 or not 0 <= self.dependent_prob <= 1:
            raise ValueError(f"decay and dependent_prob must lie in [0, 1], not {self.decay}, {self.dependent_prob}")


@dataclass(frozen=True)
class WeaknessBank:
    """Per (scenario, skill) pair: steps seen and steps failed. Never mutated; update with :func:`update_bank`."""

    failures: Mapping[Pair, float] = field(default_factory=dict)  # Σ e_t over steps with this pair
    totals: Mapping[Pair, float] = field(default_factory=dict)  # number of (attributable) steps with this pair
    trajectories: float = 0  # rollouts seen
    failed_trajectories: float = 0  # rollouts with at least one failed step

    def to_json(self) -> dict:
        return {"pairs": [[s, k, self.failures.get((s, k), 0), t] for (s, k), t in sorted(self.totals.items())],
                "trajectories": self.trajectories, "failed_trajectories": self.failed_trajectories}

    @staticmethod
    def from_json(d: dict) -> WeaknessBank:
        return WeaknessBank({(s, k): f for s, k, f, _ in d["pairs"]}, {(s, k): t for s, k, _, t in d["pairs"]},
                            d["trajectories"], d["failed_trajectories"])


def _step_outcomes(record: Mapping, where: str) -> list[tuple[Pair, bool | None]]:
    """(pair, failed) per step; failed is None where the step read the output of a failed step."""
    plan = record.get("plan")
    results = record.get("step_results")
    if not plan or results is None:
        raise BaselineError(f"{where}: a rollout record needs 'plan' (step dicts) and 'step_results' "
                            "({'step_1': 0 or 1, …}, as in the task's reward.json)")
    steps = plan.steps if isinstance(plan, Plan) else [Step.from_dict(s) for s in plan]
    failed: list[bool] = []
    out: list[tuple[Pair, bool | None]] = []
    for i, st in enumerate(steps, 1):
        if f"step_{i}" not in results:
            raise BaselineError(f"{where}: step_results has no 'step_{i}' for a {len(steps)}-step plan")
        failed.append(float(results[f"step_{i}"]) < 1)
        blocked = st.input is not None and failed[st.input - 1]
        out.append(((st.scenario, st.skill), None if blocked else failed[-1]))
    return out


def update_bank(bank: WeaknessBank, records: Iterable[Mapping], *, decay: float = 1.0) -> WeaknessBank:
    """A new bank: old counts × ``decay`` plus the failures and steps of ``records``.

    A record is one rollout: ``{"plan": [step dicts], "step_results": {"step_1": 0/1, …}}``. A step
    that consumes the output of a failed step is not counted: it failed because of its input.
    """
    failures = {p: v * decay for p, v in bank.failures.items()}
    totals = {p: v * decay for p, v in bank.totals.items()}
    n, n_failed = bank.trajectories * decay, bank.failed_trajectories * decay
    for j, record in enumerate(records):
        outcomes = _step_outcomes(record, f"record {j}")
        n += 1
        n_failed += any(f for _, f in outcomes)
        for pair, f in outcomes:
            if f is None:
                continue
            totals[pair] = totals.get(pair, 0) + 1
            failures[pair] = failures.get(pair, 0) + f
    return WeaknessBank(failures, totals, n, n_failed)


def failure_rates(bank: WeaknessBank, pairs: Iterable[Pair], smoothing: float = 1.0) -> dict[Pair, float]:
    """Smoothed per-pair failure rate: (f + s·r̄) / (t + s), r̄ the bank-wide step failure rate (½ if empty)."""
    total = sum(bank.totals.values())
    mean = sum(bank.failures.values()) / total if total else 0.5
    return {p: (bank.failures.get(p, 0) + smoothing * mean) / (bank.totals.get(p, 0) + smoothing) for p in pairs}


def synthesize(bank: WeaknessBank, seed_scenarios: Iterable[str], n: int, rng: random.Random, *,
               lengths: Sequence[int] = tuple(range(MIN_STEPS, MAX_STEPS + 1)), smoothing: float = 1.0,
               dependent_prob: float = 0.5) -> list[Plan]:
    """``n`` plans whose steps are (scenario, skill) pairs drawn ∝ smoothed failure rate, within the seed scenarios.

    Length: drawn from ``lengths`` (pass the seeds' lengths). Like a seed, each later step reads the
    previous step's output with probability ``dependent_prob`` when that output is a file of a seed
    scenario, else starts from fresh data of a drawn pair. Plans are valid; whether one renders under
    a given seed is checked by the caller (:func:`coevolve_round`).
    """
    scenarios = sorted(set(seed_scenarios))
    if not scenarios or not lengths:
        raise ValueError("synthesize needs at least one seed scenario and one length")
    candidates = [(s, k) for s in scenarios for k in skills_for(s)]
    rates = failure_rates(bank, candidates, smoothing)
    plans = []
    for _ in range(n):
        length = rng.choice(list(lengths))
        steps: list[Step] = []
        while len(steps) < length:
            last = _output_scenario(steps)
            if last in scenarios and rng.random() < dependent_prob:
                options = [p for p in candidates if p[0] == last]
                s, k = rng.choices(options, [rates[p] for p in options])[0]
                steps.append(Step(s, k, input=len(steps)))
            else:
                s, k = rng.choices(candidates, [rates[p] for p in candidates])[0]
                steps.append(Step(s, k))
        plans.append(Plan(tuple(steps)))
    return plans


def _output_scenario(steps: list[Step]) -> str | None:
    """The scenario of the last step's output file, or None (no steps, no file, or not renderable)."""
    if not steps:
        return None
    try:
        out = compose(Plan(tuple(steps)), 0).specs[-1].output_dataset
    except PlanError:
        return None
    return None if out is None else out.scenario


def coevolve_round(bank: WeaknessBank, seed_dirs: Sequence[str | Path], store: LineageStore, *, n: int,
                   round_index: int, seed: int, verify: VerifyConfig = VerifyConfig(),
                   config: CoevolutionConfig = CoevolutionConfig()) -> list[EnvRecord]:
    """Synthesise, render, verify and store ``n`` tasks from ``bank`` (generation ``round_index``).

    The training loop calls this every ``config.refresh_every`` RL steps with a bank updated from
    that window's rollouts. Scenarios and lengths come from the seeds' plans. Task j of the round
    uses ``random.Random(f"evokit-coevolve:{seed}:{round_index}:{j}:{attempt}")``; a plan that does
    not render or verify is redrawn (next attempt), at most ``config.max_attempts`` times, then the
    slot is logged as a ``reject``. Resumable: slots already stored for this round are reused (the
    caller must pass the same bank). Records carry ``data["weakness"]``: the targeted pairs with their
    smoothed failure rates.
    """
    config.validate()
    seed_plans = [_plan_and_seed(Path(d))[0] for d in sorted(seed_dirs, key=str)]
    scenarios = sorted({s.scenario for p in seed_plans for s in p.steps})
    lengths = [len(p) for p in seed_plans]
    existing = {e.k: e for e in store.lineage(config.lineage) if e.generation == round_index}
    hashes = {e.content_hash for e in existing.values()}
    out = []
    for j in range(n):
        if j in existing:
            out.append(existing[j])
            continue
        rec = _coevolve_one(bank, scenarios, lengths, store, j, round_index, seed, verify, config, hashes)
        if rec is not None:
            hashes.add(rec.content_hash)
            out.append(rec)
    return out


def _coevolve_one(bank, scenarios, lengths, store, j, round_index, seed, verify, config, hashes):
    t0 = time.monotonic()
    reasons: list[str] = []
    for attempt in range(config.max_attempts):
        rng = random.Random(f"evokit-coevolve:{seed}:{round_index}:{j}:{attempt}")
        plan = synthesize(bank, scenarios, 1, rng, lengths=lengths, smoothing=config.smoothing,
                          dependent_prob=config.dependent_prob)[0]
        render_seed = rng.randrange(2**31)
        with tempfile.TemporaryDirectory(dir=store.root, prefix=".work-") as work:
            try:
                folder = render(plan, render_seed, Path(work) / "task",
                                difficulty=score(plan, catalog_reference()).as_dict(),
                                lineage=Lineage(generation=round_index, lineage_id=config.lineage))
            except PlanError as e:
                reasons.append(f"render: {e}")
                continue
            if content_hash(folder) in hashes:
                reasons.append("duplicate of a task already made this round")
                continue
            verdict = verify_task(folder, verify)
            if not verdict.passed:
                reasons.append("; ".join(f"{c.name}: {c.reason}" for c in verdict.failures))
                continue
            rates = failure_rates(bank, [(s.scenario, s.skill) for s in plan.steps], config.smoothing)
            weakness = [[s.scenario, s.skill, round(rates[(s.scenario, s.skill)], 6)] for s in plan.steps]
            return _store_task(store, folder, config.lineage, round_index, j, verdict, t0, {
                "weakness": weakness, "render_seed": render_seed, "attempts": attempt + 1})
    store.append({"kind": "reject", "lineage": config.lineage, "generation": round_index, "k": j,
                  "stage": "verify", "reasons": reasons[-6:]})
    return None


__all__ = ["BaselineError", "CoevolutionConfig", "EnsembleConfig", "WeaknessBank", "coevolve_round", "ensemble",
           "failure_rates", "merge_plans", "synthesize", "update_bank"]
