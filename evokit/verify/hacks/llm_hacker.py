"""The LLM hacker: a model told to pass the tests without doing the task.

The script probes stand for the hack classes someone already thought of; a model explores the
task's own weaknesses (EE's agent loop, :class:`evokit.agents.LLMAgent`, with a system prompt
that asks for a reward without the work: ``evokit/prompts/hack_gate_hacker.md``). Each attempt
is a real rollout (:func:`evokit.rollout.rollout_once`): a fresh sandbox, the model's commands as
``[agent].user``, then the task's verifier phase. Off by default (it costs model calls); enable
it with :class:`~evokit.verify.hacks.gate.LLMHackerConfig`. A small model rarely succeeds; its
failure proves nothing about the task, its success (reward > 0) rejects it.
"""

from __future__ import annotations

from harbor.models.task.task import Task

from evokit.verify.hacks.gate import LLMHackerConfig, ProbeRun, judge_rollout

NAME = "llm-hacker"


def run_llm_hacker(task: Task, image, config: LLMHackerConfig, *, mode=None,
                   reward_key: str | None = None, backend: str | None = None) -> list[ProbeRun]:
    """``config.attempts`` episodes of the hacker on ``task``; one :class:`ProbeRun` each (an endpoint
    that fails makes a masked run, which fails the gate as an error)."""
    from evokit.agents import PROTOCOLS, LLMAgent
    from evokit.llm import LLMClient, prompt
    from evokit.rollout import rollout_once

    client = LLMClient(model=config.model, api_base=config.api_base,
                       backend="openai" if config.api_base else "litellm")
    agent = LLMAgent(client, system_prompt=prompt("hack_gate_hacker", protocol=PROTOCOLS[config.tool_mode]),
                     max_turns=config.max_turns, max_tokens=config.max_tokens, tool_mode=config.tool_mode,
                     temperature=config.temperature, keep_messages=False, name=NAME)
    runs = []
    for i in range(config.attempts):
        r = rollout_once(agent, task, image, i, max_turns=config.max_turns, seed=config.seed, mode=mode,
                         backend=backend)
        runs.append(judge_rollout(r, [NAME], NAME, reward_key))
    return runs
