"""Claim 4's control arms (evokit.curricula.controls): seeds-only serves generation 0 alone; the
generation-matched control serves, slot by slot, an environment of the generation EL served there,
from any lineage; EL's schedule is read back from its steps.jsonl. Hand-made environment rows: the
sources only choose folders, so no sandbox is needed to test what they choose."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from evokit.curricula import takes_envs
from evokit.curricula.controls import el_schedule
from evokit.curriculum import EnvRow
from evokit.sources import Run, make_source


def store(lineages=3, generations=3, per_generation=2) -> tuple[EnvRow, ...]:
    rows = [EnvRow(f"L{i}", 0, 1, path=None) for i in range(lineages)]
    rows += [EnvRow(f"L{i}", g, k) for i in range(lineages) for g in range(1, generations) for k in range(1, per_generation + 1)]
    return tuple(rows)


def serve(source, steps: int, n: int, seed: int = 0) -> list[list[tuple]]:
    rng, state = np.random.default_rng(seed), source.init(Run(8))
    out = []
    for _ in range(steps):
        state, refs = source.sample(state, rng, n)
        out.append([r.key for r in refs])
        state = source.update(state, [])
    return out


def test_seeds_only_serves_the_seeds_alone_distinct_within_a_step():
    src = make_source("seeds-only", envs=store())
    served = serve(src, steps=50, n=2)
    assert all(key[1] == 0 for step in served for key in step)
    assert all(len(set(step)) == 2 for step in served)  # without replacement while n ≤ 3 seeds
    assert set(Counter(key[0] for step in served for key in step)) == {"L0", "L1", "L2"}
    assert takes_envs("seeds-only") and takes_envs("matched")
    # a lineage given without its seed (a task list, or a store cut at generation 1): its first environment
    later = make_source("seeds-only", envs=tuple(r for r in store() if r.generation > 0 and r.k == 1))
    assert {key for step in serve(later, steps=20, n=2) for key in step} == {("L0", 1, 1), ("L1", 1, 1), ("L2", 1, 1)}
    with pytest.raises(ValueError, match="no environments"):
        make_source("seeds-only", envs=()).init(Run(8))


def test_matched_serves_els_generations_slot_by_slot_from_any_lineage():
    schedule = ((0, 0), (0, 1), (1, 2), (2, 2)) * 25
    src = make_source("matched", envs=store(), schedule=schedule)
    served = serve(src, steps=100, n=2, seed=3)
    assert [tuple(key[1] for key in step) for step in served] == list(schedule)
    lineages_at_2 = Counter(key[0] for step in served for key in step if key[1] == 2)
    assert set(lineages_at_2) == {"L0", "L1", "L2"}  # uniform over the generation, not EL's lineage
    ks = Counter(key[2] for step in served for key in step if key[1] == 1)
    assert set(ks) == {1, 2}
    assert src.done(src.init(Run(8))) is False


def test_matched_refuses_what_it_cannot_match():
    with pytest.raises(ValueError, match="no schedule"):
        make_source("matched", envs=store()).init(Run(8))
    with pytest.raises(ValueError, match=r"generation\(s\) \[5\]"):
        make_source("matched", envs=store(), schedule=((5, 0),)).init(Run(8))
    src = make_source("matched", envs=store(), schedule=((0, 1),))
    with pytest.raises(ValueError, match="asks for 3 tasks, EL served 2"):
        src.sample(src.init(Run(8)), np.random.default_rng(0), 3)
    with pytest.raises(ValueError, match="past EL's schedule of 1 steps"):
        serve(src, steps=2, n=2)


def test_el_schedule_reads_the_served_generations_in_step_order(tmp_path):
    rows = [{"step": t, "source": "el", "served": [{"env": ["L0", g, 1]}, {"env": ["L1", 0, 1]}]}
            for t, g in ((1, 2), (0, 1))]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert el_schedule(tmp_path) == ((1, 0), (2, 0))
    (tmp_path / "random").mkdir()
    (tmp_path / "random" / "steps.jsonl").write_text(json.dumps({**rows[0], "source": "random"}) + "\n")
    with pytest.raises(ValueError, match="no EL run's steps.jsonl"):
        el_schedule(tmp_path / "random")
