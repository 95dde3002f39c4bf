"""Tests for evokit.sandbox.dockerfile: the Dockerfile subset the local sandbox builds.

Pure parsing: no image is built here. Checks Docker's rules for continuations, comments,
JSON and shell forms, heredocs, ENV/ARG forms, variable substitution and COPY flags, and
that everything the sandbox cannot reproduce is a DockerfileError naming the line.
"""

import pytest

from evokit.sandbox.dockerfile import (
    DockerfileError,
    parse,
    parse_command,
    parse_copy_args,
    parse_key_values,
    substitute,
)
from evokit.sandbox.image import debian_suite


def one(text: str, keyword: str):
    """The only instruction with ``keyword`` in ``text`` (a FROM line is prepended)."""
    found = [i for i in parse("FROM debian:bookworm-slim\n" + text) if i.keyword == keyword]
    assert len(found) == 1, found
    return found[0]


def test_continuations_are_joined_and_keep_the_first_line_number():
    """Backslash continuations make one instruction whose line is the keyword's line."""
    ins = parse("FROM debian:bookworm\n\nRUN apt-get update \\\n    && echo a \\\n    && echo b\nRUN x\n")
    runs = [i for i in ins if i.keyword == "RUN"]
    assert [r.args for r in runs] == ["apt-get update && echo a && echo b", "x"]
    assert [r.line for r in runs] == [3, 6]


def test_comments_inside_continuations_are_dropped():
    """A ``#`` line inside a continuation is removed and the instruction goes on."""
    ins = one("RUN echo a \\\n# a comment\n    && echo b \\\n  # indented comment\n    && echo c\n", "RUN")
    assert ins.args == "echo a && echo b && echo c"


def test_full_line_comments_and_blank_lines_are_skipped():
    """Comments and blank lines between instructions yield no instruction."""
    ins = parse("# top\nFROM debian:bookworm\n\n   # indented\nRUN true\n")
    assert [i.keyword for i in ins] == ["FROM", "RUN"]


def test_escape_directive_changes_the_continuation_character():
    """``# escape=``` makes the backtick the line-continuation character."""
    ins = parse("# escape=`\nFROM debian:bookworm\nRUN echo a `\n  && echo b\n")
    assert ins[-1].args == "echo a && echo b"


def test_keywords_are_case_insensitive():
    """``run`` is RUN."""
    assert one("run echo hi\n", "RUN").args == "echo hi"


def test_json_form_gives_an_argv_and_shell_form_a_string():
    """``RUN ["a", "b c"]`` is an argv; anything else (including bad JSON) stays a string."""
    assert parse_command('["echo", "a b"]') == ["echo", "a b"]
    assert parse_command("echo a b") == "echo a b"
    assert parse_command('[not json') == "[not json"
    assert parse_command('["ok", 1]') == '["ok", 1]'


def test_heredoc_body_is_the_script():
    """``RUN <<EOF`` takes the following lines up to EOF as its script; parsing resumes after it."""
    ins = parse("FROM debian:bookworm\nRUN <<EOF\necho one\necho two\nEOF\nRUN echo after\n")
    runs = [i for i in ins if i.keyword == "RUN"]
    assert runs[0].heredoc == "echo one\necho two\n"
    assert runs[1].args == "echo after" and runs[1].line == 6


def test_heredoc_with_dash_strips_leading_tabs_and_quoted_word():
    """``<<-'EOT'`` strips leading tabs from the body and the terminator."""
    ins = one("RUN <<-'EOT'\n\techo tabbed\n\tEOT\n", "RUN")
    assert ins.heredoc == "echo tabbed\n"


def test_heredoc_after_a_command_feeds_that_command():
    """``RUN cat <<EOF > /f`` runs ``cat`` with the body on stdin, it does not run the body."""
    ins = one("RUN cat <<EOF > /etc/app.conf\nkey=value\nEOF\n", "RUN")
    script = ins.heredoc
    assert script.startswith("cat <<EOF > /etc/app.conf\n")
    assert "key=value\n" in script and script.rstrip().endswith("EOF")


def test_unclosed_heredoc_is_an_error():
    """A heredoc that never ends is reported, not silently swallowed."""
    with pytest.raises(DockerfileError, match="never closed"):
        parse("FROM debian:bookworm\nRUN <<EOF\necho x\n")


def test_env_key_value_form_with_quotes():
    """``ENV A=1 B="x y" C=z\\ w`` sets three variables with shell quoting rules."""
    assert parse_key_values('A=1 B="x y" C=z\\ w', "ENV", "Dockerfile:2") == {"A": "1", "B": "x y", "C": "z w"}


def test_env_legacy_form_takes_the_rest_of_the_line():
    """``ENV NAME a b=c`` (legacy) sets NAME to everything after the first space."""
    assert parse_key_values("OPTS --flag=1 two", "ENV", "Dockerfile:2") == {"OPTS": "--flag=1 two"}


def test_env_token_without_value_is_an_error_naming_the_line():
    """``ENV A=1 B`` cannot be parsed and the error names the location."""
    with pytest.raises(DockerfileError, match="Dockerfile:7"):
        parse_key_values("A=1 B", "ENV", "Dockerfile:7")


def test_arg_with_and_without_defaults():
    """``ARG A`` declares an empty variable; ``ARG B=2 C=3`` sets defaults."""
    assert parse_key_values("A", "ARG", "x") == {"A": ""}
    assert parse_key_values("B=2 C=3 D", "ARG", "x") == {"B": "2", "C": "3", "D": ""}


def test_substitution_forms():
    """``$X``, ``${X}``, ``${X:-d}`` and ``${X:+w}`` follow Docker's rules for set and unset X."""
    v = {"X": "x", "EMPTY": ""}
    assert substitute("$X/${X}", v) == "x/x"
    assert substitute("${X:-d} ${NOPE:-d} ${EMPTY:-d}", v) == "x d d"
    assert substitute("${X:+w} [${NOPE:+w}] [${EMPTY:+w}]", v) == "w [] []"
    assert substitute("$NOPE-end", v) == "-end"
    assert substitute("no vars", v) == "no vars"


def test_copy_flags_are_parsed_and_removed_from_the_arguments():
    """``COPY --chown=a:b --chmod=755 src dst`` keeps the flags apart from the paths."""
    ins = one("COPY --chown=agent:agent --chmod=755 a.sh /usr/local/bin/\n", "COPY")
    assert ins.flags == {"chown": "agent:agent", "chmod": "755"}
    assert parse_copy_args(ins.args) == (["a.sh"], "/usr/local/bin/")


def test_copy_json_form_and_many_sources():
    """``COPY ["a b", "c", "/dst/"]`` gives sources with spaces and the last item as destination."""
    assert parse_copy_args('["a b", "c", "/dst/"]') == (["a b", "c"], "/dst/")
    assert parse_copy_args("x y /dst/") == (["x", "y"], "/dst/")
    with pytest.raises(DockerfileError):
        parse_copy_args("only-one")


def test_ignored_metadata_instructions_are_accepted():
    """LABEL, EXPOSE, CMD, ENTRYPOINT... change nothing in a sandbox and parse without error."""
    ins = parse('FROM debian:bookworm\nLABEL a=b\nEXPOSE 80\nCMD ["bash"]\nENTRYPOINT ["x"]\n'
                'HEALTHCHECK NONE\nSTOPSIGNAL SIGTERM\nVOLUME /data\n')
    assert len(ins) == 8


@pytest.mark.parametrize(
    "line, what",
    [
        ("ONBUILD RUN echo x", "ONBUILD"),
        ("ADD https://example.com/x.tar.gz /opt/", "remote URL"),
        ("ADD git@github.com:a/b.git /src", "remote URL"),
        ("RUN --mount=type=cache,target=/root/.cache pip install x", "--mount"),
        ("COPY --exclude=*.md . /app", "--exclude"),
        ("COPY --parents a/b /app/", "--parents"),
        ("ADD --checksum=sha256:00 x.tar /opt/", "--checksum"),
    ],
)
def test_unsupported_instructions_name_the_line_and_the_fix(line, what):
    """What the sandbox cannot reproduce is an error with file:line, the feature and the docker hint."""
    with pytest.raises(DockerfileError) as e:
        parse(f"FROM debian:bookworm\nRUN true\n{line}\n", "env/Dockerfile")
    assert "env/Dockerfile:3" in str(e.value)
    assert what in str(e.value)
    assert "docker" in str(e.value)


def test_multi_stage_builds_parse():
    """Several FROM and COPY --from parse (evokit.sandbox.stages builds them); ADD --from is no
    Docker instruction, and nothing but ARG may come before the first FROM."""
    ins = parse("ARG V=1\nFROM debian:bookworm AS build\nRUN true\n\nFROM debian:bookworm-slim\n"
                "COPY --from=build /a /b\n")
    assert [i.keyword for i in ins] == ["ARG", "FROM", "RUN", "FROM", "COPY"] and ins[4].flags == {"from": "build"}
    with pytest.raises(DockerfileError, match=r"Dockerfile:3: ADD --from does not exist"):
        parse("FROM debian:bookworm AS b\nFROM debian:bookworm\nADD --from=b /a /b\n")
    with pytest.raises(DockerfileError, match=r"Dockerfile:1: RUN before the first FROM"):
        parse("RUN true\nFROM debian:bookworm\n")


def test_missing_from_is_an_error():
    """A Dockerfile without FROM is refused."""
    with pytest.raises(DockerfileError, match="no FROM"):
        parse("RUN true\n")


@pytest.mark.parametrize(
    "ref",
    [
        "python:3.12", "ubuntu:22.04", "alpine", "alpine:3.19", "debian:trixie", "debian",
        "debian:bullseye-slim", "debian:120", "someuser/debian:bookworm", "ghcr.io/x/debian:12",
    ],
)
def test_unsupported_base_images_are_refused_naming_the_image(ref):
    """Only Debian 12 (bookworm) bases are built locally; anything else names the image."""
    with pytest.raises(DockerfileError) as e:
        debian_suite(ref, "env/Dockerfile:1")
    assert repr(ref) in str(e.value) and "env/Dockerfile:1" in str(e.value)


@pytest.mark.parametrize(
    "ref",
    [
        "debian:bookworm", "debian:bookworm-slim", "docker.io/library/debian:bookworm-slim",
        "docker.io/debian:bookworm", "public.ecr.aws/docker/library/debian:bookworm",
        "library/debian:bookworm", "debian:12-slim", "debian:12", "debian:12.5",
        "debian:bookworm-20240311-slim", "debian:bookworm@sha256:" + "a1" * 32,
        "debian:bookworm-slim AS base",
    ],
)
def test_supported_base_images(ref):
    """Official Debian bookworm references (tag, registry prefix, digest) map to the bookworm base."""
    assert debian_suite(ref) == "bookworm"
