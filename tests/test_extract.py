"""Plan extraction: exact for evokit tasks, through a real local LLM endpoint for foreign tasks.

The endpoint is llama.cpp's OpenAI-compatible server running SmolLM2-135M (a real model shipped
on PyPI). A 135M model maps tasks badly; these tests check the contract (valid catalog pairs or
described 'other' steps, retries with the validation error, clear failures, usage counts), not
the model's judgement.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokit.extract import MAX_STEPS, extract, plan_of, reply_schema, validate_reply
from evokit.llm import LLMClient, LLMError, LLMReplyError, parse_json
from evokit.local_llm import LocalServer, default_threads
from evokit.plan import Plan, PlanError, Step, render

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(log=tmp_path_factory.mktemp("llm") / "server.log") as srv:
        yield srv


def test_exact_plan_of_an_evokit_task(tmp_path):
    """A rendered task's plan comes back exactly (with the parameters render chose) and needs no LLM."""
    plan = Plan((Step("access-log", "topk-count"), Step("text-list", "count-records", input=1)))
    task = render(plan, 3, tmp_path / "t")
    got = plan_of(task)
    assert [(s.scenario, s.skill, s.input) for s in got.steps] == [(s.scenario, s.skill, s.input) for s in plan.steps]
    assert dict(got.steps[0].params)["k"] in (3, 4, 5)
    assert extract(task) == got


def test_foreign_task_needs_a_client():
    """Without an LLM client a foreign task's plan cannot be guessed: a clear error says what to pass."""
    with pytest.raises(PlanError, match="not an evokit task.*--model"):
        extract(ROOT / "examples" / "tasks" / "sqlite-report")


def test_foreign_task_through_a_real_endpoint(server):
    """A hand-written (foreign) task gets a valid plan from the local model; usage is counted."""
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=200, timeout=900)
    plan = extract(ROOT / "examples" / "tasks" / "sqlite-report", client, retries=4)
    assert 1 <= len(plan) <= 8
    for st in plan.steps:
        assert (st.scenario.startswith("other:") and st.skill.startswith("other:")) or ":" not in st.scenario
    assert client.usage.calls >= 1 and client.usage.completion_tokens > 0


def test_garbage_reply_is_rejected_with_reasons(server):
    """A reply cut to a few tokens is not JSON: every attempt's reason is reported and counted."""
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=8)
    with pytest.raises(LLMReplyError, match=r"no valid reply after 2 attempt\(s\).*attempt 1") as err:
        client.chat_json([{"role": "user", "content": "List three colours as JSON."}], validate_reply,
                         what="test", retries=1)
    assert len(err.value.errors) == 2 and client.usage.invalid_replies == 2


def test_endpoint_down_is_a_clear_error():
    """A dead endpoint raises LLMError naming it (not a raw HTTP traceback)."""
    client = LLMClient(model="x", api_base="http://127.0.0.1:9/v1", timeout=3)
    with pytest.raises(LLMError, match="127.0.0.1:9"):
        client.chat([{"role": "user", "content": "hi"}])
    assert client.usage.failed_calls == 1


@pytest.mark.parametrize(("reply", "message"), [
    ({}, "steps"),
    ({"steps": [{"pair": "access-log/nope"}]}, "not a catalog pair"),
    ({"steps": [{"pair": "access-log/topk-count", "reads_previous": True}]}, "step 1: reads_previous"),
    ({"steps": [{"pair": "other"}]}, "needs other_scenario"),
    ({"steps": [{"pair": "other", "other_scenario": "none", "other_skill": "x y"}]}, "not 'none'"),
])
def test_validation_names_the_step(reply, message):
    """Each invalid reply is rejected with a reason naming the step (this text goes back to the model)."""
    with pytest.raises(ValueError, match=message):
        validate_reply(reply)


def test_long_plans_are_rejected_not_truncated():
    """A reply longer than max_steps is sent back with its length (never silently cut); the bound is a
    parameter, and the grammar for constrained decoding follows it."""
    step = {"pair": "access-log/topk-count", "other_scenario": "none", "other_skill": "none", "reads_previous": False}
    with pytest.raises(ValueError, match=rf"the plan has {MAX_STEPS + 1} steps; at most {MAX_STEPS} steps"):
        validate_reply({"steps": [step] * (MAX_STEPS + 1)})
    assert len(validate_reply({"steps": [step] * (MAX_STEPS + 1)}, max_steps=MAX_STEPS + 1)) == MAX_STEPS + 1
    assert len(validate_reply({"steps": [step] * MAX_STEPS})) == MAX_STEPS
    assert reply_schema(["access-log/topk-count"], 11)["properties"]["steps"]["maxItems"] == 11


def test_too_long_extraction_goes_back_to_the_model(tmp_path):
    """extract() feeds the length error back; the shorter retry is accepted (scripted replies)."""
    step = {"pair": "other", "other_scenario": "a report", "other_skill": "write it", "reads_previous": False}
    client = LLMClient(model="scripted", api_base="http://127.0.0.1:9/v1")
    replies, sent = [{"steps": [step] * 4}, {"steps": [step] * 2}], []

    def chat(messages, **kw):
        sent.append(messages)
        return json.dumps(replies.pop(0))

    client.chat = chat
    plan = extract(ROOT / "examples" / "tasks" / "sqlite-report", client, max_steps=3)
    assert len(plan) == 2
    assert "the plan has 4 steps; at most 3 steps" in sent[1][-1]["content"]
    assert "(1 to 3)" in sent[0][1]["content"]  # the prompt states the bound


def test_local_server_threads():
    """n_threads reaches llama.cpp's server (generation and batch); the default leaves a core free."""
    srv = LocalServer(n_threads=3)
    cmd = srv.command()
    assert cmd[cmd.index("--n_threads") + 1] == "3" and cmd[cmd.index("--n_threads_batch") + 1] == "3"
    assert LocalServer().n_threads == default_threads() >= 1
    with pytest.raises(ValueError, match="n_threads"):
        LocalServer(n_threads=0)


def test_same_seed_same_reply(server):
    """llama.cpp honours the request's seed: the same question sampled hot with one seed gives one
    answer (a resumed run asks again with the same seed)."""
    client = LLMClient(model=server.model_name, api_base=server.api_base, max_tokens=24, temperature=1.0,
                       timeout=600)
    ask = [{"role": "user", "content": "Name three unusual Unix commands."}]
    assert client.chat(ask, seed=11) == client.chat(ask, seed=11)
    assert client.usage.calls == 2


def test_parse_json_accepts_fences_and_rejects_prose():
    """JSON in a fenced block is found; prose is a clear error."""
    assert parse_json('Sure!\n```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ValueError, match="not JSON"):
        parse_json("I cannot do that.")


@pytest.mark.parametrize("task, scenario, grounded", [
    ("log-rotate-fix", "other:a log rotation shell script over app.log files", True),
    ("log-rotate-fix", "access-log", True),  # a log task: the access-log scenario names data it has
    ("log-rotate-fix", "fasta", False),
    ("log-rotate-fix", "other:JSON Lines event files with a country lookup table", False),  # only json occurs
    ("jsonl-etl-pipeline", "other:JSON Lines event files with a country lookup table", True),
    ("sqlite-migrations", "sqlite-db", True),
    ("sqlite-migrations", "crontab", False),
])
def test_grounding_tells_a_plan_about_the_task_from_one_about_other_data(task, scenario, grounded):
    """The grounding of one-step plans against the Terminal-Bench-2-style corpus: a step is grounded when
    at least half its scenario words occur in the task folder (the corpus tasks were written by hand, so
    the cases are not tuned to the word lists)."""
    from evokit.extract import grounding

    g = grounding(Plan((Step(scenario, "other:x" if scenario.startswith("other:") else "count-records"),)),
                  ROOT / "tests" / "data" / "tb2_style" / task)
    assert g.fits is grounded and (g.ungrounded == ()) is grounded, g
