"""Policies for :mod:`evokit.rollout`: a multi-turn LLM terminal agent, the oracle, and a null agent.

:class:`LLMAgent` drives an :class:`~evokit.rollout.Episode` through any OpenAI-compatible chat
endpoint (a vLLM server on GPU machines, llama.cpp's server on CPU, hosted APIs through
``LLMClient(backend="litellm")``). Each model response is one *turn* in EE's sense; the agent
records the two quantities of EE Fig. 6 (papers.md, "tokens per turn during training" and
"turns per trajectory") in ``rollout.info``:

* ``tokens_per_turn``: completion tokens of every model response, in order;
* ``model_turns``: how many responses the model gave (the trajectory's length in turns);
* ``completion_tokens`` / ``prompt_tokens``: sums over the episode (prompt tokens count the whole
  re-sent context of every call, so they grow quadratically with the number of turns);
* ``truncated`` (responses cut at ``max_tokens``), ``invalid_actions``, and ``finish``, why the
  episode ended: ``answer``, ``max_turns``, ``deadline``, ``context``, ``invalid``, ``endpoint_error``;
* with ``keep_messages``, the chat ``messages`` (for rejection-sampling fine-tuning, EE's step 0).

``Turn.tokens`` of an executed command holds the completion tokens of the response that issued
it (the first command of a response carries them, later commands of the same response 0, so
the turns' tokens sum to the responses' tokens).

Two action formats (``tool_mode``):

* ``"tools"``: the endpoint's native tool calling with one ``bash`` tool (OpenAI tools schema). A
  response without a tool call is the final answer and ends the episode. vLLM needs
  ``--enable-auto-tool-choice --tool-call-parser <parser>`` for this; :meth:`LLMAgent.check` finds
  out at set-up. llama.cpp's server (llama-cpp-python 0.3.x) with a model's own GGUF chat template
  (SmolLM2 included) does **not** parse tool calls with ``tool_choice="auto"``: it returns plain
  text. It does return a real, grammar-constrained tool call when the tool is forced, which is
  what ``constrained=True`` does; a forced tool leaves the model no way to give a final answer, so
  the episode then ends at the turn or time budget.
* ``"json"``: for servers without tool calling. Every reply must be one JSON object,
  ``{"command": "..."}`` or ``{"done": true}``; the command's output comes back as a user
  message. ``constrained=True`` asks the server for schema-constrained decoding
  (``response_format`` json_object with a schema, as :meth:`LLMClient.chat` does).

Failures are kept apart as :mod:`evokit.rollout` expects: an invalid action (arguments that are
not JSON, no ``command``, an unknown tool) is answered with an error message and recorded as a
turn with exit code 2; three in a row end the episode with :class:`~evokit.rollout.PolicyFault`
(the policy's fault: not masked). An endpoint that is down or errors raises
:class:`~evokit.llm.LLMError`, which the rollout masks. A request rejected because the context is
full ends the episode like a spent turn budget (``finish="context"``), not as an endpoint error.

Departures from EE's agent: EE trains with Terminus-2-style long-running terminals; here each
command runs in a fresh ``bash -c`` (no shell state between commands, as the system prompt
says). The paper's top-k 20 is not part of the OpenAI API; ``top_k`` sends it as ``extra_body``
(vLLM and llama.cpp accept it). Token ids and log-probabilities are not recorded.

For TRL (``GRPOTrainer(environment_factory=...)`` with a model loaded locally), the model's chat
template must pass ``trl.chat_template_utils.supports_tool_calling``; SmolLM2's does not (TRL's
bundled ``qwen2_5.jinja`` does).
"""

from __future__ import annotations

import json
import re
from typing import Any

from evokit.errors import EvokitError
from evokit.llm import ChatReply, LLMClient, LLMError, ToolCall, parse_json, prompt
from evokit.rollout import Episode, PolicyFault, Turn
from evokit.verify.trial import SOLVE_SH, run_solution, solution_output

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run one shell command in the task's container and return its exit code and output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
FORCE_BASH = {"type": "function", "function": {"name": "bash"}}  # tool_choice that forces a bash call

#: The ``tool_mode="json"`` action, for schema-constrained decoding.
ACTION_SCHEMA = {
    "oneOf": [
        {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"],
         "additionalProperties": False},
        {"type": "object", "properties": {"done": {"type": "boolean", "const": True}}, "required": ["done"],
         "additionalProperties": False},
    ]
}

PROTOCOLS = {
    "tools": "Run each command by calling the `bash` tool with {\"command\": \"...\"}; you get back its exit "
             "code and output. When the task is complete, reply with a one-line summary and no tool call.",
    "json": "Reply with exactly one JSON object and nothing else: {\"command\": \"<one shell command>\"} to run "
            "a command (you get back its exit code and output), or {\"done\": true} when the task is complete.",
}

MAX_INVALID = 3  # consecutive invalid actions that end the episode as the policy's fault
INVALID_EXIT = 2  # exit code recorded for an invalid action (like a shell usage error)
_CONTEXT_FULL = re.compile(r"context (window|length)|maximum model length|context_length_exceeded", re.I)


class InvalidAction(EvokitError, ValueError):
    """The model's action could not be turned into a command; the message goes back to the model."""


def command_from_tool_call(call: ToolCall) -> str:
    """The shell command of a ``bash`` tool call; :class:`InvalidAction` says what is wrong otherwise."""
    if call.name != "bash":
        raise InvalidAction(f"unknown tool {call.name!r}: the only tool is 'bash'")
    args = call.arguments
    if isinstance(args, str):
        if not args.strip():
            args = {}
        else:
            try:
                args = json.loads(args)
            except json.JSONDecodeError as e:
                raise InvalidAction(f"the arguments are not valid JSON ({e.msg} at char {e.pos}): "
                                    f"{args[:200]!r}; send {{\"command\": \"...\"}}") from None
    if not isinstance(args, dict):
        raise InvalidAction(f"the arguments must be a JSON object {{\"command\": \"...\"}}, not {type(args).__name__}")
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        got = f"got keys {sorted(args)}" if "command" not in args else f"got command={command!r}"
        raise InvalidAction(f"the arguments need \"command\", a non-empty string ({got})")
    return command


def action_from_json_reply(text: str) -> str | None:
    """``tool_mode="json"``: the command in a reply, or None for ``{"done": true}``."""
    try:
        value = parse_json(text)
    except ValueError as e:
        raise InvalidAction(str(e)) from None
    if not isinstance(value, dict):
        raise InvalidAction(f"the reply must be a JSON object, not {type(value).__name__}")
    done = value.get("done") is True
    if done and "command" in value:
        raise InvalidAction("give either \"command\" or \"done\", not both")
    if done:
        return None
    if "command" not in value:
        raise InvalidAction(f"expected {{\"command\": \"...\"}} or {{\"done\": true}}, got keys {sorted(value)}")
    command = value["command"]
    if not isinstance(command, str) or not command.strip():
        raise InvalidAction(f"\"command\" must be a non-empty string, got {command!r}")
    return command


def observation(turn: Turn) -> str:
    """What the model sees of one turn."""
    return f"[exit code {turn.exit_code}]\n{turn.output or '(no output)'}"


class LLMAgent:
    """A multi-turn terminal agent over a chat endpoint (see the module docstring).

    ``max_turns`` caps model responses; the episode's own command and time budgets apply too.
    Sampling defaults follow EE's evaluation (temperature 1.0, top-p 0.95; papers.md).
    With ``check=True`` the constructor calls :meth:`check`. Safe to share between the threads of
    :func:`~evokit.rollout.rollout_group`: all episode state is local to :meth:`run_episode`.
    """

    def __init__(self, client: LLMClient, *, system_prompt: str | None = None, max_turns: int = 30,
                 temperature: float = 1.0, top_p: float = 0.95, top_k: int | None = None, max_tokens: int = 1024,
                 tool_mode: str = "tools", constrained: bool = False, command_timeout: float = 60.0,
                 keep_messages: bool = True, name: str | None = None, check: bool = False):
        if tool_mode not in PROTOCOLS:
            raise ValueError(f"tool_mode must be one of {sorted(PROTOCOLS)}, not {tool_mode!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.client, self.tool_mode, self.constrained = client, tool_mode, constrained
        self.system_prompt = system_prompt or prompt("agent_system", protocol=PROTOCOLS[tool_mode])
        self.max_turns, self.max_tokens, self.command_timeout = max_turns, max_tokens, command_timeout
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.keep_messages = keep_messages
        self.name = name or f"llm:{client.model.rsplit('/', 1)[-1]}"
        if check:
            self.check()

    def _request(self, seed: int | None) -> dict[str, Any]:
        args: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.top_k is not None:
            args["extra_body"] = {"top_k": self.top_k}
        if seed is not None:
            args["seed"] = seed
        if self.tool_mode == "tools":
            args["tools"] = [BASH_TOOL]
            if self.constrained:
                args["tool_choice"] = FORCE_BASH
        elif self.constrained:
            args["json_schema"] = ACTION_SCHEMA
        return args

    def check(self) -> None:
        """One short request in this agent's mode; raises :class:`LLMError` if the endpoint is down or
        rejects the request (e.g. a vLLM server started without ``--enable-auto-tool-choice``)."""
        self.client.chat_message([{"role": "user", "content": "Reply with OK."}],
                                 **{**self._request(None), "max_tokens": 4})

    def run_episode(self, episode: Episode) -> None:
        messages: list[dict] = [{"role": "system", "content": self.system_prompt},
                                {"role": "user", "content": episode.instruction}]
        info = episode.rollout.info
        info.update(policy=self.name, tool_mode=self.tool_mode, model_turns=0, tokens_per_turn=[],
                    prompt_tokens=0, completion_tokens=0, truncated=0, invalid_actions=0, finish=None)
        if self.keep_messages:
            info["messages"] = messages
        # The openai backend reaches servers that take a per-request seed (vLLM, llama.cpp, OpenAI);
        # drawing it from the episode's rng makes a rollout repeatable on the same server.
        seeded = self.client.backend == "openai"
        streak = 0  # consecutive invalid actions
        while info["finish"] is None:
            if episode.turns_left <= 0 or info["model_turns"] >= self.max_turns:
                info["finish"] = "max_turns"
                break
            if episode.done:
                info["finish"] = "deadline"
                break
            try:
                reply = self.client.chat_message(
                    messages, **self._request(episode.rng.randrange(2**31) if seeded else None))
            except LLMError as e:
                if _CONTEXT_FULL.search(str(e)):
                    info["finish"] = "context"
                    break
                info["finish"] = "endpoint_error"
                raise
            info["model_turns"] += 1
            info["tokens_per_turn"].append(reply.completion_tokens)
            info["prompt_tokens"] += reply.prompt_tokens
            info["completion_tokens"] += reply.completion_tokens
            info["truncated"] += reply.finish_reason == "length"  # cut at max_tokens
            step = self._tools_step if self.tool_mode == "tools" else self._json_step
            streak = step(episode, reply, messages, streak)

    def _invalid(self, episode: Episode, raw: str, error: InvalidAction, tokens: int, streak: int) -> Turn:
        """Record an invalid action as a turn (nothing runs); end the episode after MAX_INVALID in a row."""
        turn = Turn(command=raw[:500], output=f"invalid action: {error}", exit_code=INVALID_EXIT, seconds=0.0,
                    tokens=tokens)
        episode.rollout.turns.append(turn)
        episode.rollout.info["invalid_actions"] += 1
        if streak + 1 >= MAX_INVALID:
            episode.rollout.info["finish"] = "invalid"
            raise PolicyFault(f"{MAX_INVALID} invalid actions in a row; the last: {error}")
        return turn

    def _tools_step(self, episode: Episode, reply: ChatReply, messages: list[dict], streak: int) -> int:
        if not reply.tool_calls:
            messages.append({"role": "assistant", "content": reply.content})
            episode.rollout.info["finish"] = "answer"
            return streak
        # content "" rather than None: llama.cpp's server rejects an assistant message without content.
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)}}
            for c in reply.tool_calls]})
        for i, call in enumerate(reply.tool_calls):
            if episode.done:
                break  # the loop in run_episode records why
            tokens = reply.completion_tokens if i == 0 else 0
            try:
                command = command_from_tool_call(call)
            except InvalidAction as e:
                raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
                turn = self._invalid(episode, f"{call.name}: {raw}", e, tokens, streak)
                streak += 1
            else:
                turn = episode.run(command, tokens=tokens, timeout_sec=self.command_timeout)
                streak = 0
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation(turn)})
        return streak

    def _json_step(self, episode: Episode, reply: ChatReply, messages: list[dict], streak: int) -> int:
        messages.append({"role": "assistant", "content": reply.content})
        if episode.done:
            return streak  # the deadline passed during the call; the loop in run_episode records it
        try:
            command = action_from_json_reply(reply.content)
        except InvalidAction as e:
            turn = self._invalid(episode, reply.content, e, reply.completion_tokens, streak)
            messages.append({"role": "user", "content": f"{turn.output}. {PROTOCOLS['json']}"})
            return streak + 1
        if command is None:
            episode.rollout.info["finish"] = "answer"
            return 0
        turn = episode.run(command, tokens=reply.completion_tokens, timeout_sec=self.command_timeout)
        messages.append({"role": "user", "content": observation(turn)})
        return 0


class OracleAgent:
    """Runs the task's reference solution as one turn, through :func:`evokit.verify.trial.run_solution`
    (Harbor's oracle agent: ``solve.sh`` as ``[agent].user``, its output in
    ``/logs/agent/oracle.txt``, which the turn records), within the episode's time."""

    name = "oracle"

    def run_episode(self, episode: Episode) -> None:
        task = episode.task
        timeout = episode.timeout(float(task.config.agent.timeout_sec or 600))
        episode.rollout.info.update(policy=self.name, finish="solution")
        res = run_solution(episode.sandbox, task, timeout_sec=timeout)
        episode.record(SOLVE_SH, res, output=solution_output(episode.sandbox, res))


class NullAgent:
    """Does nothing: the tests run on the untouched environment (Harbor's ``nop`` agent; reward should be 0)."""

    name = "null"

    def run_episode(self, episode: Episode) -> None:
        episode.rollout.info.update(policy=self.name, finish="null")
