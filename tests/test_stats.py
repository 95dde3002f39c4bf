"""evokit.stats: the bootstrap intervals every notebook's claims are asserted on."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from evokit.stats import Interval, StatsError, difference, interval, pass_at_k, per_seed, verdict


def test_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """Coverage of the percentile bootstrap on repeated draws (n = 20 seeds) from a known
    distribution: the property the notebooks rely on, measured rather than assumed."""
    rng = np.random.default_rng(1)
    hits = 0
    trials = 300
    for t in range(trials):
        xs = rng.exponential(1.0, size=20)  # skewed, true mean 1
        iv = interval(xs, n_boot=1000, seed=t)
        hits += iv.lo <= 1.0 <= iv.hi
    assert 0.88 <= hits / trials <= 0.98


def test_paired_difference_is_narrower_than_unpaired_when_seeds_share_noise():
    rng = np.random.default_rng(2)
    seed_effect = rng.normal(0, 1.0, size=10)  # each seed's tasks are easier or harder for both
    a = seed_effect + 0.5 + rng.normal(0, 0.1, size=10)
    b = seed_effect + rng.normal(0, 0.1, size=10)
    paired = difference(a, b, paired=True)
    unpaired = difference(a, b, paired=False)
    assert paired.hi - paired.lo < (unpaired.hi - unpaired.lo) / 3
    assert verdict(paired) == "above"
    assert verdict(unpaired) == "overlaps"


def test_verdict_reads_the_interval_not_the_estimate():
    assert verdict(Interval(0.3, 0.1, 0.5, 5)) == "above"
    assert verdict(Interval(-0.3, -0.5, -0.1, 5)) == "below"
    assert verdict(Interval(0.3, -0.1, 0.5, 5)) == "overlaps"


def test_same_rows_same_interval():
    xs = [0.2, 0.4, 0.1, 0.9, 0.5]
    assert interval(xs) == interval(list(xs))
    assert interval(xs, seed=1) != interval(xs, seed=2)


@pytest.mark.parametrize("xs, msg", [([0.5], "at least 2 seeds"), ([0.1, float("nan")], "finite")])
def test_bad_input_names_the_problem(xs, msg):
    with pytest.raises(StatsError, match=msg):
        interval(xs, name="pass rate")


def test_paired_difference_needs_equal_seeds():
    with pytest.raises(StatsError, match="as many seeds"):
        difference([1, 2, 3], [1, 2], paired=True)


def test_per_seed_groups_rows_by_seed():
    rows = [{"seed": 1, "r": 1.0}, {"seed": 0, "r": 0.0}, {"seed": 1, "r": 0.0}]
    assert per_seed(rows, lambda rs: np.mean([r["r"] for r in rs])) == {0: 0.0, 1: 0.5}


def _pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    """The definition itself: the share of all k-subsets of n samples (c of them passing) with a pass."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_the_share_of_k_subsets_with_a_pass(n):
    """Chen et al.'s product against enumerating every k-subset, for every (c, k) with n ≤ 8: the
    edges c = 0, c = n and k = n included."""
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_by_enumeration(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_for_many_samples_matches_a_seeded_monte_carlo():
    """n = 200 is past what enumeration reaches (C(200, 10) ≈ 2e16 subsets): a Monte Carlo of 20 000
    seeded draws agrees within 5 standard errors."""
    n, c, k, draws = 200, 7, 10, 20_000
    rng = np.random.default_rng(0)
    passing = np.zeros(n, dtype=bool)
    passing[:c] = True
    hits = np.array([passing[rng.choice(n, size=k, replace=False)].any() for _ in range(draws)])
    p = hits.mean()
    se = math.sqrt(p * (1 - p) / draws)
    assert abs(pass_at_k(n, c, k) - p) < 5 * se
    assert pass_at_k(n, c, k) > 1 - (1 - c / n) ** k  # the plug-in estimate is biased low


@pytest.mark.parametrize("n, c, k", [(2000, 3, 100), (5000, 4990, 1000), (1200, 600, 600)])
def test_pass_at_k_matches_exact_binomials_where_floats_of_them_overflow(n, c, k):
    """Past n ≈ 1030 C(n, k) exceeds a float; exact integer binomials (math.comb, as a Fraction) give the truth."""
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n, c, k, says", [(4, 1, 5, "k=5 > n=4"), (4, 5, 1, "c must lie"), (4, -1, 1, "c must lie"),
                                           (0, 0, 1, "at least 1"), (4, 1, 0, "at least 1"), (4, 1.5, 1, "integer")])
def test_pass_at_k_refuses_what_it_cannot_estimate(n, c, k, says):
    with pytest.raises(ValueError, match=says):
        pass_at_k(n, c, k)
