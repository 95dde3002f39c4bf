"""GenEnv's α-curriculum reward, its difficulty filter, the RWR weights and Theorem 1 (papers.md, "GenEnv").

Choices where the paper gives no value, stated where made: β ("sharpness" in Eq. 3) defaults to
20 (R_env = 0.45 at |p̂ − α| = 0.2, 0.0067 at p̂ = 0 with α = 0.5); :func:`rwr_weights` can
normalise the weights to mean 1 over a batch (the paper only says "∝ exp(λ·R_env)"); the
training loop's batch step (:func:`evokit.genenv.source.batch_step`) uses them unnormalised,
since the RWR step divides by each context's total weight anyway.
"""

from __future__ import annotations

import math

import numpy as np


def alpha_reward(p_hat, alpha: float = 0.5, beta: float = 20.0):
    """R_env(p̂) = exp(−β (p̂ − α)²) (GenEnv Eqs. 2–3); β is not given in the paper (default 20).

    >>> alpha_reward(0.5)
    1.0
    >>> round(alpha_reward(0.7), 4), round(alpha_reward(0.0, beta=1.0), 4)  # exp(−0.8), exp(−0.25)
    (0.4493, 0.7788)
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0 (GenEnv Eq. 3); got {beta}")
    out = np.exp(-beta * (np.asarray(p_hat, dtype=float) - alpha) ** 2)
    return float(out) if out.ndim == 0 else out


def difficulty_filter(p_hat, alpha: float = 0.5, k_min: float = 0.1):
    """True where a batch is kept for the simulator update: |p̂ − α| ≤ k_min (GenEnv, k_min = 0.1).

    >>> difficulty_filter([0.4, 0.5, 0.65, 0.0]).tolist()
    [True, True, False, False]
    """
    # round away float noise so that p̂ = 0.4 with α = 0.5 is kept (|p̂ − α| is 0.1 up to 1e-17)
    return np.round(np.abs(np.asarray(p_hat, dtype=float) - alpha), 12) <= k_min


def rwr_weights(r_env, lam: float = 1.0, normalize: bool = True) -> np.ndarray:
    """RWR weights ∝ exp(λ·R_env) (GenEnv, λ = 1.0); ``normalize`` scales them to mean 1.

    >>> rwr_weights([0.0, 1.0], normalize=False).round(4).tolist()
    [1.0, 2.7183]
    >>> rwr_weights([0.0, 1.0]).round(4).tolist()
    [0.5379, 1.4621]
    """
    w = np.exp(lam * np.asarray(r_env, dtype=float))  # R_env ∈ [0, 1]: no overflow
    return w / w.mean() if normalize and w.size else w


# ------------------------------------------------------------------------------- Theorem 1
def theorem1_bound(delta1: float, delta2: float, n: int) -> float:
    """Pr[R_env(p̂1) ≤ R_env(p̂2)] ≤ 4·exp(−(2/9)(Δ2 − Δ1)²·n) for Δ1 < Δ2 (GenEnv Theorem 1).

    Returned as written (it exceeds 1, i.e. says nothing, for small n).

    >>> round(theorem1_bound(0.0, 0.45, 64), 4)
    0.2245
    """
    if not delta1 < delta2:
        raise ValueError(f"Theorem 1 needs Δ1 < Δ2; got {delta1}, {delta2}")
    return 4.0 * math.exp(-(2.0 / 9.0) * (delta2 - delta1) ** 2 * n)


def ranking_violation_mc(p1: float, p2: float, n: int, alpha: float = 0.5, beta: float = 20.0,
                         trials: int = 100_000, rng: np.random.Generator | None = None) -> float:
    """Monte Carlo Pr[R_env(p̂1) ≤ R_env(p̂2)] with p̂_i = Binomial(n, p_i)/n (ties count as violations)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    r1 = alpha_reward(rng.binomial(n, p1, trials) / n, alpha, beta)
    r2 = alpha_reward(rng.binomial(n, p2, trials) / n, alpha, beta)
    return float(np.mean(r1 <= r2))


