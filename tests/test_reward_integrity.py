"""The adversarial battery (verifier, trial and rollout side): no agent forges its reward.

Each test is one attack *class* of docs/trust-model.md, played as the agent against a real task in the local sandbox
(an example task, ``examples/tasks/csv-quoted-ledger``, and a procedural task rendered from a
three-step plan), as root and, where a non-root agent can try it, as uid ``nobody``. The agent
is a scripted policy that runs the attack's shell commands: these tests are about the harness,
not the policy. Each attack wins against a naive harness (reward 1.0, or a self-inflicted
``masked=True``); here each must score reward 0 and not be masked. An honest
control (the task's reference solution through the same path) scores 1, so a harness that
always says 0 fails here too. After every sandbox, nothing of it may be left on the host
(processes, mounts, state dir, cgroups).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from harbor.models.task.task import Task
from sandbox_support import leftovers, ticks_since_boot, trace

from evokit.agents import OracleAgent
from evokit.plan import Plan, Step, render
from evokit.rollout import Episode, rollout_once
from evokit.sandbox import Sandbox
from evokit.sandbox.task_env import image_for_task
from evokit.verify import VerifyConfig, run_trial, verify_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tasks" / "csv-quoted-ledger"
PLAN = Plan((Step("access-log", "filter-rows"), Step("access-log", "topk-count", input=1),
             Step("csv-ledger", "group-sum")))
NOBODY = "nobody"


class Script:
    """A scripted agent: runs fixed ``(command, user)`` turns (None: the task's agent user)."""

    name = "attack"

    def __init__(self, *turns: tuple[str, str | None]):
        self.turns = turns

    def run_episode(self, episode: Episode) -> None:
        for command, user in self.turns:
            episode.run(command, user=user, timeout_sec=60)


@pytest.fixture(autouse=True)
def no_leftovers(monkeypatch):
    """Record every sandbox started during a test; afterwards none of them may have left anything."""
    traces, real_start, real_stop = [], Sandbox.start, Sandbox.stop
    stopped: dict[str, int] = {}

    def start(self):
        out = real_start(self)
        traces.append(trace(self))
        return out

    def stop(self):
        stopped.setdefault(self.id, ticks_since_boot())
        return real_stop(self)

    monkeypatch.setattr(Sandbox, "start", start)
    monkeypatch.setattr(Sandbox, "stop", stop)
    yield traces
    for t in traces:
        # A sandbox whose anchor the agent killed leaves its pid 1 to the host's init, which
        # reaps it within a moment; anything still there after 5 s is a leftover.
        deadline = time.monotonic() + 5
        while (left := leftovers(t, stopped.get(t.id))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"sandbox {t.id} left behind: {left}"


@pytest.fixture(scope="module")
def procedural(tmp_path_factory) -> Path:
    return render(PLAN, 3, tmp_path_factory.mktemp("proc") / "proc-task")


@pytest.fixture(scope="module")
def tasks(procedural) -> dict[str, tuple[Task, object]]:
    out = {}
    for name, path in (("example", EXAMPLE), ("procedural", procedural)):
        task = Task(path)
        out[name] = (task, image_for_task(task))
    return out


def outputs(task: Task) -> list[tuple[str, str]]:
    """``(output file, its answer key under /tests)`` for each output the tests compare."""
    if task.paths.task_dir == EXAMPLE:
        return [("/app/account_totals.tsv", "/tests/expected_totals.tsv")]
    return [(f"/app/out/step{i}.txt", f"/tests/expected/step{i}.txt") for i in range(1, len(PLAN.steps) + 1)]


def writable_by(user: str | None, task: Task) -> str:
    """Root setup: the output dirs exist and, for ``user``, are writable by it (as in a task whose
    agent user owns its workdir)."""
    dirs = " ".join(sorted({os.path.dirname(o) for o, _ in outputs(task)} | {"/app"}))
    return f"mkdir -p {dirs}" + ("" if user is None else f" && chmod 777 {dirs}")


def make_outputs(task: Task) -> str:
    """Wrong (empty) output files, so that only a subverted comparison could pass them."""
    return writable_by(None, task) + " && touch " + " ".join(o for o, _ in outputs(task))


def attack(task, image, *turns, **kw):
    r = rollout_once(Script(*turns), task, image, 0, **kw)
    return r


def assert_zero(r) -> None:
    assert not r.masked, f"masked ({getattr(r, 'mask_reason', r.error)}): an agent must not be able to mask its failure"
    assert r.reward == 0.0, f"reward {r.reward}: the attack worked ({r.error})"


def harbor_oracle_reward_is_0(task: Path, trials: Path) -> None:
    """Harbor's own trial (oracle agent) on ``task`` in evokit's sandbox: it must end cleanly with reward 0."""
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    config = TrialConfig(task=TaskConfig(path=task), trials_dir=trials, agent=AgentConfig(name="oracle"),
                         environment=EnvironmentConfig(import_path="evokit.sandbox:BubblewrapEnvironment"))

    async def go():
        return await (await Trial.create(config)).run()

    result = asyncio.run(go())
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 0.0}


@pytest.mark.parametrize("which", ["example", "procedural"])
def test_honest_control_scores_one(tasks, which):
    """The reference solution through the same rollout path scores 1 (separate verifier), and
    the do-nothing agent 0: the attacks below score 0 because they fail, not because all do."""
    task, image = tasks[which]
    good = rollout_once(OracleAgent(), task, image, 0)
    assert (good.reward, good.masked, good.verifier_mode) == (1.0, False, "separate"), good.error
    assert_zero(attack(task, image))


# ---------------------------------------------------------------- in-band markers
@pytest.mark.parametrize("user", [None, NOBODY])
@pytest.mark.parametrize("which", ["example", "procedural"])
def test_in_band_reward_marker_in_test_output(tasks, which, user):
    """A harness that parsed ``@@evokit-reward-file`` markers out of the tests' stdout would let the
    agent write one through a file literally named ``$LOG`` linked to /dev/stdout (reward 1.0 on the
    example task, whose ``diff`` prints the answer file; the procedural task's tests print only
    file names, so there it has no channel). Nothing the tests print is parsed: the reward is read
    from the verifier's reward file."""
    task, image = tasks[which]
    forged = "@@evokit-reward-file reward.json\\neyJyZXdhcmQiOiAxfQ==\\n"  # base64 of {"reward": 1}
    cmds = [f"printf '{forged}' > {out}" for out, _ in outputs(task)]
    r = attack(task, image, (writable_by(user, task), "root"),
               ("ln -sf /dev/stdout '/app/$LOG'; " + "; ".join(cmds), user))
    assert_zero(r)


def test_verifier_and_oracle_output_are_kept(tmp_path):
    """The tests' output is kept in /logs/verifier/test-stdout.txt (never parsed), the oracle's in
    /logs/agent/oracle.txt, exit statuses in trial.json; a failing solve.sh's
    first lines are the verdict's reason."""
    v = verify_task(EXAMPLE, VerifyConfig(log_root=tmp_path / "logs", determinism_runs=1))
    assert v.passed, v.failures
    log = Path(v.log_dir)
    assert "PASS" in (log / "oracle-0" / "verifier" / "test-stdout.txt").read_text()
    assert (log / "oracle-0" / "agent" / "oracle.txt").exists()
    assert "FAIL" in (log / "null-1" / "verifier" / "test-stdout.txt").read_text()
    assert '"tests_exit": 0' in (log / "null-1" / "trial.json").read_text()
    broken = tmp_path / "broken"
    shutil.copytree(EXAMPLE, broken)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\nsed -i s/a/b/ /app/no-such-file\n")
    c = {c.name: c for c in verify_task(broken, VerifyConfig(determinism_runs=1)).checks}
    assert not c["oracle"].passed
    assert c["oracle"].reason.startswith("solve.sh exited 2: sed: can't read /app/no-such-file"), c["oracle"].reason


# ---------------------------------------------------------------- answer-key link
@pytest.mark.parametrize("user", [None, NOBODY])
@pytest.mark.parametrize("which", ["example", "procedural"])
def test_answer_key_symlink(tasks, which, user):
    """Output files that are links to the (not yet uploaded) answer keys under /tests."""
    task, image = tasks[which]
    links = "; ".join(f"ln -sf {key} {out}" for out, key in outputs(task))
    r = attack(task, image, (writable_by(user, task), "root"), (links, user))
    assert_zero(r)
    assert "refused" in (r.error or "") or "missing" in (r.error or "") or r.error is None


def test_answer_key_symlink_relative_and_through_a_dir(tasks):
    """The same with a relative link chain and a linked output directory."""
    task, image = tasks["procedural"]
    r = attack(task, image, ("rm -rf /app/out && ln -s ../tests/expected /app/out", None))
    assert_zero(r)


# ---------------------------------------------------------------- trojaned tools
TROJANS = {
    "diff": "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/diff && chmod 755 /usr/bin/diff",
    "sh": """cp /usr/bin/dash /usr/bin/real-dash
cat > /tmp/t <<'EOF'
#!/usr/bin/real-dash
mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exit 0
EOF
chmod 755 /tmp/t && mv /tmp/t /usr/bin/dash""",
    "dotfiles-and-path": """for f in /etc/bash.bashrc /root/.bashrc /root/.profile /etc/profile; do
  echo 'diff() { return 0; }; export -f diff' >> $f; done
printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/diff && chmod 755 /usr/local/bin/diff""",
}


@pytest.mark.parametrize("trojan", sorted(TROJANS))
@pytest.mark.parametrize("which", ["example", "procedural"])
def test_trojaned_tools(tasks, which, trojan):
    """A root agent replaces /usr/bin/diff, /bin/sh (dash) or plants dotfiles and a PATH-earlier diff.
    (As uid nobody none of these paths is writable; the class needs root.)"""
    task, image = tasks[which]
    assert_zero(attack(task, image, (make_outputs(task), None), (TROJANS[trojan], None)))


# ---------------------------------------------------------------- reward daemons
DAEMON = ("setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; "
          "echo \"{\\\"reward\\\": 1}\" > /logs/verifier/reward.json 2>/dev/null; sleep 0.01; done' "
          "> /dev/null 2>&1 < /dev/null &")


@pytest.mark.parametrize("user", [None, NOBODY])
def test_reward_daemon_in_a_rollout(tasks, user):
    """A detached daemon that keeps writing reward 1 (evokit's own rollout path)."""
    task, image = tasks["example"]
    assert_zero(attack(task, image, (DAEMON, user)))
    assert_zero(attack(task, image, (DAEMON, user), mode="shared"))


@pytest.mark.parametrize("user", ["root", NOBODY])
def test_reward_daemon_under_harbors_trial(tmp_path, user):
    """Through Harbor's ``Trial`` on ``BubblewrapEnvironment`` (shared mode, Harbor's default): the
    'oracle' solution starts the daemon and never writes the answer. The daemon keeps running while
    Harbor's verifier runs (shared mode keeps the agent's processes, as Harbor does), but the tests
    write their reward in the verifier's private mount, which no agent process can see: Harbor reads 0."""

    task = tmp_path / "daemon"
    shutil.copytree(EXAMPLE, task)
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{DAEMON}\nsleep 0.3\n")
    toml = (task / "task.toml").read_text().replace("[agent]\n", f'[agent]\nuser = "{user}"\n')
    (task / "task.toml").write_text(toml)
    harbor_oracle_reward_is_0(task, tmp_path / "trials")


# ---------------------------------------------------------------- self-masking, sandbox damage
# pid 1 is the harness's anchor: it ignores signals from inside, so the agent also kills every
# other process it can reach (helpers the tests may need) before it gives up.
KILL_ANCHOR = "kill -9 1; kill -STOP 1; kill -9 -1; sleep 1"
SABOTAGE = {
    "reward-path-is-a-dir": "mkdir -p /logs/verifier/reward.txt /logs/verifier/reward.json",
    "anchor-killed": KILL_ANCHOR,
    "tool-deleted": "rm -f /usr/bin/diff /usr/bin/sed /usr/bin/mkdir",
}


@pytest.mark.parametrize("mode", ["separate", "shared"])
@pytest.mark.parametrize("sabotage", sorted(SABOTAGE))
@pytest.mark.parametrize("which", ["example", "procedural"])
def test_self_masking(tasks, which, sabotage, mode):
    """Sabotage of the agent's own sandbox (a reward path made a directory, the anchor and every other
    process signalled, tools the tests need deleted) scores 0, never ``masked=True`` (left out of the
    loss), with the verifier in a fresh sandbox or in the agent's own."""
    task, image = tasks[which]
    assert_zero(attack(task, image, (SABOTAGE[sabotage], None), mode=mode))


def small_task(tmp_path: Path, memory_mb: int, storage_mb: int) -> Task:
    small = tmp_path / "small"
    shutil.copytree(EXAMPLE, small)
    toml = (small / "task.toml").read_text().replace("memory_mb = 512", f"memory_mb = {memory_mb}")
    (small / "task.toml").write_text(toml.replace("storage_mb = 1024", f"storage_mb = {storage_mb}"))
    return Task(small)


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_sandbox_damage_disk_filled(tasks, tmp_path, mode):
    """An agent that fills its disk (the workdir and /tmp) scores 0, not masked."""
    task = small_task(tmp_path, 256, 24)
    r = attack(task, tasks["example"][1], ("dd if=/dev/zero of=/app/fill bs=1M 2>/dev/null; "
                                            "dd if=/dev/zero of=/tmp/fill bs=1M 2>/dev/null; df /app", None), mode=mode)
    assert "100%" in r.turns[0].output, r.turns[0].output
    assert_zero(r)


def test_sandbox_damage_oom_takes_the_sandbox(tasks, tmp_path):
    """An agent that fills its memory until the OOM killer takes its sandbox scores 0, not masked."""
    task = small_task(tmp_path, 64, 512)
    r = attack(task, tasks["example"][1], ("dd if=/dev/zero of=/dev/shm/fill bs=1M count=60 2>/dev/null; "
                                            "dd if=/dev/zero of=/app/fill bs=1M count=400; sleep 1", None))
    assert_zero(r)


def test_masked_only_for_harness_faults(tasks, monkeypatch):
    """What *is* masked: the agent's sandbox failing to start, the verifier's failing to start, the
    endpoint failing; a policy bug propagates; a spent budget is scored."""
    from evokit.llm import LLMError
    from evokit.sandbox import SandboxError

    task, image = tasks["example"]

    class Down:
        name = "down"

        def run_episode(self, episode):
            raise LLMError("http://127.0.0.1:9/v1: connection refused")

    r = rollout_once(Down(), task, image, 0)
    assert r.masked and "endpoint failed" in r.mask_reason and r.reward is None

    class Buggy:
        name = "buggy"

        def run_episode(self, episode):
            raise KeyError("a bug")

    with pytest.raises(KeyError):
        rollout_once(Buggy(), task, image, 0)

    # Running past the turn budget ends the episode (the agent's own budget): scored, not masked.
    r = rollout_once(Script(("true", None), ("true", None)), task, image, 0, max_turns=1)
    assert_zero(r)
    assert r.n_turns == 1 and "budget spent" in r.error

    from evokit.verify.trial import VERIFIER_THREAD

    real_start = Sandbox.start
    for failing, reason in ((VERIFIER_THREAD, "the verifier's sandbox failed to start"),
                            ("MainThread", "sandbox failed to start")):
        def start(self, failing=failing):
            if threading.current_thread().name == failing:
                raise SandboxError("injected start failure")
            return real_start(self)

        monkeypatch.setattr(Sandbox, "start", start)
        r = rollout_once(OracleAgent(), task, image, 0)
        assert r.masked and r.reward is None and r.mask_reason.startswith(reason), r.mask_reason


# ---------------------------------------------------------------- host files: tests/ is a symlink
def test_symlinked_tests_dir_is_not_uploaded(tmp_path, tasks):
    """A ``tests/`` that is a symlink (to a host dir holding a secret) uploads nothing: Harbor's
    loader refuses one that leaves the task folder, and the trial refuses any symlinked
    ``tests/`` (e.g. one swapped in after the task was loaded)."""
    secret = tmp_path / "host-secrets"
    secret.mkdir()
    (secret / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n")
    (secret / "api_key").write_text("sk-host-secret\n")
    task_dir = tmp_path / "linked"
    shutil.copytree(EXAMPLE, task_dir)
    task = Task(task_dir)
    shutil.rmtree(task_dir / "tests")
    (task_dir / "tests").symlink_to(secret)
    fmt = {c.name: c for c in verify_task(task_dir).checks}["format"]
    assert not fmt.passed and "tests" in fmt.reason
    image = tasks["example"][1]
    for kind in ("oracle", "null"):
        run = run_trial(task, image, kind=kind)
        assert run.rewards is None and "symlink" in run.error, (run.rewards, run.error)
    from evokit.verify.trial import run_tests

    with Sandbox(image) as sandbox:
        with pytest.raises(FileNotFoundError, match="symlink"):
            run_tests(sandbox, task)
        assert not sandbox.exec("cat /tests/api_key").ok


def test_bad_verifier_mode_is_a_clear_error(tasks):
    """A mistyped mode is the caller's mistake: one clear ValueError, not a masked rollout."""
    task, image = tasks["example"]
    with pytest.raises(ValueError, match="'sepárate'.*'separate'.*'shared'"):
        rollout_once(Script(), task, image, 0, mode="sepárate")
    with pytest.raises(ValueError, match="verifier_mode='x'"):
        VerifyConfig(verifier_mode="x")


# ------------------------------------------------- the agent's own program, run by the tests
SNEAKY_SCRIPT = r"""cat /tests/expected_hidden.txt 2>/dev/null || true
(setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.001; done' > /dev/null 2>&1 &)
printf '#!/bin/sh\nexit 0\n' > /usr/bin/diff 2>/dev/null || true
"""


def test_agent_program_run_by_the_tests_cannot_read_keys_or_write_the_reward(tasks):
    """``pipes-top-ips`` runs the agent's ``/app/top_ips.sh`` on a log it never saw. A script that
    prints the answer key, replaces ``diff`` and leaves a daemon racing the tests' last reward
    write scored 1.0 while the tests ran it as root with /tests readable and /logs/verifier
    world-writable; the tests now run it as nobody with /tests 0700, and the harness recreates
    /logs/verifier writable by the verifier's user only."""
    task = Task(ROOT / "examples" / "tasks" / "pipes-top-ips")
    image = image_for_task(task)
    solve = (task.paths.solution_dir / "solve.sh").read_text()
    r = attack(task, image, (f"cat > /tmp/s.sh <<'EOF'\n{solve}\nEOF\nbash /tmp/s.sh", None),
               (f"cat > /app/top_ips.sh <<'EOF'\n{SNEAKY_SCRIPT}EOF", None))
    assert_zero(r)
    honest = attack(task, image, (f"cat > /tmp/s.sh <<'EOF'\n{solve}\nEOF\nbash /tmp/s.sh", None))
    assert honest.reward == 1.0, honest.error


# ------------------------------------------------------------ the answer key through a link
# (the links that copy_between resolves by the kernel in the agent's sandbox; evokit.sandbox.transfer)
KEY_OUT, KEY = "/app/account_totals.tsv", "/tests/expected_totals.tsv"
DOTTED = ("mkdir -p /app/a/b /app/tests && echo decoy > /app/tests/expected_totals.tsv && ln -s /app /app/a/b/up && "
          f"ln -s a/b/up/../../..{KEY} {KEY_OUT}")
KERNEL_LINKS = {  # name -> (task, the agent's commands)
    "dotted-through-a-dir-link": ("example", DOTTED),
    "chain-of-dir-links": ("example", "mkdir -p /app/a/b /app/tests && echo decoy > /app/tests/expected_totals.tsv && "
                                      f"ln -s /app /app/a/b/up && ln -s a/b /app/ab && "
                                      f"ln -s ab/up/../..{KEY} {KEY_OUT}"),
    "chain-of-file-links": ("example", DOTTED.replace(f" {KEY_OUT}", " /app/l3") +
                            f" && ln -s l3 /app/l2 && ln -s l2 {KEY_OUT}"),
    "dotdot-after-an-absolute-link": ("example", "mkdir -p /app/deep/er /app/deep/tests && echo decoy > "
                                                 f"/app/deep/tests/expected_totals.tsv && ln -s /app/deep /app/deep/er/abs"
                                                 f" && ln -s deep/er/abs/../..{KEY} {KEY_OUT}"),
    "dir-link-to-root": ("example", f"ln -s / /app/r && ln -s r{KEY} {KEY_OUT}"),
    "proc-self-root": ("example", f"ln -s /proc/self/root{KEY} {KEY_OUT}"),
    "output-dir-through-a-dotted-link": ("procedural", "rm -rf /app/out && mkdir -p /app/a/b /app/a/tests/expected && "
                                                       "ln -s /app /app/a/b/up && "
                                                       "ln -s a/b/up/../../tests/expected /app/out"),
}


def link_task(tmp_path: Path, solve: str) -> Task:
    """The example task with ``solve`` as its reference solution (what ``evokit run --agent oracle`` runs)."""
    task = tmp_path / "linked-key"
    shutil.copytree(EXAMPLE, task)
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{solve}\n")
    return Task(task)


def test_answer_key_through_a_dotted_link_scores_zero_in_a_trial(tasks, tmp_path):
    """The reproduction as a task's solution (``evokit run TASK --agent oracle``): ``account_totals.tsv ->
    a/b/up/../../../tests/expected_totals.tsv`` with ``up -> /app`` reads as the decoy /app/tests/...
    but the kernel resolves it to /tests/...: it scored 1.0 when the verifier got the link. Through
    run_trial and verify_task it scores 0. Control: the reference answer reached through an in-tree
    link (and an in-tree dir link) scores 1, so links as such still work."""
    image = tasks["example"][1]
    run = run_trial(link_task(tmp_path / "attack", DOTTED), image, kind="oracle")
    assert run.mode == "separate" and run.rewards == {"reward": 0.0}, (run.rewards, run.error)
    oracle = {c.name: c for c in verify_task(tmp_path / "attack" / "linked-key",
                                             VerifyConfig(determinism_runs=1)).checks}["oracle"]
    assert not oracle.passed, oracle.reason
    solve = (EXAMPLE / "solution" / "solve.sh").read_text().replace(KEY_OUT, "/app/real/totals.tsv")
    honest = link_task(tmp_path / "honest", f"mkdir -p /app/real\n{solve}\nln -s real /app/via_dir\n"
                                            f"ln -s via_dir/totals.tsv {KEY_OUT}")
    run = run_trial(honest, image, kind="oracle")
    assert run.rewards == {"reward": 1.0}, (run.rewards, run.error)


@pytest.mark.parametrize("user", [None, NOBODY])
@pytest.mark.parametrize("variant", sorted(KERNEL_LINKS))
def test_answer_key_through_kernel_resolved_links_in_a_rollout(tasks, variant, user):
    """Variations on the reproduction through the rollout path (the one the TRL trainer's
    environment takes too, ``verify_work``), as root and as uid nobody: chains of dir and file
    links, '..' after an absolute link, a dir link to '/', /proc/self/root, and the procedural
    task's output dir as a dotted link to its answer-key dir."""
    which, commands = KERNEL_LINKS[variant]
    task, image = tasks[which]
    r = attack(task, image, (writable_by(user, task), "root"), (commands, user))
    assert r.turns[-1].exit_code == 0, r.turns[-1].output  # the links were made: the attack ran
    assert_zero(r)


# ================================================================ the borrowed-process and shared-verifier classes
# (one section: pid 1 taken over with ptrace or /proc/<pid>/mem; a daemon beside the shared verifier)
class PlaceTool:
    """A scripted agent that first puts a program of its own in its sandbox (the injector, too big for
    one command line), then runs its turns; what it places is the agent's, as if it had typed it."""

    name = "attack-with-tool"

    def __init__(self, tool: Path, where: str, *turns: tuple[str, str | None]):
        self.tool, self.where, self.turns = tool, where, turns

    def run_episode(self, episode: Episode) -> None:
        episode.sandbox.write_file(self.where, self.tool.read_bytes(), mode=0o755)
        for command, user in self.turns:
            episode.run(command, user=user, timeout_sec=60)


@pytest.mark.parametrize("mode", ["separate", "shared"])
@pytest.mark.parametrize("user", [None, NOBODY])
def test_borrowed_anchor_class(tasks, user, mode):
    """The agent injects a reward daemon into pid 1 (``ptrace`` and a ``/proc/1/mem`` write, the
    ``tests/data/inject.c`` injector), the process the harness spares: both are refused (pid 1 is the
    non-dumpable anchor), and the trial scores 0, not masked, with the verifier separate or shared."""
    from inject_support import injector

    task, image = tasks["example"]
    daemon = "while :; do echo 1 > /logs/verifier/reward.txt; echo 1 > /app/account_totals.tsv; sleep 0.01; done"
    inj = "/usr/local/bin/inject"
    r = rollout_once(PlaceTool(injector(), inj, (f"{inj} ptrace 1 '{daemon}'; {inj} mem 1 '{daemon}'", user)),
                     task, image, 0, mode=mode)
    assert r.turns[0].output.count("refused:") == 2, r.turns[0].output
    assert_zero(r)


@pytest.mark.parametrize("user", [None, NOBODY])
def test_shared_verifier_daemon_class(tmp_path, user):
    """``evokit run TASK --agent oracle`` with the attack as the solution, shared verifier: a daemon
    that writes reward 1 all through the tests, copies /tests and hunts the tests' processes to
    ptrace them (``inject_support.DAEMON_SOLVE``). It runs on beside the tests (heartbeat), takes
    over its own decoy (the control), finds none of the tests' processes, reads no key: reward 0."""
    from inject_support import check_daemon_run, daemon_task

    task = Task(daemon_task(tmp_path / "daemon", user=user))
    run = run_trial(task, image_for_task(task), kind="oracle", mode="shared", log_dir=tmp_path / "logs")
    check_daemon_run(run, tmp_path / "logs")


def test_shared_verifier_daemon_class_under_harbors_trial(tmp_path):
    """The same daemon through Harbor's ``Trial`` on ``BubblewrapEnvironment`` in Harbor's shared
    mode: the environment runs Harbor's verifier commands in the private namespaces, so Harbor
    reads 0, and the tests saw the daemon alive and its decoy taken."""
    from inject_support import daemon_task

    root = daemon_task(tmp_path / "daemon")
    toml = (root / "task.toml").read_text().replace('environment_mode = "separate"', 'environment_mode = "shared"')
    (root / "task.toml").write_text(toml)
    assert 'environment_mode = "shared"' in toml
    harbor_oracle_reward_is_0(root, tmp_path / "trials")
    logs = next((tmp_path / "trials").glob("*/verifier"))
    assert (logs / "alive.txt").read_text() == "alive\n"
    seen = (logs / "seen.txt").read_text().splitlines()
    assert seen and all(line.startswith("decoy-test.sh 600 : injected") for line in seen), seen
