"""Rollouts as SFT data: ShareGPT-style conversations (Harbor's ``harbor traces export``) or ATIF trajectories.

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

:func:`atif_trajectory` writes the same rollout as an ATIF trajectory (Agent Trajectory Interchange
Format, the ``trajectory.json`` Harbor's own agents write; ``harbor.models.trajectories``), for
tools that read Harbor's trials rather than chat rows. It follows Harbor's Terminus-2: the system
prompt and the instruction are ``system`` and ``user`` steps, each model reply an ``agent`` step whose
``observation`` holds what came back before the next reply (a tool result linked to its call by
``source_call_id``; an observation sent as a user message, the JSON action mode, unlinked). Token
counts are known per episode, not per reply, so they go to ``final_metrics``; the reward, the
reward.json and the task go to the trajectory's ``extra``. Tool-call arguments that are not a JSON
object are kept as ``{"raw": ...}`` (ATIF requires an object).
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


#: The ATIF version written: the newest Harbor 0.26 validates (``Trajectory.schema_version``).
ATIF_VERSION = "ATIF-v1.8"


def _tool_calls(message: dict, step_id: int) -> list[dict]:
    calls = []
    for n, c in enumerate(message.get("tool_calls") or []):
        fn = c.get("function", c)
        args = _arguments(fn.get("arguments"))
        calls.append({"tool_call_id": c.get("id") or f"call_{step_id}_{n}", "function_name": fn.get("name") or "",
                      "arguments": args if isinstance(args, dict) else {"raw": args}})
    return calls


def atif_steps(messages: list[dict], model: str | None = None) -> list[dict]:
    """Chat messages (OpenAI format, with tool calls) → ATIF steps (module docstring: Terminus-2's layout)."""
    steps: list[dict] = []
    for m in messages:
        role, text = m.get("role"), _text(m.get("content"))
        agent = steps[-1] if steps and steps[-1]["source"] == "agent" else None
        if role == "assistant":
            step = {"step_id": len(steps) + 1, "source": "agent", "message": text, "model_name": model or None}
            if calls := _tool_calls(m, step["step_id"]):
                step["tool_calls"] = calls
            steps.append(step)
        elif role in {"tool", "user"} and agent is not None:  # what came back to the last reply
            ids = {c["tool_call_id"] for c in agent.get("tool_calls", [])}
            link = m.get("tool_call_id") if role == "tool" and m.get("tool_call_id") in ids else None
            agent.setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": link, "content": text})
        elif role in {"system", "user", "tool"}:
            steps.append({"step_id": len(steps) + 1, "source": "system" if role == "system" else "user",
                          "message": text})
        else:
            raise ValueError(f"unknown chat role {role!r} in the kept messages")
    return steps


def atif_trajectory(row: dict, *, run_id: str = "") -> dict | None:
    """One rollout row → one ATIF trajectory as a JSON dict (None when it has no kept chat or is masked)."""
    sft = trace_row(row, run_id=run_id)
    if sft is None:
        return None
    from evokit import __version__

    info = row.get("info") or {}
    tokens = {k: info[k] for k in ("prompt_tokens", "completion_tokens") if isinstance(info.get(k), int)}
    steps = atif_steps(info["messages"], sft["model"])
    return {
        "schema_version": ATIF_VERSION, "session_id": sft["trial_name"],
        "agent": {"name": sft["agent"], "version": __version__, "model_name": sft["model"] or None},
        "steps": steps,
        "final_metrics": {"total_steps": len(steps), **{f"total_{k}": v for k, v in tokens.items()}},
        "extra": {k: sft[k] for k in ("task", "episode", "run_id", "trial_name", "result", "rewards", "date")},
    }


def _drop_none(x):
    """Harbor writes trajectories with ``exclude_none``: absent rather than null fields."""
    if isinstance(x, dict):
        return {k: _drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_none(v) for v in x]
    return x


#: Export formats: name → (rollout row, run id) → output row or None.
FORMATS = {"sharegpt": trace_row, "atif": lambda row, run_id: _drop_none(atif_trajectory(row, run_id=run_id))}


def traces_from_rows(files: Iterable[str | Path], out: str | Path, *, min_reward: float | None = None,
                     format: str = "sharegpt") -> tuple[int, int]:
    """Append every rollout row in ``files`` to ``out`` as a ShareGPT conversation or (``format="atif"``) an
    ATIF trajectory, one JSON object a line; returns (written, left out)."""
    if format not in FORMATS:
        raise ValueError(f"unknown trace format {format!r}; choose one of {', '.join(FORMATS)}")
    convert = FORMATS[format]
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
                sft = convert(row, run_id=path.stem)
            except (ValueError, AttributeError, TypeError) as e:
                raise TraceRowError(f"{path}:{n}: {e}") from None
            reward = row.get("reward")
            if sft is None or (min_reward is not None and (reward is None or reward < min_reward)):
                skipped += 1
                continue
            rows.append(sft)
        written += append_rows(out, rows)
    return written, skipped
