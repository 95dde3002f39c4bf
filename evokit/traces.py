"""Rollouts as SFT data: ShareGPT-style conversations, the format of Harbor's ``harbor traces export``.

Users who distil before RL (EE's step 0, rejection-sampling fine-tuning) need the agent's chats as
training rows. :class:`evokit.agents.LLMAgent` keeps each episode's chat in ``rollout.info["messages"]``
(``keep_messages=True``, the default) and :func:`evokit.rollout.write_rows` writes rollouts as JSON
rows. This module turns those rows into one conversation per rollout, the row schema Harbor's
trace exporter writes (``harbor.utils.traces_utils``, 0.26): ``conversations`` (a list of
``{"role", "content"}`` with text content), ``agent``, ``model``, ``model_provider``, ``date``,
``task``, ``episode``, ``run_id``, ``trial_name`` and ``result`` (the reward), plus evokit's
``rewards`` (the whole reward.json).

The conversation follows Harbor's conversion: the system prompt and every observation are ``user``
turns, the model's replies ``assistant`` turns, and a tool call is appended to the assistant text as
``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``. Rollouts without kept messages (the oracle, the null agent, ``keep_messages=False``)
and masked rollouts (not the policy's doing: endpoint or sandbox failures) are left out; with
``min_reward`` only rollouts scoring at least that are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from evokit.errors import UserError
from evokit.rows import append_rows, read_rows


class TraceRowError(UserError, ValueError):
    """A rollout row that cannot become a conversation; the message names the file and line."""


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _arguments(raw):
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw if raw is not None else {}


def conversation(messages: list[dict]) -> list[dict[str, str]]:
    """Chat messages (OpenAI format, with tool calls) → Harbor's ``{"role", "content"}`` turns."""
    out = []
    for m in messages:
        role = m.get("role")
        text = _text(m.get("content"))
        if role == "assistant":
            parts = [text] if text else []
            for c in m.get("tool_calls") or []:
                fn = c.get("function", c)
                call = {"name": fn.get("name"), "arguments": _arguments(fn.get("arguments"))}
                parts.append(f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>")
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role in {"system", "user", "tool"}:
            out.append({"role": "user", "content": text})
        else:
            raise ValueError(f"unknown chat role {role!r} in the kept messages")
    return out


def trace_row(row: dict, *, run_id: str = "") -> dict | None:
    """One rollout row → one SFT row (None when it has no kept chat or is masked)."""
    info = row.get("info") or {}
    messages = info.get("messages")
    if not messages or row.get("masked"):
        return None
    model = row.get("model") or str(info.get("policy", "")).removeprefix("llm:")
    return {
        "conversations": conversation(messages),
        "agent": info.get("policy", "evokit-llm-agent"),
        "model": model,
        "model_provider": row.get("model_provider", "openai-compatible"),
        "date": row.get("date") or datetime.now(UTC).isoformat(timespec="seconds"),
        "task": row.get("task"),
        "episode": f"episode-{row.get('index', 0)}",
        "run_id": run_id,
        "trial_name": f"{row.get('task')}__{run_id}__{row.get('step', 0)}_{row.get('index', 0)}",
        "result": row.get("reward"),
        "rewards": row.get("rewards"),
    }


def traces_from_rows(files: Iterable[str | Path], out: str | Path, *, min_reward: float | None = None) -> tuple[int, int]:
    """Append the conversations of every rollout row in ``files`` to ``out``; returns (written, left out)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    for path in map(Path, files):
        rows = []
        for n, row in enumerate(read_rows(path), 1):
            if not isinstance(row, dict) or "task" not in row:
                raise TraceRowError(f"{path}:{n}: not a rollout row (no 'task'); give rows written by "
                                    "`evokit rollout --out` or evokit.rollout.write_rows")
            try:
                sft = trace_row(row, run_id=path.stem)
            except (ValueError, AttributeError, TypeError) as e:
                raise TraceRowError(f"{path}:{n}: {e}") from None
            reward = row.get("reward")
            if sft is None or (min_reward is not None and (reward is None or reward < min_reward)):
                skipped += 1
                continue
            rows.append(sft)
        written += append_rows(out, rows)
    return written, skipped
