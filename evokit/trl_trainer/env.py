"""The rollout environment TRL drives (``environment_factory``) and the task reward.

``reset(**row)`` starts the row's task in a fresh evokit sandbox (in a background thread, so that
the G sandboxes of a group start while the prompt is tokenised) and returns the instruction, which
TRL appends to the user message. TRL turns every public method other than ``reset`` into a tool
(read from ``trl/trainer/grpo_trainer.py``, TRL 1.16), so :class:`SandboxToolEnv` has one, ``bash``:
the agent's only tool; everything else is private. The reward is the task's own
``tests/test.sh``, run only after the episode by :func:`evokit.verify.trial.verify_work` (the agent's
processes killed, its work copied into a fresh verifier sandbox: the reward-rewriting-daemon class).

Bad input never ends a run, and the masking policy is :mod:`evokit.rollout`'s: a rollout is
*masked* (the reward function returns ``None``, which TRL excludes from the group baseline and
gives advantage 0) only for a fault the harness can attribute to itself: the task folder would not
load, its instruction cannot fit the context, the agent's sandbox failed to start, the verifier's
sandbox failed (:class:`~evokit.verify.trial.HarnessFault`). What the *policy* causes is scored:
a tool call that is not valid JSON (TRL keeps it as text and ends the episode), a command that
hangs (killed after ``command_timeout_sec``), a completion cut at ``max_completion_length``
(context overflow; TRL also drops a tool result that would not fit). The tests then score what the
agent left, as :mod:`evokit.rollout` scores an invalid action or a full context (reward 0 unless
the work was done anyway), and the row's ``error`` and ``policy_outcomes`` say which happened.
Masking them (``LLMTrainConfig.mask_*``, off by default) is survivor bias: a policy learns to
trigger the masked outcome whenever it would otherwise fail, since a masked failure costs nothing.

Harbor and the sandbox are imported where used, so that the in-process task runs on a GPU machine
that has only PyTorch and TRL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from evokit.sources import InProcess, TaskRef
from evokit.trl_trainer.config import LLMTrainConfig
from evokit.trl_trainer.models import TOOL_CALL_MARKER


class _SandboxClock:
    """Wall time during which at least one sandbox operation was in flight (the sandbox share)."""

    def __init__(self):
        self._lock, self._active, self._since, self.seconds = threading.Lock(), 0, 0.0, 0.0

    @contextlib.contextmanager
    def busy(self):
        with self._lock:
            if self._active == 0:
                self._since = time.monotonic()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self.seconds += time.monotonic() - self._since


@dataclass
class RunContext:
    """What every environment instance of one run shares: settings, caches, a thread pool, the clock."""

    cfg: LLMTrainConfig
    pool: ThreadPoolExecutor
    clock: _SandboxClock = field(default_factory=_SandboxClock)
    tasks: dict = field(default_factory=dict)
    images: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    envs: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # per-rollout records of the current batch (reward function)
    eos_ids: tuple[int, ...] = ()
    prompt_budget: Callable[[str], str | None] | None = None  # instruction → error if it cannot fit

    def task(self, path: Path):
        from harbor.models.task.task import Task

        with self.lock:
            if path not in self.tasks:
                self.tasks[path] = Task(path)
            return self.tasks[path]

    def image(self, task):
        from evokit.sandbox.task_env import image_for_task

        key = task.paths.task_dir
        with self.lock:
            if key in self.images:
                return self.images[key]
        img = image_for_task(task)  # the layer cache makes a rebuild cheap; builds are flock'ed
        with self.lock:
            self.images[key] = img
        return img


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n[... {len(text) - limit} chars truncated ...]\n" + text[-half:]


class SandboxToolEnv:
    """One rollout's terminal: ``reset`` starts the task, ``bash`` is the agent's tool.

    Public methods other than ``reset`` become tools in TRL, so everything else is private.
    """

    def __init__(self, run: RunContext):
        self._run = run
        self._sandbox = None
        self._starting: Future | None = None
        self._cmd_lock = threading.Lock()
        self._reset_state(None, None)
        run.envs.append(self)

    def _reset_state(self, ref: TaskRef | None, task) -> None:
        self._ref, self._task = ref, task
        self._turns: list[dict] = []
        self._error: str | None = None
        self._timed_out = False
        budget = task.config.agent.timeout_sec if task is not None else None  # Harbor's agent phase budget
        self._deadline = time.monotonic() + float(budget or 600)
        self._seconds = 0.0

    def reset(self, **row) -> str:
        """Start the row's task (in the background) and return its instruction."""
        self._close()
        ref = TaskRef(tuple(row["task_key"]), Path(row["task_dir"]) if row.get("task_dir") else None)
        if ref.path is None:
            self._reset_state(ref, None)
            return InProcess.INSTRUCTION
        try:
            task = self._run.task(ref.path)
        except Exception as e:  # a broken task folder is a masked rollout, never a crash
            self._reset_state(ref, None)
            self._error = f"task: {type(e).__name__}: {e}"
            return "(this task could not be loaded)"
        self._reset_state(ref, task)
        instruction = task.instruction
        if self._run.prompt_budget is not None and (err := self._run.prompt_budget(instruction)):
            self._error = err
            return "(instruction too long for the context; this rollout is masked)"
        self._starting = self._run.pool.submit(self._start, task)
        return instruction

    def _start(self, task):
        from evokit.sandbox.task_env import sandbox_for_task

        with self._run.clock.busy():
            sandbox = sandbox_for_task(task, image=self._run.image(task))
            sandbox.start()
        self._sandbox = sandbox
        return sandbox

    async def bash(self, command: str) -> str:
        """Run one bash command line in the task's terminal and return its output (stdout and stderr).

        Args:
            command: The command line to run, e.g. `ls -la /app`.
        """
        return await asyncio.to_thread(self._exec, command)

    def _exec(self, command: str) -> str:
        cfg = self._run.cfg
        if self._ref is not None and self._ref.path is None:  # in-process task: no sandbox
            self._turns.append({"command": command, "exit_code": 0, "seconds": 0.0, "output": ""})
            return ""
        with self._cmd_lock:
            if self._error:
                return f"error: {self._error}"
            if len(self._turns) >= cfg.max_turns:
                return "error: no turns left in this episode"
            left = self._deadline - time.monotonic()
            if left <= 0:
                return "error: the episode's time budget is spent"
            try:
                sandbox = self._starting.result()
            except Exception as e:
                self._error = f"sandbox: {type(e).__name__}: {e}"
                return f"error: the environment failed to start ({self._error})"
            with self._run.clock.busy():
                res = sandbox.exec(command, timeout_sec=min(cfg.command_timeout_sec, left),
                                   max_output_bytes=4 * cfg.output_chars)
            out = _truncate(res.stdout + res.stderr, cfg.output_chars)
            if res.timed_out:
                self._timed_out = True
                out += f"\n[command timed out after {min(cfg.command_timeout_sec, left):.0f}s and was killed]"
            elif res.return_code:
                out += f"\n[exit code {res.return_code}]"
            self._seconds += res.duration_sec
            self._turns.append({"command": command, "exit_code": res.return_code, "timed_out": res.timed_out,
                                "seconds": round(res.duration_sec, 4), "output": out[:400]})
            return out

    def _finish(self, run_tests: bool) -> tuple[dict | None, str | None]:
        """End the episode: (rewards, error). Runs the task's tests only if ``run_tests``.

        The tests run as in :func:`evokit.rollout.rollout_once`: in a fresh verifier
        sandbox holding only the agent's work unless the task says ``shared``. Tests that leave
        no reward for what the agent did (its sandbox killed, a reward path made a directory, a
        full disk...) give ``{"reward": 0.0}`` with the reason: within the agent's reach, so
        scored, not masked. Only a harness fault (the verifier's sandbox would not start) is
        ``(None, reason)``, i.e. masked.
        """
        if self._ref is None or self._ref.path is None:
            return None, None
        try:
            if self._error:
                return None, self._error
            sandbox = self._starting.result() if self._starting else None
            if sandbox is None or not run_tests:
                return None, None
            from evokit.sandbox import SandboxError
            from evokit.verify.trial import HarnessFault, verify_work

            with self._run.clock.busy():
                try:
                    outcome = verify_work(sandbox, self._task, self._run.image(self._task))
                    rewards, err = outcome.rewards, outcome.error
                except HarnessFault as e:
                    return None, f"verifier: {e}"
                except SandboxError as e:  # a sandbox died during the tests, on what the agent left
                    rewards, err = None, f"{type(e).__name__}: {e}"
            if rewards is None:
                return {"reward": 0.0}, f"tests: {err} (reward 0)"
            return rewards, None
        except Exception as e:
            return None, f"sandbox: {type(e).__name__}: {e}"
        finally:
            self._close()

    def _close(self) -> None:
        if self._starting is not None:
            with contextlib.suppress(Exception):
                self._starting.result()
            self._starting = None
        if self._sandbox is not None:
            with self._run.clock.busy():
                with contextlib.suppress(Exception):
                    self._sandbox.stop()
            self._sandbox = None


def _invalid_tool_call(messages: list[dict]) -> bool:
    """The episode's last assistant message tried a tool call TRL could not parse (kept as text)."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return bool(last) and not last.get("tool_calls") and TOOL_CALL_MARKER in str(last.get("content") or "")


def policy_outcomes(env: SandboxToolEnv, messages: list[dict], ids, eos_ids, cfg: LLMTrainConfig
                    ) -> list[tuple[str, str]]:
    """(the ``LLMTrainConfig`` flag that would mask it, reason) for each outcome the policy caused.

    Each is the policy's own doing, so by default none masks (module docstring): an invalid tool
    call, a command past ``command_timeout_sec``, a completion cut at ``max_completion_length``
    (no end-of-sequence token) or a command whose output TRL dropped because it did not fit.
    """
    out = []
    if _invalid_tool_call(messages):
        out.append(("mask_invalid_tool_calls", "invalid tool call (not parseable JSON)"))
    if env._timed_out:
        out.append(("mask_timeouts", f"command timed out after {cfg.command_timeout_sec:.0f}s"))
    if not ids or ids[-1] not in eos_ids:
        out.append(("mask_overflow", "context overflow: the completion hit max_completion_length"))
    elif len(env._turns) > sum(m.get("role") == "tool" for m in messages):  # TRL dropped a tool result
        out.append(("mask_overflow", "context overflow: a command's output did not fit in max_completion_length"))
    return out


def make_task_reward(run: RunContext) -> Callable[..., list[float | None]]:
    """TRL reward function: the task's tests after the episode; ``None`` (masked) only for a harness
    fault, or for a policy outcome whose ``mask_*`` flag the user turned on."""

    def task_tests(prompts, completions, completion_ids, environments=None, **kw) -> list[float | None]:
        cfg = run.cfg
        decisions, outcomes = [], []
        for env, msgs, ids in zip(environments, completions, completion_ids, strict=True):
            if env._ref is not None and env._ref.path is None:  # in-process task: nothing to mask
                decisions.append(None)
                outcomes.append([])
                continue
            found = policy_outcomes(env, msgs, ids, run.eos_ids, cfg)
            masked_by = [why for flag, why in found if getattr(cfg, flag)]
            decisions.append(env._error or (masked_by[0] if masked_by else None))
            outcomes.append([why for _, why in found])
        results = list(run.pool.map(lambda a: a[0]._finish(run_tests=a[1] is None),
                                    zip(environments, decisions, strict=True)))
        rewards: list[float | None] = []
        for i, (env, reason, (rw, err)) in enumerate(zip(environments, decisions, results, strict=True)):
            if env._ref is not None and env._ref.path is None:  # in-process task: distinct-token share
                ids = completion_ids[i]
                value = len(set(ids)) / len(ids) if ids else 0.0
                rw, err = {"reward": value}, None
            reward = None if reason or rw is None else float(rw.get("reward", min(rw.values())))
            msgs = completions[i]
            error = reason or "; ".join([*outcomes[i], *([err] if err else [])]) or None
            run.pending.append({
                "slot": int(kw["slot"][i]), "task": list(env._ref.key), "task_dir": str(env._ref.path or ""),
                "reward": reward, "rewards": rw, "masked": reward is None, "error": error,
                "policy_outcomes": outcomes[i], "n_turns": len(env._turns), "turns": env._turns,
                "assistant_messages": sum(m.get("role") == "assistant" for m in msgs),
                "sandbox_seconds": round(env._seconds, 4)})
            rewards.append(reward)
        return rewards

    return task_tests


def tool_schema() -> list:
    """The tools TRL renders into every prompt (the ``bash`` method's signature and docstring)."""
    return [SandboxToolEnv.__new__(SandboxToolEnv).bash]
