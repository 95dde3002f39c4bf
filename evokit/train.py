"""The CPU learner's training loop: a task source × the GRPO learner → metric rows in ``out``.

One loop, :func:`train`, for every curriculum of both papers: each step the source
(:mod:`evokit.sources`; EL, random or D_T order, GenEnv's simulator, the co-evolution refresh,
or a new one) serves ``tasks_per_step`` tasks, the policy runs a GRPO
group of ``group_size`` rollouts on each, GRPO updates the policy (:func:`evokit.cpu_agent.policy.grpo_update`),
and the groups' results go back into the source's state. A source with a ``replay(state)``
method (GenEnv's accumulating pool D_train) adds groups of earlier traces to each update; the
row's group statistics then count them too (``served`` and ``replayed`` tell them apart). Group statistics come from
:mod:`evokit.grpo`, the draw of step t from :func:`evokit.seeding.step_rng`.

The policy is the CPU learner (:mod:`evokit.cpu_agent.policy`); the LLM policy trains through TRL
(:mod:`evokit.trl_trainer`) on the same sources. Rows: ``steps.jsonl`` (one per update),
``evals.jsonl`` (held-out pass rate and turns, every ``eval_every`` steps), ``rollouts.jsonl``. A checkpoint (policy, optimizer,
source state, step, the run's configuration) is written atomically after each step; a killed run
resumes from it, drops rows of the unfinished step and, since every random choice is keyed by
(seed, step), produces the same rows as an uninterrupted run. Resuming with another
configuration (config, policy, source, or initial policy) is refused with :class:`ResumeError`.

A warm start is a real initial policy (``init_policy``): the run starts from its weights, and
it is the KL reference π_ref *when* ``beta_kl`` > 0. Every study trains with ``beta_kl`` = 0
(TRL's default; papers.md states no KL coefficient for EE's GRPO), so there GRPO does not
regularise towards the warm start: it is the starting point only, and the policy moves as far as
the rewards take it.

**Synchronous, unlike EE.** EE trains fully asynchronously, with partial rollouts and a staleness
bound of 5; this loop updates on the current policy's own rollouts every step (staleness 0), so
EL always reads a fresh pass rate. EL's stale-update path (``at=(g, k)`` in
:mod:`evokit.curriculum`) exists for asynchronous trainers and is not used here.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.cpu_agent.policy import (
    Judge,
    PolicyConfig,
    SkillPolicy,
    collect_groups,
    evaluation,
    frozen_copy,
    grpo_update,
    task_difficulty,
)
from evokit.errors import UserError
from evokit.rollout import write_rows
from evokit.rows import append_rows, keep_rows
from evokit.seeding import group_seeds, step_rng
from evokit.sources import Run, TaskSource, describe, group_results
from evokit.training.settings import GRPOSettings
from evokit.training.steps import step_row


class ResumeError(UserError, ValueError):
    """A run folder holds a checkpoint made with another configuration than the one given now."""


@dataclass(frozen=True)
class TrainConfig(GRPOSettings):
    """One CPU training run: the shared GRPO fields (:class:`~evokit.training.settings.GRPOSettings`) at the CPU
    learner's scale, and this loop's own. Sizes default to a CPU smoke scale; EE's full setting is steps=200,
    group_size=8."""

    steps: int = 50  # GRPO updates (EE: 200; GenEnv: epochs)
    learning_rate: float = 0.03  # Adam step of the CPU learner (0.1 made learned skills collapse; 0.01-0.03 stable)
    workers: int = 2  # sandboxes in flight per group slot (results do not depend on it)
    groups_at_once: int = 1  # group slots: workers × groups_at_once rollouts in flight across the batch
    eval_every: int = 10  # steps between held-out evaluations (0: never)
    eval_rollouts: int = 8  # rollouts per held-out task
    attempts: int = 1  # techniques tried per step, reading results (LearnerPolicy; 1: one command per step)

    def run(self, out: Path | None = None) -> Run:
        """What the task source is told of this run (group size B, seed, output folder)."""
        return Run(self.group_size, self.seed, out)


def new_policy(policy: PolicyConfig, seed: int) -> SkillPolicy:
    """The untrained learner of a run seeded ``seed`` (``policy.seed`` is replaced by it)."""
    torch.manual_seed(seed)
    return SkillPolicy(dataclasses.replace(policy, seed=seed))


# --------------------------------------------------------------------------- checkpoints
def _save(out: Path, **state) -> None:
    tmp = out / ".checkpoint.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out / "checkpoint.pt")


def _load(out: Path) -> dict | None:
    path = out / "checkpoint.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


_NOT_IDENTITY = ("steps", "workers", "groups_at_once")
_SPELLING = {"lr": "learning_rate", "beta_kl": "beta"}  # keys of checkpoints written under the CPU loop's own names


def _identity_config(config: dict) -> dict:
    """The config's part of the resume identity: all but ``steps`` (which may grow) and the parallelism
    (which the rollouts do not depend on); applied to saved checkpoints too, which still carry them, with
    their keys in :class:`~evokit.training.settings.GRPOSettings`' spelling."""
    return {_SPELLING.get(k, k): v for k, v in config.items() if k not in _NOT_IDENTITY}


def _identity(source: TaskSource, policy: PolicyConfig, cfg: TrainConfig, init_policy: SkillPolicy | None) -> dict:
    """What must be the same to resume: the config (but ``steps``, which may grow, and the parallelism,
    which the rollouts do not depend on), policy, source, start weights."""
    start = None
    if init_policy is not None:
        flat = torch.cat([p.detach().flatten() for p in init_policy.state_dict().values() if p.is_floating_point()])
        start = [round(float(flat.sum()), 6), round(float(flat.abs().sum()), 6)]
    return json.loads(json.dumps({"config": _identity_config(asdict(cfg)),
                                  "policy": asdict(policy), "source": describe(source), "init_policy": start},
                                 default=str))


def _check_resume(out: Path, saved: dict | None, now: dict) -> None:
    if saved is not None:
        saved = {**saved, "config": _identity_config(saved.get("config", {}))}
    if saved is None or saved == now:
        return
    diff = [f"{part}.{k}: {saved.get(part, {}).get(k)!r} then, {v!r} now"
            for part in ("config", "policy", "source") for k, v in (now.get(part) or {}).items()
            if (saved.get(part) or {}).get(k) != v]
    if saved.get("init_policy") != now.get("init_policy"):
        diff.append("init_policy: other initial weights")
    raise ResumeError(f"{out}: holds a checkpoint of a run with another configuration ({'; '.join(diff)}). "
                      "Use a new folder, or delete its checkpoint.pt and rows to start over.")


def eval_row(step: int, per_task: dict[str, dict[str, float]]) -> dict:
    """An ``evals.jsonl`` row: after update ``step``, the held-out ``pass_rate`` (mean over tasks, as
    :func:`~evokit.cpu_agent.policy.evaluate`), the mean ``turns`` per rollout over tasks, and each task's
    own (``tasks``)."""
    return {"step": step, "pass_rate": float(np.mean([e["pass_rate"] for e in per_task.values()])),
            "turns": float(np.mean([e["turns"] for e in per_task.values()])), "tasks": per_task}


def _d_theta(policy: SkillPolicy, refs) -> float:
    """Mean D_θ of the served tasks for this learner before its update."""
    return float(np.mean([task_difficulty(policy, r.path) for r in refs]))


# ------------------------------------------------------------------------------- the loop
def train(source: TaskSource, policy: PolicyConfig, out: str | Path, config: TrainConfig = TrainConfig(),
          init_policy: SkillPolicy | None = None, *, eval_tasks: Sequence[Path] = (), progress: bool = True,
          judge: Judge | None = None) -> Path:
    """GRPO of the CPU learner on the tasks ``source`` serves; rows and checkpoint in ``out`` (module docstring).

    ``policy`` configures the learner (its seed is the run's); ``init_policy`` starts the run from
    given weights (EE's warm start), also the KL reference when ``config.beta_kl`` > 0. With ``config.attempts > 1``
    the learner reads its results and retries, ``judge`` deciding (a solver's
    :class:`~evokit.cpu_agent.solvers.ShapeJudge`; default :func:`~evokit.cpu_agent.policy.exit_status_judge`), in
    training and held-out evaluation alike. Resuming with another ``config`` (``steps`` aside),
    ``policy``, ``source`` or ``init_policy`` raises :class:`ResumeError`.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config
    model = new_policy(policy, cfg.seed)
    if init_policy is not None:
        if dataclasses.replace(init_policy.config, seed=cfg.seed) != model.config:  # its init seed is moot
            raise ValueError(f"init_policy has config {init_policy.config}, the run builds {model.config}; "
                             "pass the PolicyConfig the initial policy was made with")
        model.load_state_dict(init_policy.state_dict())
    opt, ref = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate), frozen_copy(model)
    identity = _identity(source, policy, cfg, init_policy)
    state, start = source.init(cfg.run(out)), 0
    if ck := _load(out):
        _check_resume(out, ck.get("identity"), identity)
        model.load_state_dict(ck["policy"])
        opt.load_state_dict(ck["optimizer"])
        state, start = ck["source"], ck["step"]
    for name in ("steps.jsonl", "evals.jsonl", "rollouts.jsonl"):
        keep_rows(out / name, lambda r: r.get("step", start) < start)  # a killed step is redone
    (out / "config.json").write_text(json.dumps({**identity, "steps": cfg.steps}, indent=2))
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train[{source.name}]",
               disable=not progress)
    for step in bar:
        if source.done(state):
            break
        state, refs = source.sample(state, step_rng(cfg.seed, step), cfg.tasks_per_step)
        d_theta = _d_theta(model, refs)
        groups = collect_groups(model, [r.path for r in refs], group_size=cfg.group_size, workers=cfg.workers,
                                seeds=group_seeds(cfg.seed, step, len(refs)),
                                groups_at_once=cfg.groups_at_once, attempts=cfg.attempts, judge=judge)
        # a source that keeps a pool of earlier traces (GenEnv's D_train) adds groups of it to the update
        replayed = source.replay(state) if hasattr(source, "replay") else []
        metrics = grpo_update(model, opt, [*groups, *replayed], beta=cfg.beta, clip=cfg.clip, ref_policy=ref)
        results = group_results(refs, [[r.to_row() for r in g] for g in groups])
        state = source.update(state, results)
        write_rows([r for g in groups for r in g], out / "rollouts.jsonl", step=step)
        shared = step_row(step, source.name, results, metrics, replayed=len(replayed), scheduler=source.summary(state))
        own = {k: metrics[k] for k in ("loss", "kl", "clip_fraction", "grad_norm", "n_steps")}
        append_rows(out / "steps.jsonl", [{**own, "mean_d_theta": d_theta, **shared}])
        if cfg.eval_every and eval_tasks and (step + 1) % cfg.eval_every == 0:
            bar.set_postfix_str(f"held-out evaluation on {len(eval_tasks)} task(s)")
            append_rows(out / "evals.jsonl", [eval_row(step, evaluation(
                model, list(eval_tasks), n=cfg.eval_rollouts, seed=cfg.seed + 7, workers=cfg.workers,
                attempts=cfg.attempts, judge=judge, groups_at_once=cfg.groups_at_once))])
            bar.set_postfix_str("")
        _save(out, policy=model.state_dict(), optimizer=opt.state_dict(), source=state, step=step + 1,
              identity=identity)
    bar.close()
    return out


def final_policy(out: str | Path, policy: PolicyConfig, seed: int) -> SkillPolicy:
    """The learner as the run in ``out`` left it (its last checkpoint)."""
    ck = _load(Path(out))
    if ck is None:
        raise FileNotFoundError(f"{out}: no checkpoint.pt; run evokit.train.train there first")
    model = new_policy(policy, seed)
    model.load_state_dict(ck["policy"])
    return model
