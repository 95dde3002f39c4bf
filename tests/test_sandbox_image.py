"""Tests for evokit.sandbox.image: Dockerfile → cached overlay layers, checked inside a sandbox.

Each test writes a small build context in ``tmp_path``, builds it into a cache whose base is
the shared Debian minbase rootfs, and checks the result from inside a running sandbox:
ENV/ARG/WORKDIR, every COPY form, ADD of a local archive, USER and SHELL, Debian's merged
``/usr`` symlinks, the layer cache (no-op rebuilds, partial rebuilds, no partial layers after
a failure, two processes building at once), and real apt/pip installs at build time.
"""

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from sandbox_support import layer_dirs, make_context, peak_rss, reset_peak_rss, running, temp_dirs

from evokit.sandbox import DockerfileError, ImageBuildError, build_image


def sh(sandbox, command: str, **kw) -> str:
    """Run ``command`` in the sandbox, assert it succeeded, return its stdout stripped."""
    res = sandbox.exec(command, **kw)
    assert res.ok, f"{command!r} failed ({res.return_code}): {res.stderr}"
    return res.stdout.strip()


def test_env_arg_and_workdir(tmp_path, sandbox_cache):
    """ARG defaults and build args reach RUN only; ENV (both forms) reaches RUN and exec; WORKDIR chains."""
    ctx = make_context(tmp_path / "env", """\
FROM debian:bookworm-slim
ARG VERSION=1.0
ARG NOT_GIVEN
ENV APP_VERSION=$VERSION GREETING="hello world" FALLBACK=${NOT_GIVEN:-fallback}
ENV OLD_FORM legacy value
WORKDIR /srv
WORKDIR sub
RUN echo "$VERSION|$APP_VERSION|$GREETING|$OLD_FORM|$(pwd)" > /build.txt
""")
    image = build_image(ctx, root=sandbox_cache, build_args={"VERSION": "2.5"})
    assert image.workdir == "/srv/sub"
    assert image.env["APP_VERSION"] == "2.5" and image.env["FALLBACK"] == "fallback"
    assert "VERSION" not in image.env  # ARG is build-time only
    with running(image) as s:
        assert sh(s, "cat /build.txt") == "2.5|2.5|hello world|legacy value|/srv/sub"
        assert sh(s, 'echo "$(pwd)|$GREETING|$OLD_FORM|${VERSION:-unset}"') == \
            "/srv/sub|hello world|legacy value|unset"
    default = build_image(ctx, root=sandbox_cache)
    assert default.env["APP_VERSION"] == "1.0" and default.key != image.key


def test_arg_before_from_selects_the_base(tmp_path, sandbox_cache, monkeypatch):
    """``ARG TAG`` before FROM is substituted into FROM; a build arg can send it to the registry
    (here a Docker Hub mirror on a closed local port: a clear error naming line, image and mirror)."""
    ctx = make_context(tmp_path / "argfrom", "ARG TAG=bookworm-slim\nFROM debian:${TAG}\n")
    image = build_image(ctx, root=sandbox_cache)
    assert len(image.lowerdirs) == 1 and image.lowerdirs[0].startswith("base/bookworm")
    monkeypatch.setenv("EVOKIT_REGISTRY_MIRRORS", "docker.io=http://127.0.0.1:9")
    with pytest.raises(ImageBuildError, match=r"Dockerfile:2: image 'debian:trixie' from http://127.0.0.1:9: "
                                              r"cannot reach the registry"):
        build_image(ctx, root=sandbox_cache, build_args={"TAG": "trixie"})


def test_copy_forms(tmp_path, sandbox_cache):
    """COPY of a file, a dir's contents (links kept), into an existing dir, relative dest, --chown, --chmod, glob."""
    ctx = make_context(tmp_path / "copy", """\
FROM debian:bookworm-slim
RUN useradd -u 1500 builder
WORKDIR /app
COPY a.txt /app/a.txt
COPY a.txt /renamed.txt
COPY tree /opt/tree/
COPY tree/ /opt/tree2
COPY b.txt /app
COPY b.txt rel/
COPY --chown=builder:builder a.txt /owned-by-name.txt
COPY --chown=1234:2345 a.txt /owned-by-number.txt
COPY --chmod=750 run.sh /usr/local/bin/run.sh
COPY *.cfg /etc/cfgs/
""", {"a.txt": "A\n", "b.txt": "B\n", "tree/x.txt": "X\n", "tree/sub/y.txt": "Y\n",
      "run.sh": "#!/bin/sh\necho ran\n", "one.cfg": "1\n", "two.cfg": "2\n", "skip.txt": "no\n"})
    (ctx / "run.sh").chmod(0o644)
    (ctx / "tree" / "dir-link").symlink_to("sub")
    (ctx / "tree" / "file-link").symlink_to("x.txt")
    image = build_image(ctx, root=sandbox_cache)
    with running(image) as s:
        assert sh(s, "cat /app/a.txt /renamed.txt") == "A\nA"
        assert sh(s, "cd /opt/tree && find . -type f | sort") == "./sub/y.txt\n./x.txt"
        assert sh(s, "cd /opt/tree && readlink dir-link file-link && cat dir-link/y.txt") == "sub\nx.txt\nY"
        assert sh(s, "cd /opt/tree2 && find . -type f | sort") == "./sub/y.txt\n./x.txt"
        assert sh(s, "test -d /app && cat /app/b.txt") == "B"  # into the existing dir
        assert sh(s, "cat /app/rel/b.txt") == "B"  # relative to WORKDIR
        assert sh(s, "stat -c '%U:%G' /owned-by-name.txt") == "builder:builder"
        assert sh(s, "stat -c '%u:%g' /owned-by-number.txt") == "1234:2345"
        assert sh(s, "stat -c '%u:%g' /app/a.txt") == "0:0"  # default owner is root
        assert sh(s, "stat -c '%a' /usr/local/bin/run.sh && run.sh") == "750\nran"
        assert sh(s, "ls /etc/cfgs") == "one.cfg\ntwo.cfg"


def test_copy_missing_source_and_escape_are_errors(tmp_path, sandbox_cache):
    """A COPY source that does not exist, or leaves the context, is an error naming the line."""
    ctx = make_context(tmp_path / "missing", "FROM debian:bookworm\n\nCOPY nope.txt /x\n")
    with pytest.raises(DockerfileError, match=r"Dockerfile:3.*nope\.txt"):
        build_image(ctx, root=sandbox_cache)
    (tmp_path / "outside.txt").write_text("secret")
    ctx = make_context(tmp_path / "escape", "FROM debian:bookworm\nCOPY ../outside.txt /x\n")
    with pytest.raises(DockerfileError, match=r"Dockerfile:2.*outside the build context"):
        build_image(ctx, root=sandbox_cache)


def test_add_local_archive_is_extracted(tmp_path, sandbox_cache):
    """ADD of a local .tar.gz unpacks it at the destination; ADD of a plain file copies it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("pkg/one.txt", b"one\n"), ("pkg/deep/two.txt", b"two\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ctx = make_context(tmp_path / "add", "FROM debian:bookworm-slim\nADD bundle.tar.gz /opt/bundle/\n"
                       "ADD plain.txt /plain.txt\n", {"bundle.tar.gz": buf.getvalue(), "plain.txt": "p\n"})
    with running(build_image(ctx, root=sandbox_cache)) as s:
        assert sh(s, "cat /opt/bundle/pkg/one.txt /opt/bundle/pkg/deep/two.txt /plain.txt") == "one\ntwo\np"
        assert sh(s, "ls /opt/bundle") == "pkg"


def test_run_heredocs(tmp_path, sandbox_cache):
    """``RUN <<EOF`` runs its body as a script; ``RUN cat <<'EOF' > f`` feeds the body to cat."""
    ctx = make_context(tmp_path / "heredoc", """\
FROM debian:bookworm-slim
RUN <<EOF
echo one > /h1
echo two >> /h1
EOF
RUN cat <<'EOF' > /h2
literal $HOME
key=value
EOF
""")
    with running(build_image(ctx, root=sandbox_cache)) as s:
        assert sh(s, "cat /h1") == "one\ntwo"
        assert sh(s, "cat /h2") == "literal $HOME\nkey=value"


def test_user_applies_to_run_and_exec_and_shell_to_run(tmp_path, sandbox_cache):
    """USER makes later RUN steps and exec run as that user; SHELL changes the RUN shell only."""
    ctx = make_context(tmp_path / "user", """\
FROM debian:bookworm-slim
RUN useradd -m agent
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN echo "bash=$BASH_VERSION" > /shell.txt
USER agent
RUN id -un > /home/agent/who.txt && id -gn >> /home/agent/who.txt
WORKDIR /home/agent
""")
    image = build_image(ctx, root=sandbox_cache)
    assert image.user == "agent" and image.shell == ("/bin/bash", "-o", "pipefail", "-c")
    with running(image) as s:
        assert sh(s, "cat who.txt") == "agent\nagent"
        assert sh(s, "stat -c %U who.txt") == "agent"
        assert sh(s, "id -un; id -gn") == "agent\nagent"
        assert sh(s, "id -un", user="root") == "root"
        assert sh(s, "id -un; id -gn", user="nobody") == "nobody\nnogroup"
        assert sh(s, "cat /shell.txt").startswith("bash=5.")
        assert not s.exec("touch /root/x").ok  # really unprivileged


def test_copy_into_bin_keeps_merged_usr_symlinks(tmp_path, sandbox_cache):
    """``COPY x /bin/x`` writes /usr/bin/x through Debian's /bin -> usr/bin link and keeps the link."""
    ctx = make_context(tmp_path / "bin", "FROM debian:bookworm-slim\nCOPY tool /bin/tool\nCOPY tool /lib/tool-data\n",
                       {"tool": "#!/bin/sh\necho tool-ok\n"})
    (ctx / "tool").chmod(0o755)
    image = build_image(ctx, root=sandbox_cache)
    top = image.root / image.lowerdirs[0]
    assert not (top / "lib").is_dir() or (top / "lib").is_symlink()
    assert (top / "usr/lib/tool-data").is_file()
    assert not (image.root / image.lowerdirs[1] / "bin").is_dir()
    with running(image) as s:
        assert sh(s, "readlink /bin; readlink /lib; tool") == "usr/bin\nusr/lib\ntool-ok"
        assert sh(s, "ls /usr/bin/tool && bash -c 'echo still-works'").endswith("still-works")


STEPS = """\
FROM debian:bookworm-slim
WORKDIR /work
RUN echo one > one.txt
RUN echo {two} > two.txt
COPY data.txt /work/data.txt
RUN cat one.txt two.txt data.txt > all.txt
"""


def _build_logged(ctx, root):
    lines: list[str] = []
    t0 = time.perf_counter()
    image = build_image(ctx, root=root, log=lines.append)
    return image, [ln for ln in lines if ln.startswith("step")], time.perf_counter() - t0


def test_unchanged_rebuild_is_a_cache_hit(tmp_path, fresh_cache):
    """Rebuilding an unchanged Dockerfile builds no layer and takes < 10% of the first build."""
    ctx = make_context(tmp_path / "ctx", STEPS.format(two="two"), {"data.txt": "data\n"})
    first, built, t_first = _build_logged(ctx, fresh_cache)
    assert len(built) == 5 and len(layer_dirs(fresh_cache)) == 5
    before = layer_dirs(fresh_cache)
    second, rebuilt, t_second = _build_logged(ctx, fresh_cache)
    assert rebuilt == [] and layer_dirs(fresh_cache) == before
    assert second == first
    assert t_second < 0.1 * t_first, (t_second, t_first)


def test_editing_one_line_rebuilds_from_that_line(tmp_path, fresh_cache):
    """Changing one RUN rebuilds it and the steps below; a changed COPY source rebuilds from the COPY."""
    ctx = make_context(tmp_path / "ctx", STEPS.format(two="two"), {"data.txt": "data\n"})
    first, _, _ = _build_logged(ctx, fresh_cache)
    (ctx / "Dockerfile").write_text(STEPS.format(two="TWO"))
    second, built, _ = _build_logged(ctx, fresh_cache)
    assert [b.rsplit(":", 1)[1] for b in built] == ["4", "5", "6"]  # Dockerfile lines rebuilt
    reused = set(first.lowerdirs) & set(second.lowerdirs)
    assert len(reused) == 3  # base, WORKDIR, RUN one
    assert len(layer_dirs(fresh_cache)) == 5 + 3
    (ctx / "data.txt").write_text("new data\n")
    third, built, _ = _build_logged(ctx, fresh_cache)
    assert [b.rsplit(":", 1)[1] for b in built] == ["5", "6"]
    with running(third) as s:
        assert sh(s, "cat /work/all.txt") == "one\nTWO\nnew data"


def test_failing_run_names_the_line_and_leaves_nothing(tmp_path, fresh_cache):
    """A failing RUN raises ImageBuildError with file:line and output; no temp dir, no partial layer."""
    ctx = make_context(tmp_path / "ctx", """\
FROM debian:bookworm-slim
WORKDIR /w
RUN echo fine > fine.txt
RUN echo partial > partial.txt && echo before-failure && echo on-stderr >&2 && exit 3
RUN echo never
""")
    for _ in range(2):  # the second attempt must fail the same way: nothing half-built was cached
        with pytest.raises(ImageBuildError) as e:
            build_image(ctx, root=fresh_cache)
        msg = str(e.value)
        assert f"{ctx / 'Dockerfile'}:4" in msg and "exit code 3" in msg
        assert "before-failure" in msg and "on-stderr" in msg
        assert temp_dirs(fresh_cache) == []
        assert len(layer_dirs(fresh_cache)) == 2  # WORKDIR and the first RUN only


def test_step_timeout_kills_the_step_and_leaves_nothing(tmp_path, fresh_cache):
    """A RUN past ``step_timeout_sec`` is killed (with its processes) and reported; nothing is cached."""
    token = uuid.uuid4().hex
    ctx = make_context(tmp_path / "ctx", f"FROM debian:bookworm-slim\nRUN sleep 300 && echo {token}\n")
    t0 = time.monotonic()
    with pytest.raises(ImageBuildError, match=r"Dockerfile:2: build step failed \(timed out"):
        build_image(ctx, root=fresh_cache, step_timeout_sec=1)
    assert time.monotonic() - t0 < 15
    assert temp_dirs(fresh_cache) == [] and layer_dirs(fresh_cache) == set()
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert token not in ps


def test_build_steps_run_in_a_pids_limited_cgroup_that_is_removed(tmp_path, fresh_cache):
    """Each RUN runs in its own cgroup with a pids limit (a fork bomb in a generated Dockerfile
    stops there, not at the host's limit); the cgroup is gone once the step ends."""
    ctx = make_context(tmp_path / "ctx", "FROM debian:bookworm-slim\n"
                       "RUN grep pids /proc/self/cgroup > /cg.txt && sleep 1.5\n")
    pids_root = Path("/sys/fs/cgroup/pids")
    if not pids_root.is_dir():  # cgroup v2: one unified hierarchy
        pids_root = Path("/sys/fs/cgroup")
    seen: dict[str, str] = {}
    build = threading.Thread(target=lambda: seen.update(image=build_image(ctx, root=fresh_cache)))
    build.start()
    while build.is_alive():
        for d in pids_root.rglob("evokit-build-*"):
            try:
                seen[str(d.relative_to(pids_root))] = (d / "pids.max").read_text().strip()
            except OSError:
                pass
        time.sleep(0.05)
    with running(seen.pop("image")) as s:
        path = s.exec("cat /cg.txt").stdout.strip().split(":", 2)[2].lstrip("/")
    assert "evokit-build-" in path
    assert seen.get(path) == "4096", (path, seen)  # the limit was in force while the step ran
    assert not (pids_root / path).exists()


_BUILD_SCRIPT = """
import json, sys
from pathlib import Path
from evokit.sandbox import build_image
log = []
image = build_image(sys.argv[1], root=Path(sys.argv[2]), log=log.append)
print(json.dumps({"key": image.key, "lowerdirs": image.lowerdirs, "log": log}))
"""


def test_two_processes_building_the_same_image_share_one_cache_entry(tmp_path, fresh_cache):
    """Two processes building one fresh Dockerfile at once both succeed with one layer per step."""
    token = uuid.uuid4().hex
    ctx = make_context(tmp_path / "ctx", f"""\
FROM debian:bookworm-slim
WORKDIR /app
RUN sleep 1 && echo {token} > token.txt && date +%s%N > built-at.txt
COPY f.txt /app/f.txt
RUN cat token.txt f.txt > both.txt
""", {"f.txt": "f\n"})
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(ctx), str(fresh_cache)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    results = [json.loads(out) for out, _ in outs]
    assert results[0]["key"] == results[1]["key"]
    assert results[0]["lowerdirs"] == results[1]["lowerdirs"]
    built = [line for r in results for line in r["log"] if line.startswith("step")]
    assert len(built) == 4, built  # each of WORKDIR, RUN, COPY, RUN built once in total
    assert len(layer_dirs(fresh_cache)) == 4
    assert temp_dirs(fresh_cache) == []
    image = build_image(ctx, root=fresh_cache)
    with running(image) as s:
        assert sh(s, "cat both.txt") == f"{token}\nf"


def test_apt_get_install_at_build_time(tmp_path, sandbox_cache):
    """``apt-get update && apt-get install -y jq`` works in a RUN step and jq runs in the sandbox."""
    ctx = make_context(tmp_path / "apt", """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*
""")
    image = build_image(ctx, root=sandbox_cache)
    with running(image) as s:
        assert sh(s, """echo '{"a": {"b": 42}}' | jq .a.b""") == "42"
    # the base rootfs itself was not touched by apt
    assert not os.path.exists(image.root / image.lowerdirs[-1] / "usr/bin/jq")


def test_pip_install_into_a_venv_at_build_time(tmp_path, sandbox_cache):
    """python3-venv from apt, then ``pip install tabulate==0.9.0`` into a venv, all at build time."""
    ctx = make_context(tmp_path / "pip", """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/v && /opt/v/bin/pip install --no-cache-dir tabulate==0.9.0
ENV PATH=/opt/v/bin:$PATH
""")
    image = build_image(ctx, root=sandbox_cache)
    with running(image) as s:
        out = sh(s, "python -c 'import tabulate; print(tabulate.__version__)'")
        assert out == "0.9.0"


# ---------------------------------------------------------------- host files: host resources, cache
def test_copy_of_a_big_sparse_file_is_streamed_and_capped(tmp_path, sandbox_cache, monkeypatch):
    """Class 9: COPY of a 200 MiB sparse file keeps host peak RSS within 48 MiB (the tar goes through
    a temp file, not memory); a 1 GiB sparse file over the cap is a clear error naming file and cap."""
    from evokit.sandbox import copy_layer

    ctx = make_context(tmp_path / "ctx", "FROM debian:bookworm-slim\nCOPY big.bin /data/big.bin\n")
    with open(ctx / "big.bin", "wb") as f:
        f.truncate(200 << 20)
        f.seek(100 << 20)
        f.write(b"middle")
    reset_peak_rss()
    before = peak_rss()
    img = build_image(ctx, root=sandbox_cache)
    assert peak_rss() - before < 48 << 20
    with running(img) as s:
        assert s.exec("stat -c %s /data/big.bin && dd if=/data/big.bin bs=1M skip=100 count=1 2>/dev/null"
                      " | head -c 6").stdout == f"{200 << 20}\nmiddle"
    with open(ctx / "big.bin", "wb") as f:
        f.truncate(1 << 30)
    monkeypatch.setattr(copy_layer, "MAX_COPY_BYTES", 512 << 20)
    reset_peak_rss()
    before = peak_rss()
    t0 = time.monotonic()
    with pytest.raises(DockerfileError, match=r"Dockerfile:2: .*big.bin \(1073741824 bytes\).*cap of 536870912"):
        build_image(ctx, root=sandbox_cache)
    assert time.monotonic() - t0 < 30 and peak_rss() - before < 48 << 20


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_special_file_in_the_build_context_is_refused_not_a_hang(tmp_path, sandbox_cache, kind):
    """Class 9: a FIFO (or socket) in the context, copied alone or inside a directory, is an error
    naming it at once (opening a FIFO would block before the step's timeout even starts)."""
    import socket

    ctx = make_context(tmp_path / "ctx", "FROM debian:bookworm-slim\nCOPY src/ /src/\n", {"src/ok.txt": "ok\n"})
    special = ctx / "src" / "special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(special))
    t0 = time.monotonic()
    with pytest.raises(DockerfileError, match=rf"Dockerfile:2: COPY/ADD source {special} is a {kind.upper() if kind == 'fifo' else kind}"):
        build_image(ctx, root=sandbox_cache, step_timeout_sec=5)
    (ctx / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY src/special /x\n")
    with pytest.raises(DockerfileError, match="only files, directories and symlinks"):
        build_image(ctx, root=sandbox_cache, step_timeout_sec=5)
    assert time.monotonic() - t0 < 20


def test_layer_cache_is_private_and_holds_no_setuid_files_or_devices(tmp_path, fresh_cache):
    """Class 10: a RUN that makes bash set-uid, sets file capabilities and makes device nodes, and a
    COPY of a set-uid file, store layers with none of it (whiteouts of deleted files stay); the cache
    root is 0700 (narrowed if it was wider); an unprivileged host user cannot reach it or run a layer's
    bash as root. In the sandbox the agent gets the same neutralised files."""
    os.chmod(fresh_cache, 0o755)  # a cache made wide by someone else: narrowed on use
    ctx = make_context(tmp_path / "ctx", "FROM debian:bookworm-slim\n"
                       "RUN chmod u+s /bin/bash && chmod g+s /usr/bin/env && mknod /dev-b b 8 0 && "
                       "mknod /dev-c c 1 3 && mkdir -p /sgid && chmod 2775 /sgid && rm /etc/issue\n"
                       "COPY suid /usr/local/bin/suid\n", {"suid": "#!/bin/sh\nid\n"})
    os.chmod(ctx / "suid", 0o4755)
    img = build_image(ctx, root=fresh_cache)
    assert os.stat(fresh_cache).st_mode & 0o777 == 0o700
    layers = [fresh_cache / rel for rel in img.lowerdirs if rel.startswith("layers/")]
    bad, whiteouts = [], []
    for layer in layers:
        for dirpath, dirnames, filenames in os.walk(layer):
            for name in dirnames + filenames:
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    whiteouts.append(name)
                elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                    bad.append(f"device {name}")
                elif not stat.S_ISDIR(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    bad.append(f"set-id {name}")
    assert bad == [] and "issue" in whiteouts
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    bash = next(layer / "usr/bin/bash" for layer in layers if (layer / "usr/bin/bash").exists())
    res = subprocess.run([*nobody, "sh", "-c", f"ls {fresh_cache}/layers; {bash} -p -c 'id -u'"],
                         capture_output=True, text=True)
    assert "Permission denied" in res.stderr and res.stdout.strip() != "0"
    with running(img) as s:
        assert s.exec("stat -c %a /bin/bash /usr/local/bin/suid /sgid; ls /dev-b /dev-c; "
                      "test -e /etc/issue || echo issue-gone").stdout.split() == ["755", "755", "2775",
                                                                                "issue-gone"]
        assert s.exec("/bin/bash -p -c 'id -u'", user="nobody").stdout.strip() == "65534"
