"""Rollouts: G episodes of a policy on one task, each in its own sandbox, rewarded by the task's tests.

A GRPO group is G rollouts of the same task (papers.md, "GRPO facts"; EE trains with B = 8).
Each rollout here is a real trial: a fresh sandbox on the task's image, a multi-turn episode in
which the policy issues shell commands (as the task's ``[agent].user``) and reads their
(truncated) output, then the verifier phase of :mod:`evokit.verify.trial`: by default the
agent's processes are killed, its work (the workdir and declared artifacts) is copied into a
second fresh sandbox started while it worked, and ``tests/test.sh`` runs there; the reward is
read out of band. The reward is the task's own.

A policy is anything with ``run_episode(episode) -> None`` that drives an :class:`Episode`
(:meth:`Episode.run` executes one command and records the turn; :meth:`Episode.record` records one
the policy ran another way, as the oracle does).

**Masking policy** (threat class: self-masking). A masked rollout is left out of the GRPO loss, so an
agent that could mask its own failures would bias training. A rollout is masked only for a
fault the harness can attribute to itself, each detected where it happens:

* the agent's sandbox failed to *start* (``Sandbox.start`` raised before the agent ran);
* the separate verifier's fresh sandbox failed to start or died during the copy
  (:class:`evokit.verify.trial.HarnessFault`);
* the LLM endpoint failed (the policy raised :class:`evokit.llm.LLMError`: down, timed out,
  HTTP error).

Everything inside the agent's reach scores **reward 0, not masked**, with the reason in
``error``: its sandbox dying under it (it killed the anchor process, the OOM killer took it),
a reward file it made unwritable, a tool the tests need deleted, a full disk or inode table,
work that cannot be copied to the verifier, tests that time out on what it left. A policy that
raises :class:`PolicyFault` (its own invalid action) is scored as it left the sandbox. Any other
exception from a policy is a bug: the sandboxes are stopped and it propagates with its
traceback, stopping the run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from harbor.models.task.task import Task

from evokit.errors import EvokitError
from evokit.llm import LLMError
from evokit.rows import append_rows
from evokit.sandbox import Image, Sandbox, SandboxError
from evokit.sandbox.process import ExecResult
from evokit.sandbox.task_env import image_for_task, sandbox_for_task
from evokit.verify.trial import (
    HarnessFault,
    VerifierMode,
    VerifierStarter,
    verifier_mode,
    verify_work,
)

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
    masked: bool = False  # a harness fault (see the masking policy above): leave out of the loss
    mask_reason: str | None = None  # which harness fault, when masked
    verifier_mode: str | None = None  # "separate" or "shared" (evokit.verify.trial.VerifierMode)
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

    def run(self, command: str, *, tokens: int | None = None, timeout_sec: float = 60.0,
            user: str | int | None = None) -> Turn:
        """Execute one shell command in the sandbox and record the turn.

        It runs as ``user``, by default the task's ``[agent].user`` (Harbor's rule; None: the
        image's ``USER``). A sandbox that is gone raises :class:`SandboxError`.
        """
        timeout = self.timeout(timeout_sec)
        user = self.task.config.agent.user if user is None else user
        res = self.sandbox.exec(command, timeout_sec=timeout, max_output_bytes=4 * OUTPUT_CHARS, user=user)
        return self.record(command, res, tokens=tokens)

    def timeout(self, seconds: float) -> float:
        """The timeout of the next command: ``seconds`` cut to the episode's time left (at least
        0.1 s); :class:`EpisodeOver` when its turn or time budget is spent."""
        if self.done:  # e.g. the deadline passed while the model was thinking: the agent's time
            raise EpisodeOver("episode is over (turn or time budget spent)")
        return max(0.1, min(seconds, self.deadline - time.monotonic()))

    def record(self, command: str, res: ExecResult, *, tokens: int | None = None,
               output: str | None = None) -> Turn:
        """Record a command that ran in the sandbox as one turn; ``output`` is what it printed
        (by default the exec's stdout and stderr), kept to ``OUTPUT_CHARS`` (head and tail)."""
        out = res.stdout + res.stderr if output is None else output
        if len(out) > OUTPUT_CHARS:
            half = OUTPUT_CHARS // 2
            out = out[:half] + f"\n[... {len(out) - OUTPUT_CHARS} chars truncated ...]\n" + out[-half:]
        turn = Turn(command, out, res.return_code, round(res.duration_sec, 4), tokens)
        self.rollout.turns.append(turn)
        return turn


class Policy(Protocol):
    name: str

    def run_episode(self, episode: Episode) -> None: ...


class PolicyFault(EvokitError):
    """Raised by a policy for a failure that *is* its own (e.g. an invalid action): not masked."""


class EpisodeOver(PolicyFault):
    """:meth:`Episode.run` after the turn or time budget is spent: the episode ends, scored as it is."""


def _join(*parts: str | None) -> str:
    return "; ".join(p for p in parts if p)


def rollout_once(policy: Policy, task: Task, image: Image, index: int, *, max_turns: int = 30,
                 seed: int = 0, mode: VerifierMode | str | None = None, backend: str | None = None) -> Rollout:
    """One episode in a fresh sandbox, then the task's tests (in a fresh verifier sandbox unless
    ``mode`` or the task says ``shared``); masked only for a harness fault (module docstring).
    ``backend``: the sandbox backend that made ``image`` (None: the configured one)."""
    r = Rollout(task=task.paths.task_dir.name, index=index)
    try:
        mode = verifier_mode(task, mode)  # a bad mode is the caller's mistake: ValueError, never masked
    except HarnessFault as e:  # a task this harness cannot verify (e.g. its own verifier image)
        r.error, r.masked, r.mask_reason = str(e), True, str(e)
        return r
    r.verifier_mode = mode.value
    t0 = time.monotonic()
    sandbox = sandbox_for_task(task, image=image, backend=backend)
    starter = None

    def mask(reason: str) -> Rollout:
        r.error, r.masked, r.mask_reason, r.reward, r.rewards = _join(r.error, reason), True, reason, None, None
        return r

    try:
        try:
            # The verifier's sandbox starts while the agent works (the separate mode's cost hides there).
            starter = VerifierStarter(task, image, backend) if mode == VerifierMode.SEPARATE else None
            sandbox.start()
        except Exception as e:  # nothing of the agent ran yet: the harness's own fault
            return mask(f"sandbox failed to start: {type(e).__name__}: {e}")
        timeout = task.config.agent.timeout_sec or 600
        ep = Episode(task, sandbox, r, max_turns, time.monotonic() + timeout, random.Random(f"{seed}:{index}"))
        try:
            policy.run_episode(ep)
        except PolicyFault as e:  # the policy's own failure: scored as it left the sandbox
            r.error = f"policy: {e}"
        except LLMError as e:
            return mask(f"endpoint failed: {e}")
        except SandboxError as e:  # its sandbox died under it (anchor killed, OOM): within its reach
            r.error = f"sandbox: {e}"
        # Any other exception from the policy is a bug: it propagates (after the finally below).
        try:
            outcome = verify_work(sandbox, task, image, mode=mode, verifier=None if starter is None else starter.get(),
                                  backend=backend)
            rewards, err = outcome.rewards, outcome.error
        except HarnessFault as e:
            return mask(str(e))
        except SandboxError as e:  # a sandbox died during the tests, on what the agent left
            rewards, err = None, f"{type(e).__name__}: {e}"
        r.rewards = rewards
        if rewards is None:
            r.reward, r.error = 0.0, _join(r.error, f"tests: {err} (reward 0)")
        else:
            r.reward = rewards.get("reward", min(rewards.values()))
    finally:
        sandbox.stop()
        if starter is not None:
            starter.stop()
        r.seconds = round(time.monotonic() - t0, 4)
    return r


def rollout_workers(workers: int) -> int:
    """Sandboxes in flight for ``workers`` cores: a rollout waits on process start-up more than on
    the CPU, so 4 per core (measured: 2.5× the throughput of 1 per core on 2 cores). Results do
    not depend on it (each rollout is seeded by its group's seed and its index)."""
    return max(1, 4 * workers)


def rollout_groups(policy: Policy, tasks: Sequence[Task | str | Path], *, group_size: int = 8,
                   in_flight: int = 8, max_turns: int | Sequence[int] = 30, seeds: Sequence[int] | None = None,
                   mode: VerifierMode | str | None = None) -> list[list[Rollout]]:
    """One group of ``group_size`` rollouts per task, all groups' rollouts on one pool of
    ``in_flight`` sandboxes (so small groups, e.g. one greedy rollout per task, still fill it).

    Group n's rollout i is seeded by ``(seeds[n], i)`` (default seeds 0, 1, …) and gets
    ``max_turns[n]`` turns (or ``max_turns`` for all): what a rollout does depends neither on
    ``in_flight`` nor on which rollouts share the pool with it.
    """
    tasks = [t if isinstance(t, Task) else Task(Path(t)) for t in tasks]
    seeds = list(seeds) if seeds is not None else list(range(len(tasks)))
    turns = [max_turns] * len(tasks) if isinstance(max_turns, int) else list(max_turns)
    if not len(seeds) == len(turns) == len(tasks):
        raise ValueError(f"rollout_groups: {len(tasks)} tasks, {len(seeds)} seeds, {len(turns)} max_turns")
    images = [image_for_task(t) for t in tasks]  # built once per task, before any rollout starts

    def one(job: tuple[int, int]) -> Rollout:
        n, i = job
        return rollout_once(policy, tasks[n], images[n], i, max_turns=turns[n], seed=seeds[n], mode=mode)

    jobs = [(n, i) for n in range(len(tasks)) for i in range(group_size)]
    with ThreadPoolExecutor(max_workers=max(1, in_flight)) as pool:
        flat = list(pool.map(one, jobs))
    return [flat[n * group_size:(n + 1) * group_size] for n in range(len(tasks))]


def rollout_group(policy: Policy, task: Task | str | Path, *, group_size: int = 8, workers: int = 2,
                  max_turns: int = 30, seed: int = 0, mode: VerifierMode | str | None = None) -> list[Rollout]:
    """G rollouts of ``policy`` on ``task`` in ``workers`` parallel sandboxes (a GRPO group)."""
    return rollout_groups(policy, [task], group_size=group_size, in_flight=workers, max_turns=max_turns,
                          seeds=[seed], mode=mode)[0]


def write_rows(rollouts: Sequence[Rollout], path: str | Path, **extra) -> None:
    """Append rollouts as JSON rows (with ``extra`` columns such as the training step), synced to
    disk through :func:`evokit.rows.append_rows`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    append_rows(path, ({**extra, **r.to_row()} for r in rollouts))
