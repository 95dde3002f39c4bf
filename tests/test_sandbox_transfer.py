"""Tests for evokit.sandbox.transfer: host-safe, streamed, capped file transfers (issue 11).

The agent is an adversary that is root (or uid 1234) in its sandbox and reads this source:
every test plants what such an agent would (links into ``/tests`` or onto the host, FIFOs,
device nodes, set-uid files, a trojaned ``tar``/``sh``, huge sparse files) in a real sandbox
and checks what arrives on the other side, what the host's memory did, and, through
``running``, that nothing of either sandbox is left behind.
"""

import os
import stat
import subprocess

import pytest
from sandbox_support import running

from evokit.sandbox import SandboxError
from evokit.sandbox.transfer import TransferError, copy_between

GiB = 1 << 30
MiB = 1 << 20

AGENT_WORK = r"""
set -e
mkdir -p /app/d/sub /app/node_modules/pkg/bin /app/node_modules/.bin
echo answer > /app/d/f
echo nested > /app/d/sub/g
chmod 640 /app/d/f
printf '#!/bin/sh\necho tool\n' > /app/node_modules/pkg/bin/tool && chmod 755 /app/node_modules/pkg/bin/tool
ln -s ../pkg/bin/tool /app/node_modules/.bin/tool   # a link inside the copied paths: stays a link
ln -s d /app/dlink                                   # a link to a copied dir: stays a link
ln -s /tests/expected_output.txt /app/out.txt        # the answer-key link (class 2): refused
ln -s /etc/hostname /app/host_name                   # a file outside: copied as its content
ln -s /etc /app/etc_link                             # a dir outside: refused
ln -s loop1 /app/loop2 && ln -s loop2 /app/loop1     # a loop: refused
mkfifo /app/fifo
cp /bin/ls /app/suid_ls && chmod 4755 /app/suid_ls   # set-uid dropped
mkdir -p /app/sgid_dir && chmod 2775 /app/sgid_dir   # set-gid dropped on dirs too
"""


def _mode(sandbox, path: str) -> str:
    res = sandbox.exec(["stat", "-c", "%a %U %F", path])
    assert res.ok, res.stderr
    return res.stdout.strip()


@pytest.mark.parametrize("user", ["root", "agent"])
def test_copy_between_resolves_or_refuses_links_and_drops_specials(base_image, user):
    """Only the agent's files cross: links into /tests, dir links out of the paths, loops, FIFOs and
    device nodes are refused; in-tree links stay links; set-uid/set-gid bits are gone; owners, modes
    and contents are kept. Run as root and as the unprivileged agent (uid 1234, who owns /app)."""
    with running(base_image) as src, running(base_image) as dst:
        assert src.exec("chown agent /app", user="root").ok
        res = src.exec(AGENT_WORK, user=user)
        assert res.ok, res.stderr
        if user == "root":
            assert src.exec("mknod /app/disk b 8 0 && mknod /app/null c 1 3").ok
        assert dst.exec("echo stale > /app/only_in_dst && mkdir -p /tests && echo key > /tests/expected_output.txt"
                        ).ok
        src.kill_commands()
        report = copy_between(src, dst, ["/app"], max_bytes=64 * MiB)
        refused = dict(report.refused)
        assert {"/app/out.txt", "/app/etc_link", "/app/loop1", "/app/loop2", "/app/fifo"} <= refused.keys()
        assert "dangling" in refused["/app/out.txt"]
        if user == "root":
            assert "block device" in refused["/app/disk"] and "character device" in refused["/app/null"]
        # the answer key never becomes readable through the agent's output path
        assert dst.exec("test -e /app/out.txt || test -L /app/out.txt").return_code == 1
        assert dst.exec("test -e /app/fifo || test -e /app/disk || test -e /app/etc_link").return_code == 1
        assert dst.exec("test -e /app/only_in_dst").return_code == 1  # replaced by the agent's /app
        assert dst.exec("cat /app/d/f /app/d/sub/g /app/dlink/f").stdout == "answer\nnested\nanswer\n"
        assert dst.exec("readlink /app/node_modules/.bin/tool && /app/node_modules/.bin/tool").stdout == \
            "../pkg/bin/tool\ntool\n"
        assert dst.exec("test -L /app/host_name && echo link || cat /app/host_name").stdout == \
            src.exec("cat /etc/hostname").stdout
        owner = "agent" if user == "agent" else "root"
        assert _mode(dst, "/app/d/f") == f"640 {owner} regular file"
        assert _mode(dst, "/app/suid_ls") == f"755 {owner} regular file"
        assert _mode(dst, "/app/sgid_dir") == f"775 {owner} directory"
        assert _mode(dst, "/app") == "755 agent directory"
        assert dst.exec("/app/suid_ls /").ok  # still a working program, just not set-uid
        assert report.bytes > 0 and "/app/d/f" in report.copied


def test_copy_between_caps_bytes_and_names_where_it_stopped(base_image):
    """A copy over ``max_bytes`` (apparent sizes: a sparse file counts in full) is a TransferError
    naming the file; a missing path is removed in the destination and reported; bad paths are refused."""
    with running(base_image) as src, running(base_image) as dst:
        assert src.exec("mkdir -p /app/big && truncate -s 3G /app/big/sparse.log").ok
        with pytest.raises(TransferError, match=r"/app/big/sparse.log \(3221225472 bytes\).*cap of 1048576"):
            copy_between(src, dst, ["/app/big"], max_bytes=MiB)
        assert src.exec("rm -rf /app/ready.txt").ok
        report = copy_between(src, dst, ["/app/ready.txt"], max_bytes=MiB)
        assert report.refused == (("/app/ready.txt", "missing in the source (removed in the destination)"),)
        assert dst.exec("test -e /app/ready.txt").return_code == 1
        for bad in ("app", "/app/../etc", "/", "/tests", "/logs", "/logs/verifier/reward.txt", "/proc/1"):
            with pytest.raises(ValueError):
                copy_between(src, dst, [bad], max_bytes=MiB)
        assert src.exec("mkdir -p /app/many && cd /app/many && seq 1 300 | xargs touch").ok
        with pytest.raises(TransferError, match="more than 100 files and directories"):
            copy_between(src, dst, ["/app/many"], max_bytes=MiB, max_files=100)
        copy_between(src, dst, ["/app/many", "/logs/artifacts"], max_bytes=MiB)
        assert dst.exec("ls /app/many | wc -l").stdout.strip() == "300"


def test_copy_between_ignores_a_trojaned_tar_and_shell(base_image):
    """A root agent that replaces tar, sh and bash in its sandbox changes nothing: no program of
    either sandbox runs in a transfer (the host walks the root with openat2)."""
    with running(base_image) as src, running(base_image) as dst:
        evil = "#!/bin/sh\\necho pwned > /app/pwned; exit 0\\n"
        assert src.exec(f"echo good > /app/work.txt && for t in /usr/bin/tar /bin/tar /usr/bin/dash; do "
                        f"[ -e $t ] && printf '{evil}' > $t; done; true", user="root").ok
        copy_between(src, dst, ["/app"], max_bytes=MiB)
        assert dst.exec("cat /app/work.txt").stdout == "good\n"
        assert dst.exec("test -e /app/pwned").return_code == 1
        src.upload_file(__file__, "/app/uploaded.py")
        assert src.read_file("/app/uploaded.py") == open(__file__, "rb").read()
        assert src.exec("test -e /app/pwned").return_code == 1


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM (peak RSS) of this process


def _peak_rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_sparse_3gib_log_download_keeps_host_memory_bounded(base_image, tmp_path):
    """Class 9: a 3 GiB sparse log comes back streamed (peak RSS grows < 64 MiB, holes kept on disk);
    with the default 1 GiB cap it is refused with an error naming the file and the cap."""
    with running(base_image) as s:
        assert s.exec("truncate -s 3G /logs/agent/huge.log && echo tail >> /logs/agent/huge.log").ok
        _reset_peak_rss()
        before = _peak_rss()
        s.download_dir("/logs/agent", tmp_path / "logs", max_bytes=4 * GiB)
        assert _peak_rss() - before < 64 * MiB
        out = tmp_path / "logs" / "huge.log"
        assert out.stat().st_size == 3 * GiB + 5
        assert out.stat().st_blocks * 512 < 16 * MiB  # the holes stayed holes
        with open(out, "rb") as f:
            f.seek(3 * GiB)
            assert f.read() == b"tail\n"
        with pytest.raises(SandboxError, match=r"huge.log \(3221225477 bytes\).*cap of 1073741824"):
            s.download_dir("/logs/agent", tmp_path / "capped")
        with pytest.raises(SandboxError, match="over the cap"):
            s.read_file("/logs/agent/huge.log")


@pytest.mark.parametrize("user", ["root", "agent"])
def test_download_never_writes_outside_the_target(base_image, tmp_path, user):
    """Class 6: an agent (root, or uid 1234) plants absolute and escaping links, a link chain, a path
    deeper than PATH_MAX with a link at its end (the tarfile filter-bypass shape), FIFOs and (root)
    device nodes; the host gets the files, the links that stay inside, and nothing anywhere else."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("untouched\n")
    deep = "/".join(["d" * 200] * 24)  # ~4.8 kB: deeper than PATH_MAX
    up = "/".join([".."] * 30)
    with running(base_image) as s:
        assert s.exec("mkdir /out && chown agent /out").ok
        device = "mknod disk b 8 0" if user == "root" else "touch disk && rm disk"
        res = s.exec(f"set -e; cd /out && for i in $(seq 24); do mkdir {'d' * 200}; cd {'d' * 200}; "
                     f"done; echo deep > f && "
                     f"ln -s {up}{victim} esc && ln -s {victim} abs && cd /out && ln -s {victim} victim && "
                     f"ln -s victim chain && mkfifo pipe && {device} && echo ok > plain && "
                     f"ln -s plain inside", user=user)
        assert res.ok, res.stderr
        before = sorted(os.listdir(tmp_path))
        s.download_dir("/out", tmp_path / "dl")
        assert sorted(os.listdir(tmp_path)) == sorted([*before, "dl"])
        assert sorted(os.listdir(victim)) == ["keep.txt"]
        assert (victim / "keep.txt").read_text() == "untouched\n"
        got = tmp_path / "dl"
        assert os.readlink(got / "inside") == "plain" and (got / "inside").read_text() == "ok\n"
        assert (got / "chain").is_symlink()  # relative and inside: kept, and it points at nothing
        for name in ("victim", "pipe", "disk"):
            assert not os.path.lexists(got / name)
        fd = os.open(got, os.O_RDONLY)
        try:
            for part in deep.split("/"):
                nfd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
            assert sorted(os.listdir(fd)) == ["f"]  # esc and abs skipped
        finally:
            os.close(fd)
        # a download of a file through a planted link resolves inside the sandbox, not on the host
        assert s.exec(f"mkdir -p {victim} && echo sandbox-side > {victim}/keep.txt && "
                      f"ln -s {victim}/keep.txt /out/through").ok
        with pytest.raises(FileNotFoundError, match="not a regular file"):
            s.download_file("/out/through", tmp_path / "through.txt")
        assert s.read_file(f"{victim}/keep.txt") == b"sandbox-side\n"
        assert (victim / "keep.txt").read_text() == "untouched\n"


def test_reads_of_fifos_and_devices_refuse_instead_of_hanging(base_image, tmp_path):
    """read_file/download_file of a FIFO or a device node: a clear error at once, never opened."""
    with running(base_image) as s:
        assert s.exec("mkfifo /app/pipe && mknod /app/zero c 1 5", user="root").ok
        for path in ("/app/pipe", "/app/zero"):
            with pytest.raises(FileNotFoundError, match="not a regular file"):
                s.read_file(path)
            with pytest.raises(FileNotFoundError, match="not a regular file"):
                s.download_file(path, tmp_path / "x")


def test_upload_refuses_a_symlinked_folder_and_links_inside_stay_in_the_sandbox(base_image, tmp_path):
    """Class 12a: a ``tests/`` that is itself a symlink is refused (its target is never uploaded);
    a link inside an uploaded folder arrives as a link resolved in the sandbox, so a host secret it
    names is not read; a FIFO in the folder is an error naming it, not a hang."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret 8f3a\n")
    real = tmp_path / "real_tests"
    real.mkdir()
    (real / "test.sh").write_text("echo hi\n")
    (real / "leak").symlink_to(secret)
    linked = tmp_path / "tests"
    linked.symlink_to(real)
    with running(base_image) as s:
        with pytest.raises(SandboxError, match=r"tests is a symlink .*refusing to upload"):
            s.upload_dir(linked, "/tests")
        assert s.exec("test -e /tests").return_code == 1
        s.upload_dir(real, "/tests")
        assert s.exec("cat /tests/test.sh").stdout == "echo hi\n"
        assert s.exec("readlink /tests/leak").stdout == f"{secret}\n"
        assert "8f3a" not in s.exec("cat /tests/leak").stdout
        os.mkfifo(real / "pipe")
        with pytest.raises(SandboxError, match=r"real_tests/pipe is a FIFO"):
            s.upload_dir(real, "/tests2")
        with pytest.raises(SandboxError, match="is a symlink"):
            s.upload_file(real / "leak", "/tmp/leak")


def test_upload_writes_through_planted_links_only_inside_the_sandbox(base_image, tmp_path):
    """An agent that makes the upload target (or a parent) a link to a host-looking path gets the
    upload inside its own sandbox: the host path is untouched."""
    victim = tmp_path / "victim"
    victim.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "x.txt").write_text("payload\n")
    with running(base_image) as s:
        assert s.exec(f"mkdir -p {victim} && ln -s {victim} /tests && ln -s /nowhere /tests2").ok
        s.upload_dir(src, "/tests")
        assert os.listdir(victim) == []
        assert s.exec(f"cat {victim}/x.txt").stdout == "payload\n"  # the sandbox's own {victim}
        s.write_file("/tests/w.txt", "w\n", mode=0o4755)
        assert os.listdir(victim) == []
        assert _mode(s, f"{victim}/w.txt") == "755 root regular file"  # no set-uid, even from the harness
        s.upload_dir(src, "/tests2")  # a dangling link is replaced by a real directory
        assert _mode(s, "/tests2") == "755 root directory"
        assert s.exec("cat /tests2/x.txt; test -e /nowhere").stdout == "payload\n"
        assert stat.S_ISDIR(os.lstat(victim).st_mode)


def test_filtered_download_takes_selected_regular_files_only(base_image, tmp_path):
    """download_dir_filtered (Harbor's include/exclude/protect) without the sandbox's tar or a host
    tarfile: matching regular files arrive, links/FIFOs never do, protected names always do."""
    victim = tmp_path / "victim"
    victim.mkdir()
    with running(base_image) as s:
        assert s.exec(f"mkdir -p /v/sub && echo a > /v/a.log && echo b > /v/sub/b.log && echo c > /v/c.txt && "
                      f"echo r > /v/reward.txt && ln -s {victim} /v/esc.log && mkfifo /v/p.log && "
                      "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/tar", user="root").ok
        s.download_dir_filtered("/v", tmp_path / "out", include=["*.log"], exclude=["sub/*"],
                                protect=["reward.txt"])
        got = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
        assert got == ["a.log", "reward.txt"]
        assert os.listdir(victim) == []


@pytest.mark.parametrize("include_logs", [[], ["*"]])
def test_harbor_trial_downloads_cannot_write_outside_the_trial_dir(tmp_path, sandbox_cache, monkeypatch,
                                                                   include_logs):
    """Class 6 end to end: through Harbor's ``Trial`` on ``BubblewrapEnvironment``, a root agent that
    trojans tar and plants escaping links, a deeper-than-PATH_MAX path, FIFOs and device nodes in
    /logs/agent and /logs/verifier gets its logs downloaded by Harbor (``download_dir``, or with
    ``include_logs`` the filtered download, whose Harbor default would run the trojaned tar) with
    nothing written outside the trial's own folder."""
    import asyncio

    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial
    from sandbox_support import write_harbor_task

    monkeypatch.setenv("EVOKIT_CACHE", str(sandbox_cache))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("untouched\n")
    d200 = "d" * 200
    attack = (f"printf '#!/bin/sh\\necho trojan; exit 0\\n' > /usr/bin/tar; "
              f"for L in /logs/agent /logs/verifier; do cd $L && ln -s {victim} esc && "
              f"ln -s ../../../../../../../..{victim} up && mkfifo fifo && mknod disk b 8 0 && "
              f"for i in $(seq 24); do mkdir {d200} && cd {d200}; done && ln -s {victim}/keep.txt deep_link; done; "
              "echo note > /logs/agent/note.txt; echo hi > /app/out.txt")
    task = write_harbor_task(tmp_path / "task", solve=attack)
    before = sorted(os.listdir(tmp_path))
    config = TrialConfig(task=TaskConfig(path=task), trials_dir=tmp_path / "trials",
                         agent=AgentConfig(name="oracle", include_logs=include_logs),
                         environment=EnvironmentConfig(import_path="evokit.sandbox:BubblewrapEnvironment"))

    async def go():
        return await (await Trial.create(config)).run()

    result = asyncio.run(go())
    assert result.exception_info is None, result.exception_info
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "trials"])
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == "untouched\n"
    trial_dir = next((tmp_path / "trials").iterdir())
    found = subprocess.run(["find", str(trial_dir), "(", "-type", "l", "-lname", "/*", ")", "-o", "(", "-type", "l",
                            "-lname", "*..*", ")", "-o", "-type", "p", "-o", "-type", "b", "-o", "-type", "c"],
                           capture_output=True, text=True)
    assert found.returncode == 0 and found.stdout == "", found.stdout[-2000:]
    assert (trial_dir / "agent" / "note.txt").read_text() == "note\n"  # the logs themselves did come back
    if not include_logs:
        assert (trial_dir / "agent" / d200).is_dir()
