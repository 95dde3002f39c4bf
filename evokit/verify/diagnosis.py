"""Why the tests failed, in one line: the first failing test, its assertion, and test.sh's exit status.

A verdict that says only ``reward 0.0 (need ≥ 1.0)`` sends the user digging through logs they may
not have kept. The tests' own output already names the cause, so this module reads it the way a
person would, in order of how precise the source is:

1. a CTRF report (``/logs/verifier/ctrf.json``, what Terminal-Bench 2's ``pytest --ctrf`` writes):
   the first test with status ``failed`` and its message;
2. pytest's output: the first ``FAILED node - message`` line of its short summary, else the first
   ``E   …`` line under a failing test's traceback;
3. unittest's output: the first ``FAIL:``/``ERROR:`` header and the exception line under it;
4. a shell script's own verdict line: the first line that starts with ``FAIL``, ``ERROR`` or
   ``error`` (how hand-written ``test.sh`` files say what is wrong), or the shell's own complaint
   (``…: command not found``, ``…: No such file or directory``: a tool missing from the image);
5. anything else: the last non-blank lines of ``test-stdout.txt``.

The explanation is for people only: nothing the tests print ever decides a reward (the reward is
read out of band, :mod:`evokit.verify.trial`), so an agent that forges this text changes a message,
not a score.
"""

from __future__ import annotations

import json
import re

#: Longest explanation kept (a verdict's reason is a line, not a log).
MAX_CHARS = 400
TAIL_LINES = 3

_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+::\S+|\S+\.py)(?: - (.*))?$")  # a node id, not unittest's
_PYTEST_E = re.compile(r"^E\s{2,}(\S.*)$")
_PYTEST_COUNTS = re.compile(r"^=*\s*(\d+ (?:failed|passed|errors?)\b.*?) in [\d.]+s\b.*$")
_UNITTEST_HEAD = re.compile(r"^(FAIL|ERROR): (\S+) \((\S+)\)")
_EXCEPTION = re.compile(r"^\w*(?:Error|Exception|Failure)\b.*")
_SHELL_VERDICT = re.compile(r"^(?:FAIL(?:ED)?|ERROR|[Ee]rror)\b|\berror:|: command not found$|: No such file or directory$")


def _clip(text: str, limit: int = MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def from_ctrf(raw: bytes | None) -> str | None:
    """``name: message`` of the first failed test of a CTRF report, with the failed/total count."""
    if not raw:
        return None
    try:
        tests = json.loads(raw.decode("utf-8", errors="replace"))["results"]["tests"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(tests, list):
        return None
    failed = [t for t in tests if isinstance(t, dict) and t.get("status") in ("failed", "error")]
    if not failed:
        return None
    first = failed[0]
    message = first.get("message") or first.get("trace") or ""
    message = next((ln for ln in str(message).splitlines() if ln.strip()), "")
    return f"{first.get('name', '?')}: {message}".rstrip(": ") + f" ({len(failed)} of {len(tests)} tests failed)"


def from_pytest(output: str) -> str | None:
    """The first ``FAILED node - message`` line (or ``E`` line) of pytest's output, with its counts."""
    lines = output.splitlines()
    counts = next((m.group(1) for ln in reversed(lines) if (m := _PYTEST_COUNTS.match(ln.strip()))), None)
    tail = f" ({counts})" if counts else ""
    for ln in lines:
        if m := _PYTEST_FAILED.match(ln.strip()):
            node, message = m.group(1), m.group(2)
            if not message:  # `-rf` without the message: take the first assertion line instead
                message = next((e.group(1) for x in lines if (e := _PYTEST_E.match(x))), "")
            return f"{node}: {message}".rstrip(": ") + tail
    first_e = next((e.group(1) for x in lines if (e := _PYTEST_E.match(x))), None)
    return None if first_e is None else first_e + tail


def from_unittest(output: str) -> str | None:
    """``test (module.Class): the exception line`` of unittest's first failure."""
    lines = output.splitlines()
    for i, ln in enumerate(lines):
        if m := _UNITTEST_HEAD.match(ln):
            exc = next((x.strip() for x in lines[i + 1:] if _EXCEPTION.match(x.strip())), "")
            return f"{m.group(2)} ({m.group(3)}): {exc}".rstrip(": ")
    return None


def from_shell(output: str) -> str | None:
    """The first two lines a shell test (or a tool it ran) printed as a verdict: ``FAIL: …``,
    ``ERROR …``, ``…: error: …`` (two, because a usage error's cause is often on the next line)."""
    found = [ln.strip() for ln in output.splitlines() if _SHELL_VERDICT.search(ln.strip())]
    return " | ".join(found[:2]) or None


def tail(output: str, n: int = TAIL_LINES) -> str | None:
    """The last ``n`` non-blank lines, joined with `` | ``."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or None


def explain_tests(exit_code: int | None, output: str, ctrf: bytes | None = None) -> str:
    """One line on why a verifier phase did not pass: test.sh's exit status and the first failure."""
    cause = from_ctrf(ctrf) or from_pytest(output) or from_unittest(output) or from_shell(output) or tail(output)
    status = "test.sh" + ("" if exit_code is None else f" exited {exit_code}")
    if cause is None:
        return _clip(f"{status}, printing nothing")
    return _clip(f"{status}; {cause}")
