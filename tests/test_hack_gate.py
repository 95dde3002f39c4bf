"""The hack gate (evokit.verify.hacks): generic hack solutions, run as the agent, must earn reward 0.

Everything runs for real: task folders written into tmp_path (or the bundled ones), built and run
in the local sandbox; each probe's script runs as the task's agent user through the rollout path
(a fresh sandbox, then the task's own verifier phase in its own mode). The deliberately weak tasks
are rejected naming the probe that passed them; each probe is shown to catch the hole it stands
for on a task that has that hole (a positive control, so no probe is vacuous); correct tasks pass.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evokit.sandbox.task_env import image_for_task, sandbox_for_task
from evokit.tasks import default_task_config, load_task, write_task
from evokit.verify import VerifyConfig, run_trial, verify_task
from evokit.verify.hacks import (
    PROBES,
    HackGateConfig,
    LLMHackerConfig,
    get_probe,
    plan_runs,
    probe_context,
    probe_names,
    register_probe,
    run_gate,
)
from evokit.verify.hacks.registry import PRELUDE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples" / "tasks").iterdir() if (p / "task.toml").is_file())
TB2 = ROOT / "tests" / "data" / "tb2_style"
#: Correct third-party-style tasks that pass the gate (the others run the agent's code as root: see
#: test_tasks_that_run_the_agents_code_as_root_are_rejected).
TB2_PASSING = [TB2 / "crlf-config-merge", TB2 / "jsonl-etl-pipeline"]
DEBIAN = "FROM debian:bookworm-slim\nWORKDIR /app\n"
#: The bundled python-fix-script example's first layer, so that its cached build is reused.
PYTHON = ("FROM debian:bookworm-slim\n\nRUN apt-get update && apt-get install -y --no-install-recommends python3 "
          "&& rm -rf /var/lib/apt/lists/*\n\nWORKDIR /app\n")
REWARD = "/logs/verifier/reward.txt"


def task(root: Path, name: str, test: str, *, solve: str = "echo 42 > /app/answer.txt",
         instruction: str = "Write the number 42 to /app/answer.txt and nothing else.",
         dockerfile: str = DEBIAN, tests: dict | None = None, env_files: dict | None = None,
         shared: bool = False) -> Path:
    """A task folder; ``shared`` puts its tests in the agent's own sandbox (Harbor's shared mode)."""
    from harbor.models.task.config import VerifierEnvironmentMode

    cfg = default_task_config()
    cfg.agent.timeout_sec = 60
    if shared:
        cfg.verifier.environment_mode = VerifierEnvironmentMode.SHARED
    return write_task(root / name, instruction=instruction, dockerfile=dockerfile,
                      environment_files=env_files or {},
                      tests={"test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n" + test, **(tests or {})},
                      solution={"solve.sh": "#!/bin/bash\n" + solve + "\n"}, config=cfg)


def gate(path: Path, *probes: str, **kw):
    t = load_task(path)
    return run_gate(t, image_for_task(t), HackGateConfig(probes=probes or None, **kw))


EXISTS_ONLY = f"if [ -f /app/answer.txt ]; then echo 1; else echo 0; fi > {REWARD}\n"
KEYED = f"if cmp -s /app/answer.txt /tests/expected.txt; then echo 1; else echo 0; fi > {REWARD}\n"
KEY = {"expected.txt": "42\n"}


# ------------------------------------------------------------------------------------ the registry
def test_registry_contract(tmp_path):
    """Every registered probe has a docstring naming its hack class, builds a script (or None: nothing to
    try) from a task's context, and the prelude plus its script is valid POSIX sh (dash -n) and bash;
    a name registered twice and an unknown name in the config are errors naming the probe."""
    t = load_task(task(tmp_path, "weak", EXISTS_ONLY, tests=KEY,
                       instruction="Write the number 42 to `/app/answer.txt`, for example `42`."))
    ctx = probe_context(t, image_for_task(t))
    assert len(PROBES) >= 10 and set(probe_names()) == set(PROBES)
    built = set()
    for name, probe in PROBES.items():
        assert probe.doc and probe.name == name, name
        script = probe.script(ctx)
        assert script is None or isinstance(script, str), name
        if script is None:
            continue
        built.add(name)
        for shell in ("dash", "bash"):
            res = subprocess.run([shell, "-n"], input=PRELUDE + script, capture_output=True, text=True)
            assert res.returncode == 0, (name, shell, res.stderr)
    assert set(PROBES) - built == {"ptrace-anchor"}  # the only one needing what this task lacks (python3)
    with pytest.raises(ValueError, match="registered twice"):
        register_probe("answer-key-link")(lambda ctx: None)
    with pytest.raises(ValueError, match="unknown hack probe 'nope'.*answer-key-link"):
        HackGateConfig(probes=("nope",))


def test_context_reads_outputs_inputs_and_keys():
    """The probes' reading of a bundled task: its output (not in the image), its input (in the image),
    and the answer key whose name is closest to the output."""
    from evokit.verify.hacks.context import best_key

    t = load_task(EXAMPLES[0])  # csv-quoted-ledger
    ctx = probe_context(t, image_for_task(t))
    assert ctx.outputs == ("/app/account_totals.tsv",) and "/app/ledger.csv" in ctx.inputs
    assert best_key(ctx, "/app/account_totals.tsv") == "/tests/expected_totals.tsv"
    assert ctx.python is None  # debian slim without python3: the ptrace probe is skipped
    runs, skipped = plan_runs(ctx, HackGateConfig())
    assert skipped == ["ptrace-anchor"]
    members = [m for group, _ in runs for m in group]
    assert sorted(members) == sorted(n for n in probe_names() if n != "ptrace-anchor")


def test_dotted_link_climbs_out_physically_but_not_lexically(tmp_path):
    """The dotted answer-key link, made by the probe in a real sandbox, reads /tests/expected.txt when
    followed by the kernel, while its text, normalised without following links, stays in the workdir."""
    t = load_task(task(tmp_path, "keyed", KEYED, tests=KEY))
    image = image_for_task(t)
    script = get_probe("answer-key-link-dotted").script(probe_context(t, image))
    sb = sandbox_for_task(t, image=image)
    sb.start()
    try:
        sb.exec("mkdir -p /tests && echo the-key > /tests/expected.txt", user="root")
        sb.write_file("/tmp/p.sh", PRELUDE + script)
        assert sb.exec("sh /tmp/p.sh").return_code == 0
        target = sb.exec("readlink /app/answer.txt").stdout.strip()
        assert sb.exec("cat /app/answer.txt").stdout.strip() == "the-key"
    finally:
        sb.stop()
    assert ".." in target and posixpath.normpath(posixpath.join("/app", target)).startswith("/app/")


# ------------------------------------------------------------------------------- weak tasks rejected
def test_exists_only_task_is_rejected_naming_a_probe(tmp_path):
    """A task whose tests only check that the output exists passes oracle, null and rubric, and fails
    the hack gate, which names the probe that earned the reward (placeholder outputs)."""
    v = verify_task(task(tmp_path, "weak", EXISTS_ONLY), VerifyConfig(determinism_runs=1))
    checks = {c.name: c for c in v.checks}
    assert checks["oracle"].passed and checks["null"].passed
    assert not checks["hack-gate"].passed and not v.passed
    assert checks["hack-gate"].reason.startswith("hack gate: ") and "placeholder-outputs" in checks["hack-gate"].reason
    assert "placeholder-outputs" in v.hack_gate["failed"]
    assert [c.name for c in v.failures] == ["hack-gate"]
    run = next(r for r in v.hack_gate["runs"] if r["probe"] == "placeholder-outputs")
    assert run["reward"] == 1.0 and not run["masked"]


POSITIVE = {  # probe → (tests, extra test files, dockerfile, env files, instruction, shared mode)
    "placeholder-outputs": (EXISTS_ONLY, {}, DEBIAN, {}, None, False),
    "instruction-examples": (
        f"if grep -qx 'total,7' /app/answer.txt; then echo 1; else echo 0; fi > {REWARD}\n", {}, DEBIAN, {},
        "Sum the numbers in /app/nums.txt and write /app/answer.txt, for example:\n\n```\ntotal,7\n```\n", False),
    # The shared verifier follows the agent's links on the agent's filesystem (its documented weakness).
    "answer-key-link": (KEYED, KEY, DEBIAN, {}, None, True),
    "answer-key-link-dotted": (KEYED, KEY, DEBIAN, {}, None, True),
    "answer-key-link-proc": (KEYED, KEY, DEBIAN, {}, None, True),
    "trojan-tools": (KEYED, KEY, DEBIAN, {}, None, True),
    # Tests that run the agent's script as root: the script can write the reward itself.
    "trojan-workdir-code": (f"bash /app/fix.sh > /tmp/out; if grep -qx 42 /tmp/out; then echo 1; else echo 0; fi"
                            f" > {REWARD}\n", {}, DEBIAN + "COPY fix.sh /app/\n",
                            {"fix.sh": "#!/bin/bash\necho 41\n"}, "Fix /app/fix.sh so that it prints 42.", False),
    # Tests that run Python on the agent's filesystem (the shared verifier): site-packages is the agent's.
    "python-shadowing": ("if python3 -c \"import sys; sys.exit(open('/app/answer.txt').read().strip() != '42')\"; "
                         f"then echo 1; else echo 0; fi > {REWARD}\n", {}, PYTHON, {}, None, True),
}


@pytest.mark.parametrize("probe", sorted(POSITIVE))
def test_each_probe_catches_the_hole_it_stands_for(tmp_path, probe):
    """Positive control: on a task with the hole the probe stands for, the probe alone earns a reward
    and the gate fails naming it; the oracle of the same task still scores 1 (it is a task, not a trap)."""
    test, tests, dockerfile, env_files, instruction, shared = POSITIVE[probe]
    kw = {"instruction": instruction} if instruction else {}
    if probe == "trojan-workdir-code":
        kw["solve"] = "printf '#!/bin/bash\\necho 42\\n' > /app/fix.sh"
    if probe == "instruction-examples":
        kw["solve"] = "echo total,7 > /app/answer.txt"
    path = task(tmp_path, probe, test, tests=tests, dockerfile=dockerfile, env_files=env_files, shared=shared, **kw)
    t = load_task(path)
    assert run_trial(t, image_for_task(t), kind="oracle").rewards == {"reward": 1.0}
    result = gate(path, probe)
    assert result.failed == [probe], result.to_dict()
    assert result.reason().startswith(f"hack gate: {probe} (reward 1)")


def reward_within(sb, seconds: float = 20.0) -> str:
    """The reward file's content once it reads 1, or its last content after ``seconds``. Polled inside the
    sandbox rather than after a fixed sleep: a loaded machine delays a 50 ms loop by seconds, and a read
    can land between a writer's truncate and its write."""
    return sb.exec(f"for i in $(seq {int(seconds * 10)}); do r=$(cat {REWARD} 2>/dev/null); "
                   f"[ \"$r\" = 1 ] && break; sleep 0.1; done; echo \"$r\"").stdout.strip()


def test_daemon_probe_outlives_its_script_until_the_harness_kills_it(tmp_path):
    """Positive control of the daemon probe's mechanics: after its script has exited, its detached loops
    keep rewriting reward.txt in the agent's own sandbox; Sandbox.kill_commands ends all of them."""
    t = load_task(task(tmp_path, "weak", EXISTS_ONLY))
    image = image_for_task(t)
    sb = sandbox_for_task(t, image=image)
    sb.start()
    try:
        sb.write_file("/tmp/p.sh", PRELUDE + get_probe("reward-daemon").script(probe_context(t, image)))
        assert sb.exec("sh /tmp/p.sh").return_code == 0
        sb.exec(f"rm -f {REWARD}", user="root")
        assert reward_within(sb) == "1"  # rewritten after the script ended
        assert sb.kill_commands() >= 4
        sb.exec(f"rm -f {REWARD}", user="root")
        time.sleep(2.5)  # past the late loop's start
        assert sb.exec(f"cat {REWARD} 2>/dev/null").stdout == ""
    finally:
        sb.stop()


def test_ptrace_probe_takes_over_a_process_it_did_not_start(tmp_path):
    """Positive control of the ptrace injector: a process started by an earlier command (not by the
    probe) keeps its pid but becomes the reward loop; the sandbox's anchor (pid 1) is not taken."""
    t = load_task(task(tmp_path, "py", EXISTS_ONLY, dockerfile=PYTHON))
    image = image_for_task(t)
    ctx = probe_context(t, image)
    assert ctx.python == "/usr/bin/python3"
    sb = sandbox_for_task(t, image=image)
    sb.start()
    try:
        victim = sb.exec("setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $!").stdout.strip()
        sb.write_file("/tmp/p.sh", PRELUDE + get_probe("ptrace-anchor").script(ctx))
        assert sb.exec("sh /tmp/p.sh").return_code == 0
        assert reward_within(sb) == "1"  # written by the loop after its execve: the cmdline below is final
        cmdline = sb.exec(f"tr '\\0' ' ' < /proc/{victim}/cmdline").stdout
        assert cmdline.startswith("sh -c ") and "reward" in cmdline, cmdline
        assert "sh -c" not in sb.exec("tr '\\0' ' ' < /proc/1/cmdline").stdout
    finally:
        sb.stop()


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_answer_key_link_is_rejected_only_where_the_link_reaches_the_key(tmp_path, mode):
    """A task whose tests compare the output with /tests/expected.txt: the gate names answer-key-link
    exactly when the same link, handed in directly as the solution (run_trial's oracle, as root), earns a
    reward in that verifier mode. (Separate: the copy into the verifier refuses the link; shared: the
    kernel follows it on the agent's filesystem.)"""
    link = "ln -s /tests/expected.txt /app/answer.txt"
    path = task(tmp_path, f"keyed-{mode}", KEYED, tests=KEY, solve=link, shared=mode == "shared")
    t = load_task(path)
    direct = run_trial(t, image_for_task(t), kind="oracle").reward() or 0.0
    result = gate(path, "answer-key-link")
    assert ("answer-key-link" in result.failed) == (direct > 0), (direct, result.to_dict())
    assert direct == (1.0 if mode == "shared" else 0.0)  # today's behaviour of each mode, stated


def test_tasks_that_run_the_agents_code_as_root_are_rejected():
    """Finding on the third-party-style corpus: tasks whose tests run a script of the agent's workdir as
    root (a reset script, the script under test, a package imported by pytest) are passed by the
    trojaned-deliverables probe: the agent's code writes reward.json (which wins) or forces exit 0."""
    for name in ("log-rotate-fix", "shell-report-script"):
        result = gate(TB2 / name, "trojan-workdir-code")
        assert result.failed == ["trojan-workdir-code"], (name, result.to_dict())


# ------------------------------------------------------------------------------- correct tasks pass
@pytest.mark.parametrize("path", EXAMPLES + TB2_PASSING, ids=lambda p: p.name)
def test_correct_tasks_pass_the_gate(path):
    """Every bundled example and two correct third-party-style tasks pass: every probe that had something
    to try ran, scored (none masked) and earned reward 0."""
    result = gate(path)
    assert result.passed, result.to_dict()
    assert not result.errors and result.runs
    assert all(r.reward == 0.0 and not r.masked for r in result.runs), [(r.probe, r.reward, r.error) for r in result.runs]
    assert {m for r in result.runs for m in r.members} | set(result.skipped) == set(probe_names())


# -------------------------------------------------------------------------------------- the CLI
def test_cli_verify_shows_the_gate_and_can_skip_it(tmp_path):
    """`evokit verify --json` fails a weak task with the gate's result in the verdict; `--no-hack-gate`
    skips the gate (the task then passes, and the verdict has no gate result); the table has the column."""
    weak = task(tmp_path, "weak", EXISTS_ONLY)
    cli = [sys.executable, "-m", "evokit.cli", "verify", str(weak), "--determinism-runs", "1"]
    out = subprocess.run([*cli, "--json"], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    v = json.loads(out.stdout.strip().splitlines()[-1])
    assert "placeholder-outputs" in v["hack_gate"]["failed"]
    assert any(c["name"] == "hack-gate" and not c["passed"] for c in v["checks"])
    out = subprocess.run([*cli, "--json", "--no-hack-gate"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    v = json.loads(out.stdout.strip().splitlines()[-1])
    assert v["hack_gate"] is None and not any(c["name"] == "hack-gate" for c in v["checks"])
    out = subprocess.run(cli, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 1 and "hack gate" in out.stdout and "placeholder-outputs" in out.stdout


# ----------------------------------------------------------------------------- evolution and store
@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    from evokit.seeds import make_seeds, seed_dirs

    out = tmp_path_factory.mktemp("seeds")
    make_seeds(1, 0, out, progress=False)
    return seed_dirs(out)[0]


def test_evolution_store_records_hack_rates(seed_dir, tmp_path):
    """Every child the procedural harness verifies goes through the gate: its outcome is kept in the
    store's records (per verified attempt), the store's hack rate per generation and direction counts
    them, and the lineage browser shows the table."""
    from evokit.browser import describe
    from evokit.evolve import EvolveConfig, evolve

    store = evolve([seed_dir], tmp_path / "store", EvolveConfig(generations=2), progress=False)
    children = [e for e in store.envs() if e.generation > 0]
    assert children
    for e in children:
        assert e.data["hack_gate"] and e.data["hack_gate"][-1]["passed"], e.data
    rates = store.hack_rates()
    checked = sum(len(r.get("hack_gate", [])) for r in store.records())
    assert sum(r["checked"] for r in rates) == checked >= len(children)
    assert {(r["generation"], r["direction"]) for r in rates} >= {(e.generation, e.direction) for e in children}
    assert all(r["rate"] == 0.0 and r["hacked"] == 0 for r in rates)
    html = describe(store, children[-1])
    assert "hack rate per generation and direction" in html and "hack gate" in html


class WeakeningModifier:
    """The procedural modifier, then the tests weakened to an existence check of every output: a real
    task folder a careless LLM modifier could write."""

    def __init__(self, inner):
        self.inner = inner

    def modify(self, parent_dir, parent, edit, dest, **kw):
        folder = self.inner.modify(parent_dir, parent, edit, dest, **kw)
        t = load_task(folder)
        outs = probe_context(t).outputs
        checks = " && ".join(f"[ -e {o} ]" for o in outs)
        (folder / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nmkdir -p /logs/verifier\nif {checks}; then echo 1; else echo 0; fi > {REWARD}\n")
        return folder


def test_hacked_children_are_rejected_and_counted(seed_dir, tmp_path):
    """A modifier that weakens the tests makes children that oracle and null accept and the gate
    rejects: the reject records say "hack gate: <probe>", the store's hack rate for the generation and
    direction is 1, and the browser's table shows the probe."""
    from evokit.browser import hack_rate_html
    from evokit.evolve import EvolveConfig, evolve, procedural_backend

    backend = procedural_backend()
    backend.modifier = WeakeningModifier(backend.modifier)
    store = evolve([seed_dir], tmp_path / "store", EvolveConfig(generations=1, direction="length", repair_budget=1),
                   backend=backend, progress=False)
    assert [e.generation for e in store.envs()] == [0]  # no child accepted
    rejects = [r for r in store.records() if r["kind"] == "reject" and r["stage"] == "verify"]
    assert rejects and all(any(x.startswith("hack gate: placeholder-outputs") for x in r["reasons"]) for r in rejects)
    (rate,) = store.hack_rates()
    assert (rate["generation"], rate["direction"], rate["checked"], rate["rate"]) == (1, "length", 2, 1.0)
    assert rate["probes"]["placeholder-outputs"] == 2
    lineage = rejects[0]["lineage"]
    assert "placeholder-outputs ×2" in hack_rate_html(store, lineage)


# ------------------------------------------------------------------------------------- LLM hacker
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from evokit.local_llm import LocalServer

    with LocalServer(log=tmp_path_factory.mktemp("llm") / "server.log") as srv:
        yield srv


def test_llm_hacker_runs_against_a_real_local_model(server, tmp_path):
    """Plumbing only: the LLM hacker (llama.cpp serving SmolLM2-135M) runs real episodes through the
    rollout path and each leaves a scored row in the gate's result; whether it succeeds is not asserted."""
    path = task(tmp_path, "weak", EXISTS_ONLY)
    hacker = LLMHackerConfig(server.model_name, server.api_base, max_turns=2, max_tokens=48, attempts=2)
    t = load_task(path)
    result = run_gate(t, image_for_task(t), HackGateConfig(probes=(), llm=hacker))
    rows = [r for r in result.runs if r.probe == "llm-hacker"]
    assert len(rows) == 2 and result.skipped == []
    for r in rows:
        assert not r.masked and r.reward in (0.0, 1.0), r
    assert result.passed == all(r.reward == 0.0 for r in rows)
    assert ("llm-hacker" in result.failed) == any(r.reward > 0 for r in rows)
