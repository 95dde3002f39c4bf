"""Parse the subset of Dockerfile syntax that the local sandbox can build.

The local backend does not run Docker: it turns a Dockerfile into a stack of overlay
layers (see :mod:`evokit.sandbox.image`). This module only reads the file. It keeps
Docker's rules where they matter for Terminal-Bench-style tasks: line continuations,
comments, JSON ("exec") and shell forms, ``ARG``/``ENV`` substitution (``$X``,
``${X}``, ``${X:-default}``), ``KEY=VALUE`` and legacy ``KEY VALUE`` forms, and
``RUN <<EOF`` heredocs.

Multi-stage builds (several ``FROM``, ``COPY --from``) parse; the builder resolves them
(:mod:`evokit.sandbox.stages`). Anything we cannot reproduce faithfully (remote ``ADD``
URLs, ``ONBUILD``, ``RUN --mount``...) is a :class:`DockerfileError` that names the
line and says to use Harbor's docker backend instead, never a silent approximation.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from evokit.errors import UserError

#: Instructions that change nothing a sandbox needs (image metadata for registries).
IGNORED = frozenset({"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK", "STOPSIGNAL",
                     "VOLUME", "MAINTAINER"})
SUPPORTED = frozenset({"FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "ARG", "USER", "SHELL"})
#: COPY/ADD flags we reproduce (``--link`` only changes Docker's layer caching).
COPY_FLAGS = frozenset({"chown", "chmod", "link"})

DOCKER_BACKEND_HINT = (
    "the local bubblewrap sandbox supports FROM (any registry image; debian:bookworm offline; stages) with RUN, COPY, ADD "
    "(local files), WORKDIR, ENV, ARG, USER and SHELL; run this task with Harbor's docker backend "
    "instead (`harbor run --env docker ...`, or `sandbox='docker'` in evokit)"
)


class DockerfileError(UserError, ValueError):
    """A Dockerfile the local sandbox cannot build; the message names file, line and fix."""


@dataclass(frozen=True)
class Instruction:
    """One logical Dockerfile instruction (continuations joined)."""

    keyword: str  # upper-case, e.g. "RUN"
    args: str  # raw text after the keyword, variables not yet substituted
    line: int  # 1-based line of the keyword, for error messages
    flags: dict[str, str] = field(default_factory=dict)  # --chown=..., --chmod=...
    heredoc: str | None = None  # body of a `RUN <<EOF` heredoc


_FLAG = re.compile(r"^--([a-z-]+)(?:=(\S*))?\s*")
_HEREDOC = re.compile(r"<<(-?)[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?")


def parse(text: str, path: str | Path = "Dockerfile") -> list[Instruction]:
    """Split a Dockerfile into instructions; raise :class:`DockerfileError` on unsupported ones."""
    lines = text.splitlines()
    escape = "\\"
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if i == 0 and re.match(r"#\s*escape\s*=\s*`", stripped):
            escape = "`"
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start = i + 1
        parts = [raw.rstrip()]
        while parts[-1].endswith(escape) and i + 1 < len(lines):
            parts[-1] = parts[-1][: -len(escape)]
            i += 1
            nxt = lines[i]
            if nxt.strip().startswith("#"):  # comments inside continuations are dropped
                parts.append(escape)
                continue
            parts.append(nxt.rstrip())
        if parts[-1] == escape:
            parts.pop()
        logical = " ".join(p.strip() for p in parts if p.strip())
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        flags: dict[str, str] = {}
        rest = rest.strip()
        while keyword in {"COPY", "ADD", "RUN"} and (m := _FLAG.match(rest)):
            flags[m.group(1)] = m.group(2) or ""
            rest = rest[m.end():]
        heredoc = None
        if keyword == "RUN" and (m := _HEREDOC.search(rest)):
            body, i = _read_heredoc(lines, i + 1, m.group(2), strip_tabs=bool(m.group(1)))
            # `RUN <<EOF` alone: the body is the script. `RUN cat <<EOF > f`: the shell gets
            # the command line and its here-document, as Docker passes it.
            pure = not (rest[: m.start()].strip() or rest[m.end():].strip())
            heredoc = body if pure else f"{rest}\n{body}{m.group(2)}\n"
            i -= 1
        _check_supported(keyword, flags, rest, path, start)
        out.append(Instruction(keyword, rest, start, flags, heredoc))
        i += 1
    froms = [ins for ins in out if ins.keyword == "FROM"]
    if not froms:
        raise DockerfileError(f"{path}: no FROM instruction")
    before = [ins for ins in out[: out.index(froms[0])] if ins.keyword != "ARG"]
    if before:
        first = before[0]
        raise DockerfileError(f"{path}:{first.line}: {first.keyword} before the first FROM "
                              "(only ARG may come before it)")
    return out


def _read_heredoc(lines: list[str], i: int, word: str, strip_tabs: bool) -> tuple[str, int]:
    body = []
    while i < len(lines):
        line = lines[i].lstrip("\t") if strip_tabs else lines[i]
        if line.strip() == word:
            return "\n".join(body) + "\n", i + 1
        body.append(line)
        i += 1
    raise DockerfileError(f"heredoc <<{word} is never closed")


def _check_supported(keyword: str, flags: dict, rest: str, path, line: int) -> None:
    where = f"{path}:{line}"
    if keyword in IGNORED:
        return
    if keyword not in SUPPORTED:
        raise DockerfileError(f"{where}: instruction {keyword} is not supported; {DOCKER_BACKEND_HINT}")
    if keyword == "ADD" and "from" in flags:
        raise DockerfileError(f"{where}: ADD --from does not exist (Docker has COPY --from only)")
    if keyword in {"COPY", "ADD"} and (extra := set(flags) - COPY_FLAGS - {"from"}):
        raise DockerfileError(
            f"{where}: {keyword} {' '.join('--' + f for f in sorted(extra))} is not supported; "
            + DOCKER_BACKEND_HINT
        )
    if keyword == "ADD" and re.search(r"(^|\s)(https?|git)://|\.git(\s|$)", rest):
        raise DockerfileError(f"{where}: ADD of a remote URL is not supported; {DOCKER_BACKEND_HINT}")
    if keyword == "RUN" and set(flags) - {"network"}:
        raise DockerfileError(
            f"{where}: RUN {' '.join('--' + f for f in flags)} is not supported; {DOCKER_BACKEND_HINT}"
        )


# groups: 1 = name in braces, 2 = operator (- or +), 3 = its word, 4 = bare $NAME
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(text: str, variables: dict[str, str]) -> str:
    """Docker's variable substitution for ENV/ARG/WORKDIR/COPY/USER (not RUN: the shell does it)."""

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        value = variables.get(name, "")
        op, word = m.group(2), m.group(3)
        if op == "-":
            return value or (word or "")
        if op == "+":
            return (word or "") if value else ""
        return value

    return _VAR.sub(repl, text)


def parse_key_values(args: str, keyword: str, where: str) -> dict[str, str]:
    """``ENV A=1 B="x y"`` or legacy ``ENV A 1 2`` → {"A": "1", ...}; same for ARG (no value → "")."""
    args = args.strip()
    if not args:
        raise DockerfileError(f"{where}: {keyword} needs at least one variable")
    first = args.split(None, 1)[0]
    if "=" not in first:
        if keyword == "ARG":
            return {first: ""}
        name, _, value = args.partition(" ")
        return {name: value.strip()}
    out = {}
    for token in shlex.split(args, posix=True):
        name, eq, value = token.partition("=")
        if not eq:
            if keyword == "ARG":
                out[name] = ""
                continue
            raise DockerfileError(f"{where}: cannot parse {keyword} token {token!r}")
        out[name] = value
    return out


def parse_command(args: str) -> list[str] | str:
    """JSON (exec) form → argv list; anything else → the shell string."""
    s = args.strip()
    if s.startswith("["):
        try:
            value = json.loads(s)
        except json.JSONDecodeError:
            return s  # Docker also falls back to shell form on invalid JSON
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return s


def parse_copy_args(args: str) -> tuple[list[str], str]:
    """``COPY a b dest`` or ``COPY ["a", "dest"]`` → (sources, dest)."""
    parsed = parse_command(args)
    items = parsed if isinstance(parsed, list) else shlex.split(parsed)
    if len(items) < 2:
        raise DockerfileError(f"COPY/ADD needs a source and a destination, got {args!r}")
    return items[:-1], items[-1]
