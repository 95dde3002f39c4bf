"""evokit.evolve.baselines: what EE's two baselines share. Both read evokit's procedural tasks only:
a foreign task (no plan and seed in its metadata) is refused by name by the ensemble and by
co-evolution alike.
"""

from __future__ import annotations

import pytest

from evokit.evolve.baselines import BaselineError
from evokit.evolve.coevolution import WeaknessBank, coevolve_round
from evokit.evolve.ensemble import ensemble
from evokit.lineage import LineageStore
from evokit.tasks import write_task


def test_both_baselines_refuse_foreign_tasks(tmp_path):
    task = write_task(tmp_path / "foreign", instruction="Say hi.", dockerfile="FROM debian:bookworm-slim\n",
                      tests={"test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"},
                      solution={"solve.sh": "#!/bin/bash\ntrue\n"})
    store = LineageStore(tmp_path / "store")
    with pytest.raises(BaselineError, match="no plan"):
        ensemble([task], store, budget=1, seed=0)
    with pytest.raises(BaselineError, match="no plan"):
        coevolve_round(WeaknessBank(), [task], store, n=1, round_index=1, seed=0)
