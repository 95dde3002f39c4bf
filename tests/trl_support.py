"""Shared helpers of the TRL-path tests: a scripted tiny policy that writes one of a few tool calls.

The tests that use it are about the training plumbing (curricula, masking, rows, resume), not about
what a model learns, so the policy is scripted (TRL's own generation with logits biased towards
fixed completions, :func:`evokit.trl_trainer.scripted_sampler`); the sandbox, the task's tests and
TRL's GRPO update are real.
"""

from __future__ import annotations

import json

from evokit import trl_trainer as T

SYSTEM = "Solve the task with the bash tool."
SOLVE = "mkdir -p /app/out && cat /app/step1/hosts.txt | LC_ALL=C sort -u > /app/out/step1.txt"
WINDOW = 8  # tokens of context that select the scripted next token
TINY = dict(group_size=4, tasks_per_step=2, max_completion_length=96, max_turns=2, command_timeout_sec=1.0,
            learning_rate=1e-3, system_prompt=SYSTEM, temperature=1.0, cpu_threads=1)  # a tiny run's settings


def _call(command: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call><|im_end|>"


VARIANTS = [  # (completion, bias); softmax over the biases gives the odds at the branching token
    (_call(SOLVE), 40.0 + 0.6931),
    (_call("true"), 40.0 + 0.6931),
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call><|im_end|>', 40.0),  # bad JSON
    (_call("sleep 600"), 40.0),  # hangs: killed after command_timeout_sec
]


def scripted_sampler(tokenizer, instruction: str) -> dict:
    """generation_kwargs that make any model write one of VARIANTS, then "Done." after the tool's answer."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instruction}]
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "true"}}}
    ids = lambda m: tokenizer.apply_chat_template(m, tools=T.tool_schema(), add_generation_prompt=True,  # noqa: E731
                                                     tokenize=True, return_dict=True)["input_ids"]
    after_tool = [*msgs, {"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "name": "bash", "content": ""}]
    return T.scripted_sampler(tokenizer, [(ids(msgs), VARIANTS), (ids(after_tool), [("Done.<|im_end|>", 40.0)])],
                              window=WINDOW)
