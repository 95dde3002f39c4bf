"""From the EE studies' rows to what the notebooks draw, record and the tests assert.

``envs.jsonl`` (one row per environment, :func:`evokit.studies.evolution.env_row`) holds each
environment's evolution seed, D_T and its parts, its edit's mutation, and the solver population's
pass rate and turns (mean and per solver). Here: the change each accepted edit made
(:func:`edit_rows`), population curves per generation with across-seed intervals
(:func:`seed_curves`), and the three claims as docs/preregistration.md registers them (claims 1–3):
effort (:func:`effort_claim`), directions / EE Table 1 (:func:`direction_claim`, :func:`table1`) and
calibration (:func:`calibration_claim`). The unit is the evolution seed (its own admitted seed
tasks and evolution choices); every claim statistic is a mean over units with a t interval
(:mod:`evokit.stats`), every claim reports its registered preconditions, and a claim whose
precondition fails is withheld. All pure functions of rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from evokit.evolve import DIRECTIONS
from evokit.evolve.edits import TERM
from evokit.stats import (
    MIN_UNITS,
    Interval,
    combine,
    difference,
    interval,
    paper_side,
    precondition,
    verdict,
    withheld,
)

PARTS = ("length_term", "scenario_term", "skill_term")  # D_T's three parts (evokit.difficulty)
MUTATIONS = ("instruction", "environment", "verification", "total")  # EE's mutation metrics
#: docs/preregistration.md, claims 1 and 2: at least this share of lineages (claim 1) or parents
#: (claim 2) with a population pass rate above 0 before any edit, else the floor decides the claim.
MIN_ALIVE_SHARE = 0.9
#: claim 3: environments per unit, the share of them strictly between pass rates 0 and 1 per
#: solver, and length strata usable per unit (≥ 3 environments, pass rates not all equal).
MIN_UNIT_ENVS, MIN_MIXED_SHARE, MIN_STRATA, MIN_STRATUM = 8, 0.3, 2, 3
#: claim 2: spare evolution seeds drawn at ``MIN_UNITS`` units or more, so that a seed whose pinned
#: lineage ends before generation 1 (no rarer choice left) does not withhold the claim: the fewest with
#: P(≥ 10 of 10 + k qualify) ≥ 0.95 at a 0.221 chance of ending (docs/preregistration.md, changes log).
SPARE_UNITS = 6


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
                    "d_turns_per_step": r["turns"] / r["length"] - parent["turns"] / parent["length"],
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


def _side(iv: dict, expected: str) -> str:
    """:func:`evokit.stats.paper_side` of an :func:`_iv` dict ("tie" when it has no interval)."""
    return paper_side(iv, expected) if iv["n"] >= 2 else "tie"


def _paired(a: Sequence[float], b: Sequence[float], name: str) -> dict:
    """Paired difference a − b over units as an :func:`_iv` dict (no interval below 2 units)."""
    if len(a) < 2:
        return _iv([x - y for x, y in zip(a, b, strict=True)], name)
    return difference(a, b, paired=True, name=name).as_dict()


def _chains(rows: Sequence[dict]) -> dict[tuple, dict[int, dict]]:
    """{(evolution seed, setting, lineage): {generation: row}}."""
    chains: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        chains[_key(r)][r["generation"]] = r
    return chains


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
def first_zero(chain: dict[int, dict], horizon: int) -> int | None:
    """The first generation ≤ ``horizon`` at which a lineage's population pass rate is 0 (None: it
    does not reach 0 by then, or it ended before)."""
    return next((g for g in sorted(chain) if g <= horizon and chain[g]["pass_rate"] == 0), None)


def effort_claim(rows: Sequence[dict], horizon: int | None = None, min_units: int = MIN_UNITS) -> dict:
    """Claim 1 (docs/preregistration.md): high and max effort drive lineages to a pass rate of 0 within
    the horizon H, low does not; max sooner.

    Per lineage (the registered criterion): it *reaches 0* when its population pass rate is 0 at
    some generation ≤ H; its first-zero generation is censored at H + 1 when it does not (an ended
    lineage counts up to its last generation). Per unit (evolution seed) and effort: the share of its
    lineages that reach 0 and their mean censored first-zero generation. Parts, paired over the
    units that ran every effort: (a) share(high) − share(low), (b) share(max) − share(low), gating
    ("yes" if both above 0, "no" if either below, else "tie"); (c) first-zero(high) − first-zero(max),
    "max sooner", a verdict of its own. The curves (across-unit means per generation) are drawn beside.
    """
    efforts = [e for e in ("low", "high", "max") if any(r["effort"] == e for r in rows)]
    horizon = max(r["generation"] for r in rows) if horizon is None else horizon
    chains = _chains(rows)
    lineages: dict[str, dict[int, list[tuple[bool, int]]]] = {e: defaultdict(list) for e in efforts}
    for key, chain in chains.items():
        z = first_zero(chain, horizon)
        lineages[chain[min(chain)]["effort"]][key[0]].append((z is not None, horizon + 1 if z is None else z))
    units = sorted(set.intersection(*(set(lineages[e]) for e in efforts))) if efforts else []
    share = {e: [_mean(float(r) for r, _ in lineages[e][u]) for u in units] for e in efforts}
    first = {e: [_mean(z for _, z in lineages[e][u]) for u in units] for e in efforts}
    out: dict = {"generations": max(r["generation"] for r in rows), "horizon": horizon, "efforts": efforts,
                 "n_evolution_seeds": len(units), "units": units,
                 "n_lineages": {e: sum(map(len, lineages[e].values())) for e in efforts}}
    for value in ("pass_rate", "turns", "length"):
        out[f"{value}_curve"] = seed_curves(rows, "effort", value)
    out["reaches_zero_share"] = {e: _iv(share[e], f"{e} share reaching 0") for e in efforts}
    out["first_zero"] = {e: _iv(first[e], f"{e} first-zero generation") for e in efforts}
    out["per_unit"] = {"reaches_zero_share": share, "first_zero": first}
    edits = edit_rows(rows)
    out["mean_mutation_total"] = {e: _iv(_by_seed([x for x in edits if x["effort"] == e],
                                                  lambda x: x["mutation_total"]), f"{e} mutation")
                                  for e in efforts}
    starts = [c[0]["pass_rate"] for c in chains.values() if 0 in c]
    out["ended_share"] = {e: _mean(float(max(c) < horizon and first_zero(c, horizon) is None)
                                   for c in chains.values() if c[min(c)]["effort"] == e) for e in efforts}
    pre = [precondition("efforts run (low, high, max)", len(efforts), "=", 3),
           precondition("evolution seeds with every effort", len(units), "≥", min_units),
           precondition("share of lineages above pass rate 0 at generation 0", _mean(float(p > 0) for p in starts),
                        "≥", MIN_ALIVE_SHARE)]
    out["preconditions"] = [p.as_dict() for p in pre]
    if len(efforts) == 3:
        parts = {"high_minus_low": _paired(share["high"], share["low"], "share reaching 0: high − low"),
                 "max_minus_low": _paired(share["max"], share["low"], "share reaching 0: max − low"),
                 "first_zero_high_minus_max": _paired(first["high"], first["max"], "first-zero generation: high − max")}
        out["parts"] = parts
        out["part_verdicts"] = {k: _side(iv, "above") for k, iv in parts.items()}
        claim = combine([out["part_verdicts"]["high_minus_low"], out["part_verdicts"]["max_minus_low"]])
        out["reproduced"] = withheld(claim, pre)
        out["max_sooner_reproduced"] = withheld(out["part_verdicts"]["first_zero_high_minus_max"], pre)
    else:
        out["reproduced"] = out["max_sooner_reproduced"] = withheld("tie", pre)
    return out


# ---------------------------------------------------------------------- claim 2: directions
def _pinned(rows: Sequence[dict], directions: Sequence[str]) -> list[dict[int, dict]]:
    """The lineages pinned to one of ``directions`` that hold their seed task (generation 0)."""
    return [c for c in _chains(rows).values() if c[min(c)]["direction_setting"] in directions and 0 in c]


def direction_draw(units: int) -> int:
    """How many evolution seeds claim 2's study evolves for ``units`` units: :data:`SPARE_UNITS` more at
    the registered size or above; none below it, where the claim is withheld anyway."""
    return units + (SPARE_UNITS if units >= MIN_UNITS else 0)


def direction_units(rows: Sequence[dict], directions: Sequence[str] = DIRECTIONS, units: int | None = None) -> dict:
    """Claim 2's units: the first ``units`` evolution seeds in seed order (all, if None) whose pinned
    lineage has a generation-1 child in every direction of ``directions``. Decided from which
    environments exist, never from a pass rate or a turn count, so the choice favours no outcome.
    Returns ``{"read": [...], "passed_over": [seeds without a child in some direction], "unused":
    [qualifying seeds beyond ``units``]}``."""
    children: dict[int, set[str]] = defaultdict(set)
    seeds = sorted({r.get("seed", 0) for r in rows})
    for chain in _pinned(rows, directions):
        if 1 in chain:
            children[chain[0].get("seed", 0)].add(chain[0]["direction_setting"])
    qualifying = [s for s in seeds if children[s] >= set(directions)]
    n = len(qualifying) if units is None else units
    return {"read": qualifying[:n], "passed_over": [s for s in seeds if s not in qualifying],
            "unused": qualifying[n:]}


def direction_claim(rows: Sequence[dict], directions: Sequence[str] = DIRECTIONS, min_units: int = MIN_UNITS,
                    units: int | None = None) -> dict:
    """Claim 2 (docs/preregistration.md): one high-effort step along each pinned direction lowers the
    pass rate (ΔPass interval below 0) and raises turns per trajectory (ΔTurns interval above 0).

    Per direction: t intervals over evolution seeds of the per-seed mean change from a lineage's
    seed to its generation-1 child, and over all edits; ΔTurns per plan step (a failed step ends a
    rollout early, so turns per trajectory can fall when a task gets harder), the share of edits that
    raised D_T and the direction's own part of it (a measurement where the D_T gate is off), all
    reported beside. The claim is "yes" if all six one-step parts are yes, "no" if any is no, else
    "tie"; withheld when a precondition fails (fewer than ``min_units`` seeds with a generation-1
    child in some direction, or under 90 % of parents above a pass rate of 0).

    With ``units`` the claim reads :func:`direction_units`' first ``units`` seeds with a child in
    every direction (the registered spares: :func:`direction_draw`); the choice is under ``"units"``.
    """
    chosen, drawn = None, rows
    if units is not None:
        chosen = direction_units(rows, directions, units)
        rows = [r for r in rows if r.get("seed", 0) in chosen["read"]]
    edits = edit_rows(rows)
    out: dict = {}
    for d in directions:
        mine = [x for x in edits if x["direction_setting"] == d]
        if not mine:
            continue
        one = [x for x in mine if x["generation"] == 1]
        term = TERM[d]
        row = {"own_term": term, "n_edits": len(mine), "n_first_edits": len(one),
               "n_evolution_seeds": len({x["seed"] for x in one})}
        for label, sel in (("one_step", one), ("all_edits", mine)):
            for v in ("d_pass_pts", "d_turns", "d_turns_per_step", "d_length", "d_d_t", f"d_{term}"):
                row[f"{v}_{label}"] = _iv(_by_seed(sel, lambda x, v=v: x[v]), f"{d} {v} {label}")
            row[f"share_raising_d_t_{label}"] = _iv(_by_seed(sel, lambda x: float(x["d_d_t"] > 0)), f"{d} share")
            row[f"share_raising_own_term_{label}"] = _iv(_by_seed(sel, lambda x, t=term: float(x[f"d_{t}"] > 0)),
                                                        f"{d} share own")
        row["pass_verdict"], row["turns_verdict"] = (_verdict(row["d_pass_pts_one_step"]),
                                                     _verdict(row["d_turns_one_step"]))
        row["pass_part"] = _side(row["d_pass_pts_one_step"], "below")
        row["turns_part"] = _side(row["d_turns_one_step"], "above")
        out[d] = row
    pinned, drawn_pinned = _pinned(rows, directions), _pinned(drawn, directions)
    pre = [precondition("directions with a generation-1 child", len(out), "=", len(directions)),
           precondition("fewest evolution seeds with a generation-1 child in a direction",
                        min((out[d]["n_evolution_seeds"] for d in out), default=0), "≥", min_units),
           precondition("share of parents above pass rate 0", _mean(float(c[0]["pass_rate"] > 0) for c in pinned),
                        "≥", MIN_ALIVE_SHARE)]
    parts = [v for d in out for v in (out[d]["pass_part"], out[d]["turns_part"])]
    return {"directions": out, "preconditions": [p.as_dict() for p in pre], "units": chosen,
            "ended_before_generation_1_share": _mean(float(1 not in c) for c in drawn_pinned),
            "reproduced": withheld(combine(parts) if len(out) == len(directions) else "tie", pre)}


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


def within_length(envs: Sequence[dict], value: str) -> tuple[float, int]:
    """ρ of D_T with ``value`` within equal plan lengths (what D_T's rarity parts add): the
    stratum-size-weighted mean of ρ over the length strata with ≥ 3 environments whose pass rates
    are not all equal. Returns (ρ, usable strata); NaN with no usable stratum."""
    by: dict = defaultdict(list)
    for r in envs:
        by[r["length"]].append(r)
    rhos, sizes = [], []
    for rs in by.values():
        rho = spearman([r["d_t"] for r in rs], [r[value] for r in rs]) if len(rs) >= MIN_STRATUM else float("nan")
        if not math.isnan(rho):
            rhos.append(rho)
            sizes.append(len(rs))
    return (float(np.average(rhos, weights=sizes)) if rhos else float("nan")), len(rhos)


def calibration_claim(rows: Sequence[dict], solvers: Sequence[str], min_units: int = MIN_UNITS) -> dict:
    """Claim 3 (docs/preregistration.md): Spearman ρ(D_T, pass rate) < 0 for each solver, over all
    environments and within equal lengths.

    Per unit (evolution seed) and solver, ρ over the unit's distinct environments (by content), and
    :func:`within_length`; t intervals over units of the per-unit values (a unit whose ρ is undefined,
    its pass rates all equal, is left out of that interval and counted). Each of the six (solver ×
    form) is "yes" if its interval lies below 0, "no" if above, else "tie"; the claim "yes" if all
    are yes, "no" if any is no, else "tie"; withheld when a precondition fails. The population's ρ
    and each D_T part's pooled ρ are reported beside, not gating.
    """
    groups: dict = defaultdict(dict)
    for r in rows:
        groups[r["seed"]][r["content_hash"]] = r
    seeds = sorted(groups)
    envs = {s: list(groups[s].values()) for s in seeds}
    every = [r for s in seeds for r in envs[s]]
    out: dict = {"n_envs": len(every), "n_evolution_seeds": len(seeds),
                 "envs_per_unit": {str(s): len(envs[s]) for s in seeds}, "solvers": {}}
    strata = {}
    for name in (*solvers, "population"):
        value = "pass_rate" if name == "population" else f"pass_rate_{name}"
        per_unit = {"rho_d_t": [spearman([r["d_t"] for r in envs[s]], [r[value] for r in envs[s]]) for s in seeds]}
        within = [within_length(envs[s], value) for s in seeds]
        per_unit["rho_within_length"] = [w for w, _ in within]
        strata[name] = [k for _, k in within]
        row = {}
        for key, xs in per_unit.items():
            row[key] = {**_iv(xs, f"{name} {key}"), "undefined_units": sum(math.isnan(x) for x in xs)}
            row[key]["verdict"] = _verdict(row[key])
            row[key]["reproduced_part"] = _side(row[key], "below")
        row["per_unit"] = per_unit
        for p in PARTS:  # descriptive: which part carries ρ (pooled, no interval, no claim)
            row[f"rho_{p}"] = spearman([r[p] for r in every], [r[value] for r in every])
        row["mean_pass_rate"] = _mean(r[value] for r in every)
        row["mixed_share"] = _mean(float(0 < r[value] < 1) for r in every)
        out["solvers"][name] = row
    pre = [precondition(f"evolution seeds with ≥ {MIN_UNIT_ENVS} distinct environments",
                        sum(len(envs[s]) >= MIN_UNIT_ENVS for s in seeds), "≥", min_units),
           *(precondition(f"share of environments strictly between pass rates 0 and 1 ({n})",
                          out["solvers"][n]["mixed_share"], "≥", MIN_MIXED_SHARE) for n in solvers),
           precondition(f"evolution seeds with ≥ {MIN_STRATA} usable length strata (every solver)",
                        sum(all(strata[n][i] >= MIN_STRATA for n in solvers) for i in range(len(seeds))),
                        "≥", min_units)]
    out["preconditions"] = [p.as_dict() for p in pre]
    parts = [out["solvers"][n][k]["reproduced_part"] for n in solvers for k in ("rho_d_t", "rho_within_length")]
    out["reproduced"] = withheld(combine(parts), pre)
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
