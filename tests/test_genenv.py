"""GenEnv's environment side (evokit.genenv): the α-curriculum reward and the difficulty filter against
Eqs. 2–3 at a few points, RWR weights ∝ exp(λ·R_env), Theorem 1 (the Monte Carlo ranking-violation
probability stays under its bound), the two pools persisting and reloading, the SFT export, and the
learning simulator: its plans render, it starts at the catalog prior, an RWR step moves mass toward
high-weight plans while the KL to the initial simulator stays under the cap, and the random
(non-learning) simulator never changes.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evokit.catalog import SCENARIOS, pair_weight, skills_for
from evokit.genenv import (
    Pools,
    alpha_reward,
    difficulty_filter,
    env_row,
    export_sft_dataset,
    init_simulator,
    log_prob,
    plan_context,
    random_simulator,
    ranking_violation_mc,
    rwr_update,
    rwr_weights,
    sample_plans,
    simulator_kl,
    theorem1_bound,
)
from evokit.plan import Plan, Step, compose, render

SIM = init_simulator()
CONTEXT = "logs"


@pytest.fixture(scope="module")
def plans():
    """60 plans of the initial simulator for the 'logs' context (fixed seed)."""
    return sample_plans(SIM, CONTEXT, 60, np.random.default_rng(0))


# ----------------------------------------------------------------------- reward, filter, RWR
@pytest.mark.parametrize(("p", "alpha", "beta"), [(0.5, 0.5, 20), (0.0, 0.5, 20), (0.25, 0.5, 20), (0.9, 0.5, 3),
                                                  (0.3, 0.3, 7), (1.0, 0.2, 1)])
def test_alpha_reward_matches_eq_3(p, alpha, beta):
    """R_env(p̂) = exp(−β (p̂ − α)²)."""
    assert alpha_reward(p, alpha, beta) == pytest.approx(math.exp(-beta * (p - alpha) ** 2))


def test_alpha_reward_peaks_at_alpha_and_is_symmetric():
    """Maximal (1) at p̂ = α, symmetric around it, vectorised; β ≤ 0 is refused."""
    grid = np.linspace(0, 1, 11)
    r = alpha_reward(grid)
    assert grid[np.argmax(r)] == pytest.approx(0.5) and r.max() == 1.0
    np.testing.assert_allclose(r, r[::-1])
    with pytest.raises(ValueError, match="beta"):
        alpha_reward(0.5, beta=0.0)


def test_difficulty_filter_keeps_batches_near_alpha():
    """|p̂ − α| ≤ k_min is kept, with the boundary included (k_min = 0.1)."""
    p = np.array([0.0, 0.39, 0.4, 0.5, 0.6, 0.61, 1.0])
    assert difficulty_filter(p).tolist() == [False, False, True, True, True, False, False]
    assert difficulty_filter(p, alpha=0.3, k_min=0.3).tolist() == [True, True, True, True, True, False, False]


def test_rwr_weights_are_proportional_to_exp_lambda_r():
    """w_i/w_j = exp(λ(R_i − R_j)); normalised weights have mean 1; λ = 0 gives equal weights."""
    r = np.array([0.1, 0.5, 1.0, 0.0])
    for lam in (0.5, 1.0, 4.0):
        w = rwr_weights(r, lam)
        assert w.mean() == pytest.approx(1.0)
        np.testing.assert_allclose(w / w[0], np.exp(lam * (r - r[0])))
        np.testing.assert_allclose(rwr_weights(r, lam, normalize=False), np.exp(lam * r))
    np.testing.assert_allclose(rwr_weights(r, 0.0), 1.0)


# ------------------------------------------------------------------------------- Theorem 1
@pytest.mark.parametrize(("p1", "p2", "n"), [(0.5, 0.95, 64), (0.5, 0.05, 64), (0.6, 0.1, 100), (0.45, 0.9, 80),
                                             (0.55, 1.0, 40), (0.3, 0.0, 120)])
def test_theorem1_monte_carlo_below_bound(p1, p2, n):
    """Pr[R_env(p̂1) ≤ R_env(p̂2)] (Monte Carlo, 20,000 trials) ≤ 4·exp(−(2/9)(Δ2 − Δ1)²·n) < 1.

    The bound is loose: wherever it is below 1 the measured violation rate is ~0.
    """
    d1, d2 = abs(p1 - 0.5), abs(p2 - 0.5)
    bound = theorem1_bound(d1, d2, n)
    assert bound < 1  # a bound that says something
    mc = ranking_violation_mc(p1, p2, n, trials=20_000, rng=np.random.default_rng(1))
    assert mc <= bound


@pytest.mark.parametrize(("p1", "p2", "n"), [(0.5, 0.8, 4), (0.5, 0.7, 10), (0.4, 0.1, 8), (0.55, 0.75, 20)])
def test_ranking_violation_mc_matches_exact_enumeration(p1, p2, n):
    """In the small-n regime (bound ≥ 1, violations frequent) the estimate agrees with the exact sum over
    both binomials, so the estimator is not trivially 0; it stays ≤ the (vacuous) bound."""
    from math import comb

    pmf = [[comb(n, a) * p**a * (1 - p) ** (n - a) for a in range(n + 1)] for p in (p1, p2)]
    r = alpha_reward(np.arange(n + 1) / n)
    exact = sum(pmf[0][a] * pmf[1][b] for a in range(n + 1) for b in range(n + 1) if r[a] <= r[b])
    mc = ranking_violation_mc(p1, p2, n, trials=40_000, rng=np.random.default_rng(3))
    assert exact > 0.01 and mc == pytest.approx(exact, abs=0.01)
    assert mc <= theorem1_bound(abs(p1 - 0.5), abs(p2 - 0.5), n)


def test_theorem1_violations_shrink_with_n():
    """More rollouts rank two task types more reliably; Δ1 ≥ Δ2 is refused."""
    rng = np.random.default_rng(2)
    v = [ranking_violation_mc(0.5, 0.8, n, trials=20_000, rng=rng) for n in (4, 16, 64)]
    assert v[0] > v[1] > v[2]
    with pytest.raises(ValueError, match="Δ1 < Δ2"):
        theorem1_bound(0.3, 0.2, 10)


# ------------------------------------------------------------------------------------ pools
def test_pools_accumulate_persist_and_reload(tmp_path, plans):
    """Both pools are append-only JSONL: valid traces only, reload equals what was written, a torn line is dropped."""
    pools = Pools(tmp_path)
    kept = pools.add_traces([{"task": "t1", "reward": 1.0, "turns": []}, {"task": "t2", "reward": None},
                             {"task": "t3", "reward": 0.0, "masked": True}, {"task": "t4", "reward": float("nan")},
                             {"task": "t5", "reward": 0}])
    assert kept == 2 and [r["task"] for r in pools.d_train] == ["t1", "t5"]
    pools.add_env([env_row(p, w, p_hat=0.5, r_env=1.0, epoch=0) for p, w in zip(plans[:3], (1.0, 2.0, 0.5),
                                                                                 strict=True)])
    again = Pools(tmp_path)
    assert again.d_train == pools.d_train and again.d_env == pools.d_env
    assert [(p.to_json(), w) for p, w in again.env_records()] == [(p.to_json(), w) for p, w in
                                                                  zip(plans[:3], (1.0, 2.0, 0.5), strict=True)]
    again.add_env([env_row(plans[3], 1.5, p_hat=0.4, r_env=0.8, epoch=1)])
    with open(tmp_path / "d_env.jsonl", "a") as f:
        f.write('{"context": "logs", "pl')  # a run killed mid-write
    third = Pools(tmp_path)
    assert len(third.d_env) == 4 and third.d_env[-1]["epoch"] == 1 and third.d_env[0]["context"] == CONTEXT
    with pytest.raises(ValueError, match="context"):
        third.add_env([{"plan": []}])


def test_export_sft_dataset(tmp_path, plans):
    """One {prompt, completion, weight} row per D_env record; the completion parses back to the plan."""
    pools = Pools(tmp_path / "pools")
    pools.add_env([env_row(p, 0.25 * (i + 1), p_hat=0.5, r_env=1.0, epoch=0) for i, p in enumerate(plans[:4])])
    assert export_sft_dataset(pools, tmp_path / "sft.jsonl") == 4
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert all(set(r) == {"prompt", "completion", "weight"} for r in rows)
    assert [r["weight"] for r in rows] == [0.25, 0.5, 0.75, 1.0]
    assert all(CONTEXT in r["prompt"] for r in rows)
    back = json.loads(rows[0]["completion"])
    assert Plan.from_records(back["steps"], back["goal"]) == plans[0]


# ------------------------------------------------------------------------- the simulator
def test_sampled_plans_are_valid_and_render(plans, tmp_path):
    """Plans have 2..max_len compatible steps, start in the context's domain, sometimes chain, and render."""
    assert all(2 <= len(p) <= SIM.max_len for p in plans)
    assert all(SCENARIOS[p.steps[0].scenario].domain == CONTEXT and plan_context(p) == CONTEXT for p in plans)
    for p in plans:
        p.validate()
        compose(p, SIM.render_seed)
        assert all(st.input in (None, i - 1) for i, st in enumerate(p.steps, 1))
    assert any(st.input for p in plans for st in p.steps)  # some steps read the previous output
    assert any(st.input is None for p in plans for st in p.steps[1:])
    assert (render(plans[0], SIM.render_seed, tmp_path / "task") / "instruction.md").exists()
    again = sample_plans(SIM, CONTEXT, 5, np.random.default_rng(0))
    assert again == plans[:5]  # same seed, same plans


def test_initial_simulator_is_the_catalog_prior():
    """Scenarios ∝ prior, skills ∝ p_T(κ | σ) over compatible skills, chaining 1/2, uniform length."""
    c = SIM.contexts.index(CONTEXT)
    prior = np.array([SCENARIOS[s].prior for s in SIM.scenarios])
    np.testing.assert_allclose(SIM.probs("scenario")[c], prior / prior.sum())
    in_domain = np.array([SCENARIOS[s].domain == CONTEXT for s in SIM.scenarios])
    np.testing.assert_allclose(SIM.probs("first")[c], np.where(in_domain, prior, 0) / prior[in_domain].sum())
    s = SIM.scenarios.index("csv-ledger")
    w = np.array([pair_weight("csv-ledger", k) for k in SIM.skills])
    np.testing.assert_allclose(SIM.probs("skill")[c, s], w / w.sum())
    assert {SIM.skills[j] for j in np.flatnonzero(SIM.probs("skill")[c, s])} == set(skills_for("csv-ledger"))
    np.testing.assert_allclose(SIM.probs("chain"), 0.5)
    np.testing.assert_allclose(SIM.probs("length"), 1 / (SIM.max_len - 1))


def test_log_prob_of_a_hand_computed_plan():
    """log π_env = Σ of the factors of the generative process; impossible plans get −inf."""
    c = SIM.contexts.index(CONTEXT)
    s_i, k_i = SIM.scenarios.index, SIM.skills.index
    fresh = Plan((Step("access-log", "topk-count"), Step("csv-ledger", "group-sum")))
    chained = Plan((Step("access-log", "topk-count"), Step("text-list", "distinct-values", input=1)))
    length = math.log(SIM.probs("length")[c, 0])
    first = math.log(SIM.probs("first")[c, s_i("access-log")]) + math.log(
        SIM.probs("skill")[c, s_i("access-log"), k_i("topk-count")])
    assert log_prob(SIM, fresh) == pytest.approx(length + first + math.log(0.5) + math.log(
        SIM.probs("scenario")[c, s_i("csv-ledger")]) + math.log(SIM.probs("skill")[c, s_i("csv-ledger"),
                                                                                   k_i("group-sum")]))
    assert log_prob(SIM, chained) == pytest.approx(length + first + math.log(0.5) + math.log(
        SIM.probs("skill")[c, s_i("text-list"), k_i("distinct-values")]))
    assert log_prob(SIM, Plan((Step("access-log", "topk-count"),))) == -math.inf  # shorter than min_len
    assert log_prob(SIM, fresh, context="vcs") == -math.inf  # first scenario outside the domain


def test_rwr_moves_mass_toward_high_weight_plans(plans):
    """Weighting long plans up raises the expected length and their log-probability relative to short ones."""
    c = SIM.contexts.index(CONTEXT)
    lengths = np.array([len(p) for p in plans])
    weights = rwr_weights((lengths >= 5).astype(float), lam=3.0)
    records = list(zip(plans, weights, strict=True))

    def gap(sim):
        lp = np.array([log_prob(sim, p) for p in plans])
        return lp[weights > 1].mean() - lp[weights < 1].mean()

    def mean_length(sim):
        return float((sim.probs("length")[c] * np.arange(sim.min_len, sim.max_len + 1)).sum())

    sim = SIM
    for _ in range(3):
        new = rwr_update(sim, records, lr=1.0, kl_coef=0.1, init_sim=SIM)
        assert gap(new) > gap(sim) and mean_length(new) > mean_length(sim)
        sim = new
    assert sim.updates == 3 and simulator_kl(sim, SIM) > 0
    other = SIM.contexts.index("vcs")  # contexts without records keep their distribution
    np.testing.assert_allclose(sim.probs("length")[other], SIM.probs("length")[other])


def test_simulator_makes_tasks_harder_as_well_as_easier(plans):
    """GenEnv needs difficulty to move both ways. Kept short plans shorten the generator; then, with every
    batch dropped (the agent outgrew the tasks), the KL penalty's step alone lengthens the plans again and
    moves skills back towards p_T's rarer ones; kept long plans lengthen them as well."""
    c = SIM.contexts.index(CONTEXT)

    def mean_length(sim):
        return float((sim.probs("length")[c] * np.arange(sim.min_len, sim.max_len + 1)).sum())

    short = [(p, 1.0) for p in plans if len(p) == SIM.min_len]
    easy = SIM
    for _ in range(5):
        easy = rwr_update(easy, short, lr=3.0, kl_coef=0.1, init_sim=SIM, max_kl=math.inf, max_step_kl=0.1)
    assert mean_length(easy) < mean_length(SIM) - 0.5
    relaxed = rwr_update(easy, [], lr=3.0, kl_coef=0.1, init_sim=SIM, max_kl=math.inf, max_step_kl=0.1)
    assert mean_length(easy) < mean_length(relaxed) and simulator_kl(relaxed, SIM) < simulator_kl(easy, SIM)
    assert 0 < simulator_kl(relaxed, easy) <= 0.1 + 1e-9  # the per-step cap holds
    long = [(p, 1.0) for p in plans if len(p) == SIM.max_len]
    harder = rwr_update(easy, long, lr=3.0, kl_coef=0.1, init_sim=SIM, max_kl=math.inf, max_step_kl=0.1)
    assert mean_length(harder) > mean_length(relaxed)
    assert rwr_update(SIM, [], lr=3.0, kl_coef=0.1, init_sim=SIM) is SIM  # at π_init with nothing kept: no step


def test_kl_to_the_initial_simulator_stays_under_the_cap(plans):
    """With a tight max_kl the step is shrunk: KL(new ‖ init) ≤ cap at every step, and the cap binds."""
    records = [(p, 5.0 if len(p) >= 5 else 0.1) for p in plans]
    cap, sim = 2e-3, SIM
    for _ in range(4):
        sim = rwr_update(sim, records, lr=5.0, kl_coef=0.0, init_sim=SIM, max_kl=cap)
        assert simulator_kl(sim, SIM) <= cap
    assert simulator_kl(sim, SIM) > 0.9 * cap
    step = rwr_update(SIM, records, lr=5.0, kl_coef=0.0, max_step_kl=1e-4)  # max_kl: off by default
    assert simulator_kl(step, SIM) <= 1e-4


def test_random_simulator_never_changes(plans):
    """GenEnv's baseline: the same generator, returned unchanged by rwr_update."""
    rnd = random_simulator()
    out = rwr_update(rnd, [(p, 3.0) for p in plans], lr=1.0, kl_coef=0.1)
    assert out is rnd and out.updates == 0
    for t, table in rnd.tables().items():
        np.testing.assert_array_equal(table, SIM.tables()[t])


def test_rwr_update_refuses_bad_records(plans):
    """Negative weights and plans the simulator cannot generate are errors, not silently skipped."""
    with pytest.raises(ValueError, match="weight"):
        rwr_update(SIM, [(plans[0], -1.0)], lr=1.0, kl_coef=0.1)
    long = Plan(tuple(Step("text-list", "distinct-values") for _ in range(SIM.max_len + 1)))
    with pytest.raises(ValueError, match="cannot generate"):
        rwr_update(SIM, [(long, 1.0)], lr=1.0, kl_coef=0.1)
    assert rwr_update(SIM, [(plans[0], 0.0)], lr=1.0, kl_coef=0.1) is SIM  # no weight: nothing to learn


def test_one_config_with_the_papers_values_and_doctests():
    """GenEnvConfig carries the paper's values from evokit.reference (α 0.5, k_min 0.1, λ 1.0), RWR on the pool
    by default; bad values name the field; the package's doctests hold."""
    import doctest

    import evokit.genenv.reward
    import evokit.genenv.simulator
    from evokit import reference
    from evokit.genenv import GenEnvConfig

    cfg = GenEnvConfig()
    assert (cfg.alpha, cfg.k_min, cfg.lam) == (reference.GENENV_ALPHA, reference.GENENV_K_MIN,
                                               reference.GENENV_LAMBDA) == (0.5, 0.1, 1.0)
    assert cfg.sim_data == "pool" and cfg.max_step_kl == 0.1 and cfg.max_kl == math.inf
    with pytest.raises(ValueError, match="β > 0"):
        GenEnvConfig(beta=0)
    with pytest.raises(ValueError, match="sim_data"):
        GenEnvConfig(sim_data="all")
    for mod in (evokit.genenv.reward, evokit.genenv.simulator):
        result = doctest.testmod(mod)
        assert result.failed == 0
    assert doctest.testmod(evokit.genenv.reward).attempted > 0


# ------------------------------------------------------------------ D_train replay, weights, static pool
def _trace(epoch: int, task: str, reward: float, i: int) -> dict:
    step = {"scenario": "access-log", "goal": [1], "candidates": ["topk-count"], "choice": 0, "skill": "topk-count",
            "logp": -0.1}
    return {"task": task, "index": i, "reward": reward, "masked": False, "turns": [], "info": {"steps": [step]},
            "epoch": epoch}


def test_replay_draws_live_groups_of_earlier_epochs(tmp_path):
    """D_train as GRPO groups: one per (epoch, task); replay draws only partially solved groups of epochs before
    the given one, without replacement, the same ones for the same generator, as Rollouts with their stored info."""
    pools = Pools(tmp_path)
    rows = [_trace(0, "a", r, i) for i, r in enumerate((1.0, 0.0, 1.0))]  # live
    rows += [_trace(0, "b", 1.0, i) for i in range(3)]  # dead (all pass)
    rows += [_trace(1, "c", r, i) for i, r in enumerate((0.0, 1.0))]  # live
    rows += [_trace(2, "d", r, i) for i, r in enumerate((0.0, 1.0))]  # live, but not before epoch 2
    pools.add_traces(rows)
    assert [len(g) for g in pools.train_groups(2)] == [3, 3, 2]
    got = pools.replay(2, 10, np.random.default_rng(0))
    assert sorted(g[0].task for g in got) == ["a", "c"]
    assert all(r.info["steps"][0]["logp"] == -0.1 for g in got for r in g)
    one = [g[0].task for g in pools.replay(2, 1, np.random.default_rng(5))]
    assert one == [g[0].task for g in pools.replay(2, 1, np.random.default_rng(5))] and len(one) == 1
    assert pools.replay(0, 5, np.random.default_rng(0)) == [] and pools.replay(2, 0, np.random.default_rng(0)) == []


def _results(state, successes: list[list[int]], n: int):
    from evokit.grpo import group_stats
    from evokit.sources import GroupResult, TaskRef

    out = []
    for b, per_task in enumerate(successes):
        for i, k in enumerate(per_task):
            rows = tuple(_trace(state.epoch, f"t{b}{i}", float(j < k), j) for j in range(n))
            out.append(GroupResult(TaskRef(("genenv", state.epoch, b, i), None), group_stats(rows), rows))
    return out


def test_batch_step_records_the_spread_of_rwr_weights(tmp_path):
    """With 2 tasks × 5 rollouts a batch's p̂ resolves 0.4, 0.5, 0.6: batches at 0.5 and 0.4 are kept with the
    different weights e^1 and e^exp(−20·0.01); a batch at 0.2 is dropped. The step records min, max and levels."""
    from evokit.genenv import GenEnvState, batch_step
    from evokit.genenv.source import GenEnvConfig

    cfg = GenEnvConfig(tasks_per_batch=2, min_len=1)
    sim = init_simulator(min_len=1, max_len=5, contexts=("any",))
    plans = sample_plans(sim, "any", 6, np.random.default_rng(1))
    state = GenEnvState(sim, sim, tmp_path, pending=(("any", tuple(plans[:2])), ("any", tuple(plans[2:4])),
                                                     ("any", tuple(plans[4:]))))
    new = batch_step(state, cfg, _results(state, [[3, 2], [2, 2], [1, 1]], 5))  # p̂ = 0.5, 0.4, 0.2
    last = new.last
    assert last["p_hat"] == pytest.approx([0.5, 0.4, 0.2]) and last["kept_share"] == pytest.approx(2 / 3)
    assert last["weights_n"] == 2 and last["weights_levels"] == 2
    assert last["weights_max"] == pytest.approx(math.e) and last["weights_min"] == pytest.approx(math.exp(math.exp(-0.2)))
    assert last["d_env_size"] == 4 and last["pool_weights_levels"] == 2 and last["d_train_groups"] == 6
    assert new.sim.updates == 1


def test_static_augmentation_serves_a_fixed_set_and_never_learns(tmp_path):
    """static_pool: plans sampled once at init (the same for the same run seed); every epoch's tasks come from
    them; the simulator is never updated; the source's summary names the arm."""
    from evokit.genenv import GenEnvSource
    from evokit.genenv.source import GenEnvConfig
    from evokit.sources import Run

    src = GenEnvSource(GenEnvConfig(tasks_per_batch=2, static_pool=5))
    state = src.init(Run(5, seed=3, out=tmp_path))
    assert len(state.static) == 5 and state.static == src.init(Run(5, seed=3, out=tmp_path / "x")).static
    state, refs = src.sample(state, np.random.default_rng(0), 4)
    assert all(p in state.static for _, plans in state.pending for p in plans) and len(refs) == 4
    new = src.update(state, _results(state, [[3, 2], [2, 3]], 5))  # p̂ = 0.5: kept, but nothing learns
    assert new.sim is state.sim and new.sim.updates == 0 and src.summary(new)["simulator"] == "static"
    with pytest.raises(ValueError, match="replay"):
        GenEnvConfig(replay=-1)


# ------------------------------------------------------------------------- the study's claim summaries
def _frame(success: dict, length: dict, epochs: int = 6, seeds: int = 10, solved=None, base: float = 0.15,
           kept=1):
    import pandas as pd

    rows = []
    for arm in success:
        for s in range(seeds):
            for e in range(1, epochs + 1):
                full, none = (solved or {}).get(arm, (0.5, 0.5))
                rows.append({"seed": s, "arm": arm, "epoch": e, "success": success[arm](s, e),
                             "plan_length": length[arm](s, e), "turns": length[arm](s, e),
                             "fully_solved_per_batch": full + 0.01 * s, "unsolved_per_batch": none + 0.01 * s,
                             "base_success": base, "kept_batches": kept(s, e) if callable(kept) else kept})
    return pd.DataFrame(rows)


def test_claim_7_reads_the_registered_parts():
    """Claim 7 as registered: "yes" with the learning arm's last-third interval inside [0.4, 0.6], nearer α than
    random (paired distance above 0) and plan length not falling; "no" when the learning interval lies wholly
    outside the zone, when random is nearer α, or when plan length falls (the simulator reached the zone by
    shortening its tasks); "tie" when the learning interval crosses an edge of the zone."""
    from evokit.studies.genenv import alpha_summary

    into = {"learning": lambda s, e: 0.9 if e <= 4 else 0.5 + 0.01 * s, "random": lambda s, e: 0.85}
    flat = {"learning": lambda s, e: 3.0 + 0.1 * (s % 2), "random": lambda s, e: 3.0}
    ok = alpha_summary(_frame(into, flat), (0.4, 0.6))
    assert ok["last_epochs"] == 2 and ok["learning"]["seeds_in_zone"] == 10 and ok["random"]["seeds_in_zone"] == 0
    assert ok["parts"] == {"learning_in_zone": "yes", "closer_to_alpha_than_random": "yes",
                           "length_not_below_start": "yes"} and ok["reproduced"] == "yes"
    assert ok["first_epoch_in_zone"] == 5
    assert ok["distance_random_minus_learning"]["estimate"] == pytest.approx(0.35 - 0.045)

    shrink = {"learning": lambda s, e: 3.0 - 0.3 * e - 0.05 * s, "random": lambda s, e: 3.0}
    bad = alpha_summary(_frame(into, shrink), (0.4, 0.6))
    assert bad["parts"]["length_not_below_start"] == "no" and bad["reproduced"] == "no"

    below = {"learning": lambda s, e: 0.2 + 0.01 * s, "random": lambda s, e: 0.25 + 0.01 * s}
    low = alpha_summary(_frame(below, flat), (0.4, 0.6))
    assert low["parts"]["learning_in_zone"] == "no" and low["parts"]["closer_to_alpha_than_random"] == "no"
    assert low["reproduced"] == "no" and low["first_epoch_in_zone"] is None

    edge = {"learning": lambda s, e: 0.3 + 0.04 * s, "random": lambda s, e: 0.85}  # last third 0.30–0.66
    crossing = alpha_summary(_frame(edge, flat), (0.4, 0.6))
    assert crossing["parts"]["learning_in_zone"] == "tie" and crossing["parts"]["closer_to_alpha_than_random"] == "yes"
    assert crossing["reproduced"] == "tie"


@pytest.mark.parametrize("change, fails", [
    ({"base": 0.45}, "highest base success on the initial simulator 0.45"),
    ({"kept": 0}, "kept batches per seed of the learning arms in the first third of epochs, pooled 0"),
    # 9 kept in epochs 1–2 over 10 seeds (seed 0 keeps 5, four others 1 each): 0.9 per seed
    ({"kept": lambda s, e: (3 if e == 1 else 2) if s == 0 else (1 if e == 2 and s < 5 else 0)}, "pooled 0.9"),
    ({"seeds": 5}, "seeds 5, needs ≥ 10")])
def test_a_failed_precondition_withholds_claims_7_and_8(change, fails):
    """The paper's starting condition (base agent below the zone), kept batches pooled over seeds in the first
    third and ≥ 10 seeds gate the verdict: with one unmet the summary says which, with its value, instead of
    yes / no / tie."""
    from evokit.studies.genenv import alpha_summary, vs_random_summary

    into = {"learning": lambda s, e: 0.9 if e <= 4 else 0.5 + 0.01 * s, "random": lambda s, e: 0.85}
    flat = {"learning": lambda s, e: 3.0 + 0.1 * (s % 2), "random": lambda s, e: 3.0}
    frame = _frame(into, flat, solved={"learning": (0.6, 0.2), "random": (0.5, 0.5)}, **change)
    for summary in (alpha_summary(frame, (0.4, 0.6)), vs_random_summary(frame)):
        assert summary["reproduced"].startswith("no verdict (precondition: ") and fails in summary["reproduced"]
        assert [p["met"] for p in summary["preconditions"]].count(False) == 1


def test_kept_batches_pool_over_seeds_and_each_seeds_count_is_reported():
    """Seeds that keep no batch early do not withhold when the block keeps ≥ 1 per seed in all: 6 kept in epochs
    1–2 over 10 seeds withholds, 13 does not, with 6 seeds keeping none in both; the counts per seed, and how
    many kept none, are reported beside."""
    from evokit.studies.genenv import alpha_summary

    into = {"learning": lambda s, e: 0.9 if e <= 4 else 0.5 + 0.01 * s, "random": lambda s, e: 0.85}
    flat = {"learning": lambda s, e: 3.0 + 0.1 * (s % 2), "random": lambda s, e: 3.0}
    kept = lambda s, e: (e if s == 0 else int(s < 4 and e == 2)) if e <= 2 else 5  # noqa: E731
    summary = alpha_summary(_frame(into, flat, kept=kept), (0.4, 0.6))
    pooled = summary["preconditions"][-1]
    assert pooled["value"] == pytest.approx(0.6) and not pooled["met"]
    early = summary["kept_batches_first_third"]
    assert early["per_seed"] == {0: 3, 1: 1, 2: 1, 3: 1, **{s: 0 for s in range(4, 10)}} and early["seeds_with_none"] == 6
    more = lambda s, e: (5 if s == 0 else int(s < 4 and e == 2)) if e <= 2 else 0  # noqa: E731
    met = alpha_summary(_frame(into, flat, kept=more), (0.4, 0.6))
    assert met["preconditions"][-1]["value"] == pytest.approx(1.3) and met["reproduced"] == "yes"


def test_vs_random_and_data_efficiency_verdicts():
    """Claim 8: the paper's signs → "yes", the reverse → "no". Claim 9: GenEnv above every other arm → "yes"."""
    import pandas as pd

    from evokit.studies.genenv import data_efficiency_summary, vs_random_summary

    same = {"learning": lambda s, e: 0.5, "random": lambda s, e: 0.5}
    flat = {"learning": lambda s, e: 3.0, "random": lambda s, e: 3.0}
    paper = vs_random_summary(_frame(same, flat, solved={"learning": (0.6, 0.2), "random": (0.5, 0.5)}))
    assert paper["reproduced"] == "yes"
    assert paper["unsolved_per_batch"]["relative_pct"]["estimate"] == pytest.approx(-0.3 / 0.545 * 100)  # random: 0.5 + 0.01·s over 10 seeds
    assert vs_random_summary(_frame(same, flat, solved={"learning": (0.4, 0.7), "random": (0.5, 0.5)}))[
        "reproduced"] == "no"
    rows = [{"seed": s, "arm": a, "score": base + 0.01 * s} for s in range(10)
            for a, base in (("untrained", 0.5), ("static", 0.55), ("random", 0.52), ("learning", 0.6))]
    frame = _frame(same, flat)
    d = data_efficiency_summary(pd.DataFrame(rows), frame)
    assert d["reproduced"] == "yes" and d["genenv_minus"]["static"]["estimate"] == pytest.approx(0.05)
    assert data_efficiency_summary(pd.DataFrame(rows))["reproduced"].startswith("no verdict (precondition: claim 7")
    rows = [{**r, "score": 0.4} if r["arm"] == "learning" else r for r in rows]
    assert data_efficiency_summary(pd.DataFrame(rows), frame)["reproduced"] == "no"


def test_the_base_agent_starts_below_alpha_on_its_initial_simulator_and_above_it_on_p_t(tmp_path):
    """GenEnv's starting condition (docs/preregistration.md, claim 7): on the initial simulator the rule
    chooses for a seed, its base agent succeeds below α on the precondition's own plans; on p_T's own
    plans (tilt 0, up to 5 steps) it succeeds above α, where the α-curriculum could only make tasks harder."""
    from evokit.genenv import GenEnvConfig
    from evokit.reference import GENENV_ALPHA
    from evokit.studies.genenv import SMOKE, base_solver
    from evokit.studies.genenv_start import base_success, choose_start, initial_simulator

    policy = base_solver(tmp_path, 0, SMOKE.corpus_size)
    start = choose_start(policy, 0, GenEnvConfig(), SMOKE.start)
    below = base_success(policy, initial_simulator(start.config(GenEnvConfig()), 0), 32, 0)
    at_p_t = base_success(policy, initial_simulator(GenEnvConfig(init_tilt=0.0, max_len=5), 0), 32, 0)
    assert below < GENENV_ALPHA < at_p_t, (below, at_p_t)


def test_the_registered_size_has_the_registered_batches_and_benchmark_rollouts():
    """The registered design at 10 seeds (docs/preregistration.md, claim 7): batches of ≥ 16 rollouts
    whose p̂ takes at least three values inside |p̂ − α| ≤ k_min, and ≥ 8 rollouts per benchmark task;
    the 5-seed smoke study keeps its batch of 10 (every claim is withheld there anyway), and the full
    size keeps the paper's batches with the registered benchmark rollouts."""
    from evokit.genenv.reward import difficulty_filter
    from evokit.studies.genenv import FULL, SMOKE, sized

    def in_zone(study) -> int:
        n = study.tasks_per_batch * study.rollouts
        return int(difficulty_filter(np.arange(n + 1) / n).sum())

    smoke, registered, full = sized(SMOKE), sized(SMOKE, 10), sized(FULL)
    assert smoke.seeds == 5 and registered.seeds == full.seeds == 10 and sized(FULL, 12).seeds == 12
    assert in_zone(registered) >= 3 and in_zone(full) >= 3
    assert registered.tasks_per_batch * registered.rollouts >= 16
    assert registered.benchmark_rollouts >= 8 and full.benchmark_rollouts >= 8
    assert smoke.tasks_per_batch * smoke.rollouts < 16
    assert sized(SMOKE, 12).seeds == 12 and sized(SMOKE, 12).rollouts == registered.rollouts
