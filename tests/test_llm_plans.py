"""Plans in the LLM roles' prompts and replies (evokit.evolve.llm_plans), no server.

Each validator rejects each malformed reply with a reason naming the problem (this text goes back
to the model); a valid reply becomes an Edit lined up with its parent; skill and scenario edits
are offered only their options.
"""

from __future__ import annotations

import pytest
from llm_support import KEPT, PARENT, SEED, item  # noqa: E402

from evokit.evolve.llm_plans import align, options, parse_steps, proposal_validator, validate_review
from evokit.plan import Step


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
