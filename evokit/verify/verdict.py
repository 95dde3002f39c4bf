"""The three verifiers of EE §4.1 and the hack gate, run concurrently, folded into one :class:`Verdict`.

* **oracle**: the reference solution, then the tests: reward ≥ ``oracle_threshold``
  (1.0 by default; for a multi-metric ``reward.json`` choose ``reward_key`` or every
  metric must pass);
* **null**: nothing, then the tests: reward ≤ ``null_max_reward`` (0.0): the tests are
  not vacuous;
* **rubric**: :mod:`evokit.verify.rubric` over the folder and the two runs above; the
  oracle runs ``determinism_runs`` times in fresh sandboxes for its determinism rule;
* **hack gate** (evokit's fourth verifier, not in EE): no generic hack solution of
  :mod:`evokit.verify.hacks` may earn a reward above ``hack_gate.max_reward`` (0); it runs while
  the oracle and null trials run. ``hack_gate=None`` skips it.

A task that cannot even be loaded or built gets a failed verdict naming the reason (a
``format`` or ``build`` check), never an exception: verification of many tasks goes on.
"""

from __future__ import annotations

import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evokit.errors import Unavailable
from evokit.sandbox import DockerfileError, ImageBuildError, SandboxError
from evokit.sandbox.image import Image
from evokit.sandbox.task_env import image_for_task
from evokit.tasks import TaskFormatError, content_hash, load_task
from evokit.verify.hacks.gate import HackGateConfig, run_gate
from evokit.verify.rubric import DEFAULT_RUBRIC, Rubric, RubricContext
from evokit.verify.trial import TrialRun, run_trial


@dataclass(frozen=True)
class VerifyConfig:
    """How strict verification is; defaults follow EE §4.1."""

    oracle_threshold: float = 1.0  # oracle must score at least this
    null_max_reward: float = 0.0  # the do-nothing run must score at most this
    reward_key: str | None = None  # reward.json metric to judge; None: "reward", else the minimum
    determinism_runs: int = 2  # oracle runs in fresh sandboxes (rubric: oracle-deterministic)
    rubric: Rubric = DEFAULT_RUBRIC
    log_root: Path | None = None  # keep each trial's /logs here; None: keep nothing
    parallel: bool = True  # run the oracle/null trials concurrently
    #: where the tests run: None = the task's [verifier].environment_mode, else evokit's default
    #: "separate" (a fresh sandbox with only the agent's work); "shared" = the agent's sandbox
    verifier_mode: str | None = None
    #: the fourth verifier (module docstring); None: skipped (`evokit verify --no-hack-gate`)
    hack_gate: HackGateConfig | None = HackGateConfig()
    #: the sandbox backend every trial runs on (:mod:`evokit.sandbox.backend`); None: ``$EVOKIT_SANDBOX``,
    #: else ``local``
    backend: str | None = None

    def __post_init__(self):
        if self.verifier_mode is not None and self.verifier_mode not in ("separate", "shared"):
            raise ValueError(f"VerifyConfig.verifier_mode={self.verifier_mode!r}: use 'separate', 'shared' "
                             "or None (the task's [verifier].environment_mode, else 'separate')")


@dataclass
class Check:
    name: str  # "oracle", "null", "hack-gate", "rubric:<rule>", "format", "build"
    passed: bool
    reason: str
    duration_sec: float = 0.0


@dataclass
class Verdict:
    """The structured outcome of verifying one task."""

    task: str
    content_hash: str | None
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, list] = field(default_factory=dict)  # kind → rewards of each run
    log_dir: str | None = None
    hack_gate: dict | None = None  # the gate's result (GateResult.to_dict()); None when it did not run

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _score(run: TrialRun, cfg: VerifyConfig) -> float | None:
    return run.reward(cfg.reward_key)


def _reason(run: TrialRun, scored: str, *, explain: bool) -> str:
    """A trial check's reason: its error, else ``scored``; with ``explain``, how the tests failed
    (a failing oracle's first failing test and assertion: the line a user needs first)."""
    if run.error:
        return run.error
    return f"{scored}; {run.why}" if explain and run.why else scored


def verify_task(path: str | Path, config: VerifyConfig = VerifyConfig()) -> Verdict:
    """Run the oracle, null, rubric and hack-gate verifiers on the task folder at ``path``.

    A task that cannot be loaded or built gets a failed ``format`` or ``build`` check; a machine
    that cannot build any task (:class:`evokit.errors.Unavailable`: no Docker daemon, a mistyped
    ``$EVOKIT_SANDBOX``) raises instead, since the verdict would not be about the task.
    """
    path = Path(path)
    t0 = time.monotonic()
    verdict = Verdict(task=str(path), content_hash=None)
    try:
        task = load_task(path)
        verdict.content_hash = content_hash(path)
    except (TaskFormatError, ValueError, FileNotFoundError) as e:
        verdict.checks.append(Check("format", False, str(e)))
        return verdict
    ctx = RubricContext(task)
    try:
        t = time.monotonic()
        image = image_for_task(task, backend=config.backend)
        verdict.timings["build"] = time.monotonic() - t
    except Unavailable:  # the machine's setup (no daemon, no such backend): no verdict on the task
        raise
    except (DockerfileError, ImageBuildError, SandboxError) as e:
        for rule, ok, reason in config.rubric.evaluate(ctx, runs=False):  # without the image
            verdict.checks.append(Check(f"rubric:{rule.name}", ok, reason))
        verdict.checks.append(Check("build", False, str(e)))
        return verdict
    # The static rules see what the built image provides (rubric.outputs_and_inputs). Only a local
    # image has a filesystem to ask; a Docker backend image (EVOKIT_SANDBOX=docker) leaves the rubric
    # reading the Dockerfile, as before a build.
    ctx.image = image if isinstance(image, Image) else None
    for rule, ok, reason in config.rubric.evaluate(ctx, runs=False):
        verdict.checks.append(Check(f"rubric:{rule.name}", ok, reason))

    log_dir = None
    if config.log_root is not None:
        log_dir = Path(config.log_root) / f"{path.name}-{verdict.content_hash[:10]}"
        verdict.log_dir = str(log_dir)
    kinds = ["oracle"] * max(config.determinism_runs, 1) + ["null"]
    jobs = [(k, None if log_dir is None else log_dir / f"{k}-{i}") for i, k in enumerate(kinds)]
    with ThreadPoolExecutor(max_workers=len(jobs) if config.parallel else 1) as pool:
        trials = [pool.submit(run_trial, task, image, kind=k, log_dir=d, mode=config.verifier_mode,
                              backend=config.backend) for k, d in jobs]
        gate = None
        if config.hack_gate is not None:  # while the trials run (its own pool: see evokit.verify.hacks.gate)
            gate = run_gate(task, image, config.hack_gate, mode=config.verifier_mode, reward_key=config.reward_key,
                            workers=None if config.parallel else 1, backend=config.backend)
        runs = [f.result() for f in trials]
    # A trial the harness broke says nothing about the task: it runs once more (TrialRun.harness_fault).
    runs = [run_trial(task, image, kind=k, log_dir=d, mode=config.verifier_mode, backend=config.backend)
            if r.harness_fault else r for r, (k, d) in zip(runs, jobs, strict=True)]
    ctx.oracle_runs, ctx.null_run = runs[:-1], runs[-1]
    verdict.rewards = {"oracle": [r.rewards for r in ctx.oracle_runs], "null": [ctx.null_run.rewards]}

    oracle = ctx.oracle_runs[0]
    score = _score(oracle, config)
    passed = score is not None and score >= config.oracle_threshold
    verdict.checks.insert(0, Check(
        "oracle", passed, _reason(oracle, f"reward {score} (need ≥ {config.oracle_threshold})", explain=not passed),
        oracle.timings.get("total", 0.0)))
    null = ctx.null_run
    nscore = _score(null, config)
    verdict.checks.insert(1, Check(
        "null", nscore is not None and nscore <= config.null_max_reward,
        _reason(null, f"reward {nscore} with no solution (need ≤ {config.null_max_reward})", explain=False),
        null.timings.get("total", 0.0)))
    if gate is not None:
        verdict.hack_gate = gate.to_dict()
        verdict.checks.insert(2, Check("hack-gate", gate.passed, gate.reason(config.hack_gate.max_reward),
                                       gate.seconds))
        verdict.timings["hack_gate"] = gate.seconds
    for rule, ok, reason in config.rubric.evaluate(ctx, runs=True):
        verdict.checks.append(Check(f"rubric:{rule.name}", ok, reason))
    verdict.timings["total"] = time.monotonic() - t0
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2, default=str))
    return verdict


def verify_many(paths: list[str | Path], config: VerifyConfig = VerifyConfig(), *, workers: int = 2,
                progress: bool = True, executor=None) -> list[Verdict]:
    """Verify many tasks, ``workers`` at a time (or through ``executor``: an
    :mod:`evokit.parallel` executor, e.g. Ray), with a progress bar; order is kept."""
    from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

    from evokit.parallel import LocalExecutor

    executor = executor or LocalExecutor(workers)
    with tqdm(total=len(paths), desc="verify", unit="task", disable=not progress) as bar:
        return executor.map(functools.partial(verify_task, config=config), list(paths), progress=bar)
