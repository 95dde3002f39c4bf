"""Solvers pretrained on data: they never read p_T, differ in where they fail (real
sandbox, 5 seeds), and with retries on spend more turns on harder tasks (real sandbox, 5 seeds).

Task sets are fixed by a rule stated before any run (rarest / commonest pairs of the catalog's
p_T, which the *test* may read: it is the measurement's reference, not the solver's input).
"""

from __future__ import annotations

import ast
import inspect
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import evokit.cpu_agent.solvers as solvers_mod
from evokit.catalog import SCENARIOS, SKILLS
from evokit.cpu_agent.policy import (
    LearnerPolicy,
    collect_groups,
    evaluate_per_task,
    exit_status_judge,
)
from evokit.cpu_agent.solvers import (
    SOLVERS,
    build_solver,
    pretrain,
    solver_config,
    support_reference,
)
from evokit.cpu_agent.world import CorpusConfig, Mixture, sample_corpus, world_distribution
from evokit.plan import Plan, Step, render
from evokit.rollout import Episode, rollout_group
from evokit.stats import interval

SEEDS = range(5)
FORBIDDEN_NAMES = {"catalog_reference", "empirical_reference", "llm_reference", "conditional_reference",
                   "pair_weight", "world_distribution", "score", "score_many", "Difficulty"}
FORBIDDEN_ATTRS = {"prior", "rare_in", "rationale", "log_prior"}


def _iv(values, name: str) -> tuple[float, float]:
    """The 95 % t interval of the mean over units (`evokit.stats.interval`, the project's one interval)."""
    iv = interval(values, name=name)
    return iv.lo, iv.hi


def rarest(domain: str, n: int, *, common: bool = False) -> list[tuple[str, str]]:
    """The ``n`` rarest (or commonest) compatible pairs of ``domain`` under the world's own p_T."""
    ps, p = world_distribution(Mixture("world"))
    order = sorted(((float(q), pr) for pr, q in zip(ps, p, strict=True)
                    if SCENARIOS[pr[0]].domain == domain or domain == "*"), reverse=common)
    return [pr for _, pr in order[:n]]


# ------------------------------------------------------------------------- never reads p_T
def test_solver_module_source_reads_no_reference_distribution():
    """AST of evokit/cpu_agent/solvers.py: from evokit.difficulty only the Reference container; no estimator,
    prior, multiplier or pair weight is named; pretrain() does not call the corpus sampler."""
    tree = ast.parse(Path(solvers_mod.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "evokit.difficulty":
            assert [a.name for a in node.names] == ["Reference"], ast.dump(node)
        if isinstance(node, ast.Import):
            assert all(a.name != "evokit.difficulty" for a in node.names)
        if isinstance(node, ast.ImportFrom):
            assert not FORBIDDEN_NAMES & {a.name for a in node.names}, ast.dump(node)
        if isinstance(node, ast.Name):
            assert node.id not in FORBIDDEN_NAMES, f"line {node.lineno}: {node.id}"
        if isinstance(node, ast.Attribute):
            assert node.attr not in FORBIDDEN_ATTRS | FORBIDDEN_NAMES, f"line {node.lineno}: .{node.attr}"
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pretrain")
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    assert not used & {"sample_corpus", "build_solver", "CorpusConfig"}, used
    params = inspect.signature(pretrain).parameters  # data and config; the rest only shows progress
    assert list(params)[:2] == ["corpus", "config"] and list(params)[2:] == ["progress"]


def test_pretraining_does_not_depend_on_the_catalog_priors(monkeypatch):
    """Same corpus, catalog priors and multipliers replaced (and every p_T estimator made to raise):
    bit-identical weights. The policy's reference term is exactly zero."""
    config = SOLVERS["A"]
    corpus = sample_corpus(config.corpus)
    a = pretrain(corpus, config)
    import dataclasses

    import evokit.cpu_agent.policy as learners
    import evokit.difficulty as difficulty
    rng = random.Random(7)
    for name, sc in list(SCENARIOS.items()):
        monkeypatch.setitem(SCENARIOS, name, dataclasses.replace(sc, prior=rng.uniform(0.01, 100)))
    for name, sk in list(SKILLS.items()):
        monkeypatch.setitem(SKILLS, name, dataclasses.replace(sk, prior=rng.uniform(0.01, 100),
                                                              rare_in={s: 1e-3 for s in SCENARIOS}))

    def refuse(*a, **k):
        raise AssertionError("the solver read a p_T estimator")

    for mod in (difficulty, learners):
        for fn in ("catalog_reference", "empirical_reference", "llm_reference"):
            if hasattr(mod, fn):
                monkeypatch.setattr(mod, fn, refuse)
    assert sample_corpus(config.corpus) != corpus  # the world did change
    b = pretrain(corpus, config)
    for (k, va), (_, vb) in zip(a.policy.state_dict().items(), b.policy.state_dict().items(), strict=True):
        assert torch.equal(va, vb), k
    assert all(torch.equal(x, y) for x, y in zip(a.judge.state_dict().values(), b.judge.state_dict().values(),
                                                 strict=True))
    assert a.policy.config.prior_weight == 0.0
    support = support_reference()
    i = support.scenarios.index("access-log")
    finite = support.log_skill[i][np.isfinite(support.log_skill[i])]
    assert np.allclose(finite, finite[0])  # uniform over what applies: structure, no frequency


def test_population_and_bad_input():
    assert set(SOLVERS) == {"A", "B", "C"}
    mixtures = {c.corpus.mixture for c in SOLVERS.values()}
    assert len(mixtures) == 3 and len({c.seed for c in SOLVERS.values()}) == 3
    with pytest.raises(ValueError, match="unknown solver 'Z'.*A, B, C"):
        solver_config("Z")
    with pytest.raises(ValueError, match="empty corpus"):
        pretrain((), SOLVERS["A"])
    with pytest.raises(ValueError, match="unknown domain 'lgos'"):
        Mixture("typo", (("lgos", 2.0),))
    with pytest.raises(ValueError, match="corpus size"):
        CorpusConfig(size=0)
    with pytest.raises(ValueError, match="attempts"):
        LearnerPolicy(build_solver("A").policy, attempts=0)


# ------------------------------------------------------------------- where they fail (sandbox)
@pytest.mark.slow  # several minutes of real sandbox rollouts (5 seeds x 3 solvers): make test-slow
def test_solvers_from_different_mixtures_fail_in_different_places(tmp_path):
    """Real sandbox: one-step tasks on the 4 rarest logs pairs and the 4 rarest sysadmin pairs.
    Over 5 seeds (corpus draw + init), the logs-heavy solver A's advantage on logs over sysadmin
    exceeds the sysadmin-heavy solver C's: the interaction's 95 % interval is above 0."""
    tasks = {d: [render(Plan((Step(s, k),)), 11 + n, tmp_path / f"{d}{n}") for n, (s, k) in enumerate(rarest(d, 4))]
             for d in ("logs", "sysadmin")}
    gaps = {"A": [], "C": []}
    for name in gaps:
        for seed in SEEDS:
            sol = build_solver(SOLVERS[name].reseeded(seed))
            rate = {d: np.mean(list(evaluate_per_task(sol.policy, ts, n=4, seed=seed).values()))
                    for d, ts in tasks.items()}
            gaps[name].append(rate["logs"] - rate["sysadmin"])
    diff = np.array(gaps["A"]) - np.array(gaps["C"])
    lo, hi = _iv(diff, "A − C gap")
    print(f"logs−sysadmin pass-rate gap: A {np.round(gaps['A'], 3)}, C {np.round(gaps['C'], 3)}; "
          f"A−C {diff.mean():.3f} [{lo:.3f}, {hi:.3f}]")
    assert lo > 0, (gaps, lo, hi)


# ------------------------------------------------------------------------- turns (sandbox)
class FillOutDir:
    """Scripted agent (the test is about the learner's reaction, not about choosing): occupies
    /app/out with a file so every command of the learner fails, then lets the learner act."""

    name = "fill-out-dir"

    def __init__(self, inner: LearnerPolicy):
        self.inner = inner

    def run_episode(self, episode: Episode) -> None:
        episode.run("touch /app/out")
        self.inner.run_episode(episode)


def test_a_failed_command_is_seen_and_retried(tmp_path):
    """The learner sees a non-zero exit status (not the tests) and tries another technique; with
    the default (attempts=1) it does not: one command per step, unchanged."""
    task = render(Plan((Step("access-log", "topk-count"),)), 3, tmp_path / "t")
    policy = build_solver("A").policy
    [r] = rollout_group(FillOutDir(LearnerPolicy(policy, attempts=3, judge=exit_status_judge)), task,
                        group_size=1, max_turns=4)
    attempts = r.info["steps"]
    assert [a["attempt"] for a in attempts] == [0, 1, 2] and r.n_turns == 4
    assert all(a["exit_code"] != 0 and not a["accepted"] for a in attempts)
    assert len({a["skill"] for a in attempts}) == 3  # another technique each time
    assert "File exists" in r.turns[1].output or "Not a directory" in r.turns[1].output
    assert r.reward == 0.0
    [one] = rollout_group(FillOutDir(LearnerPolicy(policy)), task, group_size=1, max_turns=2)
    assert one.n_turns == 2 and len(one.info["steps"]) == 1 and "attempt" not in one.info["steps"][0]


def test_a_wrong_shape_is_retried_and_the_right_result_accepted(tmp_path):
    """Greedy order forced to (wrong, right): solver A's learned judge rejects count-records' single
    number for a top-3 step, and accepts topk-count's lines; reward 1 after 2 turns."""
    task = render(Plan((Step("access-log", "topk-count"),)), 3, tmp_path / "t")
    sol = build_solver("A")
    with torch.no_grad():
        sol.policy.skill_bias.zero_()
        sol.policy.skill_bias[sol.policy.skill_index["count-records"]] = 100.0
        sol.policy.skill_bias[sol.policy.skill_index["topk-count"]] = 50.0
    [r] = rollout_group(LearnerPolicy(sol.policy, greedy=True, attempts=3, judge=sol.judge), task,
                        group_size=1, max_turns=3)
    assert [(a["skill"], a["accepted"]) for a in r.info["steps"]] == [("count-records", False), ("topk-count", True)]
    assert r.n_turns == 2 and r.reward == 1.0, r.error


@pytest.mark.slow  # several minutes of real sandbox rollouts (5 seeds x 3 solvers): make test-slow
def test_harder_tasks_cost_more_turns_with_retries(tmp_path):
    """Real sandbox, 3 attempts per step: two-step tasks of the 4 rarest pairs vs the 4 commonest
    (same length). Over solvers A, B, C × 5 seeds (2 rollouts per task), turns per trajectory are higher on the rare
    tasks (95 % interval of the difference above 0), and lower pass rate goes with it."""
    def tasks(prs, tag):
        return [render(Plan((Step(*prs[2 * n]), Step(*prs[2 * n + 1]))), 21 + n, tmp_path / f"{tag}{n}")
                for n in range(len(prs) // 2)]

    hard, easy = tasks(rarest("*", 4), "hard"), tasks(rarest("*", 4, common=True), "easy")
    diffs, rows = [], []
    for name in SOLVERS:
        for seed in SEEDS:
            sol = build_solver(SOLVERS[name].reseeded(seed))
            out = {}
            for tag, ts in (("hard", hard), ("easy", easy)):
                groups = collect_groups(sol.policy, ts, group_size=2, seed=seed, attempts=3, judge=sol.judge)
                rs = [r for g in groups for r in g if not r.masked]
                out[tag] = (np.mean([r.n_turns for r in rs]), np.mean([r.reward for r in rs]))
            rows.append((name, seed, out))
            diffs.append(out["hard"][0] - out["easy"][0])
    lo, hi = _iv(diffs, "turns hard − easy")
    print(f"turns hard − easy: {np.mean(diffs):.3f} [{lo:.3f}, {hi:.3f}]; rows {rows}")
    assert lo > 0, rows
    assert np.mean([o["hard"][1] for _, _, o in rows]) < np.mean([o["easy"][1] for _, _, o in rows]), rows
