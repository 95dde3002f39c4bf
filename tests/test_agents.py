"""Policies: the oracle and null agents, and the LLM terminal agent against a real local endpoint.

The endpoint is llama.cpp's OpenAI-compatible server running SmolLM2-135M (a real model shipped on
PyPI). llama-cpp-python 0.3.x with the model's own chat template returns no tool calls under
``tool_choice="auto"`` (plain text), but a real grammar-constrained tool call when the tool is
forced; so ``tool_mode="tools"`` runs live with ``constrained=True`` (forced ``bash``) and without
it (the model answers in text, ending the episode), and ``tool_mode="json"`` runs live constrained
and not. A 135M model does not solve tasks: these tests check that episodes run end to end and
that turns, tokens per turn and failures are recorded, never that the model succeeds. Malformed
tool-call arguments are tested on recorded payloads (some produced by this model at
``max_tokens=48``), and the invalid-action rule through a scripted client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evokit.agents import (
    InvalidAction,
    LLMAgent,
    NullAgent,
    OracleAgent,
    action_from_json_reply,
    command_from_tool_call,
)
from evokit.llm import ChatReply, LLMClient, ToolCall
from evokit.local_llm import LocalServer
from evokit.rollout import rollout_group
from evokit.sandbox.task_env import image_for_task
from evokit.tasks import default_task_config, load_task, write_task
from evokit.verify.trial import run_trial

ROOT = Path(__file__).resolve().parents[1]
PIPES = ROOT / "examples" / "tasks" / "pipes-top-ips"
HELLO_TEST = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
FINISHES = {"answer", "max_turns", "deadline"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(log=tmp_path_factory.mktemp("llm") / "server.log") as srv:
        yield srv


def hello_task(dest: Path, instruction: str = "Create the file /app/out.txt containing the single word: hello\n"):
    return write_task(dest, instruction=instruction, dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n",
                      tests={"test.sh": HELLO_TEST}, solution={"solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n"})


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> Path:
    """A trivial task: create /app/out.txt containing hello."""
    return hello_task(tmp_path_factory.mktemp("tasks") / "hello-file")


def test_oracle_and_null_agents_through_a_group():
    """The oracle solves the example task in one recorded turn; doing nothing scores 0 with no turns."""
    oracle = rollout_group(OracleAgent(), PIPES, group_size=2)
    null = rollout_group(NullAgent(), PIPES, group_size=2)
    assert [r.reward for r in oracle] == [1.0, 1.0] and [r.reward for r in null] == [0.0, 0.0]
    assert not any(r.masked or r.error for r in oracle + null)
    for r in oracle:
        assert r.n_turns == 1 and r.turns[0].exit_code == 0 and "/solution/solve.sh" in r.turns[0].command
        assert r.info["policy"] == "oracle"
    assert all(r.n_turns == 0 and r.info["finish"] == "null" for r in null)


def test_oracle_runs_as_the_agent_user_in_both_paths(tmp_path):
    """The rollout's oracle and the direct trial run the one solution the same way, as Harbor does:
    ``solve.sh`` as ``[agent].user`` (here ``nobody``), its printed output recorded as the turn's."""
    cfg = default_task_config()
    cfg.agent.user = "nobody"
    test = ('#!/bin/bash\nmkdir -p /logs/verifier\n'
            'if [ "$(cat /tmp/who)" = nobody ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    task_dir = write_task(tmp_path / "who", instruction="Write your user name to /tmp/who.\n",
                          dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n", tests={"test.sh": test},
                          solution={"solve.sh": "#!/bin/bash\nid -un | tee /tmp/who\n"}, config=cfg)
    (r,) = rollout_group(OracleAgent(), task_dir, group_size=1, workers=1, mode="shared")
    assert r.reward == 1.0 and r.turns[0].output.strip() == "nobody", (r.error, r.turns)
    task = load_task(task_dir)
    assert run_trial(task, image_for_task(task), kind="oracle", mode="shared").rewards == {"reward": 1.0}


@pytest.mark.parametrize(("tool_mode", "constrained"), [("tools", True), ("tools", False), ("json", True),
                                                        ("json", False)])
def test_llm_agent_runs_end_to_end(server, hello, tool_mode, constrained):
    """A real model drives a real sandbox: turns and tokens per turn are recorded, the reward is a number."""
    client = LLMClient(model=server.model_name, api_base=server.api_base)
    agent = LLMAgent(client, tool_mode=tool_mode, constrained=constrained, max_turns=2, max_tokens=32, check=True)
    (r,) = rollout_group(agent, hello, group_size=1, workers=1, max_turns=2)
    info = r.info
    assert not r.masked and r.error is None, r.error
    assert isinstance(r.reward, float) and r.reward in (0.0, 1.0)
    assert info["finish"] in FINISHES and 1 <= info["model_turns"] <= 2
    assert len(info["tokens_per_turn"]) == info["model_turns"]
    assert info["completion_tokens"] == sum(info["tokens_per_turn"]) > 0 and info["prompt_tokens"] > 0
    assert sum(t.tokens for t in r.turns) <= info["completion_tokens"]
    assert client.usage.calls == info["model_turns"] + 1  # + the set-up check
    assert info["messages"][0]["role"] == "system" and info["messages"][1]["content"].startswith("Create")
    if constrained:  # forced tool / schema-constrained JSON: every response but a final {"done": true} acts
        assert r.n_turns >= info["model_turns"] - (info["finish"] == "answer")
    if tool_mode == "tools" and constrained:
        assert info["finish"] == "max_turns"  # a forced tool call leaves no way to answer
        assert [m["role"] for m in info["messages"][2:4]] == ["assistant", "tool"]
        assert info["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    if tool_mode == "tools" and not constrained:
        # llama.cpp's generic chat handler parses no tool calls: text comes back, which is the final answer
        assert info["finish"] == "answer" and r.n_turns == 0 and info["model_turns"] == 1


def test_context_overflow_ends_the_episode(server, tmp_path):
    """An instruction longer than the server's context is rejected: the episode ends ('context'), not masked."""
    task = hello_task(tmp_path / "long", instruction="Create /app/out.txt containing hello. " + "Really. " * 3000)
    agent = LLMAgent(LLMClient(model=server.model_name, api_base=server.api_base), tool_mode="json", max_tokens=16)
    (r,) = rollout_group(agent, task, group_size=1, workers=1)
    assert not r.masked and r.error is None and r.reward == 0.0
    assert r.info["finish"] == "context" and r.info["model_turns"] == 0


def test_dead_endpoint_is_masked(hello):
    """An endpoint that is down masks the rollouts with an error naming it; the group still completes."""
    client = LLMClient(model="x", api_base="http://127.0.0.1:9/v1", timeout=3)
    rs = rollout_group(LLMAgent(client), hello, group_size=2, workers=2)
    for r in rs:
        assert r.masked and "127.0.0.1:9" in r.mask_reason and r.mask_reason.startswith("endpoint failed:")
        assert r.n_turns == 0 and r.info["finish"] == "endpoint_error"
    assert client.usage.failed_calls == 2


class ScriptedClient:
    """Replays recorded chat replies (a scripted input: the test is about the agent's loop, not a model)."""

    model, backend = "scripted", "scripted"

    def __init__(self, replies: list[ChatReply]):
        self.replies = list(replies)

    def chat_message(self, messages, **kw) -> ChatReply:
        return self.replies.pop(0)


def _call(arguments, name: str = "bash") -> ChatReply:
    return ChatReply("", [ToolCall("call_1", name, arguments)], "tool_calls", 100, 12)


def test_three_invalid_actions_in_a_row_are_the_policys_fault(hello):
    """Invalid calls are answered and recorded (exit 2); a valid one resets the count; three in a row end
    the episode as a PolicyFault (not masked), and the tests still score it."""
    replies = [_call("{"), _call('{"command": "echo hi > /app/note"}'), _call({"cmd": "ls"}), _call("", "python"),
               _call('{"command": ""}')]
    (r,) = rollout_group(LLMAgent(ScriptedClient(replies)), hello, group_size=1, workers=1)
    assert not r.masked and r.error.startswith("policy: 3 invalid actions in a row") and r.reward == 0.0
    assert [t.exit_code for t in r.turns] == [2, 0, 2, 2, 2] and r.info["invalid_actions"] == 4
    assert r.info["finish"] == "invalid" and r.info["tokens_per_turn"] == [12] * 5
    tool_msgs = [m["content"] for m in r.info["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in tool_msgs[0] and tool_msgs[1] == "[exit code 0]\n(no output)"
    assert "unknown tool 'python'" in tool_msgs[3]


# Recorded tool-call argument payloads (the first three from SmolLM2-135M through llama.cpp with a
# forced bash tool, cut at max_tokens=48; the others as other servers send them).
RECORDED_ARGS = [
    ('{"command": "echo \\"hello\\"}\nThe output is: Hello 2\nYou can now use your new commands', "not valid JSON"),
    ('{ "command": "echo \\"Hello\\"\\nThe output is: Hello 2\\nYou can now use your new', "not valid JSON"),
    ('{"command": "echo \'Hello world\',"', "not valid JSON"),
    ('{"cmd": "ls -la"}', "need \"command\".*got keys \\['cmd'\\]"),
    ('{"command": ["ls", "-la"]}', "need \"command\".*got command=\\['ls'"),
    ('{"command": "   "}', "need \"command\""),
    ('["ls"]', "must be a JSON object"),
    ("", "got keys \\[\\]"),
    ("ls -la", "not valid JSON"),
]


@pytest.mark.parametrize(("arguments", "message"), RECORDED_ARGS)
def test_malformed_tool_call_arguments(arguments, message):
    """Each malformed payload is rejected with a reason that tells the model what to send."""
    with pytest.raises(InvalidAction, match=message):
        command_from_tool_call(ToolCall("c", "bash", arguments))


def test_valid_tool_calls():
    """JSON-string and already-decoded arguments both work; only the bash tool exists."""
    assert command_from_tool_call(ToolCall("c", "bash", '{"command": "echo \\"hello\\""}')) == 'echo "hello"'
    assert command_from_tool_call(ToolCall("c", "bash", {"command": "ls"})) == "ls"
    with pytest.raises(InvalidAction, match="unknown tool 'shell'"):
        command_from_tool_call(ToolCall("c", "shell", '{"command": "ls"}'))


@pytest.mark.parametrize(("reply", "expected"), [
    ('{"command": "ls /app"}', "ls /app"),
    ('```json\n{"command": "cat out.txt"}\n```', "cat out.txt"),
    ('Sure! {"done": true}', None),
    ('{"command": "ls", "done": false}', "ls"),
])
def test_json_mode_actions(reply, expected):
    """tool_mode='json': a command, a fenced command, or done."""
    assert action_from_json_reply(reply) == expected


@pytest.mark.parametrize(("reply", "message"), [
    ("Your current working directory should be /app:", "not JSON"),  # recorded from SmolLM2
    ('{"command": "ls", "done": true}', "not both"),
    ('{"done": false}', "got keys \\['done'\\]"),
    ('{"command": 3}', "non-empty string"),
    ("[1, 2]", "must be a JSON object"),
])
def test_json_mode_invalid_replies(reply, message):
    """tool_mode='json': each invalid reply gets a reason."""
    with pytest.raises(InvalidAction, match=message):
        action_from_json_reply(reply)


def test_agent_configuration_errors():
    """A bad tool_mode or turn budget is refused at construction; the system prompt states the protocol."""
    client = LLMClient(model="x", api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="tool_mode"):
        LLMAgent(client, tool_mode="xml")
    with pytest.raises(ValueError, match="max_turns"):
        LLMAgent(client, max_turns=0)
    assert "`bash` tool" in LLMAgent(client).system_prompt
    assert '{"done": true}' in LLMAgent(client, tool_mode="json").system_prompt
