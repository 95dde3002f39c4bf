"""Seed admission: the registered band (evokit.seeds.admit_seeds), 1/8 ≤ p ≤ 4/8 on the measuring model,
the longest plan first.

The measurement (measure_seeds) runs a data-pretrained solver in the real sandbox; here its rows are
checked for what admission reads, and admission's rule on given rows (no learner, no p_T).
"""

from __future__ import annotations

import pytest

from evokit.cpu_agent.solvers import build_solver
from evokit.seeds import (
    SeedBand,
    admit_seeds,
    make_seeds,
    measure_seeds,
)


def test_band_admits_only_seeds_that_can_move_longest_plan_first():
    """0/8 (cannot fall, only dead groups) and 5/8 and above are out; the rest by plan length, then turns on
    successful trajectories, then name (seed index): a failed seed's many turns do not rank it first."""
    rows = [{"name": f"s{i}", "pass_rate": p, "success_turns": t, "length": n}
            for i, (p, t, n) in enumerate([(0.0, None, 3), (0.125, 3.0, 2), (0.5, 4.0, 3), (0.375, 5.0, 2),
                                           (0.625, 9.0, 3), (0.25, 2.0, 1), (0.25, 5.0, 2)])]
    assert [r["name"] for r in admit_seeds(rows)] == ["s2", "s3", "s6", "s1", "s5"]
    assert [r["name"] for r in admit_seeds(rows, SeedBand(0.0, 0.25))] == ["s0", "s6", "s1", "s5"]


@pytest.mark.parametrize("lo, hi", [(0.5, 0.25), (-0.1, 0.5), (0.2, 1.5)])
def test_band_refuses_bounds_that_are_not_a_band(lo, hi):
    with pytest.raises(ValueError, match="0 ≤ lo ≤ hi ≤ 1"):
        SeedBand(lo, hi)


def test_measure_seeds_reads_an_independent_solver_and_caches(tmp_path):
    """Pass rate over 8 rollouts and mean turns per seed, with retries (attempts = 3); cached by content hash."""
    rows = make_seeds(3, 0, tmp_path / "s", progress=False, min_steps=1, max_steps=2)
    solver = build_solver("C")
    cache = tmp_path / "filter.jsonl"
    m = measure_seeds(rows, tmp_path / "s", solver, seed=0, attempts=3, cache=cache, workers=4)
    assert [r["name"] for r in m] == [r["name"] for r in rows]
    assert all(0 <= r["pass_rate"] <= 1 and r["length"] <= r["turns"] <= 3 * r["length"] for r in m)
    assert all(r["solver"] == "C" for r in m)
    assert all((r["success_turns"] is None) == (r["pass_rate"] == 0) for r in m)
    assert all(r["success_turns"] is None or r["length"] <= r["success_turns"] <= 3 * r["length"] for r in m)
    again = measure_seeds(rows, tmp_path / "s", solver, seed=0, attempts=3, cache=cache, workers=4)
    assert again == m and len(cache.read_text().splitlines()) == 3
