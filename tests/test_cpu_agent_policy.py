"""The CPU-scale learner: starts at p_T with seeded weaknesses, acts through real commands in the
real sandbox (rewarded by the task's own tests), every parameter learns from one GRPO update,
resume is exact, and (slow) GRPO raises the pass rate on a fixed set of procedural tasks.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from evokit.cpu_agent.policy import (
    LearnerPolicy,
    PolicyConfig,
    SkillPolicy,
    collect_groups,
    conditional_reference,
    evaluate_per_task,
    frozen_copy,
    goal_features,
    grpo_update,
    render_command,
    step_command,
    step_goals,
    task_difficulty,
    task_plan,
)
from evokit.difficulty import catalog_reference, score, weakness
from evokit.plan import Plan, Step, compose, render
from evokit.rollout import Rollout, rollout_group

SCENARIOS = ["access-log", "csv-ledger", "git-repo", "text-list", "sqlite-db"]
GOAL = "Count how often each request path occurs in `/app/step1/access.log`; save the top 3."


def p_T(scenario: str) -> dict[str, float]:
    ref = conditional_reference(catalog_reference())
    i = ref.scenarios.index(scenario)
    return {k: float(np.exp(ref.log_skill[i, j])) for j, k in enumerate(ref.skills) if np.isfinite(ref.log_skill[i, j])}


def tv(a: dict[str, float], b: dict[str, float]) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys())


def dist(policy: SkillPolicy, scenario: str, goal: str = GOAL) -> dict[str, float]:
    skills, probs = policy.distribution(scenario, goal)
    return dict(zip(skills, probs.tolist(), strict=True))


def force(policy: SkillPolicy, skill: str, logit: float = 100.0) -> SkillPolicy:
    """Test hook: a huge bias for one skill, so the learner always picks it where it applies."""
    with torch.no_grad():
        policy.skill_bias[policy.skill_index[skill]] += logit
    return policy


def test_initial_distribution_is_p_T():
    """noise=0 gives exactly p_T(·|σ); the default seeded noise stays close (TV < 0.25) for any goal."""
    exact = SkillPolicy(PolicyConfig(noise=0.0))
    for s in SCENARIOS:
        assert tv(dist(exact, s), p_T(s)) < 1e-5, s
    for seed in range(3):
        noisy = SkillPolicy(PolicyConfig(seed=seed))
        for s in SCENARIOS:
            assert tv(dist(noisy, s), p_T(s)) < 0.25, (seed, s, tv(dist(noisy, s), p_T(s)))
            assert tv(dist(noisy, s, ""), p_T(s)) < 0.25, (seed, s)


def test_seeds_have_different_weaknesses():
    """Two seeds → different distributions and different weakest steps; noise=0 has no weakness."""
    ref = conditional_reference(catalog_reference())
    a, b = SkillPolicy(PolicyConfig(seed=0)), SkillPolicy(PolicyConfig(seed=1))
    assert max(tv(dist(a, s), dist(b, s)) for s in SCENARIOS) > 0.03
    plans = [Plan((Step(s, k),)) for s in ["access-log", "csv-ledger"] for k in sorted(p_T(s))]
    wa = np.array([weakness(p, a, ref, GOAL) for p in plans])
    wb = np.array([weakness(p, b, ref, GOAL) for p in plans])
    assert wa.max() > 0.05 and wb.max() > 0.05
    assert not np.allclose(wa, wb, atol=0.02)
    exact = SkillPolicy(PolicyConfig(noise=0.0))
    assert max(weakness(p, exact, ref, GOAL) for p in plans) < 1e-5
    assert exact.scenario_logprob("access-log") == pytest.approx(float(ref.log_scenario[0]))


def test_step_goals_and_features():
    """The learner reads the numbered step sentences; words are hashed, numbers ignored."""
    r = compose(Plan((Step("access-log", "topk-count"), Step("text-list", "distinct-values"))), 2)
    goals = step_goals(r.instruction, 2)
    assert goals[0] in r.specs[0].instructions and goals[1] in r.specs[1].instructions
    assert goal_features("top 3 values") == goal_features("TOP 5 values!")
    with pytest.raises(ValueError, match=r"step\(s\) \[3\]"):
        step_goals(r.instruction, 3)


def test_rollout_runs_the_chosen_skill_in_the_sandbox(tmp_path):
    """Forced onto the asked skill the learner's command passes the task's tests; a wrong skill fails."""
    task = render(Plan((Step("access-log", "topk-count"),)), 3, tmp_path / "t")
    right = rollout_group(LearnerPolicy(force(SkillPolicy(), "topk-count")), task, group_size=2, max_turns=1)
    assert [r.reward for r in right] == [1.0, 1.0], [r.error for r in right]
    step = right[0].info["steps"][0]
    assert step["skill"] == "topk-count" and step["candidates"][step["choice"]] == "topk-count"
    assert step["logp"] == pytest.approx(0.0, abs=1e-6) and step["scenario"] == "access-log"
    assert "uniq -c" in right[0].turns[0].command and right[0].n_turns == 1
    wrong = rollout_group(LearnerPolicy(force(SkillPolicy(), "distinct-values")), task, group_size=2, max_turns=1)
    assert [r.reward for r in wrong] == [0.0, 0.0], [r.error for r in wrong]
    assert "sort -u" in wrong[0].turns[0].command


def test_an_early_mistake_propagates(tmp_path):
    """Step 2 reads step 1's output: a wrong step 1 fails step 2 even when step 2's skill is right."""
    plan = Plan((Step("access-log", "filter-rows"), Step("access-log", "distinct-values", input=1)))
    task = render(plan, 4, tmp_path / "t")
    [r] = rollout_group(LearnerPolicy(force(SkillPolicy(), "distinct-values")), task, group_size=1, max_turns=2)
    assert [s["skill"] for s in r.info["steps"]] == ["distinct-values", "distinct-values"]
    assert r.rewards == {"reward": 0, "step_1": 0, "step_2": 0}
    filled, seed = task_plan(task)
    assert step_command(filled.to_json(), seed, 1, "distinct-values") == r.turns[1].command
    exact = SkillPolicy(PolicyConfig(noise=0.0))  # D_θ = D_T under the per-scenario p_T
    assert task_difficulty(exact, task) == pytest.approx(score(filled, conditional_reference(catalog_reference())).total,
                                                         rel=1e-5)


def test_groups_do_not_depend_on_the_parallelism(tmp_path):
    """The same groups (choices, commands, rewards) from one sandbox at a time and from 8 in flight across
    groups: the studies raise the parallelism freely (and resume under another) because of this."""
    plans = [Plan((Step("access-log", "topk-count"),)),
             Plan((Step("access-log", "filter-rows"), Step("access-log", "distinct-values", input=1)))]
    tasks = [render(p, 3 + i, tmp_path / f"t{i}") for i, p in enumerate(plans)]
    policy = SkillPolicy(PolicyConfig(seed=3, temperature=2.0))  # hot: the group's rollouts differ

    def trace(groups):
        return [[(r.task, r.index, r.reward, [t.command for t in r.turns]) for r in g] for g in groups]

    serial = trace(collect_groups(policy, tasks, group_size=3, workers=1, seed=5))
    assert len({tuple(x[3]) for g in serial for x in g}) > 2, serial  # several distinct trajectories
    assert trace(collect_groups(policy, tasks, group_size=3, workers=4, groups_at_once=2, seed=5)) == serial
    assert trace(collect_groups(policy, tasks, group_size=3, workers=1, seed=6)) != serial


def test_step_commands_from_the_shared_renders_equal_fresh_renders():
    """The per-task render memo behind step_command changes no command: for 24 seed plans of 2–5
    steps (chained and not), every step × every skill of its scenario, asked in a shuffled order,
    equals a render from scratch. (A key that confused two steps' data would differ here.)"""
    import random

    from evokit.catalog import skills_for
    from evokit.seeds import sample_plan, seed_specs

    asks = []
    for spec in seed_specs(24, 5):
        plan = compose(sample_plan(spec, random.Random(spec.index), 11), 11).plan  # filled, as task_plan reads it
        asks += [(plan.to_json(), 11, i, k) for i, st in enumerate(plan.steps) for k in skills_for(st.scenario)]
    random.Random(0).shuffle(asks)
    cached = [step_command(*a) for a in asks]
    assert cached == [render_command(*a) for a in asks]
    assert sum(c is not None for c in cached) > len(asks) // 2 and len({a[0] for a in asks}) == 24


def fake_groups(policy: SkillPolicy, rewards: list[list[float]]) -> list[list[Rollout]]:
    """Groups of one-step rollouts on access-log with given rewards (no sandbox)."""
    feats = goal_features(GOAL)
    with torch.no_grad():
        cands, lp = policy.log_probs("access-log", feats)
    groups = []
    for g, rs in enumerate(rewards):
        group = []
        for i, reward in enumerate(rs):
            j = (g + i) % len(cands)
            r = Rollout(task=f"t{g}", index=i, reward=reward)
            r.info["steps"] = [{"scenario": "access-log", "goal": feats, "candidates": cands, "choice": j,
                                "skill": cands[j], "logp": float(lp[j])}]
            group.append(r)
        groups.append(group)
    return groups


def test_every_parameter_changes_after_one_update():
    """TRL's tiny-model check: one GRPO step with non-zero advantages moves every trainable tensor."""
    policy = SkillPolicy(PolicyConfig(seed=2))
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    opt = torch.optim.Adam(policy.parameters(), lr=0.01)
    m = grpo_update(policy, opt, fake_groups(policy, [[1, 0, 0, 0], [0, 1, 1, 0]]))
    assert m["n_steps"] == 8 and m["dead_group_share"] == 0 and m["partially_solved_share"] == 1
    assert m["grad_norm"] > 0 and m["mean_reward"] == pytest.approx(0.375)
    for n, p in policy.named_parameters():
        assert not torch.equal(before[n], p.detach()), f"{n} did not change"


def test_update_raises_the_rewarded_skill_and_skips_dead_groups():
    """The rewarded choice gains probability; dead and masked rollouts teach nothing."""
    policy = SkillPolicy(PolicyConfig(seed=4))
    opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    groups = fake_groups(policy, [[1, 0, 0, 0]])
    target = groups[0][0].info["steps"][0]["skill"]
    p0 = dist(policy, "access-log")[target]
    for _ in range(3):
        grpo_update(policy, opt, fake_groups(policy, [[1, 0, 0, 0]]), beta=0.0)
    assert dist(policy, "access-log")[target] > p0 + 0.1
    state = {n: p.detach().clone() for n, p in policy.named_parameters()}
    dead = fake_groups(policy, [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    for r in dead[2][1:]:
        r.masked = True  # one usable rollout left: dead too
    m = grpo_update(policy, opt, dead)
    assert m["dead_group_share"] == 1 and m["n_steps"] == 0
    assert all(torch.equal(state[n], p) for n, p in policy.named_parameters())


def test_kl_to_the_reference_is_exact_and_finite():
    """β·KL(π ‖ π_ref): zero at the start, positive and finite after the policy moved, no NaN gradients."""
    policy = SkillPolicy(PolicyConfig(seed=3))
    ref, opt = frozen_copy(policy), torch.optim.Adam(policy.parameters(), lr=0.05)
    first = grpo_update(policy, opt, fake_groups(policy, [[1, 0, 0, 0]]), beta=0.1, ref_policy=ref)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)
    for _ in range(3):
        m = grpo_update(policy, opt, fake_groups(policy, [[1, 0, 0, 0]]), beta=0.1, ref_policy=ref)
    assert 0 < m["kl"] < 10 and np.isfinite(m["grad_norm"])
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    assert all(not p.requires_grad for p in ref.parameters())


def test_resume_gives_identical_distributions(tmp_path):
    """save → load reproduces every distribution bit for bit (after some training)."""
    policy = SkillPolicy(PolicyConfig(seed=7, temperature=0.8))
    grpo_update(policy, torch.optim.Adam(policy.parameters(), lr=0.05), fake_groups(policy, [[1, 0, 1, 0]]))
    policy.save(tmp_path / "p.pt")
    again = SkillPolicy.load(tmp_path / "p.pt")
    assert again.config == policy.config
    for s in SCENARIOS:
        assert dist(again, s) == dist(policy, s)
        assert again.skill_logprob("checksum", s, GOAL) == policy.skill_logprob("checksum", s, GOAL)


# ------------------------------------------------------------------------------------ slow part
TRAIN_PLANS = [
    Plan((Step("access-log", "topk-count"),)),
    Plan((Step("csv-ledger", "sum-field"),)),
    Plan((Step("text-list", "distinct-values"),)),
    Plan((Step("jsonl-events", "count-matching"),)),
    Plan((Step("access-log", "filter-rows"), Step("access-log", "distinct-values", input=1))),
    Plan((Step("csv-ledger", "count-records"), Step("tsv-inventory", "topk-count"))),
]
GRPO_STEPS, GROUP, LR = 25, 8, 0.03


@pytest.mark.slow
def test_grpo_raises_the_pass_rate(tmp_path):
    """25 GRPO steps (6 tasks × 8 rollouts each, real sandbox) raise the pass rate for 3 seeds."""
    tasks = [render(p, 5, tmp_path / f"task{i}") for i, p in enumerate(TRAIN_PLANS)]
    results = {}
    for seed in range(3):
        t0 = time.monotonic()
        policy = SkillPolicy(PolicyConfig(seed=seed))
        before = evaluate_per_task(policy, tasks, n=8, seed=10_000 + seed)
        opt = torch.optim.Adam(policy.parameters(), lr=LR)
        for step in range(GRPO_STEPS):
            grpo_update(policy, opt, collect_groups(policy, tasks, group_size=GROUP, workers=2,
                                                    seed=seed * 100 + step))
        after = evaluate_per_task(policy, tasks, n=8, seed=20_000 + seed)
        results[seed] = (np.mean(list(before.values())), np.mean(list(after.values())))
        print(f"seed {seed}: pass rate {results[seed][0]:.3f} → {results[seed][1]:.3f} "
              f"({time.monotonic() - t0:.0f} s) before {before} after {after}")
    gains = [a - b for b, a in results.values()]
    assert np.mean(gains) > 0.2, results
    assert all(a >= b for b, a in results.values()), results
