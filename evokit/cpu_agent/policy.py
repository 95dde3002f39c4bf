"""A CPU-scale learner: a small PyTorch policy that solves procedural tasks by choosing skills.

**What it is.** A small-scale stand-in for an LLM policy. At each step of a procedural task
(:mod:`evokit.plan`) it sees the step's scenario σ and its goal g (the numbered sentence of
``instruction.md`` that asks for the step; never the tests, never the expected values),
chooses a technique κ from the skill catalog with probability π_θ(κ | σ, g), and runs that
skill's command, with the step's parameters, as a real shell command in the real sandbox.
The reward is the task's own tests (:mod:`evokit.rollout`). A chained step reads the
previous step's output file, so an early wrong choice propagates: that is why length is hard.

    logit(κ | σ, g) = [ w·log p_T(κ | σ) + ⟨f(σ, g), e_κ⟩ + b_κ ] / T,   κ ∈ skills_for(σ)
    f(σ, g) = tanh(E_σ + W·x(g))       x(g): hashed bag of words of the step's sentence

* **Where the prior comes from.** With ``prior_weight`` w > 0 the first term is the reference
  distribution (EE's p_T; the catalog's priors by default), so the untrained policy already
  prefers common techniques and finds rare skills hard. ``PolicyConfig()``'s default is this
  learner (``evokit train --learner prior``, the mechanics' tests); but then D_T and the learner
  share p_T, and "D_T predicts pass rate" partly follows from the construction. Every experiment in :mod:`evokit.studies`,
  and ``evokit train`` by default, therefore uses w = 0 and a support-only reference, with the
  prior learned from data (:mod:`evokit.cpu_agent.solvers`). The learned part starts from seeded noise
  (``noise``), so each seed has its *own* weaknesses (Δ_θ = Σ[d_θ − d_T]_+ ≠ 0) in different
  places; ``noise=0`` with w = 1 gives exactly p_T.
* **Shared parameters.** Skill embeddings e_κ, biases b_κ and the word projection W are
  shared by every scenario; scenarios are embeddings E_σ, not table rows. Learning to answer
  "count … most frequent" with ``topk-count`` in an access log moves the same weights that
  decide a CSV ledger, so learning transfers partly, and interferes partly, across
  situations. That is what makes the order of tasks (curricula) matter.
* **GRPO.** :func:`grpo_update` applies group advantages (:func:`evokit.grpo.group_advantages`)
  to the per-step log-probabilities with the clipped surrogate.

**Why its learning dynamics are informative.** EE's difficulty is *defined* on this
abstraction: D_θ(ξ) = Σ −log p_θ(σ | g) − log p_θ(κ | σ, g). For this policy the second term
is exact (:meth:`SkillPolicy.skill_logprob`), so D_θ, weakness and their change under training
are measured, not estimated. Rewards come from real commands and real tests, with chained
errors, so length, scenario rarity and skill rarity act on the pass rate as they do for an
agent. GRPO's group statistics (dead groups with probability p^G + (1−p)^G, partially solved
groups as the only signal) are the same. And the policy generalises through shared features,
so curricula can help or hurt as they do for an LLM. What it leaves out: reading the
parameters (field, value, k) from the text, writing and debugging commands, reading outputs,
and language understanding beyond a bag of words. A mistake here is only ever the wrong
technique, i.e. exactly the signal EE says co-evolution mostly mines.

Deviations, stated where they are made:

1. The learner chooses skills, not scenarios: σ is given by the task, so
   :meth:`SkillPolicy.scenario_logprob` returns log p_T(σ) (the reference's term).
2. The step's parameters come from the task's plan (``[metadata.evokit]``) when the chosen
   skill is the one the step asks for: the learner is assumed to read "top 3 of the request
   path" correctly once it picked the right technique. A wrong skill keeps only the data
   (``data``/``data_seed``) and chooses its own parameters, as a misreading would.
3. Candidates are the skills compatible with σ *that can render on this step's data*
   (e.g. ``group-sum`` needs a numeric field a derived list lacks). The policy samples from π
   renormalised over them, so the stored log-probability is exactly that of the executed
   action (no fallback after sampling, which would bias the ratio).
4. By default one command per step; the learner never reads outputs (max_turns = number of
   steps). With ``attempts > 1`` (so that turns depend on difficulty) it reads what an
   agent reads — its command's exit status and output, never the tests — and a ``judge`` decides
   whether the result looks right; if not, it tries another technique (sampled from π over the
   untried candidates) while turns remain, so trajectory length becomes a measurement.
5. The KL term (``beta``) is the exact KL(π ‖ π_ref) over the candidates, not the k3
   sample estimate (the distribution is small enough to sum).
6. The loss is the mean over the steps of the rollouts in live groups (DAPO's token-level
   mean, a step playing the token); dead groups and masked rollouts contribute nothing.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from harbor.models.task.task import Task
from torch import nn

from evokit.catalog import OUT_DIR, CatalogError
from evokit.difficulty import Reference, catalog_reference
from evokit.grpo import (
    GroupStats,
    batch_stats,
    clipped_policy_loss,
    exact_kl,
    group_advantages,
    group_stats,
    usable,
)
from evokit.plan import Plan, PlanError, RenderCache, Step, compose
from evokit.rollout import Episode, Rollout, Turn, rollout_groups
from evokit.tasks import read_metadata

N_FEATURES = 256  # hash buckets of the goal's bag of words
_WORD = re.compile(r"[a-z]+")
_STEP_LINE = re.compile(r"^(\d+)\.\s+(.*\S)\s*$", re.MULTILINE)
KEEP_PARAMS = ("data", "data_seed")  # what a replaced skill keeps of the step: its data, nothing else


# ------------------------------------------------------------------------------- goal features
def goal_features(goal: str, n_features: int = N_FEATURES) -> list[int]:
    """Sorted hash buckets of the lower-cased words of ``goal`` (numbers and punctuation dropped).

    >>> goal_features("Count the records") == goal_features("count, the RECORDS 42")
    True
    """
    return sorted({zlib.crc32(w.encode()) % n_features for w in _WORD.findall(goal.lower())})


def step_goals(instruction: str, n_steps: int) -> list[str]:
    """The numbered step sentences of a rendered instruction (what the learner reads as g_i)."""
    found = {int(m.group(1)): m.group(2) for m in _STEP_LINE.finditer(instruction)}
    missing = [i for i in range(1, n_steps + 1) if i not in found]
    if missing:
        raise ValueError(f"instruction has no numbered line for step(s) {missing}; the learner needs the "
                         "'1. …' list that evokit.plan.render writes")
    return [found[i] for i in range(1, n_steps + 1)]


# ------------------------------------------------------------------------------------ the policy
@dataclass(frozen=True)
class PolicyConfig:
    """Hyperparameters of :class:`SkillPolicy` (saved with its weights)."""

    dim: int = 32  # width of f(σ, g) and of the skill embeddings
    n_features: int = N_FEATURES  # hash buckets of the goal's words
    prior_weight: float = 1.0  # w: weight of log p_T(κ | σ) in the logit (the "pretraining")
    noise: float = 0.5  # e_κ ~ N(0, noise²/dim) at init: logits start ≈ 0.7·noise (std) off p_T (0: exactly p_T)
    temperature: float = 1.0  # T: sampling temperature (EE evaluates at 1.0)
    seed: int = 0  # initialisation seed (which weaknesses this learner has)


class SkillPolicy(nn.Module):
    """π_θ(κ | σ, g): the reference prior plus a small shared network (see the module docstring)."""

    def __init__(self, config: PolicyConfig = PolicyConfig(), reference: Reference | None = None):
        super().__init__()
        ref = reference if reference is not None else catalog_reference()
        self.config, self.reference_name = config, ref.name
        self.scenarios, self.skills = tuple(ref.scenarios), tuple(ref.skills)
        self.scenario_index = {s: i for i, s in enumerate(self.scenarios)}
        self.skill_index = {k: j for j, k in enumerate(self.skills)}
        log_skill = torch.as_tensor(np.asarray(ref.log_skill), dtype=torch.float32)
        compatible = torch.isfinite(log_skill)
        self.register_buffer("log_prior", torch.where(compatible, log_skill, torch.zeros(())))
        self.register_buffer("compatible", compatible)
        self.register_buffer("log_scenario", torch.as_tensor(np.asarray(ref.log_scenario), dtype=torch.float32))
        g = torch.Generator().manual_seed(config.seed)
        d, nf = config.dim, config.n_features
        self.scenario_emb = nn.Parameter(torch.randn(len(self.scenarios), d, generator=g))
        self.word_proj = nn.Parameter(torch.randn(nf, d, generator=g))
        self.skill_emb = nn.Parameter(torch.randn(len(self.skills), d, generator=g) * (config.noise / math.sqrt(d)))
        self.skill_bias = nn.Parameter(torch.zeros(len(self.skills)))

    # -- core
    def features(self, goals: Sequence[Sequence[int]]) -> torch.Tensor:
        """Bags of hashed words → (n, n_features), each row of unit norm (an empty goal stays 0)."""
        x = torch.zeros(len(goals), self.config.n_features)
        for r, idx in enumerate(goals):
            if len(idx):
                x[r, list(idx)] = 1.0 / math.sqrt(len(idx))
        return x

    def logits(self, scenario_ids: torch.Tensor, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(n,) scenario ids and (n, F) goal features → (n, K) logits; −inf outside ``mask`` (default: compatible)."""
        h = torch.tanh(self.scenario_emb[scenario_ids] + x @ self.word_proj)
        z = self.config.prior_weight * self.log_prior[scenario_ids] + h @ self.skill_emb.T + self.skill_bias
        allowed = self.compatible[scenario_ids] if mask is None else mask & self.compatible[scenario_ids]
        return (z / self.config.temperature).masked_fill(~allowed, -math.inf)

    def log_probs(self, scenario: str, goal: str | Sequence[int], candidates: Sequence[str] | None = None
                  ) -> tuple[list[str], torch.Tensor]:
        """(candidates, log π over them); ``goal`` is text or precomputed :func:`goal_features`."""
        s = self._scenario_id(scenario)
        cands = list(candidates) if candidates is not None else self.candidates(scenario)
        if not cands:
            raise ValueError(f"no candidate skill for scenario {scenario!r}")
        idx = torch.tensor([self._skill_id(k) for k in cands])
        feats = goal_features(goal, self.config.n_features) if isinstance(goal, str) else goal
        mask = torch.zeros(1, len(self.skills), dtype=torch.bool)
        mask[0, idx] = True
        lp = torch.log_softmax(self.logits(torch.tensor([s]), self.features([feats]), mask), dim=-1)[0]
        return cands, lp[idx]

    # -- the API evokit.difficulty expects
    def candidates(self, scenario: str) -> list[str]:
        """Skills the reference allows in ``scenario`` (for the catalog: ``skills_for(scenario)``)."""
        row = self.compatible[self._scenario_id(scenario)]
        return [k for k, ok in zip(self.skills, row.tolist(), strict=True) if ok]

    @torch.no_grad()
    def distribution(self, scenario: str, goal: str = "") -> tuple[list[str], np.ndarray]:
        """(skills, π(κ | σ, g)) over the skills compatible with σ."""
        cands, lp = self.log_probs(scenario, goal)
        return cands, lp.exp().numpy().astype(float)

    @torch.no_grad()
    def skill_logprob(self, skill: str, scenario: str, goal: str = "") -> float:
        """log π_θ(κ | σ, g); −inf for a skill that does not apply to σ."""
        cands, lp = self.log_probs(scenario, goal)
        return float(lp[cands.index(skill)]) if skill in cands else -math.inf

    def scenario_logprob(self, scenario: str, goal: str = "") -> float:
        """log p_T(σ): the learner does not choose situations (deviation 1), so this is the reference's term."""
        return float(self.log_scenario[self._scenario_id(scenario)])

    # -- persistence
    def save(self, path: str | Path) -> None:
        torch.save({"config": asdict(self.config), "reference": self.reference_name,
                    "scenarios": self.scenarios, "skills": self.skills, "state": self.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path, reference: Reference | None = None) -> SkillPolicy:
        """Rebuild from :meth:`save`; the reference's vocabulary must match the saved one."""
        blob = torch.load(path, weights_only=True)
        policy = cls(PolicyConfig(**blob["config"]), reference)
        if (policy.scenarios, policy.skills) != (tuple(blob["scenarios"]), tuple(blob["skills"])):
            raise ValueError(f"{path}: saved with another catalog vocabulary than the reference "
                             f"{policy.reference_name!r}; pass the reference it was trained with")
        policy.load_state_dict(blob["state"])
        return policy

    def _scenario_id(self, scenario: str) -> int:
        try:
            return self.scenario_index[scenario]
        except KeyError:
            raise ValueError(f"unknown scenario {scenario!r} (reference {self.reference_name!r})") from None

    def _skill_id(self, skill: str) -> int:
        try:
            return self.skill_index[skill]
        except KeyError:
            raise ValueError(f"unknown skill {skill!r} (reference {self.reference_name!r})") from None


def conditional_reference(ref: Reference) -> Reference:
    """``ref`` with p_T(κ | σ) renormalised over the skills compatible with σ.

    :func:`evokit.difficulty.catalog_reference` leaves mass for "none of the catalog's
    techniques", so its p_T(κ | σ) sums to less than 1, while π sums to 1 over the same skills:
    against it every step looks easier to the learner by log Z_σ. Compare the learner's D_θ
    and weakness with this version (where a ``noise=0`` learner has weakness exactly 0).
    """
    lk = np.asarray(ref.log_skill, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(np.exp(lk).sum(axis=1, keepdims=True))
    return Reference(f"{ref.name}|σ", ref.scenarios, ref.skills, ref.log_scenario, lk - z)


# ------------------------------------------------------------------------------ acting in tasks
@functools.lru_cache(maxsize=256)  # tasks whose rollouts run at once are a handful; each memo holds their data
def _task_renders(plan_json: str, seed: int) -> RenderCache:
    """One task's step renders, shared by every candidate command of every step: each
    :func:`step_command` renders the plan's prefix, so without it a step's data were made again
    for each candidate skill and each later step (same commands, less work: benchmarks/bench_rollout.py)."""
    return RenderCache()


@functools.lru_cache(maxsize=65536)
def step_command(plan_json: str, seed: int, i: int, skill: str) -> str | None:
    """The shell command of step ``i`` (0-based) done with ``skill``; None if it cannot render there."""
    return render_command(plan_json, seed, i, skill, cache=_task_renders(plan_json, seed))


def render_command(plan_json: str, seed: int, i: int, skill: str, *, cache: RenderCache | None = None) -> str | None:
    """:func:`step_command` without its memo (``cache``: shared step renders, as :func:`evokit.plan.compose`)."""
    plan = Plan.from_records(*_records(plan_json))
    st = plan.steps[i]
    if skill != st.skill:  # deviation 2: a replaced skill keeps the data and picks its own parameters
        params = {k: v for k, v in st.params if k in KEEP_PARAMS}
        st = Step(st.scenario, skill, tuple(sorted(params.items())), st.input)
    # Only the prefix: earlier steps as the task asks them (the file a chained step reads is what
    # the instruction says it is), later steps irrelevant.
    prefix = Plan((*plan.steps[:i], st), plan.goal)
    try:
        spec = compose(prefix, seed, cache=cache).specs[i]
    except (PlanError, CatalogError):
        return None
    return f"mkdir -p {OUT_DIR} && cd /app && {spec.solution}"


def _records(plan_json: str) -> tuple[list[dict], str]:
    d = json.loads(plan_json)
    return d["steps"], d.get("goal", "")


def task_plan(task_dir: str | Path) -> tuple[Plan, int]:
    """(filled plan, render seed) of a rendered procedural task, from its ``[metadata.evokit]``."""
    meta = read_metadata(task_dir)
    if meta is None or meta.plan is None or meta.seed is None:
        raise ValueError(f"{task_dir}: task.toml has no [metadata.evokit] plan and seed; the learner only "
                         "acts on procedural tasks written by evokit.plan.render")
    return Plan.from_records(meta.plan, meta.goal or ""), meta.seed


def task_difficulty(policy: SkillPolicy, task_dir: str | Path) -> float:
    """D_θ of a rendered task as the learner meets it: each step scored with its own sentence g_t.

    (:func:`evokit.difficulty.policy_difficulty` takes one goal for the whole plan.)
    """
    plan, _ = task_plan(task_dir)
    goals = step_goals((Path(task_dir) / "instruction.md").read_text(), len(plan))
    return sum(-policy.scenario_logprob(st.scenario) - policy.skill_logprob(st.skill, st.scenario, g)
               for st, g in zip(plan.steps, goals, strict=True))


Judge = Callable[[str, Sequence[int], Turn], bool]
"""``judge(scenario, goal features, turn) -> accept``: does this result look like what the step asked?"""


def exit_status_judge(scenario: str, goal: Sequence[int], turn: Turn) -> bool:
    """The judge that needs no knowledge: accept unless the command failed or printed nothing.

    Measured on every compatible catalog pair (one-step tasks, every wrong candidate's command in
    the real sandbox), a wrong technique exits 0 with a non-empty output: this judge alone almost
    never triggers a retry. A solver's learned judge (:mod:`evokit.cpu_agent.solvers`) reads the output's shape.
    """
    return turn.exit_code == 0 and bool(turn.output.strip())


class LearnerPolicy:
    """The rollout :class:`~evokit.rollout.Policy` that acts with a :class:`SkillPolicy`.

    Per step: candidates (deviation 3), sample κ̂ ~ π (or argmax if ``greedy``) by inverse CDF
    on one draw of the episode's seeded ``random.Random`` (same seed → same choices), run κ̂'s
    command. ``rollout.info["steps"]`` keeps, per attempt, the scenario,
    the goal's hashed features, the candidates, the chosen index and skill, and log π(κ̂).

    ``attempts`` (default 1: the original one command per step, unchanged): with more, each
    command also prints its result file (``head -n 40``), ``judge`` (default
    :func:`exit_status_judge`) reads the turn (exit status and output only), and a rejected
    result is retried with another technique, sampled from π renormalised over the candidates
    not yet tried, until accepted, ``attempts`` are spent, or the episode's turn budget is. Each
    attempt is one GRPO action (its record has ``step`` and ``attempt``); the stored
    log-probability is that of the executed choice over its own candidate set.
    """

    def __init__(self, policy: SkillPolicy, *, greedy: bool = False, attempts: int = 1, judge: Judge | None = None):
        if not (isinstance(attempts, int) and attempts >= 1):
            raise ValueError(f"attempts must be an integer ≥ 1, got {attempts!r}")
        self.policy, self.greedy, self.attempts = policy, greedy, attempts
        self.judge = judge or exit_status_judge
        extra = f", attempts={attempts}" if attempts > 1 else ""
        self.name = f"learner(seed={policy.config.seed}{', greedy' if greedy else ''}{extra})"

    def run_episode(self, episode: Episode) -> None:
        plan, seed = task_plan(episode.task.paths.task_dir)
        goals = step_goals(episode.instruction, len(plan))
        plan_json = plan.to_json()
        steps: list[dict] = []
        episode.rollout.info["steps"] = steps
        for i, st in enumerate(plan.steps):
            if episode.done:
                break
            renderable = [k for k in self.policy.candidates(st.scenario) if step_command(plan_json, seed, i, k)]
            if not renderable:
                raise ValueError(f"step {i + 1} ({st.scenario}): no catalog skill renders on its data")
            feats = goal_features(goals[i], self.policy.config.n_features)
            tried: set[str] = set()
            for attempt in range(self.attempts):
                cands = [k for k in renderable if k not in tried]
                if not cands or episode.done:
                    break
                with torch.no_grad():
                    _, lp = self.policy.log_probs(st.scenario, feats, cands)
                probs = lp.exp().tolist()
                j = int(np.argmax(probs)) if self.greedy else _sample(probs, episode.rng.random())
                record = {"scenario": st.scenario, "goal": feats, "candidates": cands, "choice": j,
                          "skill": cands[j], "logp": float(lp[j])}
                if self.attempts > 1:
                    record.update(step=i, attempt=attempt)
                steps.append(record)
                tried.add(cands[j])
                command = step_command(plan_json, seed, i, cands[j])
                if self.attempts == 1:
                    episode.run(command)
                    break
                turn = episode.run(f"{command} && head -n 40 {OUT_DIR}/step{i + 1}.txt")
                record["exit_code"] = turn.exit_code
                record["accepted"] = bool(self.judge(st.scenario, feats, turn))
                if record["accepted"]:
                    break


def _sample(probs: Sequence[float], u: float) -> int:
    acc = 0.0
    for j, p in enumerate(probs):
        acc += p
        if u < acc:
            return j
    return len(probs) - 1


def _max_turns(task: Task | str | Path, attempts: int = 1) -> int:
    path = task.paths.task_dir if isinstance(task, Task) else Path(task)
    return len(task_plan(path)[0]) * attempts


def collect_groups(policy: SkillPolicy, tasks: Sequence[Task | str | Path], *, group_size: int = 8,
                   workers: int = 2, seed: int = 0, greedy: bool = False, groups_at_once: int = 1,
                   seeds: Sequence[int] | None = None, attempts: int = 1, judge: Judge | None = None,
                   turn_budget: int | None = None) -> list[list[Rollout]]:
    """One GRPO group per task (``group_size`` rollouts each), ``workers × groups_at_once``
    rollouts in flight across all groups (:func:`evokit.rollout.rollout_groups`).

    max_turns = the task's steps × ``attempts`` (1 by default: one command per step), or
    ``turn_budget`` when given. Group n's rollouts are seeded by ``seeds[n]`` (default
    ``seed·1000 + n``) whatever the parallelism, so the rollouts do not depend on it.
    """
    actor = LearnerPolicy(policy, greedy=greedy, attempts=attempts, judge=judge)
    seeds = list(seeds) if seeds is not None else [seed * 1000 + n for n in range(len(tasks))]
    turns = [turn_budget if turn_budget is not None else _max_turns(t, attempts) for t in tasks]
    return rollout_groups(actor, tasks, group_size=group_size, in_flight=workers * max(1, groups_at_once),
                          max_turns=turns, seeds=seeds)


def evaluate(policy: SkillPolicy, tasks: Sequence[Task | str | Path], *, n: int = 8, seed: int = 0,
             greedy: bool = False, workers: int = 2, attempts: int = 1, judge: Judge | None = None,
             groups_at_once: int = 1) -> float:
    """Pass rate: mean over tasks of the mean reward of ``n`` rollouts (masked ones left out)."""
    return float(np.mean(list(evaluate_per_task(policy, tasks, n=n, seed=seed, greedy=greedy, workers=workers,
                                                attempts=attempts, judge=judge,
                                                groups_at_once=groups_at_once).values())))


def evaluate_per_task(policy: SkillPolicy, tasks: Sequence[Task | str | Path], *, n: int = 8, seed: int = 0,
                      greedy: bool = False, workers: int = 2, attempts: int = 1, judge: Judge | None = None,
                      groups_at_once: int = 1) -> dict[str, float]:
    """Per-task pass rate over ``n`` sampled (or greedy) rollouts, keyed by task folder name
    (``attempts``/``judge``: as in :func:`collect_groups`)."""
    return {task: e["pass_rate"] for task, e in evaluation(policy, tasks, n=n, seed=seed, greedy=greedy,
                                                           workers=workers, attempts=attempts, judge=judge,
                                                           groups_at_once=groups_at_once).items()}


def evaluation(policy: SkillPolicy, tasks: Sequence[Task | str | Path], *, n: int = 8, seed: int = 0,
               greedy: bool = False, workers: int = 2, attempts: int = 1, judge: Judge | None = None,
               groups_at_once: int = 1) -> dict[str, dict[str, float]]:
    """Per task (keyed by folder name), over ``n`` sampled (or greedy) rollouts: ``pass_rate``, the mean
    reward of the usable ones, and ``turns``, the mean turns per rollout (as a ``steps.jsonl`` row counts
    a served group's, :mod:`evokit.training.steps`) — what the same tasks cost the policy as it trains."""
    out = {}
    for group in collect_groups(policy, tasks, group_size=n, workers=workers, seed=seed, greedy=greedy,
                                attempts=attempts, judge=judge, groups_at_once=groups_at_once):
        g = group_stats(group)
        if not g.n:
            raise RuntimeError(f"{group[0].task}: every rollout was masked: {group[0].error}")
        out[group[0].task] = {"pass_rate": g.mean_reward, "turns": float(np.mean([r.n_turns for r in group]))}
    return out


# ------------------------------------------------------------------------------------- training
def grpo_update(policy: SkillPolicy, optimizer: torch.optim.Optimizer, groups: Sequence[Sequence[Rollout]], *,
                beta: float = 0.0, clip: float = 0.2, clip_high: float | None = None,
                ref_policy: SkillPolicy | None = None, scale: str = "group", epochs: int = 1,
                max_grad_norm: float | None = None) -> dict[str, float]:
    """One GRPO update from groups of rollouts (one group per task); returns metrics.

    Group statistics, advantages, the clipped surrogate and the KL all come from
    :mod:`evokit.grpo` (``scale="none"`` for Dr.GRPO). Rollouts that are not usable
    (:func:`evokit.grpo.usable`) or recorded no step are left out; a dead group contributes
    nothing. Loss (deviation 6): −mean over steps of min(ρ·Â, clip(ρ, 1−ε, 1+ε_high)·Â) with
    ρ = π_θ(κ̂)/π_old(κ̂), plus ``beta``·KL(π_θ ‖ π_ref) (deviation 5; ``ref_policy`` is a
    frozen copy of the initial policy, :func:`frozen_copy`). ``epochs`` passes over the batch.
    """
    rows: list[tuple[dict, float]] = []
    stats = []
    for group in groups:
        kept = [r for r in group if usable(r) and r.info.get("steps")]
        g = group_stats(kept)
        stats.append(GroupStats(g.rewards, len(group) - len(kept)))
        if g.dead:
            continue
        adv = group_advantages([list(g.rewards)], scale=scale)[0]
        rows += [(step, float(a)) for r, a in zip(kept, adv, strict=True) for step in r.info["steps"]]
    metrics = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "n_steps": len(rows),
               **batch_stats(stats)}
    if not rows:
        return metrics
    s_ids = torch.tensor([policy._scenario_id(st["scenario"]) for st, _ in rows])
    x = policy.features([st["goal"] for st, _ in rows])
    mask = torch.zeros(len(rows), len(policy.skills), dtype=torch.bool)
    chosen = torch.empty(len(rows), dtype=torch.long)
    for n, (st, _) in enumerate(rows):
        ids = [policy._skill_id(k) for k in st["candidates"]]
        mask[n, ids] = True
        chosen[n] = ids[st["choice"]]
    mask &= policy.compatible[s_ids]
    old = torch.tensor([st["logp"] for st, _ in rows])
    adv = torch.tensor([a for _, a in rows])
    use_kl = bool(beta) and ref_policy is not None
    if use_kl:
        with torch.no_grad():
            ref_lp = torch.log_softmax(ref_policy.logits(s_ids, x, mask), dim=-1)
    for _ in range(epochs):
        lp_all = torch.log_softmax(policy.logits(s_ids, x, mask), dim=-1)
        loss, clip_fraction = clipped_policy_loss(lp_all.gather(1, chosen[:, None])[:, 0], old, adv,
                                                  eps_low=clip, eps_high=clip if clip_high is None else clip_high)
        kl = exact_kl(lp_all, ref_lp, mask).mean() if use_kl else torch.zeros(())
        loss = loss + beta * kl if use_kl else loss
        optimizer.zero_grad()
        loss.backward()
        params = [p for p in policy.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else math.inf)
        optimizer.step()
        metrics.update(loss=float(loss.detach()), kl=float(kl.detach()), grad_norm=float(norm),
                       clip_fraction=clip_fraction)
    return metrics


def frozen_copy(policy: SkillPolicy) -> SkillPolicy:
    """A frozen copy (the KL reference π_ref)."""
    ref = copy.deepcopy(policy)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
