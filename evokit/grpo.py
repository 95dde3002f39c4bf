"""GRPO's group statistics and losses, the one place every loop takes them from (papers.md, "GRPO facts").

Every loop (the CPU learner's :func:`evokit.cpu_agent.policy.grpo_update`, the TRL trainer's logs, the
studies and the benchmarks) reads a group of rollouts through this module:

* :func:`usable` — the one "usable rollout" rule: not masked, with a finite reward;
* :class:`GroupStats` / :func:`group_stats` — one group's pass rate p̂, successes, dead or
  partially solved, masked count; :func:`batch_stats` — the shares over a batch of groups;
* :func:`group_advantages` — Â = (r − mean r)/(std r + ε) (GRPO) or r − mean r (Dr.GRPO);
* :func:`clipped_policy_loss`, :func:`kl_penalty` — the clipped surrogate and the k3 KL, on
  tensors (so that a learner back-propagates through the same code the tests check).

Shapes: ``rewards`` is ``(n_groups, G)``, one row per prompt (task), one column per rollout.

Deviations and choices, stated where they are made:

1. ``std`` in the advantage is the *sample* standard deviation (``ddof=1``), as TRL computes it
   (``torch.std`` is unbiased by default); papers.md writes "std r" without saying which.
   ``ddof`` is a parameter.
2. ``eps = 1e-4`` is TRL's constant; DeepSeekMath does not print one.
3. The clipped loss averages over every element given (token- or sequence-level, with an
   optional mask). Length normalisation is the caller's choice (Dr.GRPO drops it): pass
   per-token values and a mask for the GRPO mean, or pre-summed per-sequence values.
4. p̂ is successes / usable rollouts, a success being reward ≥ ``success`` (1.0: the task's
   tests all pass); masked rollouts count in neither. A group is *dead* when fewer than two
   rollouts are usable or their rewards are all equal (every Â = 0), *partially solved* when
   1..n−1 of its n usable rollouts succeed (EE's target for the EL scheduler).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

SUCCESS = 1.0  # reward at or above which a rollout counts as solved (evokit's tests: 1 = all pass)


def usable(rollout) -> bool:
    """The one "usable rollout" rule: not masked and with a finite reward (a Rollout or its row dict).

    >>> usable({"masked": False, "reward": 0.0}), usable({"masked": True, "reward": 1.0}), usable({"reward": None})
    (True, False, False)
    """
    get = rollout.get if isinstance(rollout, Mapping) else lambda k, d=None: getattr(rollout, k, d)
    r = get("reward", None)
    return not get("masked", False) and isinstance(r, int | float) and math.isfinite(r)


def usable_rewards(group: Iterable) -> list[float]:
    """The rewards of a group's usable rollouts, in order."""
    return [float(r["reward"] if isinstance(r, Mapping) else r.reward) for r in group if usable(r)]


@dataclass(frozen=True)
class GroupStats:
    """One GRPO group: its usable rewards and what the papers read from them (deviation 4)."""

    rewards: tuple[float, ...]  # usable rollouts only
    masked: int
    success: float = SUCCESS

    @property
    def n(self) -> int:
        return len(self.rewards)

    @property
    def solved(self) -> int:
        return sum(x >= self.success for x in self.rewards)

    @property
    def pass_rate(self) -> float | None:
        """p̂ = solved / usable rollouts (None: nothing usable)."""
        return self.solved / self.n if self.n else None

    @property
    def mean_reward(self) -> float | None:
        return float(np.mean(self.rewards)) if self.rewards else None

    @property
    def dead(self) -> bool:
        return self.n < 2 or len(set(self.rewards)) == 1

    @property
    def partially_solved(self) -> bool:
        return 0 < self.solved < self.n


def group_stats(group: Iterable, success: float = SUCCESS) -> GroupStats:
    """:class:`GroupStats` of a group of rollouts (Rollout objects or row dicts).

    >>> g = group_stats([{"reward": 1.0}, {"reward": 0.0}, {"reward": None, "masked": True}])
    >>> g.pass_rate, g.n, g.masked, g.dead, g.partially_solved
    (0.5, 2, 1, False, True)
    """
    group = list(group)
    rewards = tuple(usable_rewards(group))
    return GroupStats(rewards, len(group) - len(rewards), success)


def batch_stats(groups: Sequence[GroupStats]) -> dict[str, float]:
    """Shares over a batch of groups: dead, partially solved, masked (of rollouts), fully solved, unsolved.

    >>> s = batch_stats([GroupStats((1.0, 1.0), 0), GroupStats((1.0, 0.0), 0), GroupStats((0.0,), 1)])
    >>> [round(s[k], 3) for k in ("dead_group_share", "partially_solved_share", "masked_share", "mean_reward")]
    [0.667, 0.333, 0.167, 0.6]
    """
    n = max(len(groups), 1)
    rewards = [x for g in groups for x in g.rewards]
    rollouts = sum(g.n + g.masked for g in groups)
    return {"n_groups": len(groups),
            "dead_group_share": sum(g.dead for g in groups) / n if groups else 1.0,
            "partially_solved_share": sum(g.partially_solved for g in groups) / n,
            "masked_share": sum(g.masked for g in groups) / rollouts if rollouts else 0.0,
            "fully_solved": sum(bool(g.n) and g.solved == g.n for g in groups),
            "unsolved": sum(bool(g.n) and g.solved == 0 for g in groups),
            "mean_reward": float(np.mean(rewards)) if rewards else float("nan")}


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
                        mask=None) -> tuple[torch.Tensor, float]:
    """PPO/GRPO clipped surrogate on tensors; returns ``(mean loss, clip fraction)``.

    With ρ = exp(log π_new − log π_old) (DeepSeekMath Eq. 3, PPO Eq. 7):

        loss = −min(ρ·Â, clip(ρ, 1 − ε_low, 1 + ε_high)·Â)

    averaged over the elements (where ``mask`` is true); the loss keeps the graph of
    ``logp_new``. ε_low = ε_high = 0.2 is DeepSeekMath; DAPO's clip-higher is ε_high = 0.28.
    ``adv`` broadcasts against the log-probabilities (a per-sequence advantage of shape (n, 1)
    against per-token (n, T) values). The clip fraction counts elements where the clip is
    active, as TRL logs it: ρ < 1 − ε_low with Â < 0, or ρ > 1 + ε_high with Â > 0.

    >>> loss, frac = clipped_policy_loss([0.0, 0.0], [0.0, 0.0], [1.0, -1.0])
    >>> float(loss), frac
    (0.0, 0.0)
    >>> loss, frac = clipped_policy_loss([math.log(2.0)], [0.0], [1.0])  # ρ = 2 → clipped to 1.2
    >>> round(float(loss), 6), frac
    (-1.2, 1.0)
    """
    new = torch.as_tensor(logp_new, dtype=torch.float32)
    old = torch.as_tensor(logp_old, dtype=torch.float32).detach()
    a = torch.as_tensor(adv, dtype=torch.float32).expand_as(new)
    ratio = torch.exp(new - old)
    per = -torch.minimum(ratio * a, ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * a)
    with torch.no_grad():
        active = ((ratio < 1.0 - eps_low) & (a < 0)) | ((ratio > 1.0 + eps_high) & (a > 0))
    m = torch.ones(new.shape, dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool).expand_as(new)
    if not bool(m.any()):
        raise ValueError("clipped_policy_loss: the mask selects no element")
    return per[m].mean(), float(active[m].float().mean())


def kl_penalty(logp, logp_ref) -> torch.Tensor:
    """Per-element k3 estimator of KL(π ‖ π_ref) (DeepSeekMath Eq. 4; TRL's ``per_token_kl``).

        k3 = exp(log π_ref − log π) − (log π_ref − log π) − 1 ≥ 0

    unbiased for the KL under samples from π and never negative. Weight by β (DeepSeekMath
    0.04; DAPO 0) and average as the loss does.

    >>> kl_penalty([0.0], [0.0]).tolist()
    [0.0]
    >>> round(float(kl_penalty(math.log(0.5), math.log(0.25))), 4)  # r = 0.5: 0.5 + log 2 − 1
    0.1931
    """
    d = torch.as_tensor(logp_ref, dtype=torch.float64) - torch.as_tensor(logp, dtype=torch.float64)
    return torch.exp(d) - d - 1.0


def exact_kl(logp, logp_ref, mask) -> torch.Tensor:
    """Σ_κ π(κ)·(log π(κ) − log π_ref(κ)) over the allowed entries of each row (rows: (n, K) log-probs).

    The exact KL(π ‖ π_ref) for a small discrete action space (the CPU learner's skills), where
    summing beats the k3 sample estimate; entries outside ``mask`` (−inf) contribute nothing.

    >>> lp = torch.log(torch.tensor([[0.5, 0.5]])); ref = torch.log(torch.tensor([[0.25, 0.75]]))
    >>> round(float(exact_kl(lp, ref, torch.tensor([[True, True]]))), 4)
    0.1438
    """
    lp, ref = logp.masked_fill(~mask, 0.0), logp_ref.masked_fill(~mask, 0.0)
    return (lp.exp().masked_fill(~mask, 0.0) * (lp - ref)).sum(-1)


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
