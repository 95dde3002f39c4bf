"""Solvers whose prior comes from data, and the solver population A, B, C.

A solver is a :class:`~evokit.cpu_agent.policy.SkillPolicy` whose "pretraining" is supervised learning
on a finite corpus of solved steps (:func:`evokit.cpu_agent.world.sample_corpus`), not the reference p_T
written into its logits. It relates to the world as an LLM's p_θ relates to p_T: it saw a
seeded, finite, mixture-weighted sample, so it knows common situations well, rare pairs poorly
or not at all, and each member of the population is weak in different places.

**It never reads p_T.** :func:`pretrain` takes only the corpus and this config. The policy is
built on :func:`support_reference` — which techniques *apply* to which situation (the catalog's
compatibility relation, uniform over it), never how common they are — with ``prior_weight = 0``,
so the reference term of the logit is zero. ``tests/test_cpu_agent_solvers.py`` enforces it twice: this
module's source is inspected (no import of a difficulty estimator, no read of a prior, a
multiplier or a pair weight), and pretraining with the catalog's priors replaced gives
bit-identical weights.

**What it sees while acting.** With ``attempts > 1`` (:class:`~evokit.cpu_agent.policy.LearnerPolicy`)
a solver reads what an agent reads: its command's exit status and printed result, never the
tests. Its :class:`ShapeJudge`, learned from the same corpus, predicts from the step's sentence
which output *shape* (:func:`evokit.cpu_agent.world.output_shape`: line count, fields per line, numeric or
not) a correct result has; a result whose shape it finds unlikely (p < ``doubt``), or a failed
command, is retried with another technique. A judge learned from few examples of a rare step
is unsure about it, and a wrong technique often prints another shape, so a hard step costs
more turns — measured (``tests/test_cpu_agent_solvers.py``), not built in: a wrong result with the right
shape goes unnoticed, as an agent that only glances at its output would miss it.

Deviations, stated: the judge's shapes are coarse (what a glance tells); the corpus holds
one-step examples only (chaining is learned, if at all, in RL); the learner still does not
choose scenarios (``scenario_logprob`` is uniform over the support, not p_T).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.catalog import SCENARIOS, SKILLS, compatible
from evokit.catalog.registry import load_catalog
from evokit.cpu_agent.policy import (
    N_FEATURES,
    LearnerPolicy,
    PolicyConfig,
    SkillPolicy,
    goal_features,
)
from evokit.cpu_agent.world import CorpusConfig, Mixture, SolvedStep, output_shape, sample_corpus
from evokit.difficulty import Reference  # the container only; never an estimator of p_T
from evokit.rollout import Turn


def support_reference() -> Reference:
    """The catalog's *structure* as a Reference: uniform over scenarios and over each one's compatible skills.

    The learner needs its vocabulary and which techniques apply where (a command that cannot
    apply is not an action); it gets nothing of how common anything is.
    """
    load_catalog()
    scen, sk = tuple(sorted(SCENARIOS)), tuple(sorted(SKILLS))
    ok = np.array([[compatible(s, k) for k in sk] for s in scen])
    with np.errstate(divide="ignore"):
        lk = np.where(ok, -np.log(np.maximum(ok.sum(axis=1, keepdims=True), 1)), -np.inf)
    return Reference("support", scen, sk, np.full(len(scen), -math.log(len(scen))), lk)


@dataclass(frozen=True)
class SolverConfig:
    """One member of the solver population: its corpus (mixture, size, seed) and its training."""

    name: str
    corpus: CorpusConfig
    seed: int = 0  # initialisation seed of the network
    dim: int = 32
    noise: float = 0.5  # init scale of the skill embeddings (:class:`~evokit.cpu_agent.policy.PolicyConfig`)
    pretrain_steps: int = 200  # full-batch Adam steps on the corpus
    lr: float = 0.05
    doubt: float = 0.15  # the judge rejects a result whose shape it gives p < doubt

    def reseeded(self, seed: int) -> SolverConfig:
        """The same mixture, size and training with another corpus draw and init (for across-seed claims)."""
        return dataclasses.replace(self, seed=seed, corpus=dataclasses.replace(self.corpus, seed=seed))


class ShapeJudge(nn.Module):
    """p(shape of a correct output | step sentence): a softmax over the shapes seen in the corpus."""

    def __init__(self, shapes: Sequence[str], n_features: int, doubt: float):
        super().__init__()
        self.shapes, self.doubt = tuple(shapes), doubt
        self.index = {s: i for i, s in enumerate(self.shapes)}
        self.proj = nn.Linear(n_features, len(self.shapes))

    def log_probs(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(x), dim=-1)

    @torch.no_grad()
    def shape_prob(self, goal: Sequence[int], shape: str) -> float:
        """p(shape | g); 0 for a shape never seen in the corpus."""
        if shape not in self.index:
            return 0.0
        x = torch.zeros(1, self.proj.in_features)
        if len(goal):
            x[0, list(goal)] = 1.0 / math.sqrt(len(goal))
        return float(self.log_probs(x)[0, self.index[shape]].exp())

    def __call__(self, scenario: str, goal: Sequence[int], turn: Turn) -> bool:  # the learners.Judge protocol
        return turn.exit_code == 0 and self.shape_prob(goal, output_shape(turn.output)) >= self.doubt


@dataclass
class Solver:
    """A pretrained population member: its policy π_θ, its judge, and the config that made them."""

    config: SolverConfig
    policy: SkillPolicy
    judge: ShapeJudge
    losses: list[float]

    def actor(self, *, attempts: int = 1, greedy: bool = False) -> LearnerPolicy:
        """The rollout policy; ``attempts > 1`` turns on reading results and retrying."""
        return LearnerPolicy(self.policy, greedy=greedy, attempts=attempts, judge=self.judge)


def pretrain(corpus: Sequence[SolvedStep], config: SolverConfig, *, progress: bool = False) -> Solver:
    """Supervised pretraining on ``corpus`` alone: −log π(κ | σ, g) − log p(shape | g), full-batch Adam.

    Deterministic given (corpus, config). ``progress`` shows a bar over the Adam steps (it takes
    tens of seconds on a CPU, long enough that a silent terminal looks hung). Raises ValueError for an empty corpus or a step whose
    scenario or skill the catalog does not know (naming it).
    """
    if not corpus:
        raise ValueError(f"solver {config.name!r}: empty corpus; pretraining needs at least one solved step")
    torch.manual_seed(config.seed)  # the judge's init (the policy seeds its own generator)
    policy = SkillPolicy(PolicyConfig(dim=config.dim, n_features=N_FEATURES, prior_weight=0.0, noise=config.noise,
                                      seed=config.seed), reference=support_reference())
    shapes = sorted({st.output_shape for st in corpus})
    judge = ShapeJudge(shapes, N_FEATURES, config.doubt)
    for n, st in enumerate(corpus):
        if st.scenario not in policy.scenario_index or st.skill not in policy.skill_index:
            raise ValueError(f"solver {config.name!r}: corpus step {n} ({st.scenario} × {st.skill}) is not in "
                             "the catalog")
    sid = torch.tensor([policy.scenario_index[st.scenario] for st in corpus])
    y = torch.tensor([policy.skill_index[st.skill] for st in corpus])
    x = policy.features([goal_features(st.goal, N_FEATURES) for st in corpus])
    ys = torch.tensor([judge.index[st.output_shape] for st in corpus])
    opt = torch.optim.Adam([*policy.parameters(), *judge.parameters()], lr=config.lr)
    losses = []
    for _ in tqdm(range(config.pretrain_steps), desc=f"pretrain[{config.name}]", disable=not progress):
        loss = (-torch.log_softmax(policy.logits(sid, x), dim=-1).gather(1, y[:, None]).mean()
                - judge.log_probs(x).gather(1, ys[:, None]).mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return Solver(config, policy, judge, losses)


# ----------------------------------------------------------------------------- the population
LOGS = Mixture("logs-heavy", (("logs", 6.0), ("text", 3.0)))
TABLES = Mixture("tables-heavy", (("tabular", 6.0), ("database", 3.0)))
SYSADMIN = Mixture("sysadmin-heavy", (("sysadmin", 6.0), ("config", 3.0)))
CORPUS_SIZE = 200

#: The solver population: three mixtures, one seed each (``SolverConfig.reseeded`` for more).
SOLVERS: dict[str, SolverConfig] = {
    "A": SolverConfig("A", CorpusConfig(LOGS, CORPUS_SIZE, seed=1), seed=1),
    "B": SolverConfig("B", CorpusConfig(TABLES, CORPUS_SIZE, seed=2), seed=2),
    "C": SolverConfig("C", CorpusConfig(SYSADMIN, CORPUS_SIZE, seed=3), seed=3),
}


#: The world's own frequencies, no domain leaning: the data of a base agent outside the population.
WORLD = Mixture("world")


def world_solver(seed: int, corpus_size: int = CORPUS_SIZE) -> SolverConfig:
    """A base agent outside the population: pretrained on a corpus drawn from the world's own
    frequencies (:data:`WORLD`), corpus and initialisation seeded ``seed``. GenEnv's agent
    (:mod:`evokit.studies.genenv`) and ``evokit train``'s default learner start from it."""
    return SolverConfig("world", CorpusConfig(WORLD, corpus_size, seed=seed), seed=seed)


def saved_policy(path: str | Path, config: SolverConfig, *, progress: bool = False) -> SkillPolicy:
    """``config``'s pretrained policy: pretrained and saved at ``path`` (atomically) the first time, loaded after;
    ``progress`` shows the pretraining's bar."""
    path = Path(path)
    if path.exists():
        return SkillPolicy.load(path, support_reference())
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = build_solver(config, progress=progress).policy
    tmp = path.with_name(f".{path.name}.tmp")
    policy.save(tmp)
    os.replace(tmp, path)
    return policy


def solver_config(name: str) -> SolverConfig:
    try:
        return SOLVERS[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; the population is {', '.join(SOLVERS)}") from None


def build_solver(solver: str | SolverConfig, *, progress: bool = False) -> Solver:
    """Draw the member's corpus from the world (:mod:`evokit.cpu_agent.world`) and pretrain on it (``progress``: a bar)."""
    config = solver_config(solver) if isinstance(solver, str) else solver
    return pretrain(sample_corpus(config.corpus), config, progress=progress)
