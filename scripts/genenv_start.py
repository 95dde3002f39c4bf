#!/usr/bin/env python
"""GenEnv's starting condition on a block, seed by seed: which seeds the registered rule starts, where,
and which it passes over — before any arm trains.

    python scripts/genenv_start.py                                  # block 900, 10 units
    python scripts/genenv_start.py --seed 0 --units 10
    python scripts/genenv_start.py --seed 0 --units 10 --results results/units10/block0/genenv_study/smoke

The rule (docs/preregistration.md, claim 7; :mod:`evokit.studies.genenv_start`): per seed, the least
departure from p_T (the smallest τ, then the smallest maximum plan length) whose base success on the
seed's choosing plans lies in the band; a seed with no such grid point is passed over and the block
draws its next seed. Claim 7's precondition — every unit's base success on *another* plan stream
below the zone's lower edge (0.4) — is printed beside each unit, as the notebooks will check it.

The folder is a GenEnv study folder (``study.json``, ``seed<s>/solver.pt``, ``start.json``,
``base_success.json``): point ``--results`` at a notebook's study folder and the notebooks reuse the
choices. Exits 0 whether or not the block reaches its units: which seeds do is the measurement.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args(argv)
    if args.units < 1:
        print("genenv_start: --units must be ≥ 1", file=sys.stderr)
        return 2

    from evokit.errors import UserError
    from evokit.reference import GENENV_ZONE
    from evokit.studies.folder import check_study
    from evokit.studies.genenv import SMOKE, sized, start_success, starts
    from evokit.studies.genenv_start import start_report

    study = replace(sized(SMOKE, args.units), first_seed=args.seed)
    out = Path(args.results) if args.results else ROOT / "results" / "genenv_start" / f"block{args.seed}_units{args.units}"
    try:
        check_study(out, study.key())
    except UserError as e:
        print(f"genenv_start: {e}", file=sys.stderr)
        return 2
    drawn = starts(out, study, progress=True)
    passed = start_report(drawn)["passed_over"]
    print(f"{'seed':>5} {'τ':>4} {'max':>4} {'choosing':>9} {'base':>6}  base < {GENENV_ZONE[0]}")
    for s in drawn:
        if s.qualifies:
            base = start_success(out, study, s)
            print(f"{s.seed:>5} {s.init_tilt:>4g} {s.max_len:>4} {s.success:9.3f} {base:6.3f}  "
                  f"{'yes' if base < GENENV_ZONE[0] else 'no'}")
        else:
            p = passed[s.seed]
            print(f"{s.seed:>5} passed over: no grid point in {study.start.band} "
                  f"(grid {p['lowest']:.3f}–{p['highest']:.3f})")
    units = [s for s in drawn if s.qualifies]
    print(f"units {len(units)} of {study.seeds} wanted, {len(drawn)} seeds drawn; rows in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
