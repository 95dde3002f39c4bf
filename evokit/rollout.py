"""Rollouts: G episodes of a policy on one task, each in its own sandbox, rewarded by the task's tests.

A GRPO group is G rollouts of the same task (papers.md, "GRPO facts"; EE trains with B = 8).
Each rollout here is a real trial: a fresh sandbox on the task's image, a multi-turn episode in
which the policy issues shell commands and reads their (truncated) output, then the verifier
phase of :mod:`evokit.verify.trial` (the agent's processes killed, stale rewards removed,
``tests/`` uploaded, ``test.sh`` run). The reward is the task's own.

A policy is anything with ``run_episode(episode) -> None`` that drives an :class:`Episode`
(:meth:`Episode.run` executes one command and records the turn). What went wrong is kept apart:
a failure that is not the policy's fault (the sandbox would not start, the tests crashed, the
LLM endpoint was down) marks the rollout ``masked`` so a learner leaves it out of the loss.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from harbor.models.task.task import Task

from evokit.sandbox import Image, Sandbox
from evokit.sandbox.task_env import image_for_task, sandbox_for_task
from evokit.verify.trial import run_tests

OUTPUT_CHARS = 2000  # how much of each command's output the policy sees (and the record keeps)


@dataclass
class Turn:
    command: str
    output: str  # stdout + stderr, truncated to OUTPUT_CHARS (head and tail)
    exit_code: int
    seconds: float
    tokens: int | None = None  # completion tokens for this turn, when a model produced them


@dataclass
class Rollout:
    """One episode and its reward, as a row on disk."""

    task: str
    index: int  # position in the group
    turns: list[Turn] = field(default_factory=list)
    reward: float | None = None
    rewards: dict[str, float] | None = None  # the whole reward.json (per-step results for evokit tasks)
    error: str | None = None
    masked: bool = False  # not the policy's fault: leave out of the loss
    seconds: float = 0.0
    info: dict = field(default_factory=dict)  # policy-specific (e.g. the learner's chosen skills, log-probs)

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    def to_row(self) -> dict:
        return {**asdict(self), "n_turns": self.n_turns}


class Episode:
    """The policy's handle on one rollout: run commands, see outputs, stop."""

    def __init__(self, task: Task, sandbox: Sandbox, rollout: Rollout, max_turns: int, deadline: float,
                 rng: random.Random):
        self.task, self.sandbox, self.rollout = task, sandbox, rollout
        self.max_turns, self.deadline, self.rng = max_turns, deadline, rng

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def turns_left(self) -> int:
        return self.max_turns - len(self.rollout.turns)

    @property
    def done(self) -> bool:
        return self.turns_left <= 0 or time.monotonic() >= self.deadline

    def run(self, command: str, *, tokens: int | None = None, timeout_sec: float = 60.0) -> Turn:
        """Execute one shell command in the sandbox and record the turn."""
        if self.done:
            raise RuntimeError("episode is over (turn or time budget spent)")
        timeout = max(0.1, min(timeout_sec, self.deadline - time.monotonic()))
        res = self.sandbox.exec(command, timeout_sec=timeout, max_output_bytes=4 * OUTPUT_CHARS)
        out = res.stdout + res.stderr
        if len(out) > OUTPUT_CHARS:
            half = OUTPUT_CHARS // 2
            out = out[:half] + f"\n[... {len(out) - OUTPUT_CHARS} chars truncated ...]\n" + out[-half:]
        turn = Turn(command, out, res.return_code, round(res.duration_sec, 4), tokens)
        self.rollout.turns.append(turn)
        return turn


class Policy(Protocol):
    name: str

    def run_episode(self, episode: Episode) -> None: ...


class PolicyFault(Exception):
    """Raised by a policy for a failure that *is* its own (e.g. an invalid action): not masked."""


def rollout_once(policy: Policy, task: Task, image: Image, index: int, *, max_turns: int = 30,
                 seed: int = 0) -> Rollout:
    """One episode in a fresh sandbox, then the task's tests."""
    r = Rollout(task=task.paths.task_dir.name, index=index)
    t0 = time.monotonic()
    sandbox = sandbox_for_task(task, image=image)
    try:
        sandbox.start()
    except Exception as e:  # not the policy's fault
        r.error, r.masked = f"sandbox: {type(e).__name__}: {e}", True
        return r
    try:
        timeout = task.config.agent.timeout_sec or 600
        ep = Episode(task, sandbox, r, max_turns, time.monotonic() + timeout, random.Random(f"{seed}:{index}"))
        try:
            policy.run_episode(ep)
        except PolicyFault as e:
            r.error = f"policy: {e}"
        except Exception as e:  # endpoint down, garbage reply…: masked, the run goes on
            r.error, r.masked = f"policy error: {type(e).__name__}: {e}", True
        res, rewards, err = run_tests(sandbox, task)
        r.rewards = rewards
        if rewards is None:
            r.error, r.masked = (r.error or "") + f" tests: {err}", True
        else:
            r.reward = rewards.get("reward", min(rewards.values()))
    except Exception as e:
        r.error, r.masked = f"sandbox: {type(e).__name__}: {e}", True
    finally:
        sandbox.stop()
        r.seconds = round(time.monotonic() - t0, 4)
    return r


def rollout_group(policy: Policy, task: Task | str | Path, *, group_size: int = 8, workers: int = 2,
                  max_turns: int = 30, seed: int = 0, image: Image | None = None) -> list[Rollout]:
    """G rollouts of ``policy`` on ``task`` in parallel sandboxes (a GRPO group)."""
    task = task if isinstance(task, Task) else Task(Path(task))
    image = image or image_for_task(task)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda i: rollout_once(policy, task, image, i, max_turns=max_turns, seed=seed),
                             range(group_size)))


def write_rows(rollouts: Sequence[Rollout], path: str | Path, **extra) -> None:
    """Append rollouts as JSON rows (with ``extra`` columns such as the training step)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in rollouts:
            f.write(json.dumps({**extra, **r.to_row()}, default=str) + "\n")
