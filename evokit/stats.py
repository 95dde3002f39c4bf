"""Across-seed estimates with bootstrap 95 % intervals: the one place every claim's interval comes from.

Every asserted claim of a notebook is an estimate over ≥ 5 independent seeds with a
percentile-bootstrap interval, recorded in ``summary.json`` and drawn in the figure; assertions
read the interval, never one seed. The unit of resampling is the *seed* (one independent run),
not the rollout: rollouts of one run share its learner and tasks and are not independent.

* :func:`interval` — mean of per-seed values with its bootstrap interval;
* :func:`difference` — mean of ``a − b`` with its interval: paired (same seeds on both sides,
  resampled together) when ``paired=True``, else the two sides resampled independently;
* :func:`verdict` — what an interval says about a sign: ``"above"``, ``"below"`` or ``"overlaps"``
  (the "reproduced" column of the README and docs/notebooks-and-results.md is built from these);
* :func:`pass_at_k` — the unbiased pass@k of one task from ``n`` samples of which ``c`` pass
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", Eq. 1).

The bootstrap has its own seeded generator, so a summary is a pure function of its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from evokit.errors import UserError

#: Resamples per interval: enough that the 2.5 % and 97.5 % percentiles move by < 1 % of the
#: spread between reruns with other bootstrap seeds, cheap next to any experiment.
N_BOOT = 4000
LEVEL = 0.95


class StatsError(UserError, ValueError):
    """Too few values for an interval, or values that are not finite numbers."""


@dataclass(frozen=True)
class Interval:
    """An estimate over ``n`` seeds and its bootstrap interval ``[lo, hi]`` at ``level``."""

    estimate: float
    lo: float
    hi: float
    n: int
    level: float = LEVEL

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def sign(self) -> str:
        return verdict(self)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: the chance that k of its ``n`` samples, drawn without
    replacement, hold at least one of the ``c`` that pass: 1 − C(n−c, k)/C(n, k) (Chen et al. 2021, Eq. 1).

    Computed as Chen et al.'s product 1 − ∏_{i=n−c+1}^{n} (1 − k/i): the binomials themselves
    pass a float's range near n = 1030, the product's factors all lie in [0, 1]. Averaging over tasks is the caller's
    step; the plug-in 1 − (1 − c/n)^k is biased low, which is why it is not used.

    >>> pass_at_k(8, 2, 1), pass_at_k(8, 0, 8), pass_at_k(8, 1, 8)
    (0.25, 0.0, 1.0)
    >>> round(pass_at_k(4, 1, 2), 3)  # 1 − C(3, 2)/C(4, 2) = 1 − 3/6
    0.5
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or int(v) != v:
            raise ValueError(f"pass_at_k: {name} must be an integer, got {v!r}")
    if n < 1 or k < 1:
        raise ValueError(f"pass_at_k: n and k must be at least 1 (n={n}, k={k})")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c must lie in 0..n (c={c}, n={n})")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} > n={n}: pass@k needs at least k samples of the task")
    if n - c < k:  # every k-subset holds a passing sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _values(xs: Sequence[float], name: str, min_n: int) -> np.ndarray:
    a = np.asarray([float(x) for x in xs], dtype=float)
    if a.ndim != 1 or len(a) < min_n:
        raise StatsError(f"{name}: an interval needs at least {min_n} seeds, got {len(a)}")
    if not np.all(np.isfinite(a)):
        raise StatsError(f"{name}: values must be finite numbers, got {a.tolist()}")
    return a


def interval(xs: Sequence[float], *, stat: Callable[[np.ndarray], float] = np.mean, n_boot: int = N_BOOT,
             level: float = LEVEL, seed: int = 0, min_n: int = 2, name: str = "values") -> Interval:
    """``stat`` of the per-seed values ``xs`` with a percentile-bootstrap interval.

    >>> iv = interval([0.1, 0.2, 0.3, 0.4, 0.5])
    >>> round(iv.estimate, 3), iv.lo <= iv.estimate <= iv.hi, iv.n
    (0.3, True, 5)
    """
    a = _values(xs, name, min_n)
    rng = np.random.default_rng([seed, len(a)])
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    boots = np.apply_along_axis(stat, 1, a[idx]) if stat is not np.mean else a[idx].mean(axis=1)
    q = (1 - level) / 2
    lo, hi = np.quantile(boots, [q, 1 - q])
    return Interval(float(stat(a)), float(lo), float(hi), len(a), level)


def difference(a: Sequence[float], b: Sequence[float], *, paired: bool, n_boot: int = N_BOOT,
               level: float = LEVEL, seed: int = 0, min_n: int = 2, name: str = "difference") -> Interval:
    """Mean of ``a`` minus mean of ``b`` with its bootstrap interval.

    ``paired``: ``a[i]`` and ``b[i]`` come from the same seed (same tasks, same learner), so
    the per-seed differences are resampled; otherwise each side is resampled on its own.
    """
    xa, xb = _values(a, f"{name} (a)", min_n), _values(b, f"{name} (b)", min_n)
    if paired:
        if len(xa) != len(xb):
            raise StatsError(f"{name}: a paired difference needs as many seeds on both sides "
                             f"({len(xa)} vs {len(xb)})")
        return interval(xa - xb, n_boot=n_boot, level=level, seed=seed, min_n=min_n, name=name)
    rng = np.random.default_rng([seed, len(xa), len(xb)])
    ma = xa[rng.integers(0, len(xa), size=(n_boot, len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(n_boot, len(xb)))].mean(axis=1)
    q = (1 - level) / 2
    lo, hi = np.quantile(ma - mb, [q, 1 - q])
    return Interval(float(xa.mean() - xb.mean()), float(lo), float(hi), min(len(xa), len(xb)), level)


def verdict(iv: Interval, zero: float = 0.0) -> str:
    """``"above"`` if the whole interval lies above ``zero``, ``"below"`` if below, else ``"overlaps"``."""
    if iv.lo > zero:
        return "above"
    if iv.hi < zero:
        return "below"
    return "overlaps"


def per_seed(rows: Sequence[dict], value: Callable[[list[dict]], float], key: str = "seed") -> dict:
    """Group ``rows`` by ``row[key]`` and reduce each seed's rows with ``value``: {seed: value}."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    return {s: float(value(rs)) for s, rs in sorted(groups.items(), key=lambda kv: str(kv[0]))}
