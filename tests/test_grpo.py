"""GRPO arithmetic (evokit.grpo): advantages with and without std scaling, zero advantage for dead
groups, the clipped surrogate's clipping, the k3 KL estimator, group shares, and the dead-group
probabilities quoted in papers.md (G = 8: 66 % at p = 0.05, 43 % at p = 0.9).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evokit.grpo import (
    GroupStats,
    batch_stats,
    clipped_policy_loss,
    dead_group_probability,
    exact_kl,
    group_advantages,
    group_stats,
    kl_penalty,
    usable,
)


def stats(rows) -> list[GroupStats]:
    return [GroupStats(tuple(float(x) for x in r), 0) for r in np.asarray(rows)]


def test_advantages_with_std_scaling_match_the_formula():
    """Â_i = (r_i − mean)/(std + ε) with the sample std (ddof = 1, as TRL)."""
    r = np.array([[1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], [0.2, 0.4, 0.9, 0.1, 0.0, 0.3, 0.5, 0.6]])
    a = group_advantages(r)
    expected = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(a, expected)
    np.testing.assert_allclose(a.mean(1), 0.0, atol=1e-12)
    np.testing.assert_allclose(group_advantages(r, ddof=0), (r - r.mean(1, keepdims=True))
                               / (r.std(1, keepdims=True) + 1e-4))


def test_dr_grpo_advantages_are_only_centred():
    """scale='none' (Dr.GRPO): Â_i = r_i − mean, the std is not divided out."""
    r = np.array([[1.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(group_advantages(r, scale="none"), [[0.75, -0.25, -0.25, -0.25]])


@pytest.mark.parametrize("scale", ["group", "none"])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.37])
def test_dead_groups_get_zero_advantage(scale, value):
    """A group whose rewards are all equal has Â = 0 for every rollout, under both scalings."""
    r = np.full((3, 8), value)
    assert np.all(group_advantages(r, scale=scale) == 0.0)


def test_advantage_input_errors():
    """Wrong shapes, G < 2 and unknown scalings are refused with a message naming the problem."""
    with pytest.raises(ValueError, match="n_groups, G"):
        group_advantages([1.0, 0.0])
    with pytest.raises(ValueError, match="G ≥ 2"):
        group_advantages([[1.0], [0.0]])
    with pytest.raises(ValueError, match="Dr.GRPO"):
        group_advantages([[1.0, 0.0]], scale="batch")


@pytest.mark.parametrize(
    ("ratio", "adv", "eps_low", "eps_high", "loss", "clipped"),
    [
        (1.0, 1.0, 0.2, 0.2, -1.0, False),  # on-policy: −ρÂ
        (2.0, 1.0, 0.2, 0.2, -1.2, True),  # Â > 0, ρ above 1 + ε: clipped at 1.2
        (2.0, 1.0, 0.2, 0.28, -1.28, True),  # DAPO clip-higher
        (1.1, 1.0, 0.2, 0.2, -1.1, False),  # inside the trust region
        (0.5, 1.0, 0.2, 0.2, -0.5, False),  # Â > 0, ρ below 1 − ε: min keeps ρÂ (no clip)
        (0.5, -1.0, 0.2, 0.2, 0.8, True),  # Â < 0, ρ below 1 − ε: clipped at 0.8
        (2.0, -1.0, 0.2, 0.2, 2.0, False),  # Â < 0, ρ large: the unclipped, larger loss is kept
    ],
)
def test_clipping_behaviour(ratio, adv, eps_low, eps_high, loss, clipped):
    """−min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) element by element, and the clip fraction counts active clips."""
    got, frac = clipped_policy_loss([np.log(ratio)], [0.0], [adv], eps_low, eps_high)
    got = float(got)
    assert got == pytest.approx(loss)
    assert frac == (1.0 if clipped else 0.0)


def test_clipped_loss_broadcasts_sequence_advantages_and_masks_padding():
    """A per-sequence Â (n, 1) applies to every token; masked tokens do not count."""
    new = np.log(np.array([[1.0, 2.0, 9.0], [1.0, 1.0, 1.0]]))
    old = np.zeros_like(new)
    mask = np.array([[True, True, False], [True, True, True]])
    loss, frac = clipped_policy_loss(new, old, [[1.0], [-2.0]], mask=mask)
    assert float(loss) == pytest.approx((-1.0 - 1.2 + 2.0 + 2.0 + 2.0) / 5)
    assert frac == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="mask"):
        clipped_policy_loss([0.0], [0.0], [1.0], mask=[False])


def test_k3_is_nonnegative_and_unbiased():
    """E_{x∼π}[k3(x)] = KL(π ‖ π_ref) exactly on a categorical; k3 ≥ 0 and = 0 when π = π_ref."""
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.2, 0.6])
    k3 = kl_penalty(np.log(p), np.log(q)).numpy()
    assert np.all(k3 >= 0)
    assert (p * k3).sum() == pytest.approx((p * np.log(p / q)).sum())
    assert np.all(kl_penalty(np.log(p), np.log(p)).numpy() == 0.0)


def test_clipped_loss_gradient_is_the_surrogate_gradient():
    """The loss keeps the graph: ∂loss/∂log π_new = −ρ·Â where unclipped, 0 where the clip is active."""
    new = torch.tensor([0.0, np.log(2.0)], requires_grad=True)
    loss, _ = clipped_policy_loss(new, torch.zeros(2), torch.tensor([1.0, 1.0]))
    loss.backward()
    assert new.grad.tolist() == pytest.approx([-0.5, 0.0])


def test_exact_kl_matches_the_categorical_formula_and_ignores_masked_entries():
    """Σ π log(π/π_ref) over the allowed entries; −inf outside the mask contributes nothing (no NaN)."""
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    mask = torch.tensor([[True, True, True, False]])
    lp = torch.log(torch.cat([p, torch.zeros(1)]))[None]
    lq = torch.log(torch.cat([q, torch.zeros(1)]))[None]
    assert float(exact_kl(lp, lq, mask)) == pytest.approx(float((p * torch.log(p / q)).sum()), rel=1e-5)


def test_group_shares():
    """Dead = all rewards equal (any value); partially solved = 1..G−1 successes."""
    r = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [0.5, 0.5, 0.5, 0.5]]
    s = batch_stats(stats(r))
    assert s["dead_group_share"] == pytest.approx(3 / 5)
    assert s["partially_solved_share"] == pytest.approx(2 / 5)
    assert s["fully_solved"] == 1 and s["unsolved"] == 2  # the 0.5 group solves nothing
    half = [GroupStats(g.rewards, 0, success=0.5) for g in stats(r)]
    assert batch_stats(half)["partially_solved_share"] == pytest.approx(2 / 5)  # the 0.5 group: all succeed


def test_fractional_rewards_dead_means_equal_rewards_not_equal_successes():
    """A group of rewards (0.2, 0.6) solves nothing yet is live: its advantages are not 0."""
    g = GroupStats((0.2, 0.6), 0)
    assert g.solved == 0 and g.pass_rate == 0.0 and not g.dead and not g.partially_solved
    assert np.any(group_advantages([list(g.rewards)]) != 0)


def test_masked_rollouts_count_in_no_statistic_but_the_masked_share():
    """The one usable-rollout rule: masked, missing or non-finite rewards are left out."""
    rows = [{"reward": 1.0, "masked": False}, {"reward": 0.0, "masked": False}, {"reward": 1.0, "masked": True},
            {"reward": None, "masked": False}, {"reward": float("nan"), "masked": False}]
    assert [usable(r) for r in rows] == [True, True, False, False, False]
    g = group_stats(rows)
    assert (g.n, g.masked, g.pass_rate) == (2, 3, 0.5)
    assert batch_stats([g])["masked_share"] == pytest.approx(3 / 5)
    assert group_stats([{"reward": None, "masked": True}] * 3).pass_rate is None


def test_dead_group_probability_values_from_papers_md():
    """p^G + (1−p)^G: 0.66 at p = 0.05 and 0.43 at p = 0.9 for G = 8; ½ is the minimum."""
    assert dead_group_probability(0.05, 8) == pytest.approx(0.6634, abs=1e-4)
    assert dead_group_probability(0.9, 8) == pytest.approx(0.4305, abs=1e-4)
    assert round(dead_group_probability(0.05, 8), 2) == 0.66 and round(dead_group_probability(0.9, 8), 2) == 0.43
    grid = np.linspace(0, 1, 101)
    probs = dead_group_probability(grid, 8)
    assert grid[np.argmin(probs)] == pytest.approx(0.5) and probs[0] == probs[-1] == 1.0


def test_dead_group_probability_matches_simulated_groups():
    """The formula agrees with the dead share of simulated binary groups (fixed seed)."""
    rng = np.random.default_rng(0)
    for p in (0.05, 0.3, 0.9):
        groups = rng.random((40_000, 8)) < p
        share = batch_stats(stats(groups.astype(float)))["dead_group_share"]
        assert share == pytest.approx(dead_group_probability(p, 8), abs=0.01)


def test_doctests():
    """The docstring examples of evokit.grpo hold (pytest does not collect module doctests by default)."""
    import doctest

    import evokit.grpo

    result = doctest.testmod(evokit.grpo)
    assert result.attempted > 0 and result.failed == 0
