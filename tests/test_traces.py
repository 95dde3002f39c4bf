"""Rollouts as SFT data (evokit.traces): Harbor's conversation format, filtering, errors.

The end-to-end path (real rollouts over an HTTP endpoint, then `evokit export-traces`) is in
tests/test_cli.py; here the conversion of both of the agent's action formats is checked exactly.
"""

from __future__ import annotations

import json

import pytest

from evokit.traces import TraceRowError, conversation, trace_row, traces_from_rows


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
