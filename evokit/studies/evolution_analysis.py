"""From the EE studies' rows to what the notebooks draw, record and the tests assert.

``envs.jsonl`` (one row per environment, :func:`evokit.studies.evolution.env_row`) holds each
environment's evolution seed, D_T and its parts, its edit's mutation, and the solver population's
pass rate and turns (mean and per solver). Here: the change each accepted edit made
(:func:`edit_rows`), population curves per generation with across-seed intervals
(:func:`seed_curves`), and the three claims (stated before any run) as summaries with intervals from
:mod:`evokit.stats` (the unit of resampling is the evolution seed): effort (:func:`effort_claim`),
directions / EE Table 1 (:func:`direction_claim`, :func:`table1`) and calibration
(:func:`calibration_claim`). All pure functions of rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from evokit.evolve import DIRECTIONS
from evokit.evolve.edits import TERM
from evokit.stats import Interval, interval, verdict

PARTS = ("length_term", "scenario_term", "skill_term")  # D_T's three parts (evokit.difficulty)
MUTATIONS = ("instruction", "environment", "verification", "total")  # EE's mutation metrics


def _key(r: dict) -> tuple:
    return (r.get("seed", 0), r["setting"], r["lineage"])


def edit_rows(rows: Sequence[dict]) -> list[dict]:
    """One row per accepted edit (generation g ≥ 1): the change from its parent in pass rate (points),
    turns, plan length, D_T and each part, with the edit's mutation."""
    by_hash = {(*_key(r), r["content_hash"]): r for r in rows}
    out = []
    for r in rows:
        parent = by_hash.get((*_key(r), r["parent"])) if r.get("parent") else None
        if parent is None:
            continue
        out.append({**{k: r.get(k) for k in ("seed", "setting", "effort", "direction_setting", "direction",
                                             "lineage", "generation")},
                    "d_pass_pts": 100 * (r["pass_rate"] - parent["pass_rate"]), "d_turns": r["turns"] - parent["turns"],
                    "d_length": r["length"] - parent["length"],
                    "d_d_t": r["d_t"] - parent["d_t"], **{f"d_{p}": r[p] - parent[p] for p in PARTS},
                    **{f"mutation_{m}": r[f"mutation_{m}"] for m in MUTATIONS}})
    return sorted(out, key=lambda x: (x["seed"], x["setting"], x["lineage"], x["generation"]))


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else float("nan")


def _by_seed(items: Sequence[dict], value) -> list[float]:
    """Per evolution seed (sorted): the mean of ``value(item)`` over that seed's items."""
    groups: dict = defaultdict(list)
    for x in items:
        groups[x["seed"]].append(value(x))
    return [_mean(v) for _, v in sorted(groups.items())]


def _iv(xs: Sequence[float], name: str) -> dict:
    """Interval of per-seed values as a dict (estimate, lo, hi, n, level), NaN-free input required."""
    xs = [x for x in xs if not math.isnan(x)]
    if len(xs) < 2:
        return {"estimate": _mean(xs), "lo": float("nan"), "hi": float("nan"), "n": len(xs)}
    return interval(xs, name=name).as_dict()


def _verdict(iv: dict) -> str:
    """:func:`evokit.stats.verdict` of an :func:`_iv` dict ("overlaps" when it has no interval)."""
    return verdict(Interval.from_dict(iv)) if iv["n"] >= 2 else "overlaps"


# --------------------------------------------------------------------------------- curves
def seed_curves(rows: Sequence[dict], by: str = "effort", value: str = "pass_rate") -> dict:
    """{group: [per generation: interval over evolution seeds of the seed's mean over its lineages]}.

    A lineage that ended before the last generation stays at its last environment (it is still in
    the population), so every seed has a value at every generation.
    """
    horizon = max(r["generation"] for r in rows)
    chains: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        chains[_key(r)][r["generation"]] = r
    out = {}
    for group in sorted({r[by] for r in rows}, key=str):
        per_seed: dict = defaultdict(lambda: [[] for _ in range(horizon + 1)])
        for key, chain in chains.items():
            first = next(iter(chain.values()))
            if first[by] != group:
                continue
            cur = None
            for g in range(horizon + 1):
                cur = chain.get(g, cur)
                per_seed[key[0]][g].append(cur[value])
        out[group] = [_iv([_mean(per_seed[s][g]) for s in sorted(per_seed)], f"{group} g{g} {value}")
                      for g in range(horizon + 1)]
    return out


def curves(rows: Sequence[dict], by: Sequence[str] = ("setting",),
           values: Sequence[str] = ("pass_rate", "turns", "d_t", *PARTS)) -> list[dict]:
    """Mean and standard error over environments of ``values`` per (``by``…, generation) (descriptive lines)."""
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


# ------------------------------------------------------------------------- claim 1: effort
def effort_claim(rows: Sequence[dict]) -> dict:
    """Claim 1: within the horizon the population's mean pass rate reaches 0 for high and max and
    not for low; max reaches 0 no later than high.

    "Reaches 0 at generation g": the across-seed mean of the population pass rate is 0 at g (every seed's
    lineages fail every rollout of every solver; its interval is then [0, 0]). Also recorded: the curves
    of pass rate, turns and plan length with intervals, per-seed first generations at 0, the mean
    mutation of an edit per effort.
    """
    efforts = [e for e in ("low", "high", "max") if any(r["effort"] == e for r in rows)]
    edits = edit_rows(rows)
    out: dict = {"generations": max(r["generation"] for r in rows), "efforts": efforts,
                 "n_evolution_seeds": len({r["seed"] for r in rows}),
                 "n_lineages": {e: len({_key(r) for r in rows if r["effort"] == e}) for e in efforts}}
    for value in ("pass_rate", "turns", "length"):
        out[f"{value}_curve"] = seed_curves(rows, "effort", value)
    curve = out["pass_rate_curve"]
    out["first_zero_generation"] = {e: next((g for g, iv in enumerate(curve[e]) if iv["estimate"] == 0), None)
                                    for e in efforts}
    out["min_pass_rate"] = {e: min(curve[e][1:], key=lambda iv: iv["estimate"]) for e in efforts}
    per_seed = {}
    for e in efforts:
        seeds = sorted({r["seed"] for r in rows if r["effort"] == e})
        per_seed[e] = {}
        for s in seeds:
            sub = [r for r in rows if r["effort"] == e and r["seed"] == s]
            c = seed_curves(sub, "effort", "pass_rate")[e]
            per_seed[e][str(s)] = next((g for g, iv in enumerate(c) if iv["estimate"] == 0), None)
    out["first_zero_generation_per_seed"] = per_seed
    out["mean_mutation_total"] = {e: _iv(_by_seed([x for x in edits if x["effort"] == e],
                                                  lambda x: x["mutation_total"]), f"{e} mutation")
                                  for e in efforts}
    z = out["first_zero_generation"]
    checks = {"high_reaches_zero": z.get("high") is not None, "max_reaches_zero": z.get("max") is not None,
              "low_does_not_reach_zero": "low" in z and z["low"] is None,
              "max_no_later_than_high": z.get("max") is not None and (z.get("high") is None or z["max"] <= z["high"])}
    out["checks"] = checks
    out["reproduced"] = "yes" if all(checks.values()) else "no"
    return out


# ---------------------------------------------------------------------- claim 2: directions
def direction_claim(rows: Sequence[dict], directions: Sequence[str] = DIRECTIONS) -> dict:
    """Claim 2: one high-effort step along each pinned direction lowers the pass rate (interval
    below 0) and raises turns per trajectory (interval above 0). Per direction: intervals over evolution
    seeds of the per-seed mean change after one step (generation 1) and over all edits, the share of edits
    that raised D_T and the direction's own part of it (a measurement where the D_T gate is off)."""
    edits = edit_rows(rows)
    out: dict = {}
    for d in directions:
        mine = [x for x in edits if x["direction_setting"] == d]
        if not mine:
            continue
        one = [x for x in mine if x["generation"] == 1]
        term = TERM[d]
        row = {"own_term": term, "n_edits": len(mine), "n_first_edits": len(one),
               "n_evolution_seeds": len({x["seed"] for x in mine})}
        for label, sel in (("one_step", one), ("all_edits", mine)):
            for v in ("d_pass_pts", "d_turns", "d_length", "d_d_t", f"d_{term}"):
                row[f"{v}_{label}"] = _iv(_by_seed(sel, lambda x, v=v: x[v]), f"{d} {v} {label}")
            row[f"share_raising_d_t_{label}"] = _iv(_by_seed(sel, lambda x: float(x["d_d_t"] > 0)), f"{d} share")
            row[f"share_raising_own_term_{label}"] = _iv(_by_seed(sel, lambda x, t=term: float(x[f"d_{t}"] > 0)),
                                                        f"{d} share own")
        row["pass_verdict"], row["turns_verdict"] = (_verdict(row["d_pass_pts_one_step"]),
                                                     _verdict(row["d_turns_one_step"]))
        out[d] = row
    ok = [out[d]["pass_verdict"] == "below" and out[d]["turns_verdict"] == "above" for d in out]
    return {"directions": out, "reproduced": "yes" if ok and all(ok) and len(ok) == len(directions) else "no"}


def table1(rows: Sequence[dict], *, effort: str = "high", directions: Sequence[str] = DIRECTIONS) -> list[dict]:
    """EE Table 1 from our rows: per pinned direction, after one step (generation 1) and averaged over all
    generations: ΔPass (points), ΔTurns (each with its interval over evolution seeds), and the mutation
    columns (percent, mean over edits). ``paper_key`` names the matching row of
    :data:`evokit.reference.EE_TABLE1` (whose "mean of 15" is over EE's 15 generations)."""
    edits = [e for e in edit_rows(rows) if e["effort"] == effort and e["direction_setting"] in directions]
    out = []
    for d in directions:
        mine = [e for e in edits if e["direction_setting"] == d]
        last = max((e["generation"] for e in mine), default=0)
        for label, sel, paper in ((f"{d}, 1 step", [e for e in mine if e["generation"] == 1], f"{d}, 1 step"),
                                  (f"{d}, mean of {last}", mine, f"{d}, mean of 15")):
            row = {"direction": d, "row": label, "paper_key": paper, "n_edits": len(sel),
                   **{m: 100 * _mean(e[f"mutation_{m}"] for e in sel) for m in MUTATIONS}}
            for v in ("d_pass_pts", "d_turns"):
                iv = _iv(_by_seed(sel, lambda x, v=v: x[v]), f"{label} {v}")
                row.update({v: iv["estimate"], f"{v}_lo": iv["lo"], f"{v}_hi": iv["hi"]})
            out.append(row)
    return out


# --------------------------------------------------------------------- claim 3: calibration
def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as Spearman's ρ needs)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's of average ranks, in numpy: the bootstrap calls it thousands
    of times); NaN for fewer than 3 points or a constant input.

    >>> round(spearman([1, 2, 3, 4], [10, 9, 7, 1]), 6)
    -1.0
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def _within_length(envs: Sequence[dict], value: str) -> float:
    """ρ of D_T with ``value`` after centring both within each plan length (what D_T's rarity parts add)."""
    by: dict = defaultdict(list)
    for r in envs:
        by[r["length"]].append(r)
    x, y = [], []
    for rs in by.values():
        if len(rs) < 2:
            continue
        md, mv = np.mean([r["d_t"] for r in rs]), np.mean([r[value] for r in rs])
        x += [r["d_t"] - md for r in rs]
        y += [r[value] - mv for r in rs]
    return spearman(x, y)


def _zero_if_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def calibration_claim(rows: Sequence[dict], solvers: Sequence[str]) -> dict:
    """Claim 3: Spearman ρ(D_T, pass rate) < 0 for each solver, and within equal-length strata.

    Over distinct environments (by content, per evolution seed), pooled over seeds; the interval is a
    BCa bootstrap over evolution seeds (a seed's environments resampled together, through
    :func:`evokit.stats.interval` on seed indices): a pooled ρ is not a mean over units, so no t
    interval applies, and BCa's measured coverage at 5 units is below 93 % (:mod:`evokit.stats`). ``within_length``: ρ after centring D_T and the
    pass rate within each plan length, so that length (long plans fail) cannot make it negative.
    """
    groups: dict = defaultdict(dict)
    for r in rows:
        groups[r["seed"]][r["content_hash"]] = r
    seeds = sorted(groups)
    envs = [list(groups[s].values()) for s in seeds]

    def pooled(fn):
        # A resample whose pass rates (or D_T) are all equal has no rank correlation; it counts as 0 (no
        # evidence of a relation), which can only pull the interval towards 0 (conservative for ρ < 0).
        return lambda idx: _zero_if_nan(fn([r for i in idx for r in envs[int(i)]]))

    out: dict = {"n_envs": sum(len(e) for e in envs), "n_evolution_seeds": len(seeds), "solvers": {}}
    for name in (*solvers, "population"):
        value = "pass_rate" if name == "population" else f"pass_rate_{name}"
        row = {}
        for label, fn in (("rho_d_t", lambda es, v=value: spearman([r["d_t"] for r in es], [r[v] for r in es])),
                          ("rho_within_length", lambda es, v=value: _within_length(es, v))):
            iv = interval(list(range(len(seeds))), stat=pooled(fn), name=f"{name} {label}")
            row[label] = {**iv.as_dict(), "verdict": verdict(iv)}
        every = [r for es in envs for r in es]
        for p in PARTS:  # descriptive: which part carries ρ (no interval, no claim)
            row[f"rho_{p}"] = spearman([r[p] for r in every], [r[value] for r in every])
        row["mean_pass_rate"] = _mean(r[value] for es in envs for r in es)
        out["solvers"][name] = row
    checks = {n: out["solvers"][n]["rho_d_t"]["verdict"] == "below" for n in solvers}
    checks_within = {n: out["solvers"][n]["rho_within_length"]["verdict"] == "below" for n in solvers}
    out["checks"] = {"rho_below_zero": checks, "rho_within_length_below_zero": checks_within}
    out["reproduced"] = ("yes" if all(checks.values()) and all(checks_within.values())
                         else "partly" if all(checks.values()) else "no")
    return out


def d_t_rise_share(rows: Sequence[dict]) -> dict:
    """How many accepted edits raised D_T (a measurement where the D_T gate is off): count, share, and the
    mean change per edit of turns, pass rate (points) and plan length."""
    edits = edit_rows(rows)
    n = len(edits)
    return {"n_edits": n, "n_raising_d_t": sum(x["d_d_t"] > 0 for x in edits),
            "share_raising_d_t": (sum(x["d_d_t"] > 0 for x in edits) / n) if n else float("nan"),
            "mean_d_turns": _mean(x["d_turns"] for x in edits), "mean_d_pass_pts": _mean(x["d_pass_pts"] for x in edits),
            "mean_d_length": _mean(x["d_length"] for x in edits)}
