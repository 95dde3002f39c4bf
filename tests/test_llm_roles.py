"""The LLM backend of the evolution harness: validators, the modifier's file handling, and a live run.

(a) each validator rejects each malformed reply with a reason naming the problem (this text goes
back to the model); (b) the modifier's paths are confined to the task and a valid residual applied
to a copy of a hand-written task gives a folder Harbor loads; (c) a whole generation runs against a
real local model (llama.cpp serving SmolLM2-135M). A 135M model mostly fails: the live tests check
that the run completes, that failures become rejections with reasons and that usage is counted,
never that the model is smart. Scripted replies (a client whose ``chat`` returns fixed text) check
the retry-with-reason loop without a server.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
from pathlib import Path

import pytest

from evokit.evolve import EvolveConfig, evolve
from evokit.evolve.edits import Edit
from evokit.evolve.llm_roles import (
    LLMModifier,
    LLMProposer,
    LLMReviewer,
    Residual,
    align,
    apply_residual,
    check_path,
    llm_backend,
    options,
    parse_steps,
    proposal_validator,
    require_changes,
    validate_residual,
    validate_review,
)
from evokit.lineage import LineageStore
from evokit.llm import LLMClient, LLMReplyError
from evokit.local_llm import LocalServer
from evokit.plan import Plan, Step
from evokit.seeds import make_seeds
from evokit.tasks import Lineage, load_task, read_metadata

ROOT = Path(__file__).resolve().parents[1]
PIPES = ROOT / "examples" / "tasks" / "pipes-top-ips"
PARENT = Plan((Step("access-log", "topk-count", (("data", 1),)), Step("text-list", "count-records", (), 1)))
SEED = 3


def item(pair: str, reads: bool = False, **other) -> dict:
    return {"pair": pair, "other_scenario": other.get("s", "none"), "other_skill": other.get("k", "none"),
            "reads_previous": reads}


KEPT = [item("access-log/topk-count"), item("text-list/count-records", True)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(n_ctx=8192, log=tmp_path_factory.mktemp("llm") / "server.log") as srv:
        yield srv


def scripted(replies: list) -> LLMClient:
    """A client whose ``chat`` returns the given replies in turn (the real chat_json loop runs on them)."""
    client = LLMClient(model="scripted", api_base="http://127.0.0.1:9/v1")
    client.sent = []

    def chat(messages, **kw):
        client.sent.append(messages)
        client._count(None)
        reply = replies.pop(0)
        return reply if isinstance(reply, str) else json.dumps(reply)

    client.chat = chat
    return client


# ------------------------------------------------------------------ (a) validators, no server
def test_reply_error_is_a_value_error():
    """The harness turns ValueError from propose/modify into a rejection; LLMReplyError must be one."""
    assert issubclass(LLMReplyError, ValueError)


@pytest.mark.parametrize(("direction", "effort", "steps", "message"), [
    ("length", "high", None, "steps"),
    ("length", "high", [{"pair": 3}], "step 1: expected"),
    ("length", "high", [item("access-log/nope")], "not a catalog pair"),
    ("length", "high", [item("access-log/topk-count", True)], "step 1: reads_previous"),
    ("length", "high", [item("other")], "describe the scenario"),
    ("length", "high", [item("access-log/topk-count")] * 13, "at most 12 steps"),
    ("length", "high", KEPT, "must add steps"),
    ("length", "high", [item("sqlite-db/sql-query"), item("text-list/count-records", True), KEPT[0]],
     "keep every existing step"),
    ("length", "low", [*KEPT, item("sqlite-db/sql-query"), item("passwd-db/filter-rows")], "exactly one step"),
    ("length", "high", [item("sqlite-db/sql-query"), *KEPT, item("passwd-db/filter-rows")], "contiguous span"),
    ("length", "high", [*KEPT, item("text-list/count-records", True)], "cannot be built"),
    ("skill", "high", KEPT, "changes no step"),
    ("skill", "high", [item("auth-log/topk-count"), KEPT[1]], "must keep the scenario"),
    ("scenario", "high", [item("access-log/filter-rows"), KEPT[1]], "must keep the skill"),
    ("scenario", "high", [*KEPT, item("sqlite-db/sql-query")], "keeps the number of steps"),
])
def test_proposal_validator_names_the_problem(direction, effort, steps, message):
    """Malformed or wrong-kind plans are rejected with the reason the proposer will be sent."""
    reply = {"wrong": []} if steps is None else {"steps": steps}
    with pytest.raises(ValueError, match=message):
        proposal_validator(PARENT, direction, effort, seed=SEED)(reply)


def test_proposal_validator_builds_the_edit():
    """A valid reply becomes an Edit: kept steps keep their data and links, new ones get fresh data."""
    edit = proposal_validator(PARENT, "length", "high", seed=SEED)(
        {"steps": [KEPT[0], item("sqlite-db/sql-query"), KEPT[1]]})
    assert edit.changed == (1,)
    assert edit.plan.steps[0] == PARENT.steps[0]
    assert edit.plan.steps[1] == Step("sqlite-db", "sql-query", (("data", 3),))
    assert edit.plan.steps[2].input == 1  # still reads step 1's output after the insert
    skill = proposal_validator(PARENT, "skill", "low", seed=SEED)(
        {"steps": [item("access-log/distinct-values"), KEPT[1]]})
    assert skill.changed == (0,) and dict(skill.plan.steps[0].params) == {"data": 1}
    with pytest.raises(ValueError, match="already proposed"):
        proposal_validator(PARENT, "length", "high", seed=SEED, exclude={edit.plan.to_json()})(
            {"steps": [KEPT[0], item("sqlite-db/sql-query"), KEPT[1]]})


def test_free_text_steps_are_allowed_and_not_rendered():
    """An 'other' step passes the proposer (it cannot be rendered; the LLM modifier writes its files)."""
    edit = proposal_validator(PARENT, "length", "low", seed=SEED)(
        {"steps": [*KEPT, item("other", True, s="a pcap capture", k="tshark display filter")]})
    assert edit.plan.steps[2] == Step("other:a pcap capture", "other:tshark display filter", (), 2)
    assert align(PARENT, parse_steps({"steps": KEPT}), "skill") == PARENT


def test_skill_and_scenario_edits_see_only_their_options():
    """A skill edit is offered the skills of the plan's scenarios (a short prompt, a small grammar)."""
    text, names = options(PARENT, "skill")
    assert "access-log/distinct-values" in names and "other" in names
    assert all(n.split("/")[0] in ("access-log", "text-list") for n in names if n != "other")
    assert "sqlite-db" not in text
    assert all(n.split("/")[1] in ("topk-count", "count-records") for n in options(PARENT, "scenario")[1][:-1])
    assert len(options(PARENT, "length")[1]) > len(names)


@pytest.mark.parametrize(("reply", "message"), [
    ({"accept": "yes"}, "accept"),
    ({"accept": False, "reasons": "bad"}, "list of strings"),
    ({"accept": False, "reasons": []}, "at least one reason"),
    ({"accept": False, "reasons": ["<what is wrong and how to fix it>"]}, "at least one reason"),
])
def test_review_validator_names_the_problem(reply, message):
    """A review reply must say accept true/false, and a rejection must give a reason."""
    with pytest.raises(ValueError, match=message):
        validate_review(reply)
    assert validate_review({"accept": True, "reasons": ["fine"]}) == []
    assert validate_review({"accept": False, "reasons": ["too easy"]}) == ["reviewer: too easy"]


@pytest.mark.parametrize(("files", "message"), [
    ({"/etc/passwd": "x"}, "absolute paths"),
    ({"tests/../../evil.sh": "x"}, r"'\.\.'"),
    ({"task.toml": "x"}, "task.toml cannot be edited"),
    ({"README.md": "x"}, "only instruction.md"),
    ({"tests": "x"}, "only instruction.md"),
    ({"tests/test.sh": None}, "tests/test.sh: cannot be deleted"),
    ({"solution/solve.sh": None}, "solution/solve.sh: cannot be deleted"),
    ({"tests/nothing.txt": None}, "no such file"),
    ({"tests/test.sh": 3}, "must be a string"),
    ({"tests/test.sh": "  "}, "must not be empty"),
    ({"instruction.md": "<full new text>"}, "placeholder"),
    ({"environment/data": "x"}, "is a folder"),
    ({}, "is empty"),
])
def test_residual_validator_confines_paths(files, message):
    """The modifier may only write instruction.md, environment/, tests/ and solution/, and keeps the scripts."""
    with pytest.raises(ValueError, match=message):
        validate_residual({"files": files, "summary": "s"}, existing={"tests/test.sh", "solution/solve.sh"},
                          dirs={"environment/data"})
    with pytest.raises(ValueError, match="expected"):
        validate_residual(["not", "an", "object"])
    assert check_path("./tests//test.sh") == "tests/test.sh"


def test_a_residual_must_change_instruction_tests_and_solution():
    """New steps need a new instruction, new checks and a new reference solution."""
    same = (PIPES / "tests" / "test.sh").read_text()
    with pytest.raises(ValueError, match="tests/, solution/"):
        require_changes(PIPES, Residual({"instruction.md": "new", "tests/test.sh": same}, ""))


# ------------------------------------------------------------------ (b) applying a residual
def test_apply_residual_to_a_hand_written_task(tmp_path):
    """A valid ΔE on a copy of pipes-top-ips gives a task Harbor loads, with evokit metadata; the parent is untouched."""
    parent = tmp_path / "parent"
    shutil.copytree(PIPES, parent)
    before = {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()}
    plan = Plan((Step("access-log", "topk-count"), Step("other:the saved list", "other:count its lines", (), 1)))
    residual = validate_residual({"files": {
        "instruction.md": (parent / "instruction.md").read_text() + "3. Count the lines of /app/top_ips.txt "
                                                                   "into /app/count.txt.\n",
        "tests/check_count.sh": "#!/bin/bash\n[ \"$(cat /app/count.txt)\" = 5 ]\n",
        "tests/expected_hidden.txt": None,
        "solution/solve.sh": (parent / "solution" / "solve.sh").read_text() + "wc -l < /app/top_ips.txt > /app/count.txt\n",
    }, "summary": "count the saved lines"}, existing={"tests/expected_hidden.txt"})
    from evokit.tasks import EvokitMetadata

    meta = EvokitMetadata(plan=plan.to_records(), lineage=Lineage(parent="0" * 64, generation=1, direction="length",
                                                                  effort="low", lineage_id="L0"))
    dest = apply_residual(parent, residual, tmp_path / "child", meta)
    load_task(dest)
    got = read_metadata(dest)
    assert Plan.from_records(got.plan) == plan and got.lineage.generation == 1 and got.content_hash
    assert "Count the lines" in (dest / "instruction.md").read_text()
    assert not (dest / "tests" / "expected_hidden.txt").exists()
    assert (dest / "tests" / "check_count.sh").stat().st_mode & stat.S_IXUSR
    assert (dest / "environment" / "access.log").read_bytes() == (PIPES / "environment" / "access.log").read_bytes()
    assert {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()} == before
    with pytest.raises(FileExistsError):
        apply_residual(parent, residual, dest, meta)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_modifier_retries_with_the_reason_then_writes_the_task(tmp_path):
    """A bad reply's reason goes back to the model; the valid retry is applied and stamped with the edit's plan."""
    shell = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    client = scripted([
        {"files": {"task.toml": "x"}, "summary": ""},
        {"files": {"instruction.md": "Count the log lines into /app/n.txt.\n", "tests/test.sh": shell,
                   "solution/solve.sh": "#!/bin/bash\nwc -l < /app/access.log > /app/n.txt\n"}, "summary": "count"},
    ])
    parent = Plan((Step("access-log", "topk-count"),))
    edit = Edit(Plan((Step("access-log", "count-records"),)), "skill", "low", (0,))
    lineage = Lineage(parent="1" * 64, generation=1, direction="skill", effort="low", lineage_id="L0")
    dest = LLMModifier(client).modify(PIPES, parent, edit, tmp_path / "child", seed=7, lineage=lineage)
    assert "task.toml cannot be edited" in client.sent[1][-1]["content"]
    assert client.usage.calls == 2 and client.usage.invalid_replies == 1
    meta = read_metadata(dest)
    assert meta.plan == edit.plan.to_records() and meta.seed == 7 and meta.lineage == lineage
    assert meta.difficulty["length"] == 1.0


def test_proposer_retries_with_the_reason():
    """A copied (unchanged) plan is sent back with 'changes no step'; the corrected reply is the edit."""
    client = scripted([{"steps": KEPT}, {"steps": [item("access-log/distinct-values"), KEPT[1]]}])
    edit = LLMProposer(client).propose(PARENT, "skill", "low", seed=SEED)
    assert edit.changed == (0,) and edit.plan.steps[0].skill == "distinct-values"
    assert "changes no step" in client.sent[1][-1]["content"]
    assert client.usage.invalid_replies == 1


def test_reviewer_runs_the_procedural_rubric_first():
    """A plan the procedural rubric rejects never reaches the LLM (a dead endpoint is never called)."""
    client = LLMClient(model="x", api_base="http://127.0.0.1:9/v1", timeout=3)
    reviewer = LLMReviewer(client)
    child = Plan((Step("access-log", "topk-count", (("data", 1),)),))
    assert any(r.startswith("direction:") for r in reviewer.review(PARENT, child, "length", "high", seed=SEED))
    assert client.usage.calls == 0


def test_reviewer_skips_render_and_dt_for_free_text_steps_and_rejects_on_bad_replies():
    """With an 'other' step only direction/effort/novel are checked, and the prompt says so; a reply
    that never validates becomes a rejection with its reason."""
    child = Plan((*PARENT.steps, Step("other:a pcap capture", "other:tshark filter", (), 2)))
    client = scripted([{"accept": True, "reasons": []}])
    assert LLMReviewer(client).review(PARENT, child, "length", "low", seed=SEED) == []
    assert "Not checked" in client.sent[0][-1]["content"] and "D_T" in client.sent[0][-1]["content"]
    client = scripted(["nonsense", {"accept": False, "reasons": []}])
    reasons = LLMReviewer(client, retries=1).review(PARENT, child, "length", "low", seed=SEED)
    assert len(reasons) == 1 and "no valid reply after 2 attempt(s)" in reasons[0]
    assert client.usage.invalid_replies == 2
    assert LLMReviewer(scripted([])).review(PARENT, child, "length", "low", seed=SEED,
                                            seen={child.to_json()}) == ["novel: this plan is already in the lineage"]


# ------------------------------------------------------------------ (c) against the live model
def test_modifier_against_the_live_model(server, tmp_path):
    """The live model's residual for pipes-top-ips is applied (a folder Harbor loads) or rejected with reasons."""
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=200,
                       timeout=600)  # generous: on a loaded machine calls are slow
    parent = Plan((Step("access-log", "topk-count"),))
    edit = Edit(Plan((*parent.steps, Step("text-list", "count-records", (), 1))), "length", "low", (1,))
    try:
        dest = LLMModifier(client, retries=1, file_chars=600, total_chars=1500).modify(
            PIPES, parent, edit, tmp_path / "child", seed=0)
    except LLMReplyError as e:  # every reply failed validation: each attempt's reason, each counted
        assert "attempt 1:" in str(e) and client.usage.invalid_replies == len(e.errors) == 2
    else:
        load_task(dest)
        assert read_metadata(dest).plan == edit.plan.to_records()
    assert client.usage.calls >= 1 and client.usage.prompt_tokens > 0


def test_one_generation_end_to_end(server, tmp_path):
    """evolve() with the LLM backend runs to completion on a procedural seed: every failure is a
    reject record with reasons, and the client's usage counts the calls and the invalid replies."""
    seeds = make_seeds(1, 0, tmp_path / "seeds", progress=False)
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=200,
                       timeout=600)  # generous: on a loaded machine calls are slow
    store = evolve([tmp_path / "seeds" / seeds[0]["name"]], LineageStore(tmp_path / "store"),
                   EvolveConfig(generations=1, review_rounds=1, repair_budget=0),
                   backend=llm_backend(client, retries=1, file_chars=600, total_chars=1500),
                   workers=1, progress=False)
    records = list(store.records())
    rejects = [r for r in records if r["kind"] == "reject"]
    children = [r for r in records if r["kind"] == "env" and r["generation"] == 1]
    assert rejects, "a 135M model is expected to fail at least one direction"
    assert all(r["reasons"] and all(isinstance(x, str) and x for x in r["reasons"]) for r in rejects)
    assert children or any(r["kind"] == "end" for r in records)  # the generation either grew or ended
    assert client.usage.calls >= 3 and client.usage.invalid_replies >= 1
    spent = [int(n) for r in rejects for x in r["reasons"] for n in re.findall(r"no valid reply after (\d+) attempt", x)]
    assert client.usage.invalid_replies >= sum(spent)
    assert client.usage.prompt_tokens > 0 and client.usage.failed_calls == 0
