"""Rollouts as SFT data (evokit.traces): Harbor's conversation format, ATIF trajectories checked by Harbor's
own pydantic models (harbor.models.trajectories), filtering, errors.

The end-to-end path (real rollouts over an HTTP endpoint, then `evokit export-traces`) is in
tests/test_cli.py; here the conversion of both of the agent's action formats is checked exactly.
"""

from __future__ import annotations

import json

import pytest
from harbor.models.trajectories import Trajectory

from evokit.traces import TraceRowError, atif_trajectory, conversation, trace_row, traces_from_rows


def test_tool_calls_follow_harbors_format():
    """System and tool turns become user turns; a tool call is appended as <tool_call>{name, arguments}."""
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Count the lines."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "wc -l f"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "[exit code 0]\n3 f"},
        {"role": "assistant", "content": "There are 3 lines."},
    ]
    conv = conversation(messages)
    assert [m["role"] for m in conv] == ["user", "user", "assistant", "user", "assistant"]
    assert conv[2]["content"] == '<tool_call>\n{"name": "bash", "arguments": {"command": "wc -l f"}}\n</tool_call>'
    assert conv[3]["content"] == "[exit code 0]\n3 f"


def test_rows_without_chat_or_masked_are_left_out(tmp_path):
    chat = [{"role": "user", "content": "x"}, {"role": "assistant", "content": '{"done": true}'}]
    rows = [
        {"task": "t", "index": 0, "reward": 1.0, "info": {"messages": chat, "policy": "llm:m"}},
        {"task": "t", "index": 1, "reward": 0.0, "info": {"messages": chat}},
        {"task": "t", "index": 2, "reward": None, "masked": True, "info": {"messages": chat}},
        {"task": "t", "index": 3, "reward": 1.0, "info": {}},  # the oracle: no chat kept
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert traces_from_rows([src], tmp_path / "all.jsonl") == (2, 2)
    assert traces_from_rows([src], tmp_path / "good.jsonl", min_reward=1.0) == (1, 3)
    (row,) = [json.loads(x) for x in (tmp_path / "good.jsonl").read_text().splitlines()]
    assert row["agent"] == "llm:m" and row["model"] == "m" and row["episode"] == "episode-0"
    assert trace_row(rows[3]) is None


def test_a_bad_row_names_file_and_line(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text('{"task": "t", "info": {"messages": [{"role": "wizard", "content": "?"}]}}\n')
    with pytest.raises(TraceRowError, match=r"rows.jsonl:1: unknown chat role 'wizard'"):
        traces_from_rows([src], tmp_path / "out.jsonl")


TOOL_CHAT = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Count the lines."},
    {"role": "assistant", "content": "Counting.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "wc -l f"}'}},
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "[exit code 0]\n3 f"},
    {"role": "tool", "tool_call_id": "c9", "content": "a result for a call nobody made"},
    {"role": "assistant", "content": "There are 3 lines."},
]


def test_atif_trajectory_is_valid_for_harbor_and_links_tool_results():
    """Tool results become the calling step's observation, linked by id where the call exists (Harbor
    rejects a dangling link); arguments that are not JSON are kept as {"raw": ...}."""
    row = {"task": "t", "index": 1, "step": 3, "reward": 1.0, "rewards": {"reward": 1.0},
           "info": {"messages": TOOL_CHAT, "policy": "llm:m", "prompt_tokens": 120, "completion_tokens": 30}}
    traj = Trajectory.model_validate(atif_trajectory(row, run_id="r"))
    assert [s.source for s in traj.steps] == ["system", "user", "agent", "agent"]
    call = traj.steps[2]
    assert [c.arguments for c in call.tool_calls] == [{"command": "wc -l f"}, {"raw": "not json"}]
    assert [(r.source_call_id, r.content) for r in call.observation.results] == [
        ("c1", "[exit code 0]\n3 f"), (None, "a result for a call nobody made")]
    assert traj.steps[3].observation is None and traj.steps[3].model_name == "m"
    assert traj.final_metrics.total_prompt_tokens == 120 and traj.final_metrics.total_steps == 4
    assert traj.extra["result"] == 1.0 and traj.extra["trial_name"] == "t__r__3_1" and traj.agent.name == "llm:m"
    assert atif_trajectory({**row, "masked": True}) is None and atif_trajectory({**row, "info": {}}) is None


def test_atif_export_writes_one_valid_trajectory_a_line(tmp_path):
    json_chat = [{"role": "user", "content": "x"}, {"role": "assistant", "content": '{"command": "ls"}'},
                 {"role": "user", "content": "[exit code 0]\nf"}, {"role": "assistant", "content": '{"done": true}'}]
    rows = [{"task": "t", "index": 0, "reward": 1.0, "info": {"messages": TOOL_CHAT}},
            {"task": "t", "index": 1, "reward": 0.0, "info": {"messages": json_chat}},
            {"task": "t", "index": 2, "reward": 1.0, "info": {}}]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert traces_from_rows([src], tmp_path / "atif.jsonl", format="atif") == (2, 1)
    lines = (tmp_path / "atif.jsonl").read_text().splitlines()
    trajs = [Trajectory.model_validate_json(line) for line in lines]
    assert all("null" not in line for line in lines)  # absent, not null, as Harbor writes them
    assert [s.source for s in trajs[1].steps] == ["user", "agent", "agent"]
    assert trajs[1].steps[1].observation.results[0].content == "[exit code 0]\nf"
    with pytest.raises(ValueError, match="unknown trace format 'csv'"):
        traces_from_rows([src], tmp_path / "x.jsonl", format="csv")
