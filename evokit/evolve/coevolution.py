"""EE's co-evolution baseline (§5.1): "build a weakness bank from failed trajectories, synthesise from
it, redo every 50 RL steps", as a task source.

The bank (:class:`WeaknessBank`) counts, per (scenario, skill) pair, the steps the policy got wrong:
EE's weakness-driven signal Σ_t e_t·[−log p_θ(κ_t | σ_{t−1}, g)]. New plans are built around the
weakest pairs *inside the seed scenarios*, with the seeds' lengths (:func:`synthesize`): the paper's
point is that co-evolution mines skill-selection errors there and neither lengthens tasks
systematically nor introduces rarer scenarios. A round's tasks are rendered, verified and stored as
the other methods' environments are (:func:`coevolve_round`, :mod:`evokit.evolve.baselines`).

The refresh (:class:`Coevolution`, registered as ``"coevolution"`` in :mod:`evokit.sources`): every
``refresh_every`` steps a new round of tasks is synthesised from the bank, and training continues in
random order on all rounds so far. The bank starts from the rollouts it is given (the warm policy's
on the seeds) and takes every training group's per-step results back (:meth:`Coevolution.update`).
Round r (1-based) is synthesised at step (r − 1)·``refresh_every`` into ``store`` (resumable: a
round's stored slots are reused), ``sizes[r − 1]`` tasks of it, so the rounds split an environment
budget.

Where the paper is silent, the choice is a parameter (:class:`CoevolutionConfig`), stated next to
it. Departures: (a) steps that read the output of a failed step are not counted in the bank (their
failure says nothing about their own pair); (b) the bank is updated after every training step rather
than once per refresh window; with ``decay = 1`` (the default, counts accumulate) the bank at each
refresh is the same.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from evokit.catalog import skills_for
from evokit.cpu_agent.policy import task_plan
from evokit.curriculum import RandomOrder, RandomState, store_envs
from evokit.difficulty import catalog_reference, score
from evokit.evolve.baselines import BaselineError, plan_and_seed, store_task
from evokit.grpo import usable
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import Plan, PlanError, Step, compose, render
from evokit.seeds import MAX_STEPS, MIN_STEPS
from evokit.sources import GroupResult, Run, register
from evokit.tasks import Lineage, content_hash
from evokit.verify import VerifyConfig, verify_task

Pair = tuple[str, str]  # (scenario σ, skill κ)


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
    a given seed is checked by the caller (:func:`coevolve_round`). A bank that saw steps but no
    failure rates every pair 0: there is nothing to mine, and pairs are drawn uniformly.
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
                s, k = _weighted(rng, options, rates)
                steps.append(Step(s, k, input=len(steps)))
            else:
                s, k = _weighted(rng, candidates, rates)
                steps.append(Step(s, k))
        plans.append(Plan(tuple(steps)))
    return plans


def _weighted(rng: random.Random, options: Sequence[Pair], rates: dict[Pair, float]) -> Pair:
    """One pair drawn ∝ its failure rate; uniformly when every rate is 0 (a bank without failures)."""
    weights = [rates[p] for p in options]
    return rng.choices(options, weights if sum(weights) > 0 else None)[0]


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
    seed_plans = [plan_and_seed(Path(d))[0] for d in sorted(seed_dirs, key=str)]
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
            return store_task(store, folder, config.lineage, round_index, j, verdict, t0, {
                "weakness": weakness, "render_seed": render_seed, "attempts": attempt + 1})
    store.append({"kind": "reject", "lineage": config.lineage, "generation": round_index, "k": j,
                  "stage": "verify", "reasons": reasons[-6:]})
    return None


# ------------------------------------------------------------------------------ the refresh
def split_budget(budget: int, rounds: int) -> tuple[int, ...]:
    """``budget`` environments over ``rounds`` rounds, the first ones one larger where it does not divide.

    >>> split_budget(10, 3)
    (4, 3, 3)
    """
    return tuple(budget // rounds + (r < budget % rounds) for r in range(rounds))


def bank_records(rows: Sequence[dict], task_dirs: Sequence[Path]) -> list[dict]:
    """Rollout rows as :func:`update_bank` records (plan + per-step results)."""
    plans = {Path(d).name: task_plan(d)[0] for d in task_dirs}
    return [{"plan": plans[r["task"]], "step_results": r["rewards"]} for r in rows
            if usable(r) and r["rewards"] and r["task"] in plans]


@dataclass(frozen=True)
class CoevolutionState:
    bank: WeaknessBank
    seed: int
    order: RandomState | None = None  # random order over the rounds made so far
    rounds_made: int = 0
    step: int = 0


@register("coevolution")
@dataclass(frozen=True)
class Coevolution:
    """Co-evolution's refresh (module docstring); ``seeds`` are the seed task folders the rounds draw from."""

    seeds: tuple[Path, ...]
    store: Path
    sizes: tuple[int, ...]  # tasks per round (:func:`split_budget`)
    bank: WeaknessBank = WeaknessBank()
    config: CoevolutionConfig = CoevolutionConfig()
    name: ClassVar[str] = "coevolution"

    def init(self, run: Run) -> CoevolutionState:
        self.config.validate()
        if not self.seeds or not self.sizes:
            raise ValueError("coevolution: needs seed task folders and at least one round size")
        return CoevolutionState(self.bank, run.seed)

    def sample(self, state: CoevolutionState, rng, n):
        if state.step % self.config.refresh_every == 0 and state.rounds_made < len(self.sizes):
            r = state.rounds_made + 1
            store = LineageStore(self.store)
            coevolve_round(state.bank, self.seeds, store, n=self.sizes[r - 1], round_index=r,
                           seed=state.seed, config=self.config)
            state = replace(state, rounds_made=r, order=RandomOrder(store_envs(store)).init(Run(1, state.seed)))
        if state.order is None:
            raise ValueError("coevolution: no round has been synthesised (every slot was rejected?)")
        order, refs = RandomOrder(store_envs(self.store)).sample(state.order, rng, n)
        return replace(state, order=order), refs

    def update(self, state: CoevolutionState, results: Sequence[GroupResult]) -> CoevolutionState:
        records = [{"plan": task_plan(r.ref.path)[0], "step_results": row["rewards"]}
                   for r in results if r.ref.path is not None for row in r.rows if usable(row) and row["rewards"]]
        bank = update_bank(state.bank, records, decay=self.config.decay)
        return replace(state, bank=bank, step=state.step + 1)

    def done(self, state: CoevolutionState) -> bool:
        return False

    def summary(self, state: CoevolutionState) -> dict:
        return {"rounds": state.rounds_made, "environments": len(state.order.envs) if state.order else 0,
                "bank_trajectories": state.bank.trajectories}


__all__ = ["Coevolution", "CoevolutionConfig", "CoevolutionState", "WeaknessBank", "bank_records", "coevolve_round",
           "failure_rates", "split_budget", "synthesize", "update_bank"]
