"""The independent benchmark (evokit.benchmark): verified, reproducible, apart from the seed pools, and it says so.

Checks that the tasks are built the same way twice (same content hashes), that they share no
content with EE's seed pool drawn with the same seed and lengths (the namespace keeps the streams
apart), that an overlap is refused naming the task and the set, and that a folder built with
another config is refused.
"""

from __future__ import annotations

import json

import pytest

from evokit.benchmark import (
    BenchmarkConfig,
    BenchmarkError,
    BenchmarkOverlapError,
    benchmark_tasks,
    check_disjoint,
)
from evokit.seeds import make_seeds
from evokit.tasks import content_hash

SMALL = BenchmarkConfig(n_tasks=4, min_steps=1, max_steps=2)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return benchmark_tasks(tmp_path_factory.mktemp("bench") / "benchmark", SMALL)


def test_benchmark_is_verified_and_reproducible(bench, tmp_path):
    assert [p.name for p in bench] == [f"bench-{i:04d}" for i in range(4)]
    again = benchmark_tasks(tmp_path / "again", SMALL)
    assert [content_hash(p) for p in again] == [content_hash(p) for p in bench]
    rows = [json.loads(x) for x in (bench[0].parent / "seeds.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(SMALL.min_steps <= r["length"] <= SMALL.max_steps for r in rows)


def test_benchmark_apart_from_the_seed_pool_of_the_same_seed(bench, tmp_path):
    seeds = [tmp_path / "seeds" / r["name"] for r in make_seeds(4, SMALL.seed, tmp_path / "seeds", progress=False,
                                                                  min_steps=1, max_steps=2)]
    check_disjoint(bench, {"seeds": seeds})  # raises on a shared task
    assert not {content_hash(p) for p in bench} & {content_hash(p) for p in seeds}
    assert benchmark_tasks(bench[0].parent, SMALL, disjoint_from={"seeds": seeds}) == bench


def test_overlap_is_refused_naming_the_set(bench):
    with pytest.raises(BenchmarkOverlapError, match=r"training set.*evolution store: .*bench-0002"):
        check_disjoint(bench, {"evolution store": [bench[2]]})


def test_another_config_in_the_same_folder_is_refused(bench):
    with pytest.raises(BenchmarkError, match="holds a benchmark built with"):
        benchmark_tasks(bench[0].parent, BenchmarkConfig(n_tasks=5, min_steps=1, max_steps=2))
    with pytest.raises(BenchmarkError, match="min_steps"):
        BenchmarkConfig(min_steps=3, max_steps=2)
