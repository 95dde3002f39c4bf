"""The ``evokit`` command line (evokit.cli): the foreign-task journey, error manners, verify over datasets.

The journey test drives ``evokit evolve --backend llm`` on an ordinary Harbor task (no plan in its
metadata, not from the catalog) against a real HTTP OpenAI-compatible endpoint on 127.0.0.1 that
serves a scripted sequence of replies (:class:`llm_support.ScriptedEndpoint`). The test is about
the harness and the CLI, not about a model, so a scripted model is the right one; the live
SmolLM2 run is tests/test_llm_roles.py. Every verification in it is real (sandbox builds, oracle
and null trials, rubric).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from harbor.models.trajectories import Trajectory
from llm_support import LocalEndpoint, ScriptedEndpoint
from store_support import timeless_records

from evokit import cli
from evokit.lineage import LineageStore, reject_cause
from evokit.tasks import content_hash, read_metadata
from evokit.verify import verify_task

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "tb2_style"
ETL = CORPUS / "jsonl-etl-pipeline"

STEP1 = {"pair": "other", "other_scenario": "JSON Lines event files with a country lookup table",
         "other_skill": "validate records and sum revenue per country name", "reads_previous": False}
USERS = {"pair": "other", "other_scenario": "the accepted events of the previous step",
         "other_skill": "list the distinct users with accepted events, sorted", "reads_previous": True}
USERS_BAD = {**USERS, "other_skill": "count rejected lines per file"}

USERS_TEST = '''

def test_users():
    assert (OUT / "users.txt").read_text() == "u1\\nu2\\n"
'''
USERS_SOLVE = '''json.dump(revenue, open("/app/out/revenue_by_country.json", "w"))
users = set()
for path in sorted(glob.glob(cfg["inputs"])):
    for line in open(path):
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(ev.get("amount_cents"), int) and ev["amount_cents"] >= 0 and ev.get("country") in names:
            users.add(ev["user"])
open("/app/out/users.txt", "w").write("".join(u + "\\n" for u in sorted(users)))
'''


def residual(seed: Path, *, solved: bool) -> dict:
    """The modifier's ΔE for the USERS step: instruction, a new test, and (if ``solved``) the solution."""
    instruction = (seed / "instruction.md").read_text() + (
        "3. `/app/out/users.txt`: the distinct `user` values of the accepted events, sorted, one per line.\n")
    tests = (seed / "tests" / "test_outputs.py").read_text() + USERS_TEST
    solve = (seed / "solution" / "solve.sh").read_text()
    solve = solve.replace('json.dump(revenue, open("/app/out/revenue_by_country.json", "w"))\n', USERS_SOLVE) \
        if solved else solve.replace("# Reference solution", "# Reference solution (users list to do)")
    return {"files": {"instruction.md": instruction, "tests/test_outputs.py": tests, "solution/solve.sh": solve},
            "summary": "add a sorted list of users with accepted events"}


def test_llm_evolution_of_a_foreign_task_from_the_cli(tmp_path, capsys):
    """`evokit evolve --backend llm` on an ordinary multi-file Harbor task, over a real HTTP endpoint:
    the seed's plan is extracted (free text: nothing in the catalog fits) and recorded in the store,
    the reviewer rejects the first proposal and accepts the second, the modifier's first residual
    fails verification (its solution misses the new output) and its repair passes; the child is in
    the store with its lineage, re-verifies, and the free-text steps carry through."""
    seeds = tmp_path / "dataset" / "team-a"  # a Harbor dataset folder, the task one level down
    shutil.copytree(ETL, seeds / ETL.name)
    seed = seeds / ETL.name
    before = content_hash(seed)
    replies = [
        {"steps": [STEP1]},  # plan extraction
        {"steps": [STEP1, USERS_BAD]},  # proposal, round 1
        {"accept": False, "reasons": ["counting rejected lines repeats the validation step; add new work"]},
        {"steps": [STEP1, USERS]},  # proposal, round 2
        {"accept": True, "reasons": []},
        residual(seed, solved=False),  # modifier attempt 1: fails the oracle
        residual(seed, solved=True),  # modifier attempt 2 (repair): verifies
    ]
    store_dir = tmp_path / "store"
    with ScriptedEndpoint(replies) as ep:
        code = cli.main(["evolve", "--seeds", str(tmp_path / "dataset"), "--out", str(store_dir), "--backend", "llm",
                         "--model", "scripted", "--api-base", ep.api_base, "--generations", "1",
                         "--direction", "length", "--workers", "1"])
        requests = ep.requests
    assert code == 0, capsys.readouterr()
    assert len(requests) == 7 and not ep.replies  # every scripted reply was asked for, no more
    assert "revenue_by_country.json" in requests[0]["messages"][1]["content"]  # the extraction saw the seed
    assert "counting rejected lines repeats" in requests[3]["messages"][1]["content"]  # review → proposer
    repair = requests[6]["messages"][1]["content"]  # the verification failure went back to the modifier
    assert "failed verification" in repair and "oracle: reward 0.0" in repair
    assert content_hash(seed) == before  # the user's folder is untouched

    store = LineageStore(store_dir)
    gen0, gen1 = store.envs()
    assert gen0.data["extracted"] is True and gen0.data["difficulty"] == {}
    assert read_metadata(store.path(gen0)).plan == gen0.data["plan"]  # recorded in the store's copy
    assert gen1.generation == 1 and gen1.parent == gen0.content_hash and gen1.direction == "length"
    assert gen1.data["attempts"] == 2 and gen1.data["verdict"]["passed"]
    assert [r["attempt"] for r in gen1.data["repairs"]] == [0]
    assert any(r.startswith("oracle: reward 0.0") for r in gen1.data["repairs"][0]["reasons"]), gen1.data["repairs"]
    assert [s["scenario"] for s in gen1.data["plan"]] == [f"other:{STEP1['other_scenario']}",
                                                          f"other:{USERS['other_scenario']}"]
    assert gen1.data["plan"][1]["input"] == 1
    meta = read_metadata(store.path(gen1))
    assert meta.lineage.parent == gen0.content_hash and meta.lineage.generation == 1
    assert meta.plan == gen1.data["plan"]
    rejects = [r for r in store.records() if r["kind"] == "reject"]
    assert not rejects  # the failed attempt was repaired inside the direction
    again = verify_task(store.path(gen1))
    assert again.passed, again.failures
    assert again.rewards["oracle"][0] == {"reward": 1.0} and again.rewards["null"] == [{"reward": 0.0}]


def test_a_child_that_never_verifies_is_rejected_with_its_first_failing_test(tmp_path, capsys):
    """The modifier's residual fails the oracle on every attempt (its solution misses the new output):
    no child; the reject record's cause is "oracle failed" and its reasons keep the oracle's reason,
    which names the first failing test (test_users); the summary counts it under its direction, the
    run exits 3, and `lineage show --rejections` shows the reason on one line."""
    seeds = tmp_path / "seeds"
    shutil.copytree(ETL, seeds / ETL.name)
    unsolved = residual(seeds / ETL.name, solved=False)
    replies = [{"steps": [STEP1]}, {"steps": [STEP1, USERS]}, {"accept": True, "reasons": []},
               unsolved, unsolved, unsolved]  # the first attempt and two repairs
    store_dir = tmp_path / "store"
    with ScriptedEndpoint(replies) as ep:
        code = cli.main(["evolve", "--seeds", str(seeds), "--out", str(store_dir), "--backend", "llm",
                         "--model", "scripted", "--api-base", ep.api_base, "--generations", "1",
                         "--direction", "length", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 3 and not ep.replies, out
    assert "length: 0 accepted, 1 rejected (oracle failed 1)" in out, out
    (reject,) = LineageStore(store_dir).rejections()
    assert (reject.generation, reject.direction, reject.stage, reject.cause) == (1, "length", "verify", "oracle failed")
    oracle = [r for r in reject.reasons if r.startswith("oracle: ")]
    assert oracle and "test_users" in oracle[0], reject.reasons
    (row,) = [r for r in LineageStore(store_dir).records() if r["kind"] == "reject"]
    assert reject_cause({k: v for k, v in row.items() if k != "cause"}) == row["cause"]  # records without one
    shown = evokit("lineage", "show", str(store_dir), "--rejections", env_columns=400)
    (row,) = [line for line in shown.stdout.splitlines() if "oracle failed" in line]
    assert "oracle: reward 0.0" in row and "test_users" in row, shown.stdout


def test_extract_command_records_the_plan(tmp_path):
    """`evokit extract --write` records a foreign task's plan; afterwards it reads back from metadata."""
    task = tmp_path / ETL.name
    shutil.copytree(ETL, task)
    with ScriptedEndpoint([{"steps": [STEP1]}]) as ep:
        out = subprocess.run([sys.executable, "-m", "evokit.cli", "extract", str(task), "--model", "scripted",
                              "--api-base", ep.api_base, "--write"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert row["source"] == "llm" and row["recorded"] and row["steps"] == [
        f"other:{STEP1['other_scenario']}/other:{STEP1['other_skill']}"]
    assert read_metadata(task).plan == row["plan"]
    again = subprocess.run([sys.executable, "-m", "evokit.cli", "extract", str(task)], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and json.loads(again.stdout)["source"] == "metadata"


def evokit(*args: str, timeout: float = 120, env_columns: int | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess; ``env_columns`` widens its tables (rich reads COLUMNS) so rows stay whole."""
    import os

    env = {**os.environ, **({"COLUMNS": str(env_columns)} if env_columns else {})}
    return subprocess.run([sys.executable, "-m", "evokit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("args, says", [
    (["evolve", "--seeds", str(CORPUS), "--out", "{tmp}/s"], "not an evokit task"),  # foreign, no --model
    (["evolve", "--seeds", str(CORPUS), "--out", "{tmp}/s", "--backend", "llm"], "--backend llm needs --model"),
    (["verify", "{tmp}/nowhere"], "no such file or folder"),
    (["verify", "{tmp}"], "no task folders"),
    (["evolve", "--seeds", str(CORPUS), "--out", "{tmp}/s", "--backend", "gpt"], "--backend"),
    (["verify", "--workers", "many", str(CORPUS)], "--workers"),
    (["verify", "--nonsense", str(CORPUS)], "--nonsense"),
    (["difficulty", str(CORPUS / "log-rotate-fix")], "--model"),
    (["extract", str(CORPUS / "log-rotate-fix")], "--model"),
    (["serve-llm", "--model", "{tmp}/missing.gguf"], "no such file"),
    (["evolve", "--seeds", str(ROOT / "examples" / "tasks"), "--out", "{tmp}/s", "--effort", "huge"], "effort"),
    (["train", "--out", "{tmp}/r", "--source", "genenv", "--learner", "oracle"], "--learner"),
    (["train", "--out", "{tmp}/r"], "--store"),  # a curriculum needs an evolved store
    (["seeds", "--n", "1", "--out", str(ROOT / "pyproject.toml")], "pyproject.toml: File exists"),  # the OS says no
    (["lineage", "show", "{tmp}/nope"], "no such folder"),
    (["lineage", "export", "{tmp}/nope", "--out", "{tmp}/dataset"], "no such folder"),
    (["lineage", "show", "{tmp}"], "not a lineage store"),
])
def test_user_errors_are_one_line_exit_2(tmp_path, args, says):
    """A user's mistake: exit 2, one line on stderr naming the problem (and what to do), no traceback."""
    out = evokit(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evokit: error: ") and says in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    if args[0] == "lineage":  # reading a store that is not there creates nothing (no store, no dataset)
        assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_train_starts_from_a_data_solver_and_resumes(tmp_path):
    """`evokit train --source genenv`: real GenEnv epochs (tasks rendered, rolled out in sandboxes, judged by
    their tests). The learner starts as the studies' agents do, from a solver pretrained on data
    (OUT/solver.pt; no log p_T in its logits); a second call resumes the run, and `--learner prior` (the
    p_T-prior learner) in the same folder is refused as another run, in one line. The pretraining shows a
    bar; each run ends with the summary of its rows (evokit.run_summary), and a run of groups of one
    rollout ends with the warning that GRPO had no signal."""
    from evokit.cpu_agent.policy import SkillPolicy
    from evokit.cpu_agent.solvers import build_solver, support_reference, world_solver
    from evokit.run_summary import run_report

    out = tmp_path / "run"
    args = ["train", "--source", "genenv", "--out", str(out), "--group-size", "2", "--tasks-per-step", "2"]
    first = evokit(*args, "--steps", "1", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "pretrain[world]: 100%" in first.stderr and "train[genenv]: 100%" in first.stderr
    assert first.stdout.splitlines() == [*run_report(out), f"rows in {out}/steps.jsonl"]
    assert "pass@2 " in first.stdout
    saved = SkillPolicy.load(out / "solver.pt", support_reference())
    fresh = build_solver(world_solver(0)).policy
    assert saved.config.prior_weight == 0 and saved.reference_name == "support"
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert json.loads((out / "config.json").read_text())["policy"]["prior_weight"] == 0
    again = evokit(*args, "--steps", "2", timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps == [0, 1]  # step 0 kept, step 1 added
    assert "pretrain[" not in again.stderr  # OUT/solver.pt is loaded, not pretrained again
    assert again.stdout.splitlines()[0] == "2 step(s), 4 group(s) served"
    single = tmp_path / "single"
    single.mkdir()
    shutil.copy(out / "solver.pt", single / "solver.pt")
    lonely = evokit("train", "--source", "genenv", "--out", str(single), "--group-size", "1", "--steps", "1",
                    timeout=600)
    assert lonely.returncode == 0, lonely.stderr[-3000:]
    assert "warning: no learning signal: 100 % of groups" in lonely.stdout, lonely.stdout
    other = evokit(*args, "--steps", "2", "--learner", "prior")
    assert other.returncode == 2 and other.stderr.startswith("evokit: error: "), other.stderr
    assert len(other.stderr.strip().splitlines()) == 1 and "Traceback" not in other.stderr


def test_debug_shows_the_traceback(tmp_path):
    out = evokit("--debug", "verify", str(tmp_path / "nowhere"))
    assert out.returncode != 0 and "Traceback" in out.stderr and "UserError" in out.stderr


def test_verify_finds_tasks_recursively_and_counts(tmp_path):
    """`evokit verify DATASET` finds the task folders at any depth and prints a summary line with counts;
    a task that cannot be loaded counts as an error, a failing one as failed."""
    elsewhere = tmp_path / "elsewhere" / "good"
    shutil.copytree(ROOT / "examples" / "tasks" / "pipes-top-ips", elsewhere)
    (tmp_path / "ds" / "org").mkdir(parents=True)
    (tmp_path / "ds" / "org" / "good").symlink_to(elsewhere)  # datasets of links to tasks are common
    bad = tmp_path / "ds" / "vacuous"
    shutil.copytree(ROOT / "examples" / "tasks" / "pipes-top-ips", bad)
    (bad / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    broken = tmp_path / "ds" / "deep" / "er" / "broken"
    broken.mkdir(parents=True)
    (broken / "task.toml").write_text("this is not toml = = \n")
    out = evokit("verify", "--determinism-runs", "1", str(tmp_path / "ds"), timeout=600)
    assert out.returncode == 1, out.stderr
    assert "3 task(s): 1 passed, 1 failed, 1 errors" in " ".join(out.stdout.split())
    assert "org/good" in out.stdout and "deep/er/broken" in out.stdout  # paths below the dataset's root


def test_rollout_and_export_traces(tmp_path):
    """`evokit rollout` runs G episodes of the LLM agent over a real HTTP endpoint (scripted replies: the
    test is about the command, not the model) and prints rewards, turns, tokens and pass@k; `evokit
    export-traces` turns the rows into Harbor-style SFT conversations, keeping only the solved one, and
    into ATIF trajectories that Harbor's own pydantic models accept."""
    task = ROOT / "examples" / "tasks" / "pipes-top-ips"
    solve = (task / "solution" / "solve.sh").read_text()
    replies = [{"command": solve}, {"done": True}, {"done": True}]  # episode 0 solves, episode 1 gives up
    rows = tmp_path / "rows.jsonl"
    with ScriptedEndpoint(replies) as ep:
        out = evokit("rollout", str(task), "--model", "scripted", "--api-base", ep.api_base, "-n", "2",
                     "--workers", "1", "--tool-mode", "json", "--out", str(rows), timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["rewards"] == [1.0, 0.0] and summary["turns"] == [2, 1] and summary["masked"] == 0
    assert all(t > 0 for t in summary["completion_tokens"])
    assert summary["pass_at_k"] == {"1": 0.5, "2": 1.0}  # one of two passes: any pair holds it
    assert "pass@1 0.500, pass@2 1.000" in out.stdout
    sft = tmp_path / "sft.jsonl"
    out = evokit("export-traces", str(rows), "--out", str(sft), "--min-reward", "1")
    assert out.returncode == 0, out.stderr
    (conv,) = [json.loads(line) for line in sft.read_text().splitlines()]
    assert conv["task"] == "pipes-top-ips" and conv["result"] == 1.0 and conv["model"] == "scripted"
    roles = [m["role"] for m in conv["conversations"]]
    assert roles == ["user", "user", "assistant", "user", "assistant"]  # system, task, command, output, done
    assert json.loads(conv["conversations"][2]["content"]) == {"command": solve}
    assert conv["conversations"][3]["content"].startswith("[exit code 0]")
    atif = tmp_path / "atif.jsonl"
    out = evokit("export-traces", str(rows), "--out", str(atif), "--format", "atif")
    assert out.returncode == 0 and "2 ATIF trajectory(ies)" in out.stdout, out.stderr
    solved, gave_up = [Trajectory.model_validate_json(line) for line in atif.read_text().splitlines()]
    assert [s.source for s in solved.steps] == ["system", "user", "agent", "agent"]
    assert json.loads(solved.steps[2].message) == {"command": solve}
    assert solved.steps[2].observation.results[0].content.startswith("[exit code 0]")
    assert solved.extra["result"] == 1.0 and gave_up.extra["result"] == 0.0 and solved.agent.model_name == "scripted"
    assert solved.final_metrics.total_completion_tokens == summary["completion_tokens"][0]
    out = evokit("export-traces", str(rows), "--out", str(atif), "--format", "parquet")
    assert out.returncode == 2 and out.stderr.strip() == "evokit: error: --format parquet: choose one of sharegpt, atif"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"no": "task"}\n')
    out = evokit("export-traces", str(bad), "--out", str(tmp_path / "x.jsonl"))
    assert out.returncode == 2 and "bad.jsonl:1: not a rollout row" in out.stderr


def test_serve_llm_prints_its_endpoint_and_stops_cleanly_on_ctrl_c(tmp_path):
    """`evokit serve-llm` starts the bundled llama.cpp + SmolLM2 endpoint, prints the --model/--api-base
    to pass to other commands, answers on that endpoint, and on Ctrl-C (SIGINT) stops the server and
    exits 0, leaving nothing listening — also when Ctrl-C keeps being pressed until the process is gone
    (a late one can land in interpreter shutdown, where CPython restores SIG_DFL: exit -2)."""
    import signal
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "evokit.cli", "serve-llm", "--n-ctx", "2048",
                             "--log", str(tmp_path / "server.log")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = ""
        for _ in range(50):  # a few status lines come first
            line = proc.stdout.readline()
            if line.startswith("--model ") or not line:
                break
        assert line.startswith("--model "), (line, proc.poll())
        api_base = line.split("--api-base ", 1)[1].strip()
        assert api_base.startswith("http://127.0.0.1:") and api_base.endswith("/v1")
        models = json.loads(urllib.request.urlopen(f"{api_base}/models", timeout=30).read())
        assert models["data"][0]["id"] == line.split()[1]  # completions: tests/test_llm_roles.py, test_extract.py
        presses, deadline = 0, time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            proc.send_signal(signal.SIGINT)
            presses += 1
            time.sleep(0.01)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (presses, err)
    assert presses > 1  # Ctrl-C was pressed again while it stopped
    assert "server stopped" in out and "Traceback" not in err
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{api_base}/models", timeout=2)


def test_a_seed_whose_plan_cannot_be_extracted_ends_its_lineage_only(tmp_path, capsys):
    """Extraction replies that never validate end that seed's lineage with the reasons on record; the
    run completes and says so instead of crashing (scripted endpoint, as above): with no lineage
    started it holds no child, exit 3."""
    seeds = tmp_path / "seeds"
    shutil.copytree(ETL, seeds / ETL.name)
    with ScriptedEndpoint(["no plan, sorry"] * 3) as ep:  # the first try and two retries
        code = cli.main(["evolve", "--seeds", str(seeds), "--out", str(tmp_path / "store"), "--backend", "llm",
                         "--model", "scripted", "--api-base", ep.api_base, "--generations", "1", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 3 and "did not start" in out and "no child accepted: no seed started" in out, out
    store = LineageStore(tmp_path / "store")
    (end,) = [r for r in store.records() if r["kind"] == "end"]
    assert end["generation"] == 0 and "plan extraction failed" in end["reason"] and not store.envs()


def test_a_killed_serve_llm_leaves_no_server_behind():
    """SIGKILL (no chance to clean up) of `evokit serve-llm` still stops its llama.cpp server."""
    import signal
    import time
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "evokit.cli", "serve-llm", "--n-ctx", "512"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        line = ""
        for _ in range(50):
            line = proc.stdout.readline()
            if line.startswith("--model ") or not line:
                break
        api_base = line.split("--api-base ", 1)[1].strip()
        urllib.request.urlopen(f"{api_base}/models", timeout=30).read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{api_base}/models", timeout=2).read()
        except OSError:
            return
        time.sleep(0.3)
    pytest.fail(f"the server at {api_base} outlived its SIGKILLed `evokit serve-llm`")


# ------------------------------------------------------------------------ Ctrl-C and LLM endpoints
def test_ctrl_c_stops_evolve_within_seconds_and_a_rerun_gives_the_uninterrupted_store(tmp_path):
    """A real SIGINT to the process group of a running `evokit evolve` (procedural, 4 seeds × 6
    generations, about half a minute uninterrupted): it exits 130 within 5 s of the signal, prints
    one line saying how to resume, no traceback; the rows written before stay; the same command
    again completes the run, and its store holds the records of an uninterrupted run (less at most
    one lineage that a verification failing once in one of the runs sent its own way)."""
    import os
    import signal

    from evokit.seeds import make_seeds

    make_seeds(4, 0, tmp_path / "seeds", progress=False)
    args = ["evolve", "--seeds", str(tmp_path / "seeds"), "--generations", "6"]
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-m", "evokit.cli", *args, "--out", str(store)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        index, deadline = store / "index.jsonl", time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:  # a few generations in
            if index.exists() and len(index.read_text().splitlines()) >= 8:
                break
            time.sleep(0.1)
        before = index.read_text().splitlines()
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=60)
        latency = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert latency < 5, f"exited {latency:.1f} s after Ctrl-C"
    said = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("evokit:")]
    assert said == [f"evokit: interrupted; rerun the same command to resume from {store}"], err[-2000:]
    assert "Traceback" not in err + out
    kept = index.read_text().splitlines()
    assert kept[: len(before)] == before  # nothing written before the signal was lost
    again = evokit(*args, "--out", str(store), timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(LineageStore(store).envs()) > len([r for r in kept if '"kind": "env"' in r])  # it was mid-run
    whole = evokit(*args, "--out", str(tmp_path / "whole"), timeout=600)
    assert whole.returncode == 0, whole.stderr[-2000:]
    resumed, uninterrupted = list(LineageStore(store).records()), list(LineageStore(tmp_path / "whole").records())
    # A lineage whose child needed a repair in one run only (a verification that failed once on a
    # loaded host) goes its own way from there; it is left out, its reasons shown, and at most one is.
    one_run = repaired_in_one_run(resumed, uninterrupted)
    transient = {lineage for lineage, _ in one_run}
    assert len(transient) <= 1, one_run
    assert (timeless_records(r for r in resumed if r["lineage"] not in transient)
            == timeless_records(r for r in uninterrupted if r["lineage"] not in transient)), one_run
    assert LineageStore(store).check() == []


def repaired_in_one_run(a: list[dict], b: list[dict]) -> dict[tuple[str, int], list]:
    """The children (lineage, generation) that needed a repair in one of two runs only, with its reasons."""
    ra, rb = ({(r["lineage"], r["generation"]): r["repairs"] for r in rs if r.get("repairs")} for rs in (a, b))
    return {k: ra.get(k) or rb.get(k) for k in ra.keys() ^ rb.keys()}


class StalledEndpoint(LocalEndpoint):
    """A real HTTP server on 127.0.0.1 that answers every POST after ``delay`` seconds with ``body``
    (200, application/json), noting for each request how long it held it and whether the client
    closed the connection first (a client that gives up must close it: that is how a server learns
    to stop working on the request)."""

    def __init__(self, delay: float, body: bytes = b""):
        self.delay, self.body, self.requests = delay, body, []

    def handler(self) -> type:
        import select
        from http.server import BaseHTTPRequestHandler

        ep = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                start = time.monotonic()
                closed = False
                if ep.delay:  # readable before the deadline = the client closed its end
                    poller = select.poll()  # not select(): the test process may hold fds past 1024
                    poller.register(self.connection, select.POLLIN)
                    closed = bool(poller.poll(ep.delay * 1000))
                ep.requests.append({"start": start, "held": time.monotonic() - start, "client_closed": closed})
                if not closed:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(ep.body)))
                    self.end_headers()
                    self.wfile.write(ep.body)

        return Handler


@pytest.fixture(scope="module")
def evokit_seeds(tmp_path_factory) -> Path:
    from evokit.seeds import make_seeds

    out = tmp_path_factory.mktemp("seeds")
    make_seeds(2, 0, out, progress=False)
    return out


def test_an_llm_endpoint_that_times_out_is_one_line_exit_2(tmp_path, evokit_seeds):
    """`evokit evolve --backend llm --llm-timeout 2` against a real endpoint that never answers in
    time: exit 2, one line naming the timeout, no traceback (not an internal error carrying the
    parallel executor's traceback), within 10 s of the first request; every abandoned request's
    connection was closed by the client after about 2 s."""
    with StalledEndpoint(delay=60) as ep:
        out = evokit("evolve", "--seeds", str(evokit_seeds), "--out", str(tmp_path / "store"), "--backend", "llm",
                     "--model", "m", "--api-base", ep.api_base, "--generations", "2", "--llm-timeout", "2")
        ended = time.monotonic()
    assert out.returncode == 2, out.stderr[-2000:]
    said = [line for line in out.stderr.replace("\r", "\n").splitlines() if line.startswith("evokit:")]
    assert len(said) == 1 and said[0].startswith("evokit: error: LLM endpoint"), out.stderr[-2000:]
    assert "within the timeout of 2 s" in said[0] and "2 attempt(s)" in said[0] and len(said[0]) < 400
    assert "Traceback" not in out.stderr
    assert ended - min(r["start"] for r in ep.requests) < 10
    assert len(ep.requests) == 4  # two lineages, each one request and one retry
    assert all(r["client_closed"] and 1.9 < r["held"] < 4 for r in ep.requests), ep.requests


def test_llm_flags_are_checked_and_read_from_the_environment(tmp_path, evokit_seeds):
    """A bad --llm-timeout is a one-line user error; EVOKIT_LLM_TIMEOUT sets it without the flag."""
    import os

    out = evokit("evolve", "--seeds", str(evokit_seeds), "--out", str(tmp_path / "s"), "--backend", "llm",
                 "--model", "m", "--api-base", "http://127.0.0.1:9/v1", "--llm-timeout", "0")
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("evokit: error: timeout must be")
    with StalledEndpoint(delay=60) as ep:
        env = {**os.environ, "EVOKIT_LLM_TIMEOUT": "1", "EVOKIT_LLM_RETRIES": "0"}
        out = subprocess.run([sys.executable, "-m", "evokit.cli", "extract", str(CORPUS / "log-rotate-fix"),
                              "--model", "m", "--api-base", ep.api_base], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 2 and "within the timeout of 1 s (1 attempt(s)" in out.stderr, out.stderr[-2000:]
    assert len(ep.requests) == 1 and ep.requests[0]["client_closed"]


def test_an_llm_endpoint_answering_garbage_is_one_line_exit_2(tmp_path, evokit_seeds, capsys):
    """An endpoint whose HTTP body is not JSON: exit 2, one line saying so, no traceback. A model whose
    replies are not JSON (a valid completion) is no endpoint failure: the run completes, every direction's
    proposal is rejected as invalid, the summary counts them by direction and cause, and a store with
    no child exits 3; `lineage show --rejections` lists the three attempts with their reasons."""
    with StalledEndpoint(delay=0, body=b"<html>502 Bad Gateway</html>") as ep:
        out = evokit("evolve", "--seeds", str(evokit_seeds), "--out", str(tmp_path / "store"), "--backend", "llm",
                     "--model", "m", "--api-base", ep.api_base, "--generations", "1")
    said = [line for line in out.stderr.replace("\r", "\n").splitlines() if line.startswith("evokit:")]
    assert out.returncode == 2 and len(said) == 1 and "a body that is not JSON" in said[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    with ScriptedEndpoint(["this is not JSON at all"] * 100) as ep:
        code = cli.main(["evolve", "--seeds", str(evokit_seeds), "--limit", "1", "--out", str(tmp_path / "s2"),
                         "--backend", "llm", "--model", "m", "--api-base", ep.api_base, "--generations", "1",
                         "--workers", "1"])
    out = capsys.readouterr().out
    records = list(LineageStore(tmp_path / "s2").records())
    assert code == 3 and [r["kind"] for r in records].count("env") == 1, out  # the seed only: no child
    assert {r["stage"] for r in records if r["kind"] == "reject"} == {"plan"}
    assert all(reject_cause({k: v for k, v in r.items() if k != "cause"}) == r["cause"] == "proposal invalid"
               for r in records if r["kind"] == "reject")  # the cause read from the reasons agrees
    assert [r["reason"] for r in records if r["kind"] == "end"] == ["every direction failed (see the reject records)"]
    assert "0 children accepted, 3 attempts rejected" in out, out
    for d in ("length", "scenario", "skill"):
        assert f"{d}: 0 accepted, 1 rejected (proposal invalid 1)" in out, out
    assert "no child accepted: every attempt was rejected" in out
    shown = evokit("lineage", "show", str(tmp_path / "s2"), "--rejections", env_columns=300)
    rows = [line for line in shown.stdout.splitlines() if "proposal invalid" in line]
    assert shown.returncode == 0 and len(rows) == 3, shown.stdout
    assert all("L000-" in r and "proposer:" in r for r in rows), rows


def test_evolve_records_the_hack_gate_and_no_hack_gate_keeps_its_own_store(tmp_path, evokit_seeds, capsys):
    """`evokit evolve` (procedural, one seed, one generation) runs the hack gate on every child it
    verifies and records it (``hack_gate`` rows, counted by ``hack_rates``); `--no-hack-gate` records
    none, and its store refuses to be continued with the gate on (a store keeps its verifiers)."""
    from evokit.lineage import LineageStore

    base = ["evolve", "--seeds", str(evokit_seeds), "--limit", "1", "--generations", "1", "--workers", "1"]
    assert cli.main([*base, "--out", str(tmp_path / "gated")]) == 0
    gated = LineageStore(tmp_path / "gated")
    children = [r for r in gated.records() if r["kind"] == "env" and r["generation"] > 0]
    assert children and all(r.get("hack_gate") for r in children)
    assert sum(row["checked"] for row in gated.hack_rates()) >= len(children)
    assert cli.main([*base, "--out", str(tmp_path / "open"), "--no-hack-gate"]) == 0
    assert not [r for r in LineageStore(tmp_path / "open").records() if r.get("hack_gate")]
    capsys.readouterr()
    assert cli.main([*base, "--out", str(tmp_path / "open")]) == 2
    assert "other parameters" in capsys.readouterr().err


def test_lineage_show_groups_rows_by_lineage_in_generation_order(tmp_path, evokit_seeds):
    """Two lineages evolved side by side write their records interleaved; `lineage show` lists each
    lineage's environments together, generation by generation (and --lineage only that one)."""
    store = tmp_path / "store"
    assert cli.main(["evolve", "--seeds", str(evokit_seeds), "--out", str(store), "--generations", "2",
                     "--workers", "2", "--no-hack-gate"]) == 0
    from evokit.lineage import LineageStore

    written = [e.lineage for e in LineageStore(store).envs()]
    shown = evokit("lineage", "show", str(store), env_columns=300)
    rows = [line.split("│")[1:3] for line in shown.stdout.splitlines() if line.count("│") > 5]
    rows = [(lid.strip(), int(g)) for lid, g in rows if g.strip().isdigit()]
    assert len(rows) == len(written) and len(set(written)) == 2, shown.stdout
    assert rows == sorted(rows), shown.stdout  # grouped by lineage, generations ascending
    one = evokit("lineage", "show", str(store), "--lineage", rows[-1][0], env_columns=300)
    assert rows[0][0] not in one.stdout and one.stdout.count(rows[-1][0]) >= 2, one.stdout


def _command_paths() -> list[list[str]]:
    """Every command path of the CLI, groups included (the root is [])."""
    import typer

    paths, todo = [], [([], typer.main.get_command(cli.app))]
    while todo:
        path, cmd = todo.pop()
        paths.append(path)
        todo += [([*path, name], sub) for name, sub in getattr(cmd, "commands", {}).items()]
    return sorted(paths)


def test_every_help_shows_an_example_of_its_own_command(capsys, monkeypatch):
    """Each --help carries an `Example: evokit <that command> ...` line; rich markup keeps the literal
    [metadata.evokit] in extract's help (unescaped, rich would eat the brackets)."""
    monkeypatch.setenv("COLUMNS", "250")  # one line per paragraph: nothing is wrapped away
    paths = _command_paths()
    assert ["import-tb1"] in paths and ["lineage", "show"] in paths and len(paths) > 15
    for path in paths:
        assert cli.main([*path, "--help"]) == 0, path
        text = capsys.readouterr().out
        examples = [line.strip() for line in text.splitlines() if "Example:" in line]
        assert examples and examples[0].startswith(" ".join(["Example: evokit", *path])), (path, examples)
        if path == ["extract"]:
            assert text.count("[metadata.evokit]") == 2, text  # the description and --write


def test_version(capsys):
    from evokit import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"evokit {__version__}\n"


def test_import_tb1_and_verify_points_at_it(tmp_path):
    """A Terminal-Bench 1 task given to `evokit verify` gets a pointer to `evokit import-tb1` (exit 2);
    import-tb1 converts one task, or a folder of them, into Harbor tasks that load."""
    from tb1_support import tb1_task

    from evokit.tasks import load_task

    one = tb1_task(tmp_path / "tb1", compose=False)
    tb1_task(tmp_path / "tb1", compose=True, name="count-again")
    for src, says in [(one, "looks like a Terminal-Bench 1 task"),
                      (tmp_path / "tb1", "2 Terminal-Bench 1 task(s)")]:
        out = evokit("verify", str(src))
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert says in out.stderr and f"evokit import-tb1 {src} DEST" in out.stderr, out.stderr

    out = evokit("import-tb1", str(one), str(tmp_path / "single"))
    assert out.returncode == 0, out.stderr
    assert load_task(tmp_path / "single").instruction.startswith("Count the lines")
    out = evokit("import-tb1", str(tmp_path / "tb1"), str(tmp_path / "dataset"))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "dataset").iterdir()) == ["count-again", "count-lines"]
    assert "2 task(s) imported; next: evokit verify" in out.stdout
    for t in (tmp_path / "dataset").iterdir():
        load_task(t)

    again = evokit("import-tb1", str(tmp_path / "tb1"), str(tmp_path / "dataset"))  # both exist now
    assert again.returncode == 2 and "2 of 2 task(s) not imported" in again.stderr, again.stderr
    (one / "run-tests.sh").unlink()
    broken = evokit("import-tb1", str(one), str(tmp_path / "other"))
    assert broken.returncode == 2 and "run-tests.sh: missing" in broken.stderr and "Traceback" not in broken.stderr


ROTATE = {"pair": "other", "other_scenario": "a log rotation shell script over app.log files",
          "other_skill": "fix the rotation order so no rotated log is overwritten", "reads_previous": False}


def test_extract_prints_a_line_per_llm_call_and_stops_at_the_call_budget(tmp_path):
    """`evokit extract --write --max-calls 1` on two foreign tasks: one `llm call` line per request on
    stderr (its number of at most the budget, what, attempt, tokens, seconds); the second task finds the budget spent: one line, exit 4,
    the first task's plan kept. The rerun asks only for the second (the first now reads from metadata)."""
    for src in (ETL, CORPUS / "log-rotate-fix"):
        shutil.copytree(src, tmp_path / "tasks" / src.name)
    etl, rotate = tmp_path / "tasks" / ETL.name, tmp_path / "tasks" / "log-rotate-fix"
    with ScriptedEndpoint([{"steps": [STEP1]}, {"steps": [ROTATE]}]) as ep:
        args = ["extract", str(etl), str(rotate), "--model", "scripted", "--api-base", ep.api_base, "--write",
                "--max-calls", "1"]
        first = evokit(*args)
        assert first.returncode == 4, first.stderr
        assert len(ep.requests) == 1 and read_metadata(etl).plan and read_metadata(rotate) is None
        calls = [line for line in first.stderr.splitlines() if line.startswith("llm call")]
        assert len(calls) == 1 and calls[0].startswith("llm call 1 of ≤ 1: "), first.stderr  # the budget bounds it
        assert f"plan extraction for {etl}, attempt 1: " in calls[0], first.stderr
        assert " tokens, " in calls[0] and calls[0].endswith(" s"), calls
        said = [line for line in first.stderr.splitlines() if line.startswith("evokit:")]
        assert len(said) == 1 and said[0].startswith("evokit: stopped: LLM call budget spent"), first.stderr
        assert "--max-calls" in said[0] and "Traceback" not in first.stderr

        again = evokit(*args)
    assert again.returncode == 0, again.stderr
    assert len(ep.requests) == 2 and read_metadata(rotate).plan
    assert [json.loads(line)["source"] for line in again.stdout.splitlines()] == ["metadata", "llm"]


def test_evolve_stops_at_the_call_budget_and_a_rerun_continues(tmp_path, evokit_seeds, capsys):
    """`evokit evolve --backend llm --max-calls 2`: the proposer's third attempt finds the budget spent;
    the run stops with one line (exit 4) and its store holds the seed; the rerun without a budget goes
    on from there to the same end a run without a stop reaches (the seed once, reasons on record). Each
    call line counts the calls against a ceiling (the budget, else the harness's bound) with an ETA."""
    base = ["evolve", "--seeds", str(evokit_seeds), "--limit", "1", "--out", str(tmp_path / "store"),
            "--backend", "llm", "--model", "m", "--generations", "1", "--workers", "1"]
    with ScriptedEndpoint(["this is not JSON at all"] * 100) as ep:
        assert cli.main([*base, "--api-base", ep.api_base, "--max-calls", "2"]) == 4
        err = capsys.readouterr().err.replace("\r", "\n")  # the progress bar redraws with \r
        assert len(ep.requests) == 2
        lines = [line for line in err.splitlines() if line.startswith("llm call")]
        calls = [line.split(": ")[1] for line in lines]
        direction = calls[0].split()[0]
        assert calls == [f"{direction} edit, attempt 1", f"{direction} edit, attempt 2"], err
        assert lines[0].startswith("llm call 1 of ≤ 2: ") and " left at " in lines[0], lines  # an ETA
        assert lines[1].startswith("llm call 2 of ≤ 2: ") and " left at " not in lines[1], lines
        said = [line for line in err.splitlines() if line.startswith("evokit:")]
        assert len(said) == 1 and said[0].startswith("evokit: stopped: LLM call budget spent"), err
        assert str(tmp_path / "store") in said[0]
        assert [r["kind"] for r in LineageStore(tmp_path / "store").records()].count("env") == 1

        assert cli.main([*base, "--api-base", ep.api_base]) == 3  # it ends: every reply invalid, no child
        err = capsys.readouterr().err.replace("\r", "\n")
        # Without a budget the ceiling is the harness's: 3 directions × (3 review rounds × (proposal +
        # review) + 3 modifications) × 3 asks each, plus 3 asks of plan extraction.
        assert [line for line in err.splitlines() if line.startswith("llm call 1 of ≤ 84: ")], err
    records = list(LineageStore(tmp_path / "store").records())
    assert [r["kind"] for r in records].count("env") == 1
    assert [r["reason"] for r in records if r["kind"] == "end"] == ["every direction failed (see the reject records)"]


def test_evolve_reasks_and_max_tokens_bound_a_quick_plumbing_run(tmp_path, evokit_seeds, capsys):
    """`--direction length --reasks 0 --max-tokens 64`: each role asks once, so a model that never
    answers with JSON costs 3 proposal requests (the review rounds) and the ceiling is 10 (3 rounds of
    proposal and review, 3 modifications, 1 extraction); every request asks for at most 64 tokens."""
    with ScriptedEndpoint(["this is not JSON at all"] * 100) as ep:
        code = cli.main(["evolve", "--seeds", str(evokit_seeds), "--limit", "1", "--out", str(tmp_path / "s"),
                         "--backend", "llm", "--model", "m", "--api-base", ep.api_base, "--generations", "1",
                         "--workers", "1", "--direction", "length", "--reasks", "0", "--max-tokens", "64"])
        err = capsys.readouterr().err.replace("\r", "\n")
    assert code == 3 and len(ep.requests) == 3, err
    assert all(r["max_tokens"] == 64 for r in ep.requests)
    lines = [line for line in err.splitlines() if line.startswith("llm call")]
    assert [line.split(":")[0] for line in lines] == [f"llm call {i} of ≤ 10" for i in (1, 2, 3)], err


def test_extract_warns_when_the_model_plan_does_not_fit_the_task(tmp_path):
    """A model that answers a log-rotation task with a FASTA plan and a JSON-events plan: both pass the
    reply's validation (catalog pair, free text), neither names data the task has; `evokit extract
    --write` says so on stderr and records neither. A plan that does fit is recorded, grounding 1."""
    task = tmp_path / "log-rotate-fix"
    shutil.copytree(CORPUS / "log-rotate-fix", task)
    fasta = {"pair": "fasta/fasta-stats", "other_scenario": "none", "other_skill": "none", "reads_previous": False}
    with ScriptedEndpoint([{"steps": [fasta]}, {"steps": [STEP1]}, {"steps": [ROTATE]}]) as ep:
        for wrong in ("fasta/fasta-stats", STEP1["other_scenario"]):
            out = evokit("extract", str(task), "--model", "m", "--api-base", ep.api_base, "--write")
            assert out.returncode == 0, out.stderr
            warned = [line for line in out.stderr.splitlines() if line.startswith("evokit: warning:")]
            assert len(warned) == 1 and "the model's plan does not fit this task" in warned[0], out.stderr
            assert wrong in warned[0] and "not recorded" in warned[0], warned
            row = json.loads(out.stdout)
            assert row["grounding"] == 0 and not row["recorded"] and read_metadata(task) is None
        out = evokit("extract", str(task), "--model", "m", "--api-base", ep.api_base, "--write")
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["grounding"] == 1 and read_metadata(task).plan
