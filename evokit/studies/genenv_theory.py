"""GenEnv's theory as rows (papers.md, "GenEnv"): Proposition 1's gradient signal p(1 − p), the dead-group
probability p^G + (1 − p)^G, and Theorem 1's ranking bound against a Monte Carlo estimate — pure
arithmetic on :mod:`evokit.genenv`'s functions, seconds on a CPU (the ``genenv_theory`` notebook)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from evokit import genenv
from evokit.grpo import dead_group_probability
from evokit.studies.folder import check_study


@dataclass(frozen=True)
class TheoryStudy:
    """GenEnv's Proposition 1, the dead-group probability and Theorem 1: the grid and Monte Carlo sizes."""

    group_sizes: tuple[int, ...] = (4, 8, 16)
    ns: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512)
    pairs: tuple[tuple[float, float], ...] = ((0.5, 0.9), (0.45, 0.15), (0.6, 0.8))  # |p1 − α| < |p2 − α|
    trials: int = 20_000
    alpha: float = 0.5
    beta: float = 20.0
    grid: int = 101
    seed: int = 0


def theory_study(results_dir: str | Path, study: TheoryStudy = TheoryStudy()) -> Path:
    """Rows for GenEnv's Proposition 1, the dead-group probability and Theorem 1 (pure math, seconds).

    * ``signal.jsonl``: p, the gradient-signal proxy p(1−p) and R_env(p) on a grid;
    * ``dead_groups.jsonl``: p^G + (1−p)^G for each G;
    * ``theorem1.jsonl``: for each pair (p1, p2) with Δ1 = |p1 − α| < Δ2 = |p2 − α| and each n, the
      bound 4·exp(−(2/9)(Δ2 − Δ1)²·n) and a Monte Carlo estimate of Pr[R_env(p̂1) ≤ R_env(p̂2)]
      (ties counted as violations, as :func:`evokit.genenv.ranking_violation_mc`).
    """
    out, st = Path(results_dir), study
    check_study(out, {"study": "genenv_theory", **asdict(st)})
    p = np.linspace(0.0, 1.0, st.grid)
    signal = [{"p": float(x), "signal": float(x * (1 - x)), "r_env": float(genenv.alpha_reward(x, st.alpha, st.beta))}
              for x in p]
    dead = [{"G": int(g), "p": float(x), "dead": float(dead_group_probability(x, g))} for g in st.group_sizes for x in p]
    thm = []
    for i, (p1, p2) in enumerate(st.pairs):
        d1, d2 = abs(p1 - st.alpha), abs(p2 - st.alpha)
        for n in st.ns:
            mc = genenv.ranking_violation_mc(p1, p2, n, st.alpha, st.beta, trials=st.trials,
                                             rng=np.random.default_rng([st.seed, i, n]))
            thm.append({"p1": p1, "p2": p2, "delta1": d1, "delta2": d2, "n": int(n), "trials": st.trials,
                        "bound": genenv.theorem1_bound(d1, d2, n), "mc": mc})
    for name, rows in (("signal", signal), ("dead_groups", dead), ("theorem1", thm)):
        tmp = out / f".{name}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        os.replace(tmp, out / f"{name}.jsonl")
    return out

