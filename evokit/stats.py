"""Across-unit estimates with 95 % intervals of measured coverage: the one place every claim's interval comes from.

Every asserted claim of a notebook is an estimate over ≥ 5 independent units (runs, seeds,
repetitions) with a two-sided 95 % interval, recorded in ``summary.json`` and drawn in the
figure; assertions read the interval, never one unit. The unit is one independent run, not the
rollout: rollouts of one run share its learner and tasks and are not independent.

**Which interval, and why** (docs/preregistration.md, "Intervals and their coverage"). An
interval is only as good as its coverage *at the n used*, and the claims use n = 5 to 10.
``tests/test_stats.py`` measures it by simulation on the kinds of per-unit value the studies
produce (normal values, pass rates over 8 rollouts, paired pass-rate differences):

* ``"t"`` — the Student t interval for a mean, mean ± t₀.₉₇₅,ₙ₋₁ · s/√n (paired: on the per-unit
  differences; unpaired: Welch's, with the Welch–Satterthwaite degrees of freedom). Measured
  ≈ 0.95 at n = 5 and 10 on all three kinds; the default for every mean, which every claim's
  statistic is.
* ``"bca"`` — the bias-corrected and accelerated bootstrap (``scipy.stats.bootstrap``), for a
  statistic that is not a mean (``stat=``): no t quantile applies to it. At n = 5 its measured
  coverage is ≈ 0.81–0.88 (a resample of 5 values has few distinct values), so no claim whose
  statistic can be written as a mean over units uses it.
* ``"percentile"`` — the plain percentile bootstrap, kept to read and compare older summaries and
  to show what the coverage test rejects: ≈ 0.84 at n = 5, ≈ 0.90 at n = 10.

Every :class:`Interval` records its method. Bootstrap methods have their own seeded generator, so
a summary is a pure function of its rows; the t interval has no randomness.

* :func:`interval` — a statistic of per-unit values (the mean by default) with its interval;
* :func:`difference` — mean of ``a − b`` with its interval, paired (the same units on both sides)
  when ``paired=True``, else Welch's;
* :func:`verdict` — what an interval says about a sign: ``"above"``, ``"below"`` or ``"overlaps"``
  (the "reproduced" column of the README and docs/notebooks-and-results.md is built from these);
* :attr:`Interval.mde` — the minimum detectable effect: what a "tie" could have seen;
  :func:`format_interval` prints it beside every interval that holds 0;
* :class:`Precondition`, :func:`precondition` and :func:`withheld` — the conditions under which a
  claim can come out either way (docs/preregistration.md, "Preconditions"): a claim whose
  precondition fails gets "no verdict (precondition: …)" instead of yes / no / tie;
* :func:`pass_at_k` — the unbiased pass@k of one task from ``n`` samples of which ``c`` pass
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", Eq. 1).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
from scipy import stats as sps

from evokit.errors import UserError

#: Resamples per bootstrap interval: enough that the 2.5 % and 97.5 % percentiles move by < 1 % of
#: the spread between reruns with other bootstrap seeds, cheap next to any experiment.
N_BOOT = 4000
LEVEL = 0.95
#: The power an :attr:`Interval.mde` is stated at.
POWER = 0.8
METHODS = ("t", "bca", "percentile")
#: Units a claim needs before it gets a verdict (docs/preregistration.md, "Units": ≥ 10 per claim).
MIN_UNITS = 10


def _dist(df: float | None):
    """t quantiles at ``df``, normal ones where there is no ``df`` (a bootstrap interval)."""
    return sps.norm if df is None or not np.isfinite(df) else sps.t(df)


def _detectable(se: float, df: float | None, level: float = LEVEL) -> float:
    """The smallest true effect a two-sided test at 1 − ``level`` finds with :data:`POWER`: (q₁₋α/₂ + q_power)·se."""
    dist = _dist(df)
    return float(se * (float(dist.ppf((1 + level) / 2)) + float(dist.ppf(POWER))))


class StatsError(UserError, ValueError):
    """Too few values for an interval, values that are not finite numbers, or an unknown method."""


@dataclass(frozen=True)
class Interval:
    """An estimate over ``n`` units and its two-sided interval ``[lo, hi]`` at ``level``, made by ``method``.

    ``lo`` and ``hi`` are NaN where the method cannot make an interval (one unit).

    ``mde`` is the minimum detectable effect of the design that made it: the smallest true effect a
    two-sided test at ``1 − level`` finds with 80 % power, (q₁₋α/₂ + q₀.₈) · se, with se the
    interval's half-width over q₁₋α/₂ and q the t quantiles at ``df`` (normal ones for a bootstrap
    interval, ``df`` None). A "tie" whose ``mde`` is larger than the paper's effect says the design
    could not have seen it, not that the effect is absent (docs/preregistration.md, "Power").
    """

    estimate: float
    lo: float
    hi: float
    n: int
    level: float = LEVEL
    method: str = "t"
    df: float | None = None

    @property
    def mde(self) -> float:
        if not (np.isfinite(self.lo) and np.isfinite(self.hi)):
            return float("nan")
        return _detectable(self._se(), self.df, self.level)

    def _se(self) -> float:
        return float((self.hi - self.lo) / 2 / float(_dist(self.df).ppf((1 + self.level) / 2)))

    def units_to_detect(self, effect: float, *, min_units: int = MIN_UNITS, max_units: int = 10_000) -> int | None:
        """Sizing from a pilot (docs/preregistration.md, claims 6 and 9): the smallest n ≥ ``min_units``
        whose t interval over n units of this interval's spread (sd = se·√n of the pilot) detects a true
        ``effect`` with 80 % power, (t₁₋α/₂,ₙ₋₁ + t₀.₈,ₙ₋₁) · sd/√n ≤ effect; ``max_units`` + 1 if none
        up to ``max_units`` does (the budget's n is then run, with its MDE); None for an interval
        without bounds (one unit: no spread to size from)."""
        if not (np.isfinite(self.lo) and np.isfinite(self.hi)) or self.n < 2:
            return None
        sd = self._se() * np.sqrt(self.n)
        for n in range(max(min_units, 2), max_units + 1):
            if _detectable(sd / np.sqrt(n), n - 1, self.level) <= effect:
                return n
        return max_units + 1

    def as_dict(self) -> dict:
        """The fields and the ``mde``, for ``summary.json``."""
        return {**asdict(self), "mde": self.mde}

    @classmethod
    def from_dict(cls, d: dict) -> Interval:
        """The interval an :meth:`as_dict` (a ``summary.json`` entry) recorded; derived keys are dropped."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

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
        raise StatsError(f"{name}: an interval needs at least {min_n} units, got {len(a)}")
    if not np.all(np.isfinite(a)):
        raise StatsError(f"{name}: values must be finite numbers, got {a.tolist()}")
    return a


def _t_bounds(mean: float, se: float, df: float, level: float) -> tuple[float, float]:
    """mean ± t_{(1+level)/2, df} · se; NaN bounds without degrees of freedom (one unit)."""
    if not df > 0:
        return float("nan"), float("nan")
    q = float(sps.t.ppf((1 + level) / 2, df))
    return mean - q * se, mean + q * se


def _bootstrap(a: np.ndarray, stat: Callable[[np.ndarray], float], method: str, n_boot: int, level: float,
               seed: int) -> tuple[float, float]:
    if len(a) < 2 or np.all(a == a[0]):
        return (float("nan"),) * 2 if len(a) < 2 else (float(stat(a)),) * 2
    rng = np.random.default_rng([seed, len(a)])
    if method == "percentile":
        idx = rng.integers(0, len(a), size=(n_boot, len(a)))
        boots = a[idx].mean(axis=1) if stat is np.mean else np.apply_along_axis(stat, 1, a[idx])
        q = (1 - level) / 2
        lo, hi = np.quantile(boots, [q, 1 - q])
        return float(lo), float(hi)
    with warnings.catch_warnings():  # a degenerate resample distribution: BCa's NaN is handled below
        warnings.simplefilter("ignore")
        ci = sps.bootstrap((a,), stat, vectorized=False, method="BCa", n_resamples=n_boot,
                           confidence_level=level, rng=rng).confidence_interval
    if not (np.isfinite(ci.low) and np.isfinite(ci.high)):  # every resample gave one value
        return (float(stat(a)),) * 2
    return float(ci.low), float(ci.high)


def interval(xs: Sequence[float], *, stat: Callable[[np.ndarray], float] | None = None, method: str | None = None,
             n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0, min_n: int = 2,
             name: str = "values") -> Interval:
    """``stat`` of the per-unit values ``xs`` (the mean by default) with its interval (module docstring).

    ``method`` defaults to ``"t"`` for the mean and ``"bca"`` for any other ``stat``; the t
    interval is only defined for the mean. With ``min_n=1`` a single unit gives NaN bounds.

    >>> iv = interval([0.1, 0.2, 0.3, 0.4, 0.5])
    >>> round(iv.estimate, 3), round(iv.lo, 3), round(iv.hi, 3), iv.n, iv.method
    (0.3, 0.104, 0.496, 5, 't')
    """
    a = _values(xs, name, min_n)
    fn = np.mean if stat is None else stat
    method = method or ("t" if fn is np.mean else "bca")
    if method not in METHODS:
        raise StatsError(f"{name}: unknown interval method {method!r}; choose from {METHODS}")
    if method == "t":
        if fn is not np.mean:
            raise StatsError(f"{name}: the t interval is for a mean; use method='bca' for another statistic")
        se = float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else float("nan")
        lo, hi = _t_bounds(float(a.mean()), se, len(a) - 1, level)
        return Interval(float(fn(a)), lo, hi, len(a), level, method, float(len(a) - 1))
    lo, hi = _bootstrap(a, fn, method, n_boot, level, seed)
    return Interval(float(fn(a)), lo, hi, len(a), level, method)


def difference(a: Sequence[float], b: Sequence[float], *, paired: bool, method: str = "t", n_boot: int = N_BOOT,
               level: float = LEVEL, seed: int = 0, min_n: int = 2, name: str = "difference") -> Interval:
    """Mean of ``a`` minus mean of ``b`` with its interval.

    ``paired``: ``a[i]`` and ``b[i]`` come from the same unit (same tasks, same learner), so the
    interval is :func:`interval` of the per-unit differences. Otherwise Welch's t interval: the
    two sides' variances are not assumed equal, and the degrees of freedom are
    Welch–Satterthwaite's (``method="percentile"`` resamples each side on its own instead).
    """
    xa, xb = _values(a, f"{name} (a)", min_n), _values(b, f"{name} (b)", min_n)
    if paired:
        if len(xa) != len(xb):
            raise StatsError(f"{name}: a paired difference needs as many units on both sides "
                             f"({len(xa)} vs {len(xb)})")
        return interval(xa - xb, method=method, n_boot=n_boot, level=level, seed=seed, min_n=min_n, name=name)
    est, n = float(xa.mean() - xb.mean()), min(len(xa), len(xb))
    if method == "percentile":
        rng = np.random.default_rng([seed, len(xa), len(xb)])
        ma = xa[rng.integers(0, len(xa), size=(n_boot, len(xa)))].mean(axis=1)
        mb = xb[rng.integers(0, len(xb), size=(n_boot, len(xb)))].mean(axis=1)
        q = (1 - level) / 2
        lo, hi = np.quantile(ma - mb, [q, 1 - q])
        return Interval(est, float(lo), float(hi), n, level, method)
    if method != "t":
        raise StatsError(f"{name}: an unpaired difference takes method 't' (Welch) or 'percentile', not {method!r}")
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = float(np.sqrt(va + vb))
    df = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1)) if va + vb > 0 else np.inf
    lo, hi = _t_bounds(est, se, float(df), level) if se > 0 else (est, est)
    return Interval(est, lo, hi, n, level, method, float(df))


def format_interval(iv: Interval | dict, digits: int = 2) -> str:
    """``estimate [lo, hi]`` for printed tables and prose; an interval holding 0 adds its MDE, so a
    "tie" says what it could have seen.

    >>> format_interval({"estimate": -0.5, "lo": -0.75, "hi": -0.25})
    '-0.50 [-0.75, -0.25]'
    >>> format_interval({"estimate": 0.1, "lo": -0.2, "hi": 0.4, "mde": 0.43})
    '0.10 [-0.20, 0.40] (MDE 0.43)'
    """
    d = iv.as_dict() if isinstance(iv, Interval) else iv
    text = f"{d['estimate']:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}]"
    mde = d.get("mde")
    if mde is not None and np.isfinite(mde) and d["lo"] <= 0 <= d["hi"] and d["lo"] < d["hi"]:
        text += f" (MDE {mde:.{digits}f})"
    return text


def verdict(iv: Interval, zero: float = 0.0) -> str:
    """``"above"`` if the whole interval lies above ``zero``, ``"below"`` if below, else ``"overlaps"``."""
    if iv.lo > zero:
        return "above"
    if iv.hi < zero:
        return "below"
    return "overlaps"


def paper_side(iv: Interval | dict, expected: str = "above", zero: float = 0.0) -> str:
    """A claim part's verdict (docs/preregistration.md, "Verdicts"): "yes" if the interval lies wholly
    on the paper's side of ``zero`` (``expected``: "above" or "below"), "no" if wholly on the other
    side, "tie" if it holds ``zero``.

    >>> paper_side({"estimate": -1.0, "lo": -2.0, "hi": -0.5, "n": 5}, "below"), paper_side(Interval(1, 0.5, 2, 5), "below")
    ('yes', 'no')
    """
    v = verdict(Interval.from_dict(iv) if isinstance(iv, dict) else iv, zero)
    return "yes" if v == expected else "tie" if v == "overlaps" else "no"


def zone_side(iv: Interval | dict, zone: tuple[float, float]) -> str:
    """A part's verdict against a zone (GenEnv's 0.4–0.6): "yes" if the interval lies within it, "no" if
    wholly outside it, "tie" if it crosses an edge.

    >>> [zone_side(Interval(e, lo, hi, 10), (0.4, 0.6)) for e, lo, hi in ((0.5, 0.45, 0.55), (0.3, 0.2, 0.35), (0.4, 0.3, 0.5))]
    ['yes', 'no', 'tie']
    """
    iv = Interval.from_dict(iv) if isinstance(iv, dict) else iv
    return "yes" if zone[0] <= iv.lo and iv.hi <= zone[1] else "no" if iv.hi < zone[0] or iv.lo > zone[1] else "tie"


def combine(parts: Sequence[str]) -> str:
    """A claim's verdict from its gating parts' verdicts: "yes" if every part is yes, "no" if any is no,
    "tie" otherwise (an empty list is a tie: nothing was shown).

    >>> combine(["yes", "yes"]), combine(["yes", "tie"]), combine(["tie", "no"])
    ('yes', 'tie', 'no')
    """
    parts = list(parts)
    return "no" if "no" in parts else "yes" if parts and all(p == "yes" for p in parts) else "tie"


@dataclass(frozen=True)
class Precondition:
    """One condition a claim needs to be able to come out either way: its measured ``value``, the
    ``needs`` it is held to (e.g. "≥ 10") and whether it is ``met``. ``value`` None: not measured."""

    name: str
    value: float | None
    needs: str
    met: bool

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        shown = "not measured" if self.value is None else f"{self.value:.3g}"
        return f"{self.name} {shown}, needs {self.needs}"


_OPS = {"≥": lambda v, t: v >= t, "≤": lambda v, t: v <= t, "<": lambda v, t: v < t, "=": lambda v, t: v == t}


def precondition(name: str, value: float | None, op: str, threshold: float | tuple[float, float]) -> Precondition:
    """``value`` held to ``op threshold`` (``op`` one of ≥ ≤ < =, or "in" with a closed range);
    a value that was not measured (None or NaN) does not meet it.

    >>> str(precondition("runs", 5, "≥", 10))
    'runs 5, needs ≥ 10'
    """
    measured = value is not None and not (isinstance(value, float) and np.isnan(value))
    if op == "in":
        lo, hi = threshold  # type: ignore[misc]
        return Precondition(name, float(value) if measured else None, f"in [{lo:g}, {hi:g}]",
                            bool(measured and lo <= value <= hi))
    return Precondition(name, float(value) if measured else None, f"{op} {threshold:g}",
                        bool(measured and _OPS[op](value, threshold)))


def withheld(verdict: str, preconditions: Sequence[Precondition]) -> str:
    """``verdict`` if every precondition is met, else "no verdict (precondition: …)" naming the failed ones."""
    failed = [p for p in preconditions if not p.met]
    return verdict if not failed else f"no verdict (precondition: {'; '.join(map(str, failed))})"


def per_seed(rows: Sequence[dict], value: Callable[[list[dict]], float], key: str = "seed") -> dict:
    """Group ``rows`` by ``row[key]`` and reduce each seed's rows with ``value``: {seed: value}."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    return {s: float(value(rs)) for s, rs in sorted(groups.items(), key=lambda kv: str(kv[0]))}
