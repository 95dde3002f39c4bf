"""GRPO arithmetic both papers rely on, as small pure numpy functions (papers.md, "GRPO facts").

Nothing here runs a model: these are the formulas a trainer needs (group advantages, the
clipped surrogate, the k3 KL estimator) and the diagnostics the EE paper reads its scheduler
by (the share of dead and of partially solved groups). Shapes: ``rewards`` is
``(n_groups, G)``, one row per prompt (task) and one column per rollout.

Deviations and choices, stated where they are made:

1. ``std`` in the advantage is the *sample* standard deviation (``ddof=1``), as TRL computes it
   (``torch.std`` is unbiased by default); papers.md writes "std r" without saying which.
   ``ddof`` is a parameter.
2. ``eps = 1e-4`` is TRL's constant; DeepSeekMath does not print one.
3. The clipped loss averages over every element given (token- or sequence-level, with an
   optional mask). Length normalisation is the caller's choice (Dr.GRPO drops it): pass
   per-token values and a mask for the GRPO mean, or pre-summed per-sequence values.
"""

from __future__ import annotations

import numpy as np


def _as_groups(rewards) -> np.ndarray:
    r = np.asarray(rewards, dtype=float)
    if r.ndim != 2:
        raise ValueError(f"rewards must have shape (n_groups, G); got shape {r.shape}")
    return r


def group_advantages(rewards, scale: str = "group", eps: float = 1e-4, ddof: int = 1) -> np.ndarray:
    """Group-relative advantages Â_i = (r_i − mean r) / (std r + ε) (GRPO, DeepSeekMath Eq. in §4.1.2).

    ``scale="none"`` is Dr.GRPO: Â_i = r_i − mean r, no division by the group's std.
    Every rollout of a group whose rewards are all equal gets Â = 0 (it teaches nothing).

    >>> group_advantages([[1, 0, 0, 1]]).round(3).tolist()
    [[0.866, -0.866, -0.866, 0.866]]
    >>> group_advantages([[1, 0, 0, 1]], scale="none").tolist()
    [[0.5, -0.5, -0.5, 0.5]]
    >>> group_advantages([[1, 1, 1, 1]]).tolist()
    [[0.0, 0.0, 0.0, 0.0]]
    """
    r = _as_groups(rewards)
    if r.shape[1] < 2:
        raise ValueError(f"a GRPO group needs G ≥ 2 rollouts; got G = {r.shape[1]}")
    centred = r - r.mean(axis=1, keepdims=True)
    if scale == "none":
        return centred
    if scale != "group":
        raise ValueError(f"scale must be 'group' (GRPO) or 'none' (Dr.GRPO); got {scale!r}")
    return centred / (r.std(axis=1, ddof=ddof, keepdims=True) + eps)


def clipped_policy_loss(logp_new, logp_old, adv, eps_low: float = 0.2, eps_high: float = 0.2,
                        mask=None) -> tuple[float, float]:
    """PPO/GRPO clipped surrogate; returns ``(mean loss, clip fraction)``.

    With ρ = exp(log π_new − log π_old) (DeepSeekMath Eq. 3, PPO Eq. 7):

        loss = −min(ρ·Â, clip(ρ, 1 − ε_low, 1 + ε_high)·Â)

    averaged over the elements (where ``mask`` is true). ε_low = ε_high = 0.2 is DeepSeekMath;
    DAPO's clip-higher is ε_high = 0.28. ``adv`` broadcasts against the log-probabilities (a
    per-sequence advantage of shape (n, 1) against per-token (n, T) values). The clip fraction
    counts elements where the clip is active, as TRL logs it: ρ < 1 − ε_low with Â < 0, or
    ρ > 1 + ε_high with Â > 0.

    >>> clipped_policy_loss([0.0, 0.0], [0.0, 0.0], [1.0, -1.0])
    (0.0, 0.0)
    >>> loss, frac = clipped_policy_loss([np.log(2.0)], [0.0], [1.0])  # ρ = 2 → clipped to 1.2
    >>> round(loss, 6), frac
    (-1.2, 1.0)
    """
    new, old = np.asarray(logp_new, dtype=float), np.asarray(logp_old, dtype=float)
    a = np.broadcast_to(np.asarray(adv, dtype=float), new.shape)
    ratio = np.exp(new - old)
    clipped = np.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per = -np.minimum(ratio * a, clipped * a)
    active = ((ratio < 1.0 - eps_low) & (a < 0)) | ((ratio > 1.0 + eps_high) & (a > 0))
    m = np.ones(new.shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), new.shape)
    if not m.any():
        raise ValueError("clipped_policy_loss: the mask selects no element")
    return float(per[m].mean()), float(active[m].mean())


def kl_penalty(logp, logp_ref) -> np.ndarray:
    """Per-element k3 estimator of KL(π ‖ π_ref) (DeepSeekMath Eq. 4; TRL's ``per_token_kl``).

        k3 = exp(log π_ref − log π) − (log π_ref − log π) − 1 ≥ 0

    unbiased for the KL under samples from π and never negative. Weight by β (DeepSeekMath
    0.04; DAPO 0) and average as the loss does.

    >>> kl_penalty([0.0], [0.0]).tolist()
    [0.0]
    >>> float(kl_penalty(np.log(0.5), np.log(0.25)).round(4))  # r = 0.5: 0.5 + log 2 − 1
    0.1931
    """
    d = np.asarray(logp_ref, dtype=float) - np.asarray(logp, dtype=float)
    return np.exp(d) - d - 1.0


def dead_group_share(rewards) -> float:
    """Share of groups whose rewards are all equal (Â = 0 for every rollout: no gradient).

    >>> dead_group_share([[1, 1, 1], [0, 1, 0], [0, 0, 0], [0.5, 0.5, 0.5]])
    0.75
    """
    r = _as_groups(rewards)
    return float(np.all(r == r[:, :1], axis=1).mean())


def partially_solved_share(rewards, success: float = 1.0) -> float:
    """Share of groups with 1..G−1 successes (reward ≥ ``success``): EE's target for the EL scheduler.

    >>> partially_solved_share([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]])
    0.5
    """
    r = _as_groups(rewards)
    k = (r >= success).sum(axis=1)
    return float(((k >= 1) & (k <= r.shape[1] - 1)).mean())


def dead_group_probability(p, G: int):
    """Probability that a group of G binary rollouts with pass probability p is dead: p^G + (1−p)^G.

    (papers.md, GRPO facts: G = 8 gives 66 % at p = 0.05 and 43 % at p = 0.9.)

    >>> round(dead_group_probability(0.05, 8), 4)
    0.6634
    >>> round(dead_group_probability(0.9, 8), 4)
    0.4305
    >>> dead_group_probability(0.5, 2)
    0.5
    """
    if G < 1:
        raise ValueError(f"G must be ≥ 1; got {G}")
    p = np.asarray(p, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p must lie in [0, 1]")
    out = p**G + (1.0 - p) ** G
    return float(out) if out.ndim == 0 else out
