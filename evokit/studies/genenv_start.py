"""GenEnv's starting condition, chosen per seed (docs/preregistration.md, claim 7).

GenEnv's base model solves 13.8 % of the simulator's first tasks, below the α-zone, and the
α-curriculum raises it into the zone (papers.md, "GenEnv"). A simulator at p_T generates the agent's
own training distribution, on which an agent pretrained on the world's frequencies succeeds far above
α, so the simulator starts from rarer, longer plans: ∝ p_T^(1 − τ), up to a maximum length
(:func:`evokit.genenv.simulator.init_simulator`; the tilt is evokit's, the paper's simulator is an
LLM). Each seed's base agent is pretrained on its own corpus, so their strengths differ, and one
start chosen on a pilot's mean left some seeds above the zone. The condition is a property of each
base agent's start, so the registered rule chooses it **per seed**:

* **the least departure from p_T** — the smallest τ in :attr:`StartRule.tilts`, then the smallest
  maximum length in :attr:`StartRule.max_lens` — whose base success lies in :attr:`StartRule.band`
  (centred near the paper's 0.138), measured on :attr:`StartRule.tasks` plans of a **choosing stream**
  (:data:`CHOOSING_STREAM`) of the seed's own;
* claim 7's precondition (every seed's base success below the zone) is measured at that choice on
  another stream (:data:`BASE_STREAM`), so it is a measurement and not true by construction;
* a seed with no such grid point is **passed over**: it is recorded with its grid, and the block
  draws its next seed, at most :attr:`StartRule.passed_over` more. The claims then speak of base
  agents that the grid can start below the zone, which is stated beside them.

A seed's arms all start from its choice (paired), so the choice favours no arm. Base success is an
expectation over plans (:func:`base_success`), so the grid costs seconds per seed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from evokit.cpu_agent.policy import SkillPolicy, step_goals
from evokit.genenv import GenEnvConfig
from evokit.genenv.reward import difficulty_filter
from evokit.genenv.simulator import Simulator, init_simulator, sample_plans
from evokit.plan import compose
from evokit.reference import GENENV_ALPHA, GENENV_K_MIN

CHOOSING_STREAM = 9_300  # the plans a seed's start is chosen on: their own generator key
BASE_STREAM = 9_200  # the plans claim 7's precondition is measured on, apart from the choosing ones and every arm's
START_FILE = "start.json"  # per seed folder: the grid it was measured on and the choice, or none


@dataclass(frozen=True)
class StartRule:
    """The registered rule's grid, band and sizes (docs/preregistration.md, claim 7).

    A one-point grid fixes the start for every seed that lands in ``band`` (a user's fixed start).
    """

    tilts: tuple[float, ...] = (0.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)  # τ: 0 is p_T, 1 uniform, > 1 rare first
    max_lens: tuple[int, ...] = (6, 8, 10, 12)  # longest generated plan (≥ 6: longer than the seeds' 5)
    band: tuple[float, float] = (0.05, 0.25)  # base success on the choosing plans, centred near the paper's 0.138
    tasks: int = 128  # choosing plans per grid point (a plan's success spreads 0.44: standard error 0.039)
    passed_over: int = 20  # seeds a block may pass over before it stops drawing

    def __post_init__(self):
        if (not self.tilts or not self.max_lens or min(self.tilts) < 0 or min(self.max_lens) < 1
                or not 0 <= self.band[0] <= self.band[1] <= 1 or self.tasks < 1 or self.passed_over < 0):
            raise ValueError(f"StartRule: tilts ≥ 0 and max_lens ≥ 1 (non-empty), 0 ≤ band[0] ≤ band[1] ≤ 1, "
                             f"tasks ≥ 1, passed_over ≥ 0; got {self}")

    def points(self) -> list[tuple[float, int]]:
        """The grid in the rule's order: least departure first (τ, then maximum length)."""
        return [(t, m) for t in sorted(self.tilts) for m in sorted(self.max_lens)]


@dataclass(frozen=True)
class Start:
    """Seed ``seed``'s start: the grid points measured, in the rule's order up to the choice, each
    ``{"init_tilt", "max_len", "success"}``; ``init_tilt``/``max_len`` are the choice, None when no
    point qualifies (the seed is passed over)."""

    seed: int
    grid: tuple[dict, ...]
    init_tilt: float | None = None
    max_len: int | None = None

    @property
    def qualifies(self) -> bool:
        return self.init_tilt is not None

    @property
    def success(self) -> float | None:
        """Base success on the choosing plans at the choice."""
        return self.grid[-1]["success"] if self.qualifies else None

    def config(self, base: GenEnvConfig) -> GenEnvConfig:
        """``base`` with this seed's initial simulator."""
        if not self.qualifies:
            raise ValueError(f"seed {self.seed} has no start: it is passed over (no grid point in the band)")
        return replace(base, init_tilt=self.init_tilt, max_len=self.max_len)

    def to_dict(self) -> dict:
        return {"seed": self.seed, "init_tilt": self.init_tilt, "max_len": self.max_len,
                "qualifies": self.qualifies, "grid": list(self.grid)}

    @classmethod
    def from_dict(cls, d: dict) -> Start:
        return cls(seed=int(d["seed"]), grid=tuple(d["grid"]), init_tilt=d["init_tilt"], max_len=d["max_len"])


def initial_simulator(config: GenEnvConfig, seed: int) -> Simulator:
    """The simulator a run of ``config`` with seed ``seed`` starts from (as :class:`evokit.genenv.GenEnvSource` builds it)."""
    return init_simulator(min_len=config.min_len, max_len=config.max_len, render_seed=seed,
                          contexts=config.contexts, tilt=config.init_tilt)


@torch.no_grad()
def plan_successes(policy: SkillPolicy, sim: Simulator, n: int, seed: int, stream: int = BASE_STREAM) -> np.ndarray:
    """The base agent's success probability on each of ``n`` plans of ``sim``: ∏_t π(κ_t | σ_t, g_t) per plan.

    The agent acts with one technique per step (the loop's ``attempts`` = 1) and a step's tests
    pass only on its own technique's result, so a rollout succeeds with exactly that probability:
    the expectation replaces rollouts (no rollout noise). Plans in their own stream (``seed``,
    ``stream``), apart from every arm's.
    """
    plans = sample_plans(sim, sorted(sim.contexts)[0], n, np.random.default_rng([seed, stream]))
    out = []
    for plan in plans:
        goals = step_goals(compose(plan, sim.render_seed).instruction, len(plan))
        out.append(math.exp(sum(policy.skill_logprob(st.skill, st.scenario, g)
                                for st, g in zip(plan.steps, goals, strict=True))))
    return np.array(out)


def base_success(policy: SkillPolicy, sim: Simulator, n: int, seed: int, stream: int = BASE_STREAM) -> float:
    """The base agent's expected success on ``n`` plans of ``sim`` (the mean of :func:`plan_successes`;
    a deviation from the registered 4 rollouts per task, stated in docs/preregistration.md)."""
    return float(plan_successes(policy, sim, n, seed, stream).mean())


def keep_probability(successes, tasks: int, rollouts: int, alpha: float = GENENV_ALPHA,
                     k_min: float = GENENV_K_MIN) -> float:
    """The chance that GenEnv's difficulty filter keeps one batch (|p̂ − α| ≤ k_min) of ``tasks`` plans,
    each tried ``rollouts`` times, when plans are drawn at random from those whose success
    probabilities are ``successes`` and the agent does not change.

    Exact: a task's success count is a mixture of binomials over the plans, a batch's the sum of
    ``tasks`` of them. This is what sizes the batches of claims 7–9 (docs/preregistration.md): a
    start below the zone keeps few batches, since a plan's success is nearly 0 or 1 and a batch's p̂
    sits near the agent's base success.
    """
    one = _binomial(rollouts, np.asarray(successes, dtype=float)[:, None]).mean(axis=0)
    batch = np.array([1.0])
    for _ in range(tasks):
        batch = np.convolve(batch, one)
    return float(batch[difficulty_filter(np.arange(tasks * rollouts + 1) / (tasks * rollouts), alpha, k_min)].sum())


def pooled_keep_probability(keep: list[float], batches: int, need: int) -> float:
    """The chance that units whose batches are kept with probabilities ``keep`` keep ≥ ``need`` batches
    in all, each trying ``batches`` (a sum of independent binomials: claim 7's pooled precondition)."""
    total = np.array([1.0])
    for p in keep:
        total = np.convolve(total, _binomial(batches, p))
    return float(total[need:].sum())


def _binomial(n: int, p):
    """P(k successes of ``n``) for k = 0 … n, along the last axis (``p`` a number or a column of them)."""
    k = np.arange(n + 1)
    return np.array([math.comb(n, i) for i in k]) * p ** k * (1 - p) ** (n - k)


def choose_start(policy: SkillPolicy, seed: int, base: GenEnvConfig, rule: StartRule = StartRule()) -> Start:
    """The registered rule on seed ``seed``'s base agent: the first grid point, in the rule's order, whose
    base success on the choosing plans lies in the band; passed over (no choice) if none does."""
    grid = []
    for tilt, max_len in rule.points():
        config = replace(base, init_tilt=tilt, max_len=max_len)
        p = base_success(policy, initial_simulator(config, seed), rule.tasks, seed, stream=CHOOSING_STREAM)
        grid.append({"init_tilt": tilt, "max_len": max_len, "success": p})
        if rule.band[0] <= p <= rule.band[1]:
            return Start(seed, tuple(grid), tilt, max_len)
    return Start(seed, tuple(grid))


def read_start(seed_dir: Path) -> Start | None:
    """The start recorded in ``seed_dir`` (None if not chosen yet)."""
    path = Path(seed_dir) / START_FILE
    return Start.from_dict(json.loads(path.read_text())) if path.exists() else None


def write_start(seed_dir: Path, start: Start) -> None:
    """Record ``start`` in ``seed_dir`` (atomically: a killed run leaves the old file or none)."""
    seed_dir = Path(seed_dir)
    seed_dir.mkdir(parents=True, exist_ok=True)
    tmp = seed_dir / f".{START_FILE}.tmp"
    tmp.write_text(json.dumps(start.to_dict(), indent=2) + "\n")
    os.replace(tmp, seed_dir / START_FILE)


def start_report(starts: list[Start]) -> dict:
    """What is reported beside claims 7–9: each unit's choice and choosing success, and the seeds passed
    over with the highest and lowest base success their grid reached (none in the band)."""
    return {"units": {s.seed: {"init_tilt": s.init_tilt, "max_len": s.max_len, "choosing_success": s.success}
                      for s in starts if s.qualifies},
            "passed_over": {s.seed: {"lowest": min(g["success"] for g in s.grid),
                                     "highest": max(g["success"] for g in s.grid), "points": len(s.grid)}
                            for s in starts if not s.qualifies},
            "drawn": [s.seed for s in starts]}
