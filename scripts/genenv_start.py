#!/usr/bin/env python
"""GenEnv's starting condition on a block, seed by seed: which seeds the registered rule starts, where,
and which it passes over — before any arm trains.

    python scripts/genenv_start.py                                  # block 900, 10 units
    python scripts/genenv_start.py --seed 0 --units 10
    python scripts/genenv_start.py --seed 0 --units 10 --results results/units10/block0/genenv_study/smoke
    python scripts/genenv_start.py --batches 2 3 4 5 6                # the kept-batch precondition per size

The rule (docs/preregistration.md, claim 7; :mod:`evokit.studies.genenv_start`): per seed, the least
departure from p_T (the smallest τ, then the smallest maximum plan length) whose base success on the
seed's choosing plans lies in the band; a seed with no such grid point is passed over and the block
draws its next seed. Claim 7's precondition — every unit's base success on *another* plan stream
below the zone's lower edge (0.4) — is printed beside each unit, as the notebooks will check it.

Beside it, ``keep``: the chance that the difficulty filter keeps one batch of the study's shape at the
base agent on those plans (:func:`evokit.studies.genenv_start.keep_probability`), and, for each number
of batches per epoch in ``--batches``, the chance that the units keep at least one batch each in the
first third of epochs, pooled (claim 7's kept-batch precondition, read at the base agent: the agent's
learning moves it). This is how the registered batches per epoch were sized.

The folder is a GenEnv study folder (``study.json``, ``seed<s>/solver.pt``, ``start.json``,
``base_success.json``): point ``--results`` at a notebook's study folder and the notebooks reuse the
choices. Exits 0 whether or not the block reaches its units: which seeds do is the measurement.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=900, help="the block's first seed (default 900, the pilot)")
    ap.add_argument("--units", type=int, default=10, help="units (seeds with a start) wanted (default 10)")
    ap.add_argument("--results", default=None,
                    help="study folder to fill or reuse (default results/genenv_start/block<seed>_units<n>)")
    ap.add_argument("--batches", type=int, nargs="+", default=None,
                    help="batches per epoch to read the kept-batch precondition at (default: the study's)")
    args = ap.parse_args(argv)
    if args.units < 1 or (args.batches and min(args.batches) < 1):
        print("genenv_start: --units and --batches must be ≥ 1", file=sys.stderr)
        return 2

    from evokit.errors import UserError
    from evokit.reference import GENENV_ZONE
    from evokit.studies.folder import check_study
    from evokit.studies.genenv import (
        SMOKE,
        arm_config,
        base_solver,
        last_third,
        sized,
        start_success,
        starts,
    )
    from evokit.studies.genenv_start import (
        initial_simulator,
        keep_probability,
        plan_successes,
        pooled_keep_probability,
        start_report,
    )

    study = replace(sized(SMOKE, args.units), first_seed=args.seed)
    out = Path(args.results) if args.results else ROOT / "results" / "genenv_start" / f"block{args.seed}_units{args.units}"
    try:
        check_study(out, study.key())
    except UserError as e:
        print(f"genenv_start: {e}", file=sys.stderr)
        return 2
    drawn = starts(out, study, progress=True)
    passed = start_report(drawn)["passed_over"]
    keep = []
    print(f"{'seed':>5} {'τ':>4} {'max':>4} {'choosing':>9} {'base':>6} {'keep':>6}  base < {GENENV_ZONE[0]}")
    for s in drawn:
        if s.qualifies:
            base = start_success(out, study, s)
            sim = initial_simulator(arm_config(study, "learning", s), s.seed)
            q = plan_successes(base_solver(out / f"seed{s.seed}", s.seed, study.corpus_size), sim, study.base_tasks, s.seed)
            keep.append(keep_probability(q, study.tasks_per_batch, study.rollouts))
            print(f"{s.seed:>5} {s.init_tilt:>4g} {s.max_len:>4} {s.success:9.3f} {base:6.3f} {keep[-1]:6.3f}  "
                  f"{'yes' if base < GENENV_ZONE[0] else 'no'}")
        else:
            p = passed[s.seed]
            print(f"{s.seed:>5} passed over: no grid point in {study.start.band} "
                  f"(grid {p['lowest']:.3f}–{p['highest']:.3f})")
    units = [s for s in drawn if s.qualifies]
    print(f"units {len(units)} of {study.seeds} wanted, {len(drawn)} seeds drawn; rows in {out}")
    first = last_third(study.epochs)
    for b in args.batches or [study.batches_per_epoch]:
        print(f"{b} batches per epoch: {first * b} in the first {first} epochs, expected kept per unit "
              f"{first * b * sum(keep) / max(len(keep), 1):.2f}; P(≥ 1 per unit, pooled) "
              f"{pooled_keep_probability(keep, first * b, len(keep)):.3f}, P(≥ 1 in every unit) "
              f"{math.prod(1 - (1 - p) ** (first * b) for p in keep):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
