"""Tests for evokit.sandbox.transfer: host-safe, streamed, capped file transfers.

The agent is an adversary that is root (or uid 1234) in its sandbox and reads this source:
every test plants what such an agent would (links into ``/tests`` or onto the host, links the
kernel resolves elsewhere than their text says, FIFOs, device nodes, set-uid files, a trojaned
``tar``/``sh``, huge sparse files) in a real sandbox and checks what arrives on the other side,
what the host's memory did, and, through ``running``, that nothing of either sandbox is left
behind.
"""

import errno
import os
import stat
import subprocess
import sys
import time

import pytest
from docker_support import docker_client, docker_daemon  # noqa: F401
from sandbox_support import peak_rss, reset_peak_rss, running

from evokit.sandbox import SandboxError
from evokit.sandbox.transfer import TransferError, copy_between, download, settle

GiB = 1 << 30
MiB = 1 << 20

AGENT_WORK = r"""
set -e
mkdir -p /app/d/sub /app/node_modules/pkg/bin /app/node_modules/.bin
echo answer > /app/d/f
echo nested > /app/d/sub/g
chmod 640 /app/d/f
printf '#!/bin/sh\necho tool\n' > /app/node_modules/pkg/bin/tool && chmod 755 /app/node_modules/pkg/bin/tool
ln -s ../pkg/bin/tool /app/node_modules/.bin/tool   # a link to a copied file: a copy of it
ln -s d /app/dlink                                   # a link to a copied dir: a copy of it
ln -s /tests/expected_output.txt /app/out.txt        # the answer-key link: refused
ln -s /etc/hostname /app/host_name                   # a file outside the copied paths: refused
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
    """Only the agent's files cross, and no symlink: links into /tests, to files or dirs outside the
    paths, loops, FIFOs and device nodes are refused; links to copied files and dirs arrive as copies;
    set-uid/set-gid bits are gone; owners, modes and contents are kept. Run as root and as the
    unprivileged agent (uid 1234, who owns /app)."""
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
        assert {"/app/out.txt", "/app/etc_link", "/app/host_name", "/app/loop1", "/app/loop2",
                "/app/fifo"} <= refused.keys()
        assert "dangling" in refused["/app/out.txt"]
        assert "outside the copied paths" in refused["/app/host_name"]
        assert "a directory outside" in refused["/app/etc_link"]
        assert "loop" in refused["/app/loop1"]
        if user == "root":
            assert "block device" in refused["/app/disk"] and "character device" in refused["/app/null"]
        # the answer key never becomes readable through the agent's output path
        assert dst.exec("test -e /app/out.txt || test -L /app/out.txt").return_code == 1
        assert dst.exec("test -e /app/fifo || test -e /app/disk || test -e /app/etc_link").return_code == 1
        assert dst.exec("test -e /app/host_name || test -L /app/host_name").return_code == 1
        assert dst.exec("test -e /app/only_in_dst").return_code == 1  # replaced by the agent's /app
        assert dst.exec("find /app -type l").stdout == ""  # the verifier receives no symlink at all
        assert dst.exec("cat /app/d/f /app/d/sub/g /app/dlink/f /app/dlink/sub/g").stdout == \
            "answer\nnested\nanswer\nnested\n"
        assert _mode(dst, "/app/dlink") == f"755 {'agent' if user == 'agent' else 'root'} directory"
        assert dst.exec("/app/node_modules/.bin/tool").stdout == "tool\n"
        assert _mode(dst, "/app/node_modules/.bin/tool").endswith("regular file")
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


def test_sparse_3gib_log_download_keeps_host_memory_bounded(base_image, tmp_path):
    """The host-memory class: a 3 GiB sparse log comes back streamed (peak RSS grows < 64 MiB, holes kept on disk);
    with the default 1 GiB cap it is refused with an error naming the file and the cap."""
    with running(base_image) as s:
        assert s.exec("truncate -s 3G /logs/agent/huge.log && echo tail >> /logs/agent/huge.log").ok
        reset_peak_rss()
        before = peak_rss()
        s.download_dir("/logs/agent", tmp_path / "logs", max_bytes=4 * GiB)
        assert peak_rss() - before < 64 * MiB
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
    """The host-write class: an agent (root, or uid 1234) plants absolute and escaping links, a link
    chain, a path deeper than PATH_MAX with a link at its end (the tarfile filter-bypass shape),
    FIFOs and (root) device nodes; the host gets the files, copies of the files that in-tree links
    lead to, no symlink at all, and nothing anywhere else."""
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
        assert not (got / "inside").is_symlink() and (got / "inside").read_text() == "ok\n"
        for name in ("victim", "chain", "pipe", "disk"):  # chain -> victim -> a path missing in the sandbox
            assert not os.path.lexists(got / name)
        assert _host_links(got) == []
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


def _host_links(top) -> list[str]:
    """Every symlink under the host dir ``top`` (none is followed)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        found += [os.path.join(dirpath, n) for n in dirnames + filenames if os.path.islink(os.path.join(dirpath, n))]
    return found


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
    """The linked-tests-folder class: a ``tests/`` that is itself a symlink is refused (its target is never uploaded);
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
    """The host-write class end to end: through Harbor's ``Trial`` on ``BubblewrapEnvironment``, a root agent that
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
    found = subprocess.run(["find", str(trial_dir), "-type", "l", "-o", "-type", "p", "-o", "-type", "b", "-o",
                            "-type", "c"], capture_output=True, text=True)
    assert found.returncode == 0 and found.stdout == "", found.stdout[-2000:]
    assert (trial_dir / "agent" / "note.txt").read_text() == "note\n"  # the logs themselves did come back
    if not include_logs:
        assert (trial_dir / "agent" / d200).is_dir()


# ------------------------------------------------ links whose text says one place, the kernel another
KEY = "KEY-7f3e"  # the verifier's answer key: must never be readable from what the agent's work became
SETUP = """set -e
mkdir -p /srv/out /tests /app/deep/tests && chown {user} /app /srv/out /app/deep /app/deep/tests
echo decoy-in-src > /tests/expected_totals.tsv   # so that links into /tests resolve in the source
"""
LINK_ATTACKS = r"""set -e
cd /app
mkdir -p a/b tests deep/er x
echo decoy > tests/expected_totals.tsv
echo decoy > deep/tests/expected_totals.tsv
ln -s /app a/b/up                                                      # a dir link to an ancestor
ln -s a/b/up/../../../tests/expected_totals.tsv account_totals.tsv    # the reproduction
ln -s c2 c1 && ln -s c3 c2 && ln -s a/b/up/../../../tests/expected_totals.tsv c3   # a chain of links
ln -s / deep/er/abs                                                    # a dir link to / in the work dir
ln -s deep/er/abs/../../tests/expected_totals.tsv dotdot_after_abs     # '..' after an absolute link
ln -s /app/deep deep/er/abs2 && ln -s deep/er/abs2/../../tests/expected_totals.tsv dotdot_after_abs2
ln -s deep/er/abs/tests/expected_totals.tsv through_root
ln -s /proc/self/root/tests/expected_totals.tsv proc_self              # magic links, /proc's mount
ln -s /proc/1/root/tests/expected_totals.tsv proc_one
ln -s /dev/shm/../../tests/expected_totals.tsv through_a_mount
echo outside > /srv/out/hard.txt && ln /srv/out/hard.txt hl && ln -s /srv/out/hard.txt via_hard
echo secret-9c1d > /srv/out/secret.txt && ln -s /srv/out/secret.txt via_secret
ln -s ../a x/dirlink                                                   # a dir link inside the paths
ln -s ../account_totals.tsv x/to_a_refused_link
ln -s ../x x/self_parent                                               # its own parent: a loop
echo ok > x/plain && ln -s plain x/good                                # an ordinary in-tree link
"""
REFUSED = {  # path -> a word of the reason
    "/app/account_totals.tsv": "outside the copied paths", "/app/c1": "outside", "/app/c2": "outside",
    "/app/c3": "outside", "/app/a/b/up": "loop", "/app/deep/er/abs": "a directory outside",
    "/app/dotdot_after_abs": "outside", "/app/dotdot_after_abs2": "outside", "/app/through_root": "outside", "/app/proc_self": "root mount",
    "/app/proc_one": "root mount", "/app/through_a_mount": "root mount", "/app/via_secret": "outside",
    "/app/x/to_a_refused_link": "outside", "/app/x/self_parent": "loop",
}


@pytest.mark.parametrize("user", ["root", "agent"])
def test_copy_between_resolves_every_link_by_the_kernel_and_creates_none(base_image, user):
    """The answer-key-through-a-link class: ``a/b/up/../../../tests/key`` with ``up -> /app`` reads as
    ``/app/tests/key`` (a decoy inside the copied paths) but the kernel resolves it to ``/tests/key``.
    With the reproduction, a chain, '..' after an absolute link, a dir link to '/', /proc magic
    links, a path through a mount, a link to a hard-linked file and dir links (one a loop), the
    verifier gets regular files and dirs only, none of the answer key, none of the files outside the
    paths (but the hard-linked one, whose bytes cross anyway), and every refusal with its reason."""
    with running(base_image) as src, running(base_image) as dst:
        assert src.exec(SETUP.format(user=user), user="root").ok
        res = src.exec(LINK_ATTACKS, user=user)
        assert res.ok, res.stderr
        if user == "root":  # a top path that is itself a link out of the paths
            assert src.exec("rm -rf /logs/artifacts && ln -s /app/a/b/up/../../../tests /logs/artifacts").ok
        assert dst.exec(f"mkdir -p /tests && echo {KEY} > /tests/expected_totals.tsv").ok
        src.kill_commands()
        report = copy_between(src, dst, ["/app", "/logs/artifacts"], max_bytes=64 * MiB)
        refused = dict(report.refused)
        for path, why in REFUSED.items():
            assert why in refused.get(path, ""), (path, refused.get(path))
        if user == "root":
            assert "a directory outside" in refused["/logs/artifacts"]
        assert dst.exec("find /app /logs/artifacts -type l").stdout == ""
        assert dst.exec(f"grep -rl -e {KEY} -e secret-9c1d -e decoy-in-src /app /logs/artifacts").stdout == ""
        for path in REFUSED:
            assert dst.exec(f"test -e {path} || test -L {path}").return_code == 1, path
        assert dst.exec("cat /app/hl /app/via_hard /app/x/good").stdout == "outside\noutside\nok\n"
        # the dir link inside arrives as a real dir with the target's files, its loop left out
        assert dst.exec("find /app/x/dirlink | sort").stdout == "/app/x/dirlink\n/app/x/dirlink/b\n"
        assert _mode(dst, "/app/x/dirlink") == f"755 {user} directory"


@pytest.mark.parametrize("user", ["root", "agent"])
def test_download_resolves_every_link_in_the_sandbox_and_writes_none(base_image, tmp_path, user):
    """Downloads follow the same rule: the link shapes above in a downloaded dir (plus ones whose text
    names a host path) leave no symlink on the host, nothing outside the target, and none of the
    sandbox's files outside the downloaded tree; in-tree links arrive as copies."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("untouched\n")
    with running(base_image) as s:
        assert s.exec(SETUP.format(user=user), user="root").ok
        res = s.exec(LINK_ATTACKS + f"ln -s a/b/up/../../../../../../..{victim}/keep.txt host_dotted\n"
                     f"ln -s deep/er/abs{victim}/keep.txt host_through_root\n", user=user)
        assert res.ok, res.stderr
        assert s.exec(f"mkdir -p {victim} && echo sandbox-side > {victim}/keep.txt").ok
        got = tmp_path / "dl"
        report = download(s, "/app", got, 64 * MiB, as_file=False)
        refused = dict(report.refused)
        for path, why in {**REFUSED, "/app/host_dotted": "outside", "/app/host_through_root": "outside"}.items():
            assert why in refused.get(path, ""), (path, refused.get(path))
            assert not os.path.lexists(got / path.removeprefix("/app/")), path
        assert _host_links(got) == []
        assert sorted(os.listdir(tmp_path)) == ["dl", "victim"]
        assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == "untouched\n"
        texts = {p.read_text() for p in got.rglob("*") if p.is_file()}
        assert texts.isdisjoint({"decoy-in-src\n", "secret-9c1d\n", "sandbox-side\n"}), texts
        assert (got / "via_hard").read_text() == "outside\n" and (got / "x" / "good").read_text() == "ok\n"
        assert sorted(str(p.relative_to(got)) for p in (got / "x" / "dirlink").rglob("*")) == ["x/dirlink/b"]


SWAPPER = r"""mkdir -p /app/real_dir && echo in-tree > /app/real_dir/f && echo secret-4b2a > /srv/out/secret.txt
mkdir -p /srv/out/sdir && echo secret-4b2a > /srv/out/sdir/f
ln -s victim /app/out && ln -s victim_dir /app/out_dir
setsid sh -c 'while :; do
  echo decoy > /app/t1 && mv -T /app/t1 /app/victim
  ln -s /srv/out/secret.txt /app/t2 && mv -T /app/t2 /app/victim
  ln -s real_dir /app/t3 && mv -T /app/t3 /app/victim_dir
  ln -s /srv/out/sdir /app/t4 && mv -T /app/t4 /app/victim_dir
done' > /dev/null 2>&1 < /dev/null &
"""


@pytest.mark.parametrize("user", ["root", "agent"])
def test_links_swapped_during_the_transfer_never_carry_outside_files(base_image, tmp_path, user):
    """An agent process left running swaps the targets of ``/app/out`` and ``/app/out_dir`` between
    in-tree entries and links to a secret outside the paths while copies and downloads walk the tree:
    the check and the read use the one fd the kernel resolved, so no transfer ever carries the secret
    or a symlink, whatever the interleaving (both outcomes, copied and refused, are seen)."""
    with running(base_image) as src, running(base_image) as dst:
        assert src.exec(SETUP.format(user=user), user="root").ok
        assert src.exec(SWAPPER, user=user).ok
        outcomes = set()
        for i in range(40):
            report = copy_between(src, dst, ["/app"], max_bytes=64 * MiB)
            got = tmp_path / f"dl{i}"
            dl = download(src, "/app", got, 64 * MiB, as_file=False)
            for r in (report, dl):
                outcomes |= {("copied" if "/app/out" in r.copied else "refused"),
                             ("dir copied" if "/app/out_dir" in r.copied else "dir refused")}
            assert _host_links(got) == []
            assert all("secret-4b2a" not in p.read_text() for p in got.rglob("*") if p.is_file())
            res = dst.exec("find /app -type l; grep -rl secret-4b2a /app; true")
            assert res.stdout == "", res.stdout
        assert outcomes == {"copied", "refused", "dir copied", "dir refused"}, outcomes


REPRO = ("mkdir -p /app/a/b /app/tests; echo decoy > /app/tests/expected_totals.tsv; ln -s /app /app/a/b/up; "
         "ln -s a/b/up/../../../tests/expected_totals.tsv /app/account_totals.tsv")
DOTDOT_AFTER_ABS = ("mkdir -p /app/deep/er /app/deep/tests && echo decoy > /app/deep/tests/expected_totals.tsv && "
                    "ln -s /app/deep /app/deep/er/abs && "
                    "ln -s deep/er/abs/../../tests/expected_totals.tsv /app/account_totals.tsv")


def test_answer_key_links_score_zero_on_the_docker_backend(docker_client, monkeypatch, tmp_path):  # noqa: F811
    """The answer-key-through-a-link class on evokit's Docker backend (``EVOKIT_SANDBOX=docker``):
    the reproduction and '..' after an absolute link, as the example task's solution, score 0
    through run_trial (separate verifier: the copy walks the container's root); the reference
    answer reached through an in-tree file link and dir link scores 1; and ``download_dir`` of the
    attacked /app writes no symlink on the host."""
    import shutil
    from pathlib import Path

    from harbor.models.task.task import Task

    from evokit.sandbox.task_env import image_for_task, sandbox_for_task
    from evokit.verify import run_trial

    monkeypatch.setenv("EVOKIT_SANDBOX", "docker")
    example = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "csv-quoted-ledger"
    solve = (example / "solution" / "solve.sh").read_text().replace("/app/account_totals.tsv", "/app/real/t.tsv")
    solutions = {"repro": REPRO, "dotdot": DOTDOT_AFTER_ABS,
                 "honest": f"mkdir -p /app/real\n{solve}\nln -s real /app/via\n"
                           "ln -s via/t.tsv /app/account_totals.tsv"}
    image = None
    for name, commands in solutions.items():
        folder = tmp_path / name
        shutil.copytree(example, folder)
        (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{commands}\n")
        task = Task(folder)
        image = image or image_for_task(task)
        run = run_trial(task, image, kind="oracle")
        assert run.mode == "separate", run.mode
        assert run.rewards == {"reward": 1.0 if name == "honest" else 0.0}, (name, run.rewards, run.error)
    with sandbox_for_task(task, image=image) as box:
        assert box.exec(f"{REPRO}; echo ok > /app/plain; ln -s plain /app/good").ok
        box.download_dir("/app", tmp_path / "dl")
    assert _host_links(tmp_path / "dl") == []
    assert (tmp_path / "dl" / "plain").read_text() == "ok\n"
    assert not os.path.lexists(tmp_path / "dl" / "account_totals.tsv")


def test_directory_link_farms_stop_at_the_caps(base_image):
    """Directory links are expanded, so an agent can build a farm that doubles at every level (each
    dir holds two links to the next): the expansion is finite (no dir inside itself) and stopped by
    ``max_files`` with a TransferError, not an endless or exponential walk; a small farm arrives whole."""
    with running(base_image) as src, running(base_image) as dst:
        farm = ("mkdir -p /app/{name} && cd /app/{name} && for i in $(seq 0 {n}); do mkdir d$i; done && "
                "for i in $(seq 0 $(({n} - 1))); do ln -s ../d$((i + 1)) d$i/a; ln -s ../d$((i + 1)) d$i/b; done && "
                "echo leaf > d{n}/x")
        assert src.exec(farm.format(name="big", n=24) + " && " + farm.format(name="small", n=2)).ok
        with pytest.raises(TransferError, match="more than 5000 files and directories"):
            copy_between(src, dst, ["/app/big"], max_bytes=64 * MiB, max_files=5000)
        copy_between(src, dst, ["/app/small"], max_bytes=MiB)
        leaves = dst.exec("cd /app/small && find . -name x | sort").stdout.split()
        assert leaves == ["./d0/a/a/x", "./d0/a/b/x", "./d0/b/a/x", "./d0/b/b/x", "./d1/a/x", "./d1/b/x",
                          "./d2/x"], leaves


HOLD = "import os, sys, time; fd = os.open(sys.argv[1], os.O_WRONLY); print('held', flush=True); time.sleep(float(sys.argv[2]))"


def test_a_file_held_open_for_writing_elsewhere_is_settled_before_it_is_executed(tmp_path):
    """Why every file written into a sandbox is settled: a write descriptor another process holds (as a
    child that another thread forked holds the uploader's until its exec) makes executing the file fail
    with ETXTBSY, which scored a task's test.sh 0. The control shows that failure on a real exec;
    ``settle`` returns only once the holder has let go, and the file then runs. A holder that outlasts
    the timeout is an error naming the file."""
    script = tmp_path / "test.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(script), "1.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    held_at = time.monotonic()
    with pytest.raises(OSError) as busy:
        subprocess.run([str(script)], check=True)
    assert busy.value.errno == errno.ETXTBSY
    dirfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        settle(dirfd, "test.sh", "tests/test.sh")
        assert time.monotonic() - held_at >= 0.9  # the holder sleeps 1 s with the file open
        assert subprocess.run([str(script)], capture_output=True, text=True).stdout == "ran\n"
        stuck = subprocess.Popen([sys.executable, "-c", HOLD, str(script), "30"], stdout=subprocess.PIPE, text=True)
        try:
            assert stuck.stdout.readline().strip() == "held"
            with pytest.raises(TransferError, match="tests/test.sh: still open for writing"):
                settle(dirfd, "test.sh", "tests/test.sh", timeout=0.2)
        finally:
            stuck.kill()
            stuck.wait()
    finally:
        os.close(dirfd)
        holder.wait()


def test_an_upload_into_a_sandbox_waits_for_a_forked_childs_copy_of_its_write_descriptor(base_image, tmp_path):
    """The race as it happens: a child forked while the host writes a file into a sandbox keeps a copy of the
    write descriptor after the host closes its own. While it does, the file cannot be executed in the
    sandbox (exit 126, "Text file busy"); ``settle`` on the sandbox's root waits the child out, as every
    upload does, and the file then runs."""
    with running(base_image) as sb:
        sb.exec(["mkdir", "-p", "/app"], user="root")
        root = sb.open_root()
        try:
            app = os.open("app", os.O_PATH | os.O_DIRECTORY, dir_fd=root)
            out = os.open("run.sh", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o755, dir_fd=app)
            os.write(out, b"#!/bin/sh\necho ran\n")
            child = subprocess.Popen(["sleep", "1"], pass_fds=(out,))  # the forked child's copy
            os.close(out)
            held_at = time.monotonic()
            busy = sb.exec(["/app/run.sh"], user="root")
            assert busy.return_code == 126 and "busy" in (busy.stdout + busy.stderr).lower(), busy
            settle(app, "run.sh", "/app/run.sh")
            assert time.monotonic() - held_at >= 0.9
            res = sb.exec(["/app/run.sh"], user="root")
            assert (res.return_code, res.stdout) == (0, "ran\n"), res
            child.wait()
            os.close(app)
        finally:
            os.close(root)
