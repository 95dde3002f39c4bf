"""Issue check at full size (slow): 12 seeds × 15 generations at each effort, then re-verify everything.

Run with ``make test-slow``. Every stored environment must pass the three verifiers again from
scratch, and the index must agree with the folders.
"""

from __future__ import annotations

import pytest

from evokit.evolve import EvolveConfig, evolve
from evokit.seeds import make_seeds, seed_dirs
from evokit.verify import VerifyConfig, verify_many


@pytest.mark.slow
@pytest.mark.parametrize("effort", ["low", "high", "max"])
def test_twelve_seeds_fifteen_generations(tmp_path_factory, effort):
    """Evolve 12 seeds for 15 generations; re-verify every environment; check the index."""
    seeds = tmp_path_factory.mktemp("seeds")
    make_seeds(12, 0, seeds, progress=False)
    dirs = seed_dirs(seeds)
    store = evolve(dirs, tmp_path_factory.mktemp(f"store-{effort}"), EvolveConfig(generations=15, effort=effort),
                   progress=False)
    envs = store.envs()
    assert store.check() == []
    assert len({e.lineage for e in envs}) == 12
    assert max(e.generation for e in envs) == 15
    verdicts = verify_many([store.path(e) for e in envs], VerifyConfig(), progress=False)
    failed = [(v.task, [c.name for c in v.failures]) for v in verdicts if not v.passed]
    assert not failed, failed
