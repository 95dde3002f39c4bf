"""Model-independent difficulty D_T of a plan, its decomposition, and agent weakness (EE §3).

EE (papers.md, "why a task is hard"):

    D_T(ξ) = Σ_{t=1..L} [ −log p_T(σ_{t−1} | g) − log p_T(κ_t | σ_{t−1}, g) ]

with a reference distribution p_T "grounded in broad world knowledge". Three estimators of
p_T are pluggable (:class:`Reference`): the catalog's documented priors
(:func:`catalog_reference`), smoothed counts over a collection of plans
(:func:`empirical_reference`), and an LLM's log-probabilities (:func:`llm_reference`).

**Decomposition.** The paper says length is "the number of summands, not a separate term".
To report three *additive* parts we centre each summand on the reference's typical step:
with b_σ = E_{p_T}[−log p_T(σ)] and b_κ = E_{p_T}[−log p_T(κ | σ)],

    D_T = L·(b_σ + b_κ)                        (length: L typical steps)
        + Σ_t [−log p_T(σ_t) − b_σ]            (scenario: rarity beyond a typical situation)
        + Σ_t [−log p_T(κ_t | σ_t) − b_κ]      (skill: rarity beyond a typical technique)

exactly. Inserting a step raises D_T by that step's (positive) difficulty; replacing a skill
by a rarer one raises only the skill part; replacing a scenario by a rarer one raises the
scenario part and, through p_T(κ | σ), the skill part only as much as the kept technique
is unusual in the new situation (zero under the catalog's factorised prior, see below).

**Goal conditioning.** The catalog and empirical estimators ignore g (they are marginal over
goals); the LLM estimator conditions on it. This is stated, not hidden: pass ``goal`` to an
estimator that uses it.

Scoring is vectorised: plans become integer arrays and D_T is a gather and a sum, so
100,000 plans score in well under a second (``benchmarks/bench_difficulty.py``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from evokit.catalog import SCENARIOS, SKILLS, compatible, pair_weight
from evokit.catalog.registry import load_catalog
from evokit.plan import Plan


@dataclass(frozen=True)
class Reference:
    """A reference distribution p_T over the catalog vocabulary, as dense log-probability tables.

    ``log_scenario[i]`` = log p_T(σ_i); ``log_skill[i, j]`` = log p_T(κ_j | σ_i) (−inf where
    incompatible). ``name`` says which estimator made it.
    """

    name: str
    scenarios: tuple[str, ...]
    skills: tuple[str, ...]
    log_scenario: np.ndarray
    log_skill: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "_s_index", {s: i for i, s in enumerate(self.scenarios)})
        object.__setattr__(self, "_k_index", {k: j for j, k in enumerate(self.skills)})

    # typical per-step costs: the centring constants of the decomposition
    @property
    def baseline(self) -> tuple[float, float]:
        ps = np.exp(self.log_scenario)
        b_s = float(-(ps * self.log_scenario).sum())
        with np.errstate(invalid="ignore"):
            pk = np.exp(self.log_skill)
            cond = np.where(pk > 0, -pk * self.log_skill, 0.0).sum(axis=1) / np.maximum(pk.sum(axis=1), 1e-300)
        b_k = float((ps * cond).sum())
        return b_s, b_k

    def encode(self, plans: Sequence[Plan]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Plans → (scenario ids, skill ids, mask), each of shape (n_plans, max_len)."""
        n, width = len(plans), max((len(p) for p in plans), default=1)
        s_ids = np.zeros((n, width), dtype=np.int32)
        k_ids = np.zeros((n, width), dtype=np.int32)
        mask = np.zeros((n, width), dtype=bool)
        for r, plan in enumerate(plans):
            for c, st in enumerate(plan.steps):
                s_ids[r, c] = self._s_index[st.scenario]
                k_ids[r, c] = self._k_index[st.skill]
                mask[r, c] = True
        return s_ids, k_ids, mask


@dataclass(frozen=True)
class Difficulty:
    """D_T of one plan and its exact three-part decomposition (plus the raw sums)."""

    total: float  # D_T
    length: int  # L
    length_term: float  # L·(b_σ + b_κ)
    scenario_term: float  # Σ −log p(σ) − L·b_σ
    skill_term: float  # Σ −log p(κ|σ) − L·b_κ
    scenario_nll: float  # Σ −log p(σ)   (the paper's first sum)
    skill_nll: float  # Σ −log p(κ|σ) (the paper's second sum)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


def score_arrays(ref: Reference, s_ids: np.ndarray, k_ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised D_T for encoded plans; returns arrays keyed like :class:`Difficulty`."""
    step_s = np.where(mask, -ref.log_scenario[s_ids], 0.0)
    step_k = np.where(mask, -ref.log_skill[s_ids, k_ids], 0.0)
    length = mask.sum(axis=1)
    b_s, b_k = ref.baseline
    s_nll, k_nll = step_s.sum(axis=1), step_k.sum(axis=1)
    return {"total": s_nll + k_nll, "length": length, "length_term": length * (b_s + b_k),
            "scenario_term": s_nll - length * b_s, "skill_term": k_nll - length * b_k,
            "scenario_nll": s_nll, "skill_nll": k_nll}


def score_many(plans: Sequence[Plan], ref: Reference) -> dict[str, np.ndarray]:
    return score_arrays(ref, *ref.encode(plans))


def score(plan: Plan, ref: Reference) -> Difficulty:
    row = {k: v[0] for k, v in score_many([plan], ref).items()}
    return Difficulty(**{k: (int(v) if k == "length" else float(v)) for k, v in row.items()})


# ------------------------------------------------------------------------------ estimators
def catalog_reference() -> Reference:
    """p_T from the catalog's documented priors.

    p(σ) ∝ prior(σ). p(κ | σ) = prior(κ)·m(σ, κ) / Σ_κ' prior(κ') for compatible pairs, where
    m is the skill's scenario-specific multiplier (a quirk that makes a technique unusual in
    that situation). The normaliser is global, not per scenario: how common a technique is
    does not depend on which other techniques happen to apply; the mass of inapplicable
    techniques is the probability that the situation calls for none of the catalog's
    techniques. Consequence (by design): a scenario edit that keeps the skill leaves the
    skill term unchanged unless m differs between the two situations.
    """
    load_catalog()
    scen, sk = tuple(sorted(SCENARIOS)), tuple(sorted(SKILLS))
    ps = np.array([SCENARIOS[s].prior for s in scen], dtype=float)
    total_k = sum(SKILLS[k].prior for k in sk)
    w = np.array([[pair_weight(s, k) for k in sk] for s in scen], dtype=float) / total_k
    with np.errstate(divide="ignore"):
        return Reference("catalog", scen, sk, np.log(ps / ps.sum()), np.log(w))


def empirical_reference(plans: Iterable[Plan], alpha: float = 0.5) -> Reference:
    """p_T from counts over an environment family, add-α smoothed over the compatible support.

    p(σ) = (n_σ + α) / (N + α·|S|);  p(κ | σ) = (n_σκ + α) / (n_σ + α·|K_σ|) over the skills
    compatible with σ (incompatible pairs keep probability 0).
    """
    load_catalog()
    scen, sk = tuple(sorted(SCENARIOS)), tuple(sorted(SKILLS))
    n_s, n_sk = Counter(), Counter()
    for plan in plans:
        for st in plan.steps:
            n_s[st.scenario] += 1
            n_sk[st.scenario, st.skill] += 1
    total = sum(n_s.values())
    ps = np.array([(n_s[s] + alpha) / (total + alpha * len(scen)) for s in scen])
    lk = np.full((len(scen), len(sk)), -np.inf)
    for i, s in enumerate(scen):
        ok = [j for j, k in enumerate(sk) if compatible(s, k)]
        for j in ok:
            lk[i, j] = math.log((n_sk[s, sk[j]] + alpha) / (n_s[s] + alpha * len(ok)))
    return Reference(f"empirical(α={alpha})", scen, sk, np.log(ps), lk)


def llm_reference(client, goal: str = "", *, scenarios: Sequence[str] | None = None,
                  skills: Sequence[str] | None = None) -> Reference:
    """p_T from an LLM's next-token log-probabilities over lettered choices.

    p(σ | g): one multiple-choice question listing the scenarios; p(κ | σ, g): one question
    per scenario listing its compatible skills (``client.choice_logprobs``, one completions
    call each). The LLM's broad-world-knowledge prior is what EE means by p_T; restrict
    ``scenarios``/``skills`` to make it cheaper.
    """
    load_catalog()
    scen = tuple(scenarios or sorted(SCENARIOS))
    sk = tuple(skills or sorted(SKILLS))
    g = goal or "a task in a Linux terminal"
    summary = {s: SCENARIOS[s].summary for s in scen}
    log_s = client.choice_logprobs(f"Goal: {g}\nWhich situation is a terminal user most likely facing?",
                                   [summary[s] for s in scen])
    lk = np.full((len(scen), len(sk)), -np.inf)
    for i, s in enumerate(scen):
        ok = [j for j, k in enumerate(sk) if compatible(s, k)]
        if ok:
            lk[i, ok] = client.choice_logprobs(
                f"Goal: {g}\nSituation: {summary[s]}\nWhich technique would an expert most likely use?",
                [SKILLS[sk[j]].summary for j in ok])
    return Reference(f"llm({getattr(client, 'model', '?')})", scen, sk, np.asarray(log_s), lk)


# --------------------------------------------------------------------------- policy terms
def policy_difficulty(plan: Plan, policy, goal: str = "") -> float:
    """D_θ(ξ) for a policy exposing ``scenario_logprob(σ, g)`` and ``skill_logprob(κ, σ, g)``."""
    return sum(-policy.scenario_logprob(st.scenario, goal) - policy.skill_logprob(st.skill, st.scenario, goal)
               for st in plan.steps)


def weakness(plan: Plan, policy, ref: Reference, goal: str = "") -> float:
    """Δ_θ(ξ) = Σ_t [d_θ(z_t) − d_T(z_t)]_+ : only steps the policy finds harder than the reference."""
    total = 0.0
    for st in plan.steps:
        d_theta = -policy.scenario_logprob(st.scenario, goal) - policy.skill_logprob(st.skill, st.scenario, goal)
        i, j = ref._s_index[st.scenario], ref._k_index[st.skill]
        d_t = -ref.log_scenario[i] - ref.log_skill[i, j]
        total += max(d_theta - d_t, 0.0)
    return float(total)
