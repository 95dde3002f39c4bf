"""evokit.stats: the intervals every notebook's claims are asserted on, and their measured coverage."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats as sps

from evokit.stats import Interval, StatsError, difference, interval, pass_at_k, per_seed, verdict

#: The kinds of per-unit value the studies produce, with their true mean: (name, draw(rng, reps, n), mean).
#: Pass rates are over 8 rollouts; a unit averages a few tasks (as a run averages its groups).
KINDS = [
    ("normal", lambda rng, r, n: rng.normal(0.0, 1.0, (r, n)), 0.0),
    ("pass rate p=0.15, 4 tasks", lambda rng, r, n: rng.binomial(8, 0.15, (r, n, 4)).mean(axis=2) / 8, 0.15),
    ("paired pass-rate difference 0.3 − 0.2, 2 tasks",
     lambda rng, r, n: (rng.binomial(8, 0.3, (r, n, 2)) - rng.binomial(8, 0.2, (r, n, 2))).mean(axis=2) / 8, 0.1),
]


def coverage(draws: np.ndarray, truth: float, **kw) -> float:
    """Share of simulated blocks (rows of ``draws``) whose 95 % interval holds the true mean."""
    ivs = [interval(row, seed=i, **kw) for i, row in enumerate(draws)]
    return float(np.mean([iv.lo <= truth <= iv.hi for iv in ivs]))


@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("kind", KINDS, ids=[k[0] for k in KINDS])
def test_the_default_interval_covers_at_least_93_percent_at_the_sizes_the_studies_use(kind, n):
    """Measured coverage of :func:`interval` (the t interval) over 3,000 simulated null blocks of
    n units; the simulation's own 95 % margin is ± 0.008, so a true 0.95 stays above 0.93."""
    _, draw, truth = kind
    measured = coverage(draw(np.random.default_rng([20261206, n]), 3000, n), truth)
    assert measured >= 0.93, f"coverage {measured:.3f} at n = {n}"


def test_the_percentile_bootstrap_covers_less_than_93_percent_at_5_units():
    """The same measurement fails the percentile bootstrap at n = 5 (≈ 0.84), so the test above can fail."""
    draws = np.random.default_rng([20261206, 5]).normal(0.0, 1.0, (1000, 5))
    assert coverage(draws, 0.0, method="percentile", n_boot=1000) < 0.93


def test_welch_difference_covers_at_least_93_percent_with_unequal_spreads():
    rng = np.random.default_rng([20261206, 7])
    a, b = rng.normal(0.3, 1.0, (3000, 5)), rng.normal(0.0, 0.2, (3000, 5))
    ivs = [difference(x, y, paired=False) for x, y in zip(a, b, strict=True)]
    assert np.mean([iv.lo <= 0.3 <= iv.hi for iv in ivs]) >= 0.93


def test_a_statistic_other_than_the_mean_gets_bca_and_the_t_interval_refuses_it():
    xs = [0.1, 0.4, 0.35, 0.8, 0.2, 0.6]
    iv = interval(xs, stat=np.median)
    assert iv.method == "bca" and iv.lo <= iv.estimate <= iv.hi and iv.estimate == pytest.approx(0.375)
    with pytest.raises(StatsError, match="t interval is for a mean"):
        interval(xs, stat=np.median, method="t")


def test_constant_values_give_a_point_interval_and_one_unit_none():
    assert (interval([0.5] * 5).lo, interval([0.5] * 5).hi) == (0.5, 0.5)
    one = interval([0.5], min_n=1)
    assert one.estimate == 0.5 and np.isnan(one.lo) and np.isnan(one.hi)


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
    assert interval(xs, method="percentile", seed=1) == interval(list(xs), method="percentile", seed=1)
    assert interval(xs, method="percentile", seed=1) != interval(xs, method="percentile", seed=2)


@pytest.mark.parametrize("xs, msg", [([0.5], "at least 2 units"), ([0.1, float("nan")], "finite")])
def test_bad_input_names_the_problem(xs, msg):
    with pytest.raises(StatsError, match=msg):
        interval(xs, name="pass rate")


def test_paired_difference_needs_equal_units():
    with pytest.raises(StatsError, match="as many units"):
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


@pytest.mark.parametrize("n", [5, 10])
def test_a_true_effect_of_the_stated_mde_is_found_about_80_percent_of_the_time(n):
    """The MDE blocks of n normal units state (its root mean square over 3,000 null blocks: s² is
    unbiased for σ², s is not), then 3,000 blocks with that true effect: the share whose interval lies above 0 is the design's power, stated as 0.8
    (± 0.015 is the simulation's own 95 % margin; the t approximation of the noncentral t adds < 0.03)."""
    rng = np.random.default_rng([20261206, 11, n])
    mde = float(np.sqrt(np.mean([interval(row).mde ** 2 for row in rng.normal(0.0, 1.0, (3000, n))])))
    found = np.mean([interval(row).lo > 0 for row in rng.normal(mde, 1.0, (3000, n))])
    assert 0.74 <= found <= 0.86, f"power {found:.3f} at the stated MDE {mde:.3f} (n = {n})"
    welch = difference(rng.normal(0, 1, n), rng.normal(0, 1, n), paired=False)
    assert welch.df is not None and welch.mde > interval(rng.normal(0, 1, n)).mde / 2


def test_a_recorded_interval_reads_back_as_the_same_interval():
    """summary.json holds ``as_dict`` with the derived ``mde``; reading it back gives the interval again."""
    for iv in (interval([0.1, 0.4, 0.2, 0.5]), difference([1, 2, 3], [2, 2, 5], paired=False),
               interval([0.1, 0.9, 0.3, 0.2, 0.8], method="bca")):
        assert Interval.from_dict(iv.as_dict()) == iv


def test_a_design_sized_from_a_pilot_finds_the_effect_about_80_percent_of_the_time():
    """Sizing from a pilot (claims 6 and 9): from a 10-unit pilot of sd 0.1, ``units_to_detect(0.05)``
    gives an n at which a true effect of 0.05 puts the t interval above 0 in about 80 % of simulated
    runs, and n − 1 units do it less often; a pilot spread the effect already clears needs only the
    10-unit floor, and a one-unit pilot (no interval) has no spread to size from."""
    rng = np.random.default_rng(3)
    pilot = interval(rng.normal(0.0, 0.1, 10))
    n = pilot.units_to_detect(0.05)
    sd = (pilot.hi - pilot.lo) / 2 / sps.t(9).ppf(0.975) * np.sqrt(10)
    power = {m: np.mean([interval(row).lo > 0 for row in rng.normal(0.05, sd, (3000, m))]) for m in (n - 1, n)}
    assert n > 10 and 0.77 <= power[n] <= 0.86 and power[n - 1] < power[n], (n, power)
    assert interval(rng.normal(0.0, 0.01, 10)).units_to_detect(0.05) == 10
    assert Interval(0.3, float("nan"), float("nan"), n=1).units_to_detect(0.05) is None
