"""Tests for evokit.sandbox.stages (and the multi-stage path of evokit.sandbox.image).

Each test builds a multi-stage Dockerfile on the Debian base (offline) and checks the final
image from inside a running sandbox: ``COPY --from`` of a directory's contents, a file to a
file and into a directory, by stage name and by index, ``--chown``, a relative destination,
links kept as links, files deleted in the source stage (whiteouts) not copied, build stages
not leaking into the final image, ``FROM <stage>`` continuing a stage with its ENV; and that
a symlink in the source stage cannot make ``COPY --from`` read the host's files.
"""

from __future__ import annotations

import pytest
from sandbox_support import make_context, running

from evokit.sandbox import DockerfileError, ImageBuildError, build_image


def sh(sandbox, command: str) -> str:
    res = sandbox.exec(command)
    assert res.ok, f"{command!r} failed ({res.return_code}): {res.stderr}"
    return res.stdout.strip()


BUILD_STAGE = """\
FROM debian:bookworm-slim AS build
RUN mkdir -p /out/sub && echo bin > /out/app && echo nested > /out/sub/n.txt && ln -s app /out/link \\
    && echo doomed > /out/gone
RUN rm /out/gone
WORKDIR /src
RUN echo built > result.txt
"""


def test_copy_from_a_stage(tmp_path, sandbox_cache):
    ctx = make_context(tmp_path / "ctx", BUILD_STAGE + """
FROM debian:bookworm-slim
WORKDIR /work
COPY --from=build /out /opt/app/
COPY --from=build /src/result.txt /result.txt
COPY --from=0 /out/app /usr/local/bin/
COPY --from=build --chown=1234:2345 /out/sub ./sub
""")
    image = build_image(ctx, root=sandbox_cache)
    with running(image) as s:
        assert sh(s, "cat /opt/app/app /opt/app/sub/n.txt") == "bin\nnested"
        assert sh(s, "readlink /opt/app/link") == "app"
        assert sh(s, "test ! -e /opt/app/gone && echo gone") == "gone"  # deleted in its stage
        assert sh(s, "cat /result.txt /usr/local/bin/app") == "built\nbin"
        assert sh(s, "stat -c '%u:%g' /work/sub/n.txt") == "1234:2345"
        assert sh(s, "test ! -e /out && test ! -e /src && echo clean") == "clean"  # stage files stay there
    again = build_image(ctx, root=sandbox_cache)
    assert again.key == image.key  # the copied streams are content-keyed like any COPY


def test_from_an_earlier_stage_continues_it(tmp_path, sandbox_cache):
    ctx = make_context(tmp_path / "ctx", """\
FROM debian:bookworm-slim AS base
ENV STAGE_VAR=from-base
WORKDIR /app
RUN echo base > base.txt

FROM base AS next
RUN cat base.txt > next.txt && echo "$STAGE_VAR" >> next.txt
""")
    image = build_image(ctx, root=sandbox_cache)
    assert image.env["STAGE_VAR"] == "from-base" and image.workdir == "/app"
    with running(image) as s:
        assert sh(s, "cat /app/next.txt") == "base\nfrom-base"


@pytest.mark.parametrize("line,error,match", [
    ("COPY --from=build /missing /x", ImageBuildError, r"Dockerfile:9: .*/missing does not exist"),
    ("COPY --from=build /out/* /x/", ImageBuildError, r"Dockerfile:9: .*wildcard"),
    ("COPY --from=build --chmod=755 /out/app /x", DockerfileError, r"Dockerfile:9: .*--chmod"),
    ("COPY --from=2 /out/app /x", DockerfileError, r"Dockerfile:9: stage '2' is not an earlier stage"),
])
def test_copy_from_errors_name_the_line(tmp_path, sandbox_cache, line, error, match):
    ctx = make_context(tmp_path / "ctx", BUILD_STAGE + f"\nFROM debian:bookworm-slim\n{line}\n")
    with pytest.raises(error, match=match) as e:
        build_image(ctx, root=sandbox_cache)
    assert "\n" not in str(e.value)


def test_a_symlink_in_the_source_stage_cannot_reach_host_files(tmp_path, sandbox_cache):
    """The path named in COPY --from is resolved where the host has nothing but read-only /usr:
    ``/out/etc -> /etc`` then ``/out/etc/shadow`` finds no file (the host's would be copied)."""
    ctx = make_context(tmp_path / "ctx", """\
FROM debian:bookworm-slim AS build
RUN mkdir /out && ln -s /etc /out/etc && ln -s /root /out/root

FROM debian:bookworm-slim
COPY --from=build /out/etc/shadow /stolen
""")
    with pytest.raises(ImageBuildError, match=r"/out/etc/shadow does not exist"):
        build_image(ctx, root=sandbox_cache)
    ctx2 = make_context(tmp_path / "ctx2", """\
FROM debian:bookworm-slim AS build
RUN mkdir /out && ln -s /root /out/root

FROM debian:bookworm-slim
COPY --from=build /out/root /stolen-root
""")
    with running(build_image(ctx2, root=sandbox_cache)) as s:  # the link itself is copied, as a link
        assert sh(s, "readlink /stolen-root") == "/root"


def test_instructions_before_the_first_from_are_refused(tmp_path, sandbox_cache):
    ctx = make_context(tmp_path / "ctx", "ARG V=1\nRUN true\nFROM debian:bookworm-slim\n")
    with pytest.raises(DockerfileError, match=r"Dockerfile:2: RUN before the first FROM"):
        build_image(ctx, root=sandbox_cache)
