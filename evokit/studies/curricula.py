"""EE's curricula study: EL vs random order (vs D_T order) on the same evolved store, from the same warm policy.

Rows per curriculum: ``train/<curriculum>/steps.jsonl`` and ``rollouts.jsonl``
(:func:`evokit.train.train`); notebooks ``ee_el_scheduler`` and ``ee_trajectory_growth``.

**One command per turn** (departure from EE). The learner issues one shell command per plan step
and never reads outputs, so turns per trajectory equal the length of the plan it is served and
"commands per turn" is 1 by construction; EE's tokens per turn has no counterpart. What can grow is
turns per trajectory, as EL unlocks later (longer) generations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evokit.curriculum import store_envs
from evokit.learners import PolicyConfig
from evokit.rows import read_rows
from evokit.sources import make_source
from evokit.studies.folder import check_study
from evokit.studies.warm_start import EEStudy, seed_store, warm_policy
from evokit.train import TrainConfig, train


@dataclass(frozen=True)
class CurriculaStudy(EEStudy):
    """EE's curricula study: the shared sizes and which curricula to compare."""

    curricula: tuple[str, ...] = ("el", "random")


def curricula_study(results_dir: str | Path, study: CurriculaStudy = CurriculaStudy(), *, workers: int = 2) -> Path:
    """Seeds → evolved lineages → one GRPO run per curriculum, same store, same warm policy, same seeds.

    Rows: ``train/<curriculum>/steps.jsonl`` and ``rollouts.jsonl`` (:func:`evokit.train.train`);
    read them with :func:`curricula_frame`.
    """
    out = Path(results_dir)
    check_study(out, {"study": "curricula", **asdict(study)})
    _, store = seed_store(out, n_seeds=study.n_seeds, generations=study.generations, seed=study.seed, workers=workers,
                          seed_steps=study.seed_steps)
    cfg = TrainConfig(steps=study.steps, tasks_per_step=study.tasks_per_step, group_size=study.group_size,
                      seed=study.seed, workers=workers, eval_every=0)
    policy = warm_policy(out, study.seed, steps=study.warmup_steps)
    envs = store_envs(store)
    for name in study.curricula:
        train(make_source(name, envs=envs), PolicyConfig(), out / "train" / name, cfg, init_policy=policy,
              progress=False)
    return out


def _commands_per_turn(rollout_rows: Sequence[dict]) -> dict[int, float]:
    """Per step: shell commands issued per turn (each recorded turn is one command: 1 for the CPU learner)."""
    by: dict[int, list[int]] = {}
    for r in rollout_rows:
        by.setdefault(r["step"], []).extend(1 if t.get("command") else 0 for t in r["turns"])
    return {s: float(np.mean(v)) if v else float("nan") for s, v in by.items()}


def curricula_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (curriculum, step): GRPO group shares, reward, turns per trajectory, served generation."""
    frames = []
    for run in sorted((Path(results_dir) / "train").iterdir()):
        cmd = _commands_per_turn(read_rows(run / "rollouts.jsonl"))
        rows = [{"curriculum": run.name, "step": r["step"], "partially_solved_share": r["partially_solved_share"],
                 "dead_group_share": r["dead_group_share"], "mean_reward": r["mean_reward"], "turns": r["turns"],
                 "generation": float(np.mean([s["env"][1] for s in r["served"]])), "mean_d_t": r["mean_d_t"],
                 "commands_per_turn": cmd.get(r["step"], float("nan"))}
                for r in read_rows(run / "steps.jsonl")]
        frames.append(pd.DataFrame(rows))
    return pd.concat(frames, ignore_index=True)


def _slope(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else float("nan")


def curricula_summary(frame: pd.DataFrame, first: int = 50, window: int = 10) -> dict:
    """Per curriculum over the first ``first`` steps: mean shares and reward, reward slope, turns early vs late."""
    out = {}
    for name, g in frame.groupby("curriculum"):
        g = g[g.step < first].sort_values("step")
        w = min(window, max(1, len(g) // 2))
        out[name] = {"steps": len(g), "partially_solved_share": float(g.partially_solved_share.mean()),
                     "dead_group_share": float(g.dead_group_share.mean()),
                     "mean_reward": float(g.mean_reward.mean()), "reward_slope": _slope(g.step, g.mean_reward),
                     "turns_first": float(g.turns.head(w).mean()), "turns_last": float(g.turns.tail(w).mean()),
                     "turns_slope": _slope(g.step, g.turns), "max_generation": float(g.generation.max()),
                     "generation_last": float(g.generation.tail(w).mean()),
                     "commands_per_turn": float(g.commands_per_turn.mean())}
    return out

