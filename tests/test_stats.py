"""evokit.stats: the bootstrap intervals every notebook's claims are asserted on."""

import numpy as np
import pytest

from evokit.stats import Interval, StatsError, difference, interval, per_seed, verdict


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
