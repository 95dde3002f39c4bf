"""EE's seed filter (evokit.seeds.select_seeds): pass rate ≤ 4/8 under an independent solver, the longest first.

The measurement (measure_seeds) runs a data-pretrained solver of another mixture than any learner
in the real sandbox; here its rows are checked for what the filter reads, and the filter's rule on
given rows (no learner, no p_T).
"""

from __future__ import annotations

import pytest

from evokit.seeds import MAX_SEED_PASS, make_seeds, measure_seeds, select_seeds
from evokit.solvers import build_solver


def test_filter_keeps_hard_seeds_longest_first():
    rows = [{"name": f"s{i}", "pass_rate": p, "turns": t, "length": n}
            for i, (p, t, n) in enumerate([(0.0, 6.0, 3), (0.5, 6.0, 2), (0.625, 9.0, 3), (0.25, 2.0, 1),
                                           (1.0, 3.0, 1), (0.375, 6.0, 3)])]
    kept = select_seeds(rows, 4)
    assert [r["name"] for r in kept] == ["s0", "s5", "s1", "s3"]  # ≤ 4/8; turns, then length, then name
    assert all(r["pass_rate"] <= MAX_SEED_PASS for r in kept)
    with pytest.raises(ValueError, match="only 4 of 6 candidate seeds"):
        select_seeds(rows, 5)


def test_measure_seeds_reads_an_independent_solver_and_caches(tmp_path):
    """Pass rate over 8 rollouts and mean turns per seed, with retries (attempts = 3); cached by content hash."""
    rows = make_seeds(3, 0, tmp_path / "s", progress=False, min_steps=1, max_steps=2)
    solver = build_solver("C")
    cache = tmp_path / "filter.jsonl"
    m = measure_seeds(rows, tmp_path / "s", solver, seed=0, attempts=3, cache=cache, workers=4)
    assert [r["name"] for r in m] == [r["name"] for r in rows]
    assert all(0 <= r["pass_rate"] <= 1 and r["length"] <= r["turns"] <= 3 * r["length"] for r in m)
    assert all(r["solver"] == "C" for r in m)
    again = measure_seeds(rows, tmp_path / "s", solver, seed=0, attempts=3, cache=cache, workers=4)
    assert again == m and len(cache.read_text().splitlines()) == 3
