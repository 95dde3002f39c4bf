"""What a task's scripts fetch from the network: installers (pip, uv, apt, npm, git clone) and
curl/wget downloads, a task's own service on the loopback interface excepted.

A fact about the task's files, so it lives with the task folder: the Terminal-Bench importer
(:mod:`evokit.tasks.migrate`) records what the tests fetch at test time, and the rubric's
``tests-offline`` and ``tests-no-download`` rules (:mod:`evokit.verify.rubric`) judge it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NETWORK_FETCH = re.compile(
    r"\b(pip3?\s+install|uvx\s|uv\s+(pip\s+)?(install|add|sync|run\s+--with)|apt(-get)?\s+install|git\s+clone|"
    r"npm\s+(i|install)\b)"
)
#: curl/wget count as a download unless every URL on the line is on this machine (a task's own
#: service on the loopback interface is not the network).
_HTTP_TOOL = re.compile(r"\b(curl|wget)\s")
_URL = re.compile(r"\b(?:https?|ftp)://([^/\s:'\"]+)")
_COMMENT_LINE = re.compile(r"^\s*#.*$", re.M)
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "[::1]", "::1"}


def first_fetch(text: str, allowed: Iterable[str] | None = None) -> str | None:
    """The first command in ``text`` that downloads something it may not, or None.

    A curl/wget line is judged by its URLs, or, when its URL is in a variable, by every URL the
    file spells out: all on the loopback interface (and at least one) is a local request. With
    ``allowed`` (an ``allowlist`` task's hosts, ``*.`` wildcards as Harbor writes them), hosts that
    match are fine and installers are not judged (their index may be on the list).
    """
    text = _COMMENT_LINE.sub("", text)  # a comment that mentions an installer runs nothing
    if allowed is None and (m := _NETWORK_FETCH.search(text)):
        return m.group(0).strip()
    ok = _LOCAL_HOSTS | set(allowed or ())

    def reachable(host: str) -> bool:
        host = host.lower()
        return host in ok or any(p.startswith("*.") and host.endswith(p[1:]) for p in ok)

    for line in text.splitlines():
        if _HTTP_TOOL.search(line):
            hosts = _URL.findall(line) or _URL.findall(text)
            if not hosts or not all(reachable(h) for h in hosts):
                return line.strip()[:80]
    return None


def test_time_fetches(text: str) -> list[str]:
    """Every line of a test file that installs or downloads something (loopback requests excluded).

    The same judgement as :func:`first_fetch` with no allowlist, line by line, so an importer can record
    what a task's tests fetch and the rubric can name each one.
    """
    text = _COMMENT_LINE.sub("", text)

    def downloads(line: str) -> bool:
        hosts = _URL.findall(line) or _URL.findall(text)
        return not hosts or not all(h.lower() in _LOCAL_HOSTS for h in hosts)

    return [line.strip()[:120] for line in text.splitlines()
            if _NETWORK_FETCH.search(line) or (_HTTP_TOOL.search(line) and downloads(line))]
