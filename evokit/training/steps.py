"""The ``steps.jsonl`` row both training loops write: one per GRPO update, the same fields with one meaning.

A study reads a run's rows without knowing which loop wrote them (:mod:`evokit.studies.curricula`,
:mod:`evokit.run_summary`): the CPU learner's loop (:func:`evokit.train.train`) and the TRL path
(:mod:`evokit.trl_trainer.checkpoints`) both build the row's shared part here, :func:`step_row`.
Its fields are :data:`STEP_FIELDS` and each served group's entry is :data:`SERVED_FIELDS`. Besides
them a row carries its loop's own numbers: the CPU update's ``loss``, ``kl``, ``clip_fraction``,
``grad_norm``, ``n_steps`` and the learner's D_θ (``mean_d_theta``); TRL's logs as it writes them
(``reward``, ``frac_reward_zero_std``, ``completions/…``, ``step_time``, evokit's ``tokens_per_turn``,
``sandbox_seconds``, ``scheduler/…``).

The group statistics are :func:`evokit.grpo.batch_stats` over the groups the update used, so the
one "usable rollout" rule and the one *dead* group definition hold in both loops. D_T is EE's
policy-independent difficulty under the catalog's p_T (:mod:`evokit.difficulty`), read from the
task's own plan; a task without one (not written by :func:`evokit.plan.render`) has ``d_t`` None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from evokit.cpu_agent.policy import task_plan
from evokit.difficulty import catalog_reference, score_many
from evokit.sources import GroupResult, TaskRef

#: the shared fields of a ``steps.jsonl`` row and what each means
STEP_FIELDS: dict[str, str] = {
    "step": "index of the GRPO update in the run, from 0",
    "source": "the task source's registered name (evokit.sources)",
    "served": "one entry per group served this step, in slot order (SERVED_FIELDS)",
    "replayed": "groups of earlier traces added to the update (GenEnv's D_train, CPU loop only; 0 in the TRL path)",
    "n_groups": "groups the update counted: served plus replayed",
    "dead_group_share": "share of those groups with every advantage 0 (equal rewards, or < 2 usable rollouts)",
    "partially_solved_share": "share of those groups where 1..n−1 of n usable rollouts succeed",
    "masked_share": "share of their rollouts masked (harness faults; left out of the baseline)",
    "fully_solved": "groups where every usable rollout succeeds",
    "unsolved": "groups where no usable rollout succeeds",
    "mean_reward": "mean reward of their usable rollouts",
    "turns": "mean turns per rollout of the served groups",
    "mean_d_t": "mean D_T of the served tasks (None if no served task has a plan)",
    "scheduler": "the source's summary after the update (its position: EL's cursors, …)",
}

#: the fields of one entry of a row's ``served``
SERVED_FIELDS: dict[str, str] = {
    "task": "the task folder's name (None: a task in process)",
    "env": "the source's key for the task (EL: lineage, generation g, k)",
    "n": "usable rollouts", "successes": "usable rollouts that succeeded", "masked": "masked rollouts",
    "pass_rate": "p̂ = successes / n (None if n = 0), what the source was fed back",
    "mean_reward": "mean reward of the usable rollouts (None if n = 0)",
    "turns": "mean turns per rollout",
    "d_t": "the task's D_T (None: no plan)",
    "plan_steps": "the task's plan length, its scenario–skill steps (None: no plan), so turns per plan step can be read",
}


def _plans(refs: Sequence[TaskRef]) -> list:
    """Each served task's plan (None for a task without one)."""
    plans = []
    for ref in refs:
        try:
            plans.append(task_plan(ref.path)[0] if ref.path is not None else None)
        except (ValueError, OSError):
            plans.append(None)
    return plans


def _d_t(plans: Sequence) -> list[float | None]:
    known = [p for p in plans if p is not None]
    scores = iter(score_many(known, catalog_reference())["total"].tolist() if known else [])
    return [float(next(scores)) if p is not None else None for p in plans]


def task_d_t(refs: Sequence[TaskRef]) -> list[float | None]:
    """D_T of each served task under the catalog's p_T (None for a task without a plan)."""
    return _d_t(_plans(refs))


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def served_entry(result: GroupResult, d_t: float | None, plan_steps: int | None = None) -> dict:
    """One served group's entry (:data:`SERVED_FIELDS`)."""
    s, ref = result.stats, result.ref
    return {"task": ref.path.name if ref.path else None, "env": list(ref.key), "n": s.n, "successes": s.solved,
            "masked": s.masked, "pass_rate": s.pass_rate, "mean_reward": s.mean_reward,
            "turns": _mean([r["n_turns"] for r in result.rows]), "d_t": d_t, "plan_steps": plan_steps}


def step_row(step: int, source: str, results: Sequence[GroupResult], stats: Mapping[str, float], *,
             replayed: int = 0, scheduler: dict, d_t: Sequence[float | None] | None = None) -> dict:
    """The shared part of one update's row (:data:`STEP_FIELDS`).

    ``results``: the served groups; ``stats``: :func:`evokit.grpo.batch_stats` over the groups the
    update used (served and ``replayed``); ``d_t``: the served tasks' D_T (computed if not given).
    """
    plans = _plans([r.ref for r in results])
    d_t = _d_t(plans) if d_t is None else list(d_t)
    steps = [len(p.steps) if p is not None else None for p in plans]
    known = [x for x in d_t if x is not None]
    row = {"step": step, "source": source,
           "served": [served_entry(r, d, n) for r, d, n in zip(results, d_t, steps, strict=True)],
           "replayed": replayed, **{k: stats[k] for k in ("n_groups", "dead_group_share", "partially_solved_share",
                                                          "masked_share", "fully_solved", "unsolved", "mean_reward")},
           "turns": _mean([r["n_turns"] for res in results for r in res.rows]),
           "mean_d_t": _mean(known) if known else None, "scheduler": scheduler}
    assert row.keys() == STEP_FIELDS.keys()
    return row
