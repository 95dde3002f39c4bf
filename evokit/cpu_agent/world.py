"""The world a solver's pretraining data comes from: a seeded corpus of solved steps.

EE (papers.md, "why a task is hard") grounds difficulty in a reference distribution p_T "of
broad world knowledge", and a model's p_θ is what it learned from a finite sample of that
world. :mod:`evokit.cpu_agent.policy`' :class:`~evokit.cpu_agent.policy.SkillPolicy` instead *contains*
``w·log p_T`` in its logits, so p_T sits on both sides of every D_T measurement and "D_T
predicts pass rate" partly follows from the construction. This module is the other side only: it samples what a solver is pretrained on.

**Modelling choice (stated).** The world is the catalog's documented frequencies: a solved
step is a pair (σ, κ) drawn with probability

    P_mix(σ, κ) ∝ prior(σ)·m_domain(σ) · pair_weight(σ, κ) / Σ_κ' pair_weight(σ, κ')

where ``m_domain`` is a solver's **data mixture** (how much of its corpus comes from each
domain: a solver that read mostly logs, one that read mostly tables), and p(κ | σ) is the
catalog's per-scenario technique frequency (:func:`evokit.catalog.pair_weight`). Each drawn
step is rendered with a seeded render seed (:func:`evokit.plan.compose`), so the corpus holds
what an agent would have seen solved: the step's instruction sentence g, the scenario, the
technique used, and the *shape* of the correct output (:func:`output_shape`). A finite corpus
(``size``) with a seeded draw makes each solver know the world imperfectly and differently:
rare pairs appear a few times or never.

D_T's reference stays the catalog (:func:`evokit.difficulty.catalog_reference`) or empirical
counts of a disjoint family; the solver (:mod:`evokit.cpu_agent.solvers`) never reads p_T, only the
corpus this module returns (enforced by ``tests/test_cpu_agent_solvers.py``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evokit.catalog import SCENARIOS, pair_weight, skills_for
from evokit.catalog.registry import load_catalog
from evokit.plan import Plan, PlanError, RenderCache, Step, compose


@dataclass(frozen=True)
class Mixture:
    """A data mixture: a weight multiplier per scenario domain (``Scenario.domain``); others 1."""

    name: str
    domain_weights: tuple[tuple[str, float], ...] = ()

    def weight(self, domain: str) -> float:
        return dict(self.domain_weights).get(domain, 1.0)

    def __post_init__(self):
        load_catalog()
        known = {s.domain for s in SCENARIOS.values()}
        for d, w in self.domain_weights:
            if d not in known:
                raise ValueError(f"mixture {self.name!r}: unknown domain {d!r}; known: {', '.join(sorted(known))}")
            if not (isinstance(w, int | float) and w >= 0):
                raise ValueError(f"mixture {self.name!r}: weight of {d!r} must be a number ≥ 0, got {w!r}")


@dataclass(frozen=True)
class CorpusConfig:
    """Which corpus a solver is pretrained on: mixture, number of solved steps, draw seed."""

    mixture: Mixture = Mixture("world")
    size: int = 300
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.size, int) and self.size > 0):
            raise ValueError(f"corpus size must be a positive integer, got {self.size!r}")


@dataclass(frozen=True)
class SolvedStep:
    """One pretraining example: what was asked (g), where (σ), how it was solved (κ), what came out."""

    scenario: str
    skill: str
    goal: str  # the step's instruction sentence, as an agent reads it
    output_shape: str  # :func:`output_shape` of the correct output


def output_shape(text: str) -> str:
    """A coarse shape of a command's output: line-count bucket, fields per line, numeric first field.

    What an agent glances at to see whether its result looks like what was asked ("one number",
    "three `<count> <value>` lines"). Shared by the corpus (shape of the correct output) and the
    solver's judge (shape of what its own command printed), so both speak the same vocabulary.

    >>> output_shape("3 /a\\n2 /b\\n1 /c\\n"), output_shape("42\\n"), output_shape("")
    ('L2-5|F2|N', 'L1|F1|N', 'L0')
    """
    rows = [r for r in text.splitlines() if r.strip()]
    n = len(rows)
    if n == 0:
        return "L0"
    lines = "L1" if n == 1 else "L2-5" if n <= 5 else "L6-20" if n <= 20 else "L21+"
    fields = int(np.median([len(r.split()) for r in rows]))
    numeric = np.mean([_is_number(r.split()[0]) for r in rows]) > 0.5
    return f"{lines}|F{min(fields, 3)}{'+' if fields > 3 else ''}|{'N' if numeric else 'T'}"


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def world_distribution(mixture: Mixture) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(pairs, P_mix(σ, κ)) over every compatible pair (module docstring)."""
    load_catalog()
    pairs, probs = [], []
    for s in sorted(SCENARIOS):
        sc = SCENARIOS[s]
        ks = skills_for(s)
        w = np.array([pair_weight(s, k) for k in ks], dtype=float)
        if not len(ks) or w.sum() <= 0:
            continue
        ps = sc.prior * mixture.weight(sc.domain)
        pairs += [(s, k) for k in ks]
        probs += list(ps * w / w.sum())
    p = np.asarray(probs)
    if p.sum() <= 0:
        raise ValueError(f"mixture {mixture.name!r} gives every scenario weight 0")
    return pairs, p / p.sum()


def sample_corpus(config: CorpusConfig) -> tuple[SolvedStep, ...]:
    """``config.size`` solved steps drawn from P_mix with ``config.seed`` (same config → same corpus)."""
    pairs, p = world_distribution(config.mixture)
    rng = np.random.default_rng(config.seed)
    cache = RenderCache()
    out: list[SolvedStep] = []
    draws = rng.choice(len(pairs), size=config.size, p=p)
    seeds = rng.integers(0, 2**31 - 1, size=config.size)
    for j, render_seed in zip(draws, seeds, strict=True):
        s, k = pairs[int(j)]
        try:
            spec = compose(Plan((Step(s, k),)), int(render_seed), cache=cache).specs[0]
        except PlanError as e:  # every catalog pair renders (tests/test_catalog.py); say which if not
            raise PlanError(f"corpus step {s} × {k} (render seed {render_seed}): {e}") from None
        goal = random.Random(int(render_seed)).choice(spec.instructions)
        out.append(SolvedStep(s, k, goal, output_shape(spec.expected.decode(errors="replace"))))
    return tuple(out)


def corpus_counts(corpus: Sequence[SolvedStep]) -> dict[tuple[str, str], int]:
    """How often each (σ, κ) pair occurs in ``corpus`` (what a solver could have learned from)."""
    counts: dict[tuple[str, str], int] = {}
    for st in corpus:
        counts[st.scenario, st.skill] = counts.get((st.scenario, st.skill), 0) + 1
    return counts
