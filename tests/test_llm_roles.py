"""The LLM roles of the evolution harness (evokit.evolve.llm_roles): retries, seeds, and a live run.

(a) Scripted replies (a client whose ``chat`` returns fixed text) check the retry-with-reason loop,
the reviewer's order of checks and the per-call seeds without a server; (b) a whole generation
runs against a real local model (llama.cpp serving SmolLM2-135M). A 135M model mostly fails: the
live tests check that the run completes, that failures become rejections with reasons and that
usage is counted, never that the model is smart. The validators are tested in
``test_llm_plans.py``, the modifier's file handling in ``test_residual.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evokit.evolve import EvolveConfig, evolve
from evokit.evolve.edits import Edit
from evokit.evolve.harness import role_seed
from evokit.evolve.llm_roles import LLMModifier, LLMProposer, LLMReviewer, llm_backend
from evokit.lineage import LineageStore
from evokit.llm import LLMClient, LLMReplyError
from evokit.local_llm import LocalServer
from evokit.plan import Plan, Step, render
from evokit.seeding import call_seed
from evokit.seeds import make_seeds
from evokit.tasks import Lineage, load_task, read_metadata

ROOT = Path(__file__).resolve().parents[1]
PIPES = ROOT / "examples" / "tasks" / "pipes-top-ips"
from llm_support import KEPT, PARENT, SEED, item  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(n_ctx=8192, log=tmp_path_factory.mktemp("llm") / "server.log") as srv:
        yield srv


def scripted(replies: list) -> LLMClient:
    """A client whose ``chat`` returns the given replies in turn (the real chat_json loop runs on them);
    ``sent`` holds each call's messages, ``seeds`` each call's seed."""
    client = LLMClient(model="scripted", api_base="http://127.0.0.1:9/v1")
    client.sent, client.seeds = [], []

    def chat(messages, seed=None, **kw):
        client.sent.append(messages)
        client.seeds.append(seed)
        client._count(None)
        reply = replies.pop(0)
        return reply if isinstance(reply, str) else json.dumps(reply)

    client.chat = chat
    return client


# ------------------------------------------------------------------ (a) scripted replies, no server
def test_reply_error_is_a_value_error():
    """The harness turns ValueError from propose/modify into a rejection; LLMReplyError must be one."""
    assert issubclass(LLMReplyError, ValueError)


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


def _seeded_run(tmp_path: Path, name: str, run_seed: int) -> tuple[LineageStore, LLMClient]:
    """One LLM generation whose replies never validate (every direction is rejected), on a rendered seed."""
    seed_dir = tmp_path / "seeds" / "seed-0000"
    if not seed_dir.exists():
        render(PARENT, SEED, seed_dir)
    client = scripted(["not json"] * 12)  # 3 directions × 2 rounds × 2 attempts
    store = evolve([seed_dir], LineageStore(tmp_path / name),
                   EvolveConfig(generations=1, review_rounds=2, repair_budget=0, seed=run_seed),
                   backend=llm_backend(client, retries=1), workers=1, progress=False)
    return store, client


def test_llm_calls_are_seeded_by_run_lineage_generation_and_round(tmp_path):
    """Each call's seed follows from (run seed, lineage, generation, direction, role, round, retry) and
    the direction's llm_seed is recorded: a second (or resumed) run asks the same questions with the
    same seeds; another run seed changes them."""
    store, client = _seeded_run(tmp_path, "a", 0)
    rejects = [r for r in store.records() if r["kind"] == "reject"]
    assert len(rejects) == 3 and len(client.seeds) == 12
    expected = []
    for r in rejects:  # directions in the order the harness tried them
        assert r["llm_seed"] == call_seed(0, r["lineage"], 1, r["direction"])
        for rnd in range(2):
            first = role_seed(r["llm_seed"], "propose", rnd)
            expected += [first, call_seed(first, "retry", 1)]
    assert client.seeds == expected
    _, client2 = _seeded_run(tmp_path, "b", 0)
    assert client2.seeds == client.seeds and [m[1]["content"] for m in client2.sent] == \
        [m[1]["content"] for m in client.sent]
    _, other = _seeded_run(tmp_path, "c", 1)
    assert not set(other.seeds) & set(client.seeds)


# ------------------------------------------------------------------ (b) against the live model
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
    reject record with reasons and the direction's llm_seed, and the client's usage counts the calls
    and the invalid replies.

    One direction only (length: the one whose proposals a 135M model most often gets through to the
    reviewer and the modifier, so all three roles meet the server); falling back over directions is
    the harness's, tested procedurally in test_evolve.py. Each new prompt costs the server most (its
    prompt cache makes retries cheap): three directions took ~3 min on a loaded 2-core machine, one ~1.
    """
    seeds = make_seeds(1, 0, tmp_path / "seeds", progress=False)
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=200,
                       timeout=600)  # generous: on a loaded machine calls are slow
    store = evolve([tmp_path / "seeds" / seeds[0]["name"]], LineageStore(tmp_path / "store"),
                   EvolveConfig(generations=1, direction="length", review_rounds=1, repair_budget=0),
                   backend=llm_backend(client, retries=1, file_chars=600, total_chars=1500),
                   workers=1, progress=False)
    records = list(store.records())
    rejects = [r for r in records if r["kind"] == "reject"]
    children = [r for r in records if r["kind"] == "env" and r["generation"] == 1]
    assert len(rejects + children) == 1  # the one direction was tried once: rejected, or a child
    assert all(r["reasons"] and all(isinstance(x, str) and x for x in r["reasons"]) for r in rejects)
    assert all(r["direction"] == "length" and isinstance(r["llm_seed"], int) for r in rejects + children)
    assert children or any(r["kind"] == "end" for r in records)  # the generation either grew or ended
    assert client.usage.calls >= 1 and client.usage.prompt_tokens > 0 and client.usage.failed_calls == 0
    spent = [int(n) for r in rejects for x in r["reasons"] for n in re.findall(r"no valid reply after (\d+) attempt", x)]
    assert client.usage.invalid_replies >= sum(spent)
