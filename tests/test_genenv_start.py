"""GenEnv's starting condition chosen per seed (evokit.studies.genenv_start, docs/preregistration.md
claim 7), the block's draw of seeds (evokit.studies.genenv.starts) and scripts/genenv_start.py.
Every base agent here is a real pretrained solver, and every base success a real measurement."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace

import numpy as np
import pytest
from script_support import load_script

from evokit.genenv import GenEnvConfig
from evokit.genenv.reward import difficulty_filter
from evokit.studies.genenv import SMOKE, base_solver, starts, units
from evokit.studies.genenv_start import (
    BASE_STREAM,
    CHOOSING_STREAM,
    START_FILE,
    StartRule,
    base_success,
    choose_start,
    initial_simulator,
    keep_probability,
    plan_successes,
    pooled_keep_probability,
    start_report,
)


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """Base agents of seeds 0–5, cached in one folder laid out as a study's."""
    out = tmp_path_factory.mktemp("agents")
    return out, {s: base_solver(out / f"seed{s}", s, SMOKE.corpus_size) for s in range(6)}


def test_tilting_towards_rare_pairs_lowers_base_success(agents):
    """The grid's direction: for a real base agent, rare pairs first (τ = 8) and longer plans are harder than
    p_T's own plans (τ = 0), which is what lets the rule find a start below the zone."""
    _, policies = agents
    for seed in (0, 1):
        at = {(t, m): base_success(policies[seed], initial_simulator(replace(GenEnvConfig(), init_tilt=t, max_len=m),
                                                                     seed), 32, seed) for t, m in ((0, 6), (8, 6), (8, 12))}
        assert at[(8, 12)] < at[(8, 6)] < at[(0, 6)], at


def test_a_seed_starts_at_the_least_departure_whose_choosing_success_is_in_the_band(agents):
    """The rule on real agents: the grid is walked in its order (τ, then maximum length) and stops at the
    first point in the band, every earlier point lying outside it; a seed whose whole grid misses the band
    has no start. The precondition's plans are another stream, so its measurement at a choice differs from
    the choosing one."""
    _, policies = agents
    rule = SMOKE.start  # the registered rule on fewer plans: the walk is what is tested
    chosen = {s: choose_start(policies[s], s, GenEnvConfig(), rule) for s in (0, 1)}
    assert any(start.qualifies for start in chosen.values())
    for seed, start in chosen.items():
        points = [(g["init_tilt"], g["max_len"]) for g in start.grid]
        inside = [rule.band[0] <= g["success"] <= rule.band[1] for g in start.grid]
        assert points == rule.points()[:len(points)]
        if not start.qualifies:
            assert points == rule.points() and not any(inside), start.grid
            continue
        assert points[-1] == (start.init_tilt, start.max_len) and inside == [False] * (len(inside) - 1) + [True]
        sim = initial_simulator(start.config(GenEnvConfig()), seed)
        assert base_success(policies[seed], sim, rule.tasks, seed, stream=CHOOSING_STREAM) == start.success
        assert base_success(policies[seed], sim, rule.tasks, seed, stream=BASE_STREAM) != start.success


def test_seeds_without_a_start_are_passed_over_and_the_block_draws_the_next(agents):
    """A one-point grid whose band admits only the seeds at or below the median of six real agents: the block's
    units are the first two such seeds in order, every seed drawn before the second is recorded (with its
    grid), and no seed after it is drawn. With too few candidates the block stops short."""
    out, policies = agents
    point = StartRule(tilts=(3.0,), max_lens=(8,), band=(0.0, 1.0), tasks=32)
    values = {s: choose_start(p, s, GenEnvConfig(), point).success for s, p in policies.items()}
    cut = sorted(values.values())[2]
    expected = [s for s in sorted(values) if values[s] <= cut][:2]
    study = replace(SMOKE, seeds=2, start=replace(point, band=(0.0, cut), passed_over=4))
    drawn = starts(out, study)
    assert [s.seed for s in drawn] == list(range(expected[-1] + 1)) and len(drawn) > len(expected), values
    assert [s.seed for s in drawn if s.qualifies] == expected == units(out, study)
    for s in drawn:
        recorded = json.loads((out / f"seed{s.seed}" / START_FILE).read_text())
        assert recorded["qualifies"] == (values[s.seed] <= cut) and recorded["grid"][0]["success"] == values[s.seed]
    report = start_report(drawn)
    assert sorted(report["units"]) == expected and sorted(report["passed_over"]) == sorted(set(range(len(drawn))) - set(expected))

    none = replace(study, start=replace(point, band=(0.999, 1.0), passed_over=1))
    for s in range(3):  # the same agents, in a fresh folder
        (out / "none" / f"seed{s}").mkdir(parents=True)
        shutil.copy(out / f"seed{s}" / "solver.pt", out / "none" / f"seed{s}" / "solver.pt")
    assert [s.seed for s in starts(out / "none", none)] == [0, 1, 2] and units(out / "none", none) == []


def test_a_recorded_start_is_read_not_chosen_again(agents, tmp_path):
    """A seed's start is chosen once, before its arms train: a resumed study reads ``start.json``, so a
    later change of the grid cannot move the start of a seed that has already trained."""
    study = replace(SMOKE, seeds=1)
    first = starts(tmp_path, study)[0]
    assert first.qualifies
    path = tmp_path / "seed0" / START_FILE
    edited = {**json.loads(path.read_text()), "max_len": 12}
    path.write_text(json.dumps(edited))
    assert starts(tmp_path, study)[0].max_len == 12


def test_keep_probability_matches_closed_forms_and_a_simulation_of_batches(agents):
    """The difficulty filter's chance to keep a batch of 4 tasks × 4 rollouts (what sizes claims 7–9's
    batches): every plan at 0.5 gives Binomial(16, ½) ∈ {7, 8, 9}; plans solved always or never, at
    share s, keep a batch exactly when two of four tasks are solved, 6s²(1 − s)²; and on a real base
    agent's plans it agrees with batches simulated by drawing plans and rollouts and applying the filter."""
    assert keep_probability([0.5] * 3, 4, 4) == pytest.approx(sum(math.comb(16, k) for k in (7, 8, 9)) / 2 ** 16)
    for s in (0.1, 0.25, 0.5):
        q = [1.0] * round(100 * s) + [0.0] * round(100 * (1 - s))
        assert keep_probability(q, 4, 4) == pytest.approx(6 * s ** 2 * (1 - s) ** 2)

    _, policies = agents
    q = plan_successes(policies[0], initial_simulator(replace(GenEnvConfig(), init_tilt=3.0, max_len=8), 0), 64, 0)
    assert q.min() >= 0 and q.max() <= 1 and 0 < q.mean() < 1
    rng = np.random.default_rng(7)
    plans = rng.choice(q, size=(40_000, 4))
    p_hat = rng.binomial(4, plans).sum(axis=1) / 16
    simulated = difficulty_filter(p_hat).mean()  # standard error ≤ 0.0025
    assert keep_probability(q, 4, 4) == pytest.approx(simulated, abs=0.01)


def test_pooled_keep_probability_is_the_tail_of_a_sum_of_binomials():
    """Equal chances pool to one binomial; unequal ones are checked against a direct enumeration."""
    p, batches, units = 0.2, 8, 10
    tail = sum(math.comb(batches * units, j) * p ** j * (1 - p) ** (batches * units - j) for j in range(units, batches * units + 1))
    assert pooled_keep_probability([p] * units, batches, units) == pytest.approx(tail)
    keep = [0.1, 0.3]
    direct = sum(math.comb(2, a) * 0.1 ** a * 0.9 ** (2 - a) * math.comb(2, b) * 0.3 ** b * 0.7 ** (2 - b)
                 for a in range(3) for b in range(3) if a + b >= 2)
    assert pooled_keep_probability(keep, 2, 2) == pytest.approx(direct)
    assert pooled_keep_probability(keep, 2, 0) == pytest.approx(1.0)


def test_the_script_reports_each_seeds_start_and_the_precondition(tmp_path, capsys):
    """scripts/genenv_start.py on one unit: exit 0, the row names the choice and the base success on the
    precondition's stream, and the folder is a study folder a notebook can reuse."""
    gs = load_script("genenv_start", tmp_path)
    assert gs.main(["--seed", "0", "--units", "1", "--batches", "2", "4"]) == 0
    out = tmp_path / "results" / "genenv_start" / "block0_units1"
    start = json.loads((out / "seed0" / START_FILE).read_text())
    base = json.loads((out / "seed0" / "base_success.json").read_text())
    assert (base["init_tilt"], base["max_len"]) == (start["init_tilt"], start["max_len"])
    text = capsys.readouterr().out
    assert f"{base['success']:6.3f}" in text and "units 1 of 1 wanted" in text
    assert "2 batches per epoch: 4 in the first 2 epochs" in text and "4 batches per epoch: 8 in the first 2 epochs" in text
    assert (out / "study.json").exists()


def test_the_script_refuses_a_folder_of_another_study_in_one_line(tmp_path, capsys):
    gs = load_script("genenv_start", tmp_path)
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "study.json").write_text(json.dumps({"study": "genenv", "seeds": 99}))
    assert gs.main(["--units", "1", "--results", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("genenv_start: ") and err.count("\n") == 1
    assert gs.main(["--units", "0"]) == 2
    assert gs.main(["--units", "1", "--batches", "0"]) == 2
