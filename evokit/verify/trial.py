"""One direct trial of a task in the local sandbox: (solution) → tests → reward.

This is what Harbor's ``Trial`` does with the ``oracle`` or ``nop`` agent, minus the
job machinery: the same paths (``/solution``, ``/tests``, ``/logs/verifier``), the same
order (stale reward files removed, *then* ``tests/`` uploaded, only after the agent
phase), the same reward contract (``reward.json`` wins over ``reward.txt``; finite
numbers only; a missing file is an error, not a zero). Keeping it in-process with a
sandbox we already hold is what makes verification fast (see ``benchmarks/``).

**Trust model.** An RL policy optimises whatever reward is easiest, so nothing the
agent can touch may decide the reward:

* *Separate verifier* (:attr:`VerifierMode.SEPARATE`, evokit's default; Harbor schema 1.4's
  ``[verifier].environment_mode = "separate"``): every process the agent started is killed,
  then the tests run in a **fresh sandbox** from the task's image in which the agent never ran.
  Only the agent's work travels there: :func:`work_paths` (the task's workdir plus the sources
  of Harbor's ``artifacts`` list and the ``/logs/artifacts`` convention dir), copied by
  the agent sandbox's :meth:`~evokit.sandbox.backend.SandboxAPI.copy_work_to` (the built-in
  backends: :func:`evokit.sandbox.transfer.copy_between`) with links resolved inside the agent's sandbox or
  refused. Trojaned tools, planted daemons, dangling links into ``/tests`` and poisoned dotfiles
  outside those paths never reach the tests.
* *Shared verifier* (:attr:`VerifierMode.SHARED`, Harbor's default): the tests run in the
  agent's own sandbox **while the agent's processes keep running**, as under Harbor (a task
  whose solution starts redis or supervisord is checked with them up). The tests' processes run
  in the verifier's private namespaces (:mod:`evokit.sandbox.verifier_ns`): a pid namespace no
  agent process can see, signal or ptrace, and ``/tests`` and ``/logs/verifier`` on tmpfs mounts
  that only the host and the tests reach. After the tests end, everything (theirs and the
  agent's) is killed. **Documented weakness:** the tests run on the agent's filesystem (its
  ``/usr/bin``, ``/tmp``, its workdir), so a root agent or a daemon it left can still change
  what the tests *read* (a trojaned ``diff``, a file swapped under them) and so subvert them;
  it cannot write the reward, read the answer keys or reach the tests' processes. Choose it per
  task with ``environment_mode = "shared"`` or per call.

In both modes rewards are **out of band**: the test's output goes to
``/logs/verifier/test-stdout.txt`` (never parsed), and the reward files are read by the host
through its own fd of the private ``/logs/verifier`` only once every process of the verifier
phase is gone. The tests run with ``PYTHONSAFEPATH=1`` (set by the harness over the task's
``[verifier].env``): their cwd is the task's workdir, i.e. the agent's work, and a
``python3 -c``/``-m`` there would otherwise import the agent's ``json.py`` before the standard
library's (the verifier's import path). Deviation from Harbor, stated: a test that runs
``python3 /tests/x.py`` does not get ``/tests`` on its import path (pytest inserts its
rootdir itself and is unaffected).
"""

from __future__ import annotations

import json
import math
import shlex
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath

from harbor.models.task.config import VerifierEnvironmentMode
from harbor.models.task.task import Task

from evokit.errors import EvokitError, UserError
from evokit.sandbox import Image, Sandbox
from evokit.sandbox.image import as_user
from evokit.sandbox.process import ExecResult
from evokit.sandbox.runtime import tar_bytes
from evokit.sandbox.task_env import limits_from_config, sandbox_for_task
from evokit.sandbox.verifier_ns import VerifierNamespace, VerifierSetupError
from evokit.verify.diagnosis import explain_tests

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
CTRF = f"{VERIFIER_DIR}/ctrf.json"  # Terminal-Bench 2's `pytest --ctrf` report, read for the reason only
TEST_LOG_MAX_BYTES = 8 << 20  # test-stdout.txt larger than this is not read for the reason
ORACLE_LOG = "/logs/agent/oracle.txt"
SOLUTION_DIR = "/solution"
SOLVE_SH = f"{SOLUTION_DIR}/solve.sh"
ARTIFACTS_DIR = "/logs/artifacts"  # Harbor's convention dir, copied in its separate mode too
REWARD_MAX_BYTES = 1 << 20  # a reward file larger than this is not a reward
REASON_LINES = 5  # how many lines of a failing solve.sh go into the reason
VERIFIER_THREAD = "evokit-verifier-start"  # name of the thread that starts a separate verifier


class RewardError(UserError, ValueError):
    """The tests ran but left no usable reward (missing, empty, non-numeric, non-finite)."""


class HarnessFault(EvokitError, RuntimeError):
    """A failure the harness can attribute to itself (the verifier's fresh sandbox would not
    start): a rollout that hits it is masked, never scored. Everything the agent can reach is
    scored instead (see :mod:`evokit.rollout`)."""


class VerifierMode(StrEnum):
    """Where the tests run: a fresh sandbox with only the agent's work (``separate``) or the
    agent's own sandbox (``shared``). Values are Harbor's ``environment_mode`` names."""

    SEPARATE = "separate"
    SHARED = "shared"


def verifier_mode(task: Task, override: VerifierMode | str | None = None) -> VerifierMode:
    """``override`` if given, else the task's ``[verifier].environment_mode``, else ``separate``.

    Deviation from Harbor, stated: Harbor defaults to ``shared`` when the task says nothing;
    evokit's own trials and rollouts default to ``separate`` because its agents are RL policies.
    """
    if override is not None:
        try:
            return VerifierMode(override)
        except ValueError:
            raise ValueError(f"verifier mode {override!r}: use 'separate' (a fresh sandbox with only the "
                             "agent's work) or 'shared' (the agent's own sandbox)") from None
    cfg = task.config.verifier
    if cfg.environment is not None:
        raise HarnessFault(
            f"{task.paths.config_path}: [verifier.environment] (a different image for the verifier) is not "
            "supported by the local sandbox; the separate verifier uses the task's own image")
    if cfg.environment_mode == VerifierEnvironmentMode.SHARED:
        return VerifierMode.SHARED
    return VerifierMode.SEPARATE


def work_paths(task: Task, image: Image) -> list[str]:
    """The paths that make up the agent's work, copied into the separate verifier.

    The task's workdir (``[environment].workdir``, else the image's ``WORKDIR``), the ``source``
    of each entry of Harbor's top-level ``artifacts = [...]`` (what Harbor's own separate mode
    carries over), and ``/logs/artifacts``. A workdir of ``/`` would carry the agent's whole
    filesystem (its trojaned tools too), so it is refused with the way out.
    """
    workdir = task.config.environment.workdir or image.workdir or "/"
    paths = [workdir, *(a if isinstance(a, str) else a.source for a in task.config.artifacts), ARTIFACTS_DIR]
    out: list[str] = []
    for p in paths:
        pp = PurePosixPath(p)
        if not pp.is_absolute():
            raise HarnessFault(f"{task.paths.config_path}: artifact path {p!r} must be absolute")
        norm = str(PurePosixPath("/", *[part for part in pp.parts[1:] if part not in (".", "")]))
        if norm == "/" or ".." in pp.parts:
            raise HarnessFault(
                f"{task.paths.config_path}: the separate verifier cannot copy {p!r} (the agent's whole "
                "filesystem, or a path with '..'): set [environment].workdir, list the outputs in "
                "`artifacts = [...]`, or set [verifier].environment_mode = \"shared\"")
        if norm.startswith(("/tests", VERIFIER_DIR, SOLUTION_DIR)):
            raise HarnessFault(f"{task.paths.config_path}: {p!r} is a harness path; it cannot be agent work")
        if norm not in out:
            out.append(norm)
    return out


@dataclass
class TestsOutcome:
    """What a verifier phase left: ``rewards`` (None when ``error`` says why) and ``why``, one line
    on how the tests failed (:func:`evokit.verify.diagnosis.explain_tests`), for people only."""

    exec: ExecResult | None
    rewards: dict[str, float] | None
    error: str | None
    why: str | None = None


@dataclass
class TrialRun:
    """What one trial did and produced; ``rewards`` is None when ``error`` says why, and ``why``
    says how the tests failed (the first failing test and its assertion, test.sh's exit status)."""

    kind: str  # "oracle", "null", or an agent's name
    rewards: dict[str, float] | None = None
    error: str | None = None
    agent: ExecResult | None = None
    tests: ExecResult | None = None
    mode: str = VerifierMode.SEPARATE.value
    timings: dict[str, float] = field(default_factory=dict)
    why: str | None = None
    #: The trial broke for the harness's reasons (a sandbox that would not start, a copy that failed),
    #: not the task's: :func:`evokit.verify.verdict.verify_task` runs such a trial once more, so that
    #: a verdict (and an evolution's choice of child) does not depend on the machine's load.
    harness_fault: bool = False

    def reward(self, key: str | None = None) -> float | None:
        """The reward under ``key``; with no key, ``reward`` or else the minimum over all keys."""
        if not self.rewards:
            return None
        if key is not None:
            return self.rewards.get(key)
        return self.rewards.get("reward", min(self.rewards.values()))


def _decode(name: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise RewardError(f"{name} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_rewards(files: dict[str, bytes]) -> dict[str, float]:
    """Harbor's reward contract on the verifier dir's reward files (``{name: bytes}``), strictly:
    UTF-8 only, finite numbers only, booleans and strings refused."""
    if "reward.json" in files:
        raw = _decode("reward.json", files["reward.json"])
        if not raw.strip():
            raise RewardError("reward.json is empty")
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise RewardError(f"reward.json is not JSON: {e}") from e
        values = value if isinstance(value, dict) else {"reward": value}
        if not values:
            raise RewardError("reward.json is an empty object")
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RewardError(f"reward.json: {k}={v!r} is not a finite number")
        return {k: float(v) for k, v in values.items()}
    if "reward.txt" in files:
        raw = _decode("reward.txt", files["reward.txt"]).strip()
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


def _stage_and_run(sandbox: Sandbox, src: Path, target: str, script: str, log: str, *, pre: str = "",
                   user: str | int | None, env: dict, timeout_sec: float | None) -> ExecResult:
    """Upload ``src`` to ``target`` and run ``target/script`` in *one* exec, output to ``log``.

    Staging (as root) and running (as ``user``) share a shell, which halves the number of
    sandbox round trips of a trial. The script's stdout and stderr go to the file ``log`` in the
    sandbox (Harbor's convention), never to the exec's stdout: nothing a script prints is ever
    parsed. The exit status of the exec is the script's. A ``src`` that is itself a symlink is
    refused (the linked-tests class): a ``tests -> /etc`` link would upload the host's ``/etc``.
    """
    _check_folder(src)
    runner = shlex.join(as_user(["sh", "-c", 'exec "$1" > "$2" 2>&1', "sh", f"{target}/{script}", log],
                                 None if user is None else str(user)))
    cmd = (f"{pre} mkdir -p {target} {shlex.quote(str(PurePosixPath(log).parent))} && "
           f"tar -x -f - -C {target} --no-same-owner && chmod +x {target}/{script} && "
           f": > {shlex.quote(log)} && chmod 644 {shlex.quote(log)} && {_chown(user, log)}exec {runner}")
    return sandbox.exec(["sh", "-c", cmd], stdin=tar_bytes(src), user="root", env=env, timeout_sec=timeout_sec)


def _check_folder(src: Path) -> None:
    """A task's ``tests/`` or ``solution/`` must be a real folder (the linked-tests class)."""
    if src.is_symlink() or not src.is_dir():
        raise FileNotFoundError(f"{src} is {'a symlink' if src.is_symlink() else 'not a directory'}; "
                                f"the task's {src.name}/ must be a real folder")


def _chown(user: str | int | None, *paths: str) -> str:
    """``chown USER PATHS && `` for a non-root ``user`` (a name, uid or uid:gid), else nothing."""
    if user is None or str(user) in ("", "root", "0", "0:0"):
        return ""
    return f"chown {shlex.quote(str(user))} {' '.join(map(shlex.quote, paths))} && "


def run_solution(sandbox: Sandbox, task: Task, *, timeout_sec: float | None = None) -> ExecResult:
    """The oracle agent, the one implementation evokit has (:func:`run_trial` and
    :class:`evokit.agents.OracleAgent` both run it): ``solution/`` uploaded to ``/solution`` and
    ``solve.sh`` run with ``[solution].env`` over ``DEBIAN_FRONTEND=noninteractive``, its output
    kept in ``/logs/agent/oracle.txt`` (never in the exec's output).

    It runs as the task's ``[agent].user``, as Harbor's oracle does: Harbor's trial sets the
    environment's default user to ``[agent].user`` for the whole agent phase, and its oracle agent
    execs ``solve.sh`` with that default (only the ``chmod +x`` runs as root, as the staging here
    does). A reference solution is an agent's work; running it as root would let a solution pass
    that no agent with the task's permissions could match. ``timeout_sec``: by default the task's
    ``[agent].timeout_sec``.
    """
    env = {"DEBIAN_FRONTEND": "noninteractive", **task.config.solution.env}
    return _stage_and_run(sandbox, task.paths.solution_dir, SOLUTION_DIR, "solve.sh", ORACLE_LOG,
                          user=task.config.agent.user, env=env,
                          timeout_sec=task.config.agent.timeout_sec if timeout_sec is None else timeout_sec)


def solution_output(sandbox: Sandbox, res: ExecResult) -> str:
    """What ``solve.sh`` printed (its log), or the exec's stderr where the log cannot be read (the
    staging failed before the script ran)."""
    try:
        return sandbox.read_file(ORACLE_LOG, max_bytes=64 << 10).decode(errors="replace")
    except Exception:  # noqa: BLE001 - best effort; the exit status alone still says it
        return res.stderr


def solution_failure(sandbox: Sandbox, res: ExecResult) -> str:
    """``solve.sh exited 1: <its first lines>`` for a failing oracle (the reason a verdict shows)."""
    out = solution_output(sandbox, res)
    lines = [ln for ln in out.splitlines() if ln.strip()][:REASON_LINES]
    return f"solve.sh exited {res.return_code}" + (": " + " | ".join(lines) if lines else "")


def read_rewards(sandbox: Sandbox | VerifierNamespace) -> dict[str, float]:
    """The reward files of a finished verifier phase, read out of band and parsed strictly.

    Call it only once the phase's processes are gone: then nothing can rewrite the files between
    the tests' end and this read. ``sandbox`` is the verifier's private namespace (its host-held
    ``/logs/verifier``), or a sandbox without one (Docker with a remote daemon).
    """
    files: dict[str, bytes] = {}
    for path in (REWARD_JSON, REWARD_TXT):
        try:
            files[PurePosixPath(path).name] = sandbox.read_file(path, max_bytes=REWARD_MAX_BYTES)
            break  # reward.json wins: reward.txt need not be read
        except FileNotFoundError:
            continue
        except Exception as e:  # noqa: BLE001 - too large, unreadable: the tests left no usable reward
            raise RewardError(f"{path} could not be read: {e}") from None
    return parse_rewards(files)


def tests_env(task: Task) -> dict[str, str]:
    """The tests' environment: the task's ``[verifier].env``, and ``PYTHONSAFEPATH=1`` over it
    (the import-path class, module docstring): the one variable a task cannot turn off."""
    return {**task.config.verifier.env, "PYTHONSAFEPATH": "1"}


def _runner(task: Task) -> str:
    """The verifier's one shell line: the log made, ``/logs/verifier`` handed to the verifier's user,
    ``test.sh`` run as that user with its output in the log (never in the exec's output)."""
    user = task.config.verifier.user
    runner = shlex.join(as_user(["sh", "-c", 'exec "$1" > "$2" 2>&1', "sh", f"{TESTS_DIR}/test.sh", TEST_STDOUT],
                                 None if user is None else str(user)))
    return (f"chmod +x {TESTS_DIR}/test.sh && : > {TEST_STDOUT} && chmod 644 {TEST_STDOUT} && "
            f"{_chown(user, VERIFIER_DIR, TEST_STDOUT)}exec {runner}")


def run_tests(sandbox: Sandbox, task: Task, *, logs_to: Path | None = None) -> TestsOutcome:
    """Verifier phase in ``sandbox``: the tests in the verifier's private namespaces, then every
    process ended (the tests', and the agent's in the shared mode), then the reward read.

    ``/tests`` and ``/logs/verifier`` are fresh tmpfs mounts only the host and the tests see
    (:mod:`evokit.sandbox.verifier_ns`): the host uploads ``tests/`` into one and reads the reward
    out of the other; no process of the sandbox can reach either, so the agent's processes need
    not be stopped before the tests (the shared mode keeps them running, as Harbor does). The
    verifier dir is writable by the verifier's user only (``0755``, chowned to it): a program of the
    agent's that the tests run as another user (``setpriv --reuid=nobody``, as the bundled examples
    do) cannot write a reward. ``logs_to``: a host dir that receives a copy of ``/logs/verifier``.

    A Docker sandbox whose daemon is not on this host has no private namespaces: there every
    process of the agent is killed first and the tests run in the sandbox itself (stated in
    :mod:`evokit.sandbox.docker_backend`).
    """
    if not getattr(sandbox, "private_verifier", True):
        return _run_tests_in_sandbox(sandbox, task, logs_to=logs_to)
    _check_folder(task.paths.tests_dir)
    try:
        verifier = sandbox.verifier_namespace()
    except VerifierSetupError as e:
        return TestsOutcome(None, None, f"the verifier could not be set up in the sandbox: {e}")
    with verifier:
        verifier.upload_dir(task.paths.tests_dir, TESTS_DIR)
        try:
            res = verifier.exec(["sh", "-c", _runner(task)], user="root", env=tests_env(task),
                                timeout_sec=task.config.verifier.timeout_sec)
        except VerifierSetupError as e:  # its pid 1 died under it (the sandbox's memory limit)
            return TestsOutcome(None, None, f"the verifier's namespace ended during the tests: {e}")
        verifier.stop()  # every process of the tests, at once (their pid namespace ends)
        sandbox.kill_commands()  # and the agent's (shared mode); raises if a spared process was taken over
        if logs_to is not None:
            _save_verifier_logs(verifier, logs_to)
        if res.return_code == 125 and "evokit-enter:" in res.stderr:
            return TestsOutcome(res, None, f"the tests could not start in the verifier: {res.stderr.strip()[:500]}")
        return _outcome(verifier, task, res)


def _explain(source: Sandbox | VerifierNamespace, res: ExecResult) -> str:
    """Why the tests failed, from their log and CTRF report (best effort: a log that cannot be
    read leaves test.sh's exit status alone)."""
    def read(path: str) -> bytes | None:
        try:
            return source.read_file(path, max_bytes=TEST_LOG_MAX_BYTES)
        except Exception:  # noqa: BLE001 - missing, too large or unreadable: the reason is best effort
            return None

    output = (read(TEST_STDOUT) or b"").decode("utf-8", errors="replace")
    return explain_tests(None if res.timed_out else res.return_code, output, read(CTRF))


def _outcome(source: Sandbox | VerifierNamespace, task: Task, res: ExecResult) -> TestsOutcome:
    """The rewards of a finished verifier phase in ``source``, or the reason there are none, and why
    the tests failed. A test.sh that exits non-zero without a reward is named as such, with the
    first lines of what it printed: a ``set -e`` script that died early is not "no reward file"."""
    why = _explain(source, res)
    if res.timed_out:
        return TestsOutcome(res, None, f"tests timed out after {task.config.verifier.timeout_sec:.0f}s; {why}", why)
    try:
        return TestsOutcome(res, read_rewards(source), None, why)
    except RewardError as e:
        if res.return_code != 0:
            return TestsOutcome(res, None, f"test.sh failed before writing a reward ({e}): {why}", why)
        return TestsOutcome(res, None, str(e), why)


def _save_verifier_logs(source: Sandbox | VerifierNamespace, target: Path) -> None:
    """Copy ``/logs/verifier`` to the host dir ``target``; a failure is noted beside it, never raised."""
    try:
        if isinstance(source, VerifierNamespace):
            source.download(VERIFIER_DIR, target, 64 << 20, as_file=False)
        else:
            source.download_dir(VERIFIER_DIR, target, max_bytes=64 << 20)
    except Exception as e:  # noqa: BLE001 - logs are best effort: a missing log never fails a verdict
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / "download-error.txt", "a") as f:
            f.write(f"{VERIFIER_DIR}: {e}\n")


def _run_tests_in_sandbox(sandbox, task: Task, *, logs_to: Path | None = None) -> TestsOutcome:
    """The verifier phase where no private namespace can be made (a remote Docker daemon): every
    command's processes ended first (a daemon could otherwise rewrite the reward file), the
    verifier dir and ``/tests`` recreated (``0755``, the verifier's user), ``tests/`` uploaded,
    ``test.sh`` run, its processes ended, the reward read."""
    sandbox.kill_commands()
    res = _stage_and_run(sandbox, task.paths.tests_dir, TESTS_DIR, "test.sh", TEST_STDOUT,
                         pre=(f"rm -rf {VERIFIER_DIR} {TESTS_DIR} && mkdir -p -m 755 {VERIFIER_DIR} && "
                              + _chown(task.config.verifier.user, VERIFIER_DIR)),
                         user=task.config.verifier.user, env=tests_env(task),
                         timeout_sec=task.config.verifier.timeout_sec)
    sandbox.kill_commands()
    if logs_to is not None:
        _save_verifier_logs(sandbox, logs_to)
    return _outcome(sandbox, task, res)


def start_verifier(task: Task, image: Image, backend: str | None = None) -> Sandbox:
    """A started fresh sandbox of ``backend`` for the separate verifier; :class:`HarnessFault` if it will not start."""
    sandbox = sandbox_for_task(task, image=image, backend=backend)
    try:
        return sandbox.start()
    except Exception as e:
        sandbox.stop()
        raise HarnessFault(f"the verifier's sandbox failed to start: {type(e).__name__}: {e}") from e


class VerifierStarter:
    """Start the separate verifier's sandbox in a thread while the agent works, so the separate
    mode costs little more wall time than the shared one (target: separate <= 1.5x shared).
    ``get()`` returns it started or raises :class:`HarnessFault`; ``stop()`` always cleans up.

    The thread lives until ``stop()``: a sandbox's init dies with the *thread* that started it
    (``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which follows the forking thread), so it
    must not be a thread that ends once the sandbox is up.
    """

    def __init__(self, task: Task, image: Image, backend: str | None = None):
        self._sandbox: Sandbox | None = None
        self._error: BaseException | None = None
        self._ready, self._done = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(task, image, backend), daemon=True,
                                        name=VERIFIER_THREAD)
        self._thread.start()

    def _run(self, task: Task, image: Image, backend: str | None) -> None:
        try:
            self._sandbox = start_verifier(task, image, backend)
        except BaseException as e:  # noqa: BLE001 - handed to get()
            self._error = e
        finally:
            self._ready.set()
        self._done.wait()
        if self._sandbox is not None:
            self._sandbox.stop()

    def get(self) -> Sandbox:
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self._sandbox

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def verify_work(agent: Sandbox, task: Task, image: Image, *, mode: VerifierMode | str | None = None,
                verifier: Sandbox | None = None, logs_to: Path | None = None,
                backend: str | None = None) -> TestsOutcome:
    """Score the agent's work in ``agent`` after its phase.

    Separate mode: the agent's processes are killed, :func:`work_paths` are copied into
    ``verifier`` (a started fresh sandbox, e.g. from :class:`VerifierStarter`; one is started
    here if None, by ``backend``, the one that made ``image``) and the tests run there. Shared mode: the tests run beside the agent's
    still-running processes in ``agent`` (:func:`run_tests`). An agent whose sandbox is gone (the
    OOM killer took it), or whose work cannot be copied (too large, a link out of its sandbox),
    gets no reward and the reason; a process the harness spares that was taken over raises
    :class:`~evokit.sandbox.runtime.SandboxSabotaged` (a :class:`SandboxError`: scored 0 by the
    callers); only a verifier that will not start raises :class:`HarnessFault`.
    """
    mode = verifier_mode(task, mode)
    if not agent.running:
        return TestsOutcome(None, None, "the agent's sandbox is gone (its processes were killed or it ran out of memory)")
    if mode == VerifierMode.SHARED:
        return run_tests(agent, task, logs_to=logs_to)
    paths = work_paths(task, image)
    own = verifier is None
    verifier = start_verifier(task, image, backend) if own else verifier
    try:
        agent.kill_commands()
        cap = (limits_from_config(task.config.environment).storage_mb or 2048) << 20
        try:
            agent.copy_work_to(verifier, paths, max_bytes=cap)
        except Exception as e:  # noqa: BLE001 - the agent's work could not be carried over: its failure
            if not verifier.running:
                raise HarnessFault(f"the verifier's sandbox died during the copy: {e}") from e
            return TestsOutcome(None, None, f"the agent's work could not be copied to the verifier: "
                                            f"{type(e).__name__}: {e}")
        return run_tests(verifier, task, logs_to=logs_to)
    finally:
        if own:
            verifier.stop()


def run_trial(task: Task, image: Image, *, kind: str = "oracle", log_dir: Path | None = None,
              mode: VerifierMode | str | None = None, backend: str | None = None) -> TrialRun:
    """A fresh sandbox, the solution if ``kind == "oracle"`` (nothing for ``"null"``), then the tests.

    ``backend``: the sandbox backend that made ``image`` (:mod:`evokit.sandbox.backend`; None: the
    configured one), which runs the agent's sandbox and the verifier's.

    In the separate mode the null trial needs one sandbox only: an agent that does nothing
    leaves a sandbox identical to a fresh one, so its tests run in the sandbox it got.
    """
    run = TrialRun(kind=kind)
    if mode is not None:
        verifier_mode(task, mode)  # a mistyped mode is the caller's mistake: ValueError here
    t0 = time.monotonic()
    agent = verifier = starter = None
    try:
        run.mode = verifier_mode(task, mode).value
        separate = run.mode == VerifierMode.SEPARATE.value and kind == "oracle"
        starter = VerifierStarter(task, image, backend) if separate else None
        agent = sandbox_for_task(task, image=image, backend=backend)
        agent.start()
        run.timings["start"] = time.monotonic() - t0
        if kind == "oracle":
            t = time.monotonic()
            run.agent = run_solution(agent, task)
            run.timings["agent"] = time.monotonic() - t
            if run.agent.timed_out:
                run.error = f"solution timed out after {task.config.agent.timeout_sec:.0f}s"
            elif run.agent.return_code != 0:
                run.error = solution_failure(agent, run.agent)
        t = time.monotonic()
        logs_to = None if log_dir is None else log_dir / "verifier"
        if separate:
            verifier = starter.get()
            outcome = verify_work(agent, task, image, mode=VerifierMode.SEPARATE, verifier=verifier,
                                  logs_to=logs_to)
        else:
            outcome = run_tests(agent, task, logs_to=logs_to)
        run.tests, run.rewards, run.why = outcome.exec, outcome.rewards, outcome.why
        run.error = run.error or outcome.error
        run.timings["tests"] = time.monotonic() - t
        if log_dir is not None:
            _keep_logs(agent, log_dir, run)
    except Exception as e:  # a broken sandbox is a failed trial with its reason, never a crash
        run.error = f"{type(e).__name__}: {e}"
        run.harness_fault = not isinstance(e, UserError)  # a task's own mistake is its verdict
    finally:
        if agent is not None:
            agent.stop()
        if starter is not None:
            starter.stop()
    run.timings["total"] = time.monotonic() - t0
    return run


def _keep_logs(agent: Sandbox, log_dir: Path, run: TrialRun) -> None:
    """``agent/`` and ``artifacts/`` from the agent's sandbox (``verifier/`` was saved by
    :func:`run_tests`), and ``trial.json`` (exit statuses, reason, mode) written by the host."""
    log_dir.mkdir(parents=True, exist_ok=True)
    status = {"kind": run.kind, "mode": run.mode, "rewards": run.rewards, "error": run.error,
              "solution_exit": None if run.agent is None else run.agent.return_code,
              "solution_timed_out": None if run.agent is None else run.agent.timed_out,
              "tests_exit": None if run.tests is None else run.tests.return_code,
              "tests_timed_out": None if run.tests is None else run.tests.timed_out}
    (log_dir / "trial.json").write_text(json.dumps(status, indent=2))
    for src in ("/logs/agent", ARTIFACTS_DIR):
        try:
            if agent.running:
                agent.download_dir(src, log_dir / PurePosixPath(src).name, max_bytes=64 << 20)
        except Exception as e:  # noqa: BLE001 - logs are best effort: a missing log never fails a verdict
            with open(log_dir / "download-error.txt", "a") as f:
                f.write(f"{src}: {e}\n")
