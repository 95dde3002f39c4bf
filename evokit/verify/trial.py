"""One direct trial of a task in the local sandbox: (solution) → tests → reward.

This is what Harbor's ``Trial`` does with the ``oracle`` or ``nop`` agent, minus the
job machinery: the same paths (``/solution``, ``/tests``, ``/logs/verifier``), the same
order (stale reward files removed, *then* ``tests/`` uploaded, only after the agent
phase), the same reward contract (``reward.json`` wins over ``reward.txt``; finite
numbers only; a missing file is an error, not a zero). Keeping it in-process with a
sandbox we already hold is what makes verification fast (see ``benchmarks/``).
"""

from __future__ import annotations

import base64
import json
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from harbor.models.task.task import Task

from evokit.sandbox import Image, Sandbox
from evokit.sandbox.image import _as_user
from evokit.sandbox.process import ExecResult
from evokit.sandbox.runtime import tar_bytes
from evokit.sandbox.task_env import sandbox_for_task

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"


class RewardError(ValueError):
    """The tests ran but left no usable reward (missing, empty, non-numeric, non-finite)."""


@dataclass
class TrialRun:
    """What one trial did and produced; ``rewards`` is None when ``error`` says why."""

    kind: str  # "oracle", "null", or an agent's name
    rewards: dict[str, float] | None = None
    error: str | None = None
    agent: ExecResult | None = None
    tests: ExecResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def reward(self, key: str | None = None) -> float | None:
        """The reward under ``key``; with no key, ``reward`` or else the minimum over all keys."""
        if not self.rewards:
            return None
        if key is not None:
            return self.rewards.get(key)
        return self.rewards.get("reward", min(self.rewards.values()))


def parse_rewards(files: dict[str, bytes]) -> dict[str, float]:
    """Harbor's reward contract on the downloaded verifier dir (``{name: bytes}``)."""
    if "reward.json" in files:
        raw = files["reward.json"]
        if not raw.strip():
            raise RewardError("reward.json is empty")
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise RewardError(f"reward.json is not JSON: {e}") from e
        values = value if isinstance(value, dict) else {"reward": value}
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RewardError(f"reward.json: {k}={v!r} is not a finite number")
        return {k: float(v) for k, v in values.items()}
    if "reward.txt" in files:
        raw = files["reward.txt"].strip()
        if not raw:
            raise RewardError("reward.txt is empty")
        try:
            v = float(raw)
        except ValueError as e:
            raise RewardError(f"reward.txt is not a number: {raw[:80]!r}") from e
        if not math.isfinite(v):
            raise RewardError(f"reward.txt holds a non-finite value {v}")
        return {"reward": v}
    raise RewardError("the tests wrote no reward file (/logs/verifier/reward.txt or reward.json)")


def _stage_and_run(sandbox: Sandbox, src: Path, target: str, script: str, *, pre: str = "",
                   post: str = "", user: str | int | None, env: dict, timeout_sec: float | None) -> ExecResult:
    """Upload ``src`` to ``target`` and run ``target/script`` in *one* exec.

    Staging (as root) and running (as ``user``) share a shell, which halves the number of
    sandbox round trips of a trial; ``post`` runs as root after the script, whatever its
    exit status, and the script's status is the exec's status.
    """
    runner = shlex.join(_as_user(["sh", "-c", f"{target}/{script} > \"$0\" 2>&1", "$LOG"],
                                 None if user is None else str(user)))
    cmd = (f"{pre} mkdir -p {target} && tar -x -f - -C {target} --no-same-owner && "
           f"chmod +x {target}/{script} && {runner}; rc=$?; {post} exit $rc")
    return sandbox.exec(["sh", "-c", cmd], stdin=tar_bytes(src), user="root", env=env, timeout_sec=timeout_sec)


def run_solution(sandbox: Sandbox, task: Task) -> ExecResult:
    """The oracle agent: upload ``solution/`` to /solution and run ``solve.sh`` (Harbor's way)."""
    env = {"DEBIAN_FRONTEND": "noninteractive", **task.config.solution.env, "LOG": "/logs/agent/oracle.txt"}
    return _stage_and_run(sandbox, task.paths.solution_dir, "/solution", "solve.sh",
                          user=task.config.agent.user, env=env, timeout_sec=task.config.agent.timeout_sec)


_FILE_MARK = "@@evokit-reward-file "


def run_tests(sandbox: Sandbox, task: Task) -> tuple[ExecResult, dict[str, float] | None, str | None]:
    """Verifier phase: end the agent's processes, clear stale rewards, upload ``tests/``, run, read the reward.

    Killing every process the agent phase started comes first: a daemon left behind could
    otherwise rewrite the reward file while (or after) the tests run.
    """
    sandbox.kill_commands()
    collect = "".join(f'[ -f {p} ] && echo "{_FILE_MARK}{Path(p).name}" && base64 {p}; '
                      for p in (REWARD_JSON, REWARD_TXT))
    res = _stage_and_run(sandbox, task.paths.tests_dir, "/tests", "test.sh",
                         pre=f"rm -f {REWARD_TXT} {REWARD_JSON} &&", post=collect,
                         user=task.config.verifier.user,
                         env={**task.config.verifier.env, "LOG": "/logs/verifier/test-stdout.txt"},
                         timeout_sec=task.config.verifier.timeout_sec)
    if res.timed_out:
        return res, None, f"tests timed out after {task.config.verifier.timeout_sec:.0f}s"
    files: dict[str, bytes] = {}
    for chunk in res.stdout.split(_FILE_MARK)[1:]:
        name, _, body = chunk.partition("\n")
        files[name.strip()] = base64.b64decode("".join(body.split()))
    try:
        return res, parse_rewards(files), None
    except RewardError as e:
        return res, None, str(e)


def run_trial(task: Task, image: Image, *, kind: str = "oracle", log_dir: Path | None = None) -> TrialRun:
    """A fresh sandbox, the solution if ``kind == "oracle"`` (nothing for ``"null"``), then the tests."""
    run = TrialRun(kind=kind)
    t0 = time.monotonic()
    sandbox = sandbox_for_task(task, image=image)
    try:
        sandbox.start()
        run.timings["start"] = time.monotonic() - t0
        if kind == "oracle":
            t = time.monotonic()
            run.agent = run_solution(sandbox, task)
            run.timings["agent"] = time.monotonic() - t
            if run.agent.timed_out:
                run.error = f"solution timed out after {task.config.agent.timeout_sec:.0f}s"
        t = time.monotonic()
        run.tests, run.rewards, err = run_tests(sandbox, task)
        run.error = run.error or err
        run.timings["tests"] = time.monotonic() - t
        if log_dir is not None:
            _keep_logs(sandbox, log_dir)
    except Exception as e:  # a broken sandbox is a failed trial with its reason, never a crash
        run.error = f"{type(e).__name__}: {e}"
    finally:
        sandbox.stop()
    run.timings["total"] = time.monotonic() - t0
    return run


def _keep_logs(sandbox: Sandbox, log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        sandbox.download_dir("/logs", log_dir, max_bytes=64 << 20)
    except Exception as e:  # logs are best effort: a missing log never fails a verdict
        (log_dir / "download-error.txt").write_text(str(e))
