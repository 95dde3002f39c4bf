"""From the EE studies' rows to what the notebooks draw and record.

``envs.jsonl`` (one row per environment, :func:`evokit.studies.evolution.env_row`) holds each
environment's D_T and its parts, its edit's mutation, and the reference solver's pass rate and turns.
Here: the change each accepted edit made (:func:`edit_rows`), EE's Table 1 from our rows
(:func:`table1`), whether D_T predicts the pass rate (:func:`calibration`, Spearman's ρ), mean curves
per generation (:func:`curves`), and the summaries the notebooks record and the tests assert
(:func:`effort_summary`, :func:`direction_summary`). All pure functions of rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from evokit.evolve import DIRECTIONS
from evokit.evolve.edits import TERM

PARTS = ("length_term", "scenario_term", "skill_term")  # D_T's three parts (evokit.difficulty)
MUTATIONS = ("instruction", "environment", "verification", "total")  # EE's mutation metrics


def edit_rows(rows: Sequence[dict]) -> list[dict]:
    """One row per accepted edit (generation g ≥ 1): the change from its parent in pass rate (points),
    turns, D_T and each part, with the edit's mutation."""
    by_hash = {(r["setting"], r["lineage"], r["content_hash"]): r for r in rows}
    out = []
    for r in rows:
        parent = by_hash.get((r["setting"], r["lineage"], r["parent"])) if r.get("parent") else None
        if parent is None:
            continue
        out.append({**{k: r[k] for k in ("setting", "effort", "direction_setting", "direction", "lineage",
                                         "generation")},
                    "d_pass_pts": 100 * (r["pass_rate"] - parent["pass_rate"]), "d_turns": r["turns"] - parent["turns"],
                    "d_d_t": r["d_t"] - parent["d_t"], **{f"d_{p}": r[p] - parent[p] for p in PARTS},
                    **{f"mutation_{m}": r[f"mutation_{m}"] for m in MUTATIONS}})
    return sorted(out, key=lambda x: (x["setting"], x["lineage"], x["generation"]))


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else float("nan")


def table1(rows: Sequence[dict], *, effort: str = "high", directions: Sequence[str] = DIRECTIONS) -> list[dict]:
    """EE Table 1 from our rows: per pinned direction, after one step (generation 1) and averaged over all
    generations: ΔPass (points), ΔTurns, and the mutation columns (percent). ``paper_key`` names the matching
    row of :data:`evokit.reference.EE_TABLE1` (whose "mean of 15" is over EE's 15 generations)."""
    edits = [e for e in edit_rows(rows) if e["effort"] == effort and e["direction_setting"] in directions]
    out = []
    for d in directions:
        mine = [e for e in edits if e["direction_setting"] == d]
        last = max((e["generation"] for e in mine), default=0)
        for label, sel, paper in ((f"{d}, 1 step", [e for e in mine if e["generation"] == 1], f"{d}, 1 step"),
                                  (f"{d}, mean of {last}", mine, f"{d}, mean of 15")):
            out.append({"direction": d, "row": label, "paper_key": paper, "n_edits": len(sel),
                        "d_pass_pts": _mean(e["d_pass_pts"] for e in sel), "d_turns": _mean(e["d_turns"] for e in sel),
                        **{m: 100 * _mean(e[f"mutation_{m}"] for e in sel) for m in MUTATIONS},
                        f"d_{TERM[d]}": _mean(e[f"d_{TERM[d]}"] for e in sel)})
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as Spearman's ρ needs)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (scipy's when installed, else the same formula in numpy).

    >>> round(spearman([1, 2, 3, 4], [10, 9, 7, 1]), 6)
    -1.0
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])
    return float(spearmanr(x, y).statistic)


def calibration(rows: Sequence[dict]) -> dict:
    """Does D_T predict the measured pass rate? Spearman ρ over distinct environments (by content hash),
    for D_T and for each of its parts, with the number of environments; and ``rho_within_length``: ρ of
    D_T with the pass rate among environments of the same length L (mean over lengths with at least 4
    environments, weighted by their number; NaN if none), i.e. what D_T predicts beyond length."""
    uniq = list({r["content_hash"]: r for r in rows}.values())
    p = [r["pass_rate"] for r in uniq]
    by_length: dict[int, list[dict]] = defaultdict(list)
    for r in uniq:
        by_length[r["length"]].append(r)
    strata = [(len(rs), spearman([r["d_t"] for r in rs], [r["pass_rate"] for r in rs]))
              for rs in by_length.values() if len(rs) >= 4]
    strata = [(n, rho) for n, rho in strata if not math.isnan(rho)]
    within = sum(n * rho for n, rho in strata) / sum(n for n, _ in strata) if strata else float("nan")
    return {"n_envs": len(uniq), "rho_d_t": spearman([r["d_t"] for r in uniq], p),
            **{f"rho_{part}": spearman([r[part] for r in uniq], p) for part in PARTS},
            "rho_within_length": within, "n_envs_within_length": sum(n for n, _ in strata)}


def curves(rows: Sequence[dict], by: Sequence[str] = ("setting",),
           values: Sequence[str] = ("pass_rate", "turns", "d_t", *PARTS)) -> list[dict]:
    """Mean and standard error of ``values`` per (``by``…, generation): the lines of the figures."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(*(r[b] for b in by), r["generation"])].append(r)
    out = []
    for key, rs in sorted(groups.items()):
        row = {**dict(zip(by, key[:-1], strict=True)), "generation": key[-1], "n": len(rs)}
        for v in values:
            xs = np.array([r[v] for r in rs], dtype=float)
            row[v] = float(xs.mean())
            row[f"{v}_sem"] = float(xs.std(ddof=1) / math.sqrt(len(xs))) if len(xs) > 1 else 0.0
        out.append(row)
    return out


# ------------------------------------------------------------------------ notebook summaries
def _last_envs(rows: Sequence[dict]) -> list[dict]:
    """The newest environment of each (setting, lineage): where a lineage stands at the end of the run."""
    last: dict[tuple, dict] = {}
    for r in rows:
        key = (r["setting"], r["lineage"])
        if key not in last or r["generation"] > last[key]["generation"]:
            last[key] = r
    return list(last.values())


def effort_summary(rows: Sequence[dict]) -> dict:
    """Per effort: pass rate, turns and D_T of the seeds and at the last generation; the pass rate averaged
    over the evolved generations; the mean pass rate per generation and whether it never rises (EE: high
    and max fall *monotonically*); the first generation at which the mean pass rate is 0; the lineages at 0
    at the end; and the mean mutation of an edit."""
    efforts = [e for e in ("low", "high", "max") if any(r["effort"] == e for r in rows)]
    curve = {(c["effort"], c["generation"]): c for c in curves(rows, by=("effort",), values=("pass_rate",))}
    edits = edit_rows(rows)
    out: dict = {"generations": max(r["generation"] for r in rows), "efforts": efforts}
    for key, fn in (("n_lineages", lambda rs: len(rs)),
                    ("seed_pass_rate", lambda rs: _mean(r["pass_rate"] for r in rs)),
                    ("seed_turns", lambda rs: _mean(r["turns"] for r in rs)),
                    ("seed_d_t", lambda rs: _mean(r["d_t"] for r in rs)),
                    ("final_pass_rate", lambda rs: _mean(r["pass_rate"] for r in rs)),
                    ("final_turns", lambda rs: _mean(r["turns"] for r in rs)),
                    ("final_d_t", lambda rs: _mean(r["d_t"] for r in rs))):
        src = [r for r in rows if r["generation"] == 0] if key.startswith("seed_") else _last_envs(rows)
        out[key] = {e: fn([r for r in src if r["effort"] == e]) for e in efforts}
    out["mean_pass_rate_evolved"] = {e: _mean(r["pass_rate"] for r in rows if r["effort"] == e and r["generation"] > 0)
                                     for e in efforts}
    out["pass_rate_curve"] = {e: [c["pass_rate"] for (ee, _), c in sorted(curve.items()) if ee == e] for e in efforts}
    out["pass_rate_monotone"] = {e: bool(all(b <= a for a, b in zip(c, c[1:], strict=False)))
                                 for e, c in out["pass_rate_curve"].items()}
    out["lineages_at_zero"] = {e: sum(r["pass_rate"] == 0 for r in _last_envs(rows) if r["effort"] == e)
                               for e in efforts}
    out["first_zero_generation"] = {
        e: next((g for (ee, g), c in sorted(curve.items()) if ee == e and c["pass_rate"] == 0), None) for e in efforts}
    out["mean_mutation_total"] = {e: _mean(x["mutation_total"] for x in edits if x["effort"] == e) for e in efforts}
    return out


def direction_summary(rows: Sequence[dict], directions: Sequence[str] = DIRECTIONS) -> dict:
    """Per pinned direction: the mean change per edit of D_T, of each of its parts and of the pass rate, and
    the direction's own part of D_T at the seeds and at the end (does each direction raise its own term and
    lower the pass rate?)."""
    edits = edit_rows(rows)
    last = _last_envs(rows)
    out = {}
    for d in directions:
        mine = [x for x in edits if x["direction_setting"] == d]
        if not mine:
            continue
        term = TERM[d]
        out[d] = {"own_term": term, "n_edits": len(mine),
                  "d_pass_pts_mean": _mean(x["d_pass_pts"] for x in mine),
                  "d_turns_mean": _mean(x["d_turns"] for x in mine),
                  "d_d_t_mean": _mean(x["d_d_t"] for x in mine),
                  **{f"d_{p}_mean": _mean(x[f"d_{p}"] for x in mine) for p in PARTS},
                  "own_term_seed": _mean(r[term] for r in rows if r["direction_setting"] == d and r["generation"] == 0),
                  "own_term_final": _mean(r[term] for r in last if r["direction_setting"] == d),
                  "pass_rate_seed": _mean(r["pass_rate"] for r in rows
                                          if r["direction_setting"] == d and r["generation"] == 0),
                  "pass_rate_final": _mean(r["pass_rate"] for r in last if r["direction_setting"] == d)}
    return out
