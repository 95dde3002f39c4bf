"""Tests for evokit.sandbox.runtime: exec, persistence between execs, file transfer, limits on output.

Every test runs real commands in a sandbox started from the session's base image and, through
``running``, checks that stopping it leaves no process, mount, state dir or cgroup behind.
"""

import os
import subprocess
import threading
import time

import pytest
from inject_support import place_injector
from sandbox_support import running

from evokit.sandbox import Image, Limits, Sandbox, SandboxError, enter
from evokit.sandbox.runtime import RUN_DIR, SandboxSabotaged, process_identity
from evokit.sandbox.verifier_ns import VerifierSetupError

MB = 1024 * 1024


def processes(sandbox) -> str:
    """The command lines of every process in the sandbox, one per line, as the agent sees them."""
    res = sandbox.exec(r'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline; echo; done')
    assert res.ok, res.stderr
    return res.stdout


def test_exec_cwd_env_exit_codes_and_streams(base_image):
    """exec runs in the image's WORKDIR with its ENV; cwd/env override; codes and streams are kept apart."""
    with running(base_image) as s:
        res = s.exec('pwd; echo "$IMAGE_VAR"; echo to-err >&2; exit 7')
        assert (res.stdout, res.stderr, res.return_code, res.timed_out) == ("/app\nfrom-image\n", "to-err\n", 7, False)
        assert not res.ok
        res = s.exec('pwd; echo "$IMAGE_VAR $CALL_VAR"', cwd="/tmp", env={"CALL_VAR": "c", "IMAGE_VAR": "over"})
        assert res.stdout == "/tmp\nover c\n" and res.ok
        assert s.exec("cat ready.txt").stdout == "ready\n"  # built by the image's RUN
        assert s.exec("exit 0").return_code == 0
        assert s.exec("kill -9 $$").return_code in (-9, 137)
        assert s.exec("hostname").stdout.strip() == "sandbox"


def test_exec_argv_form_is_not_shell_parsed(base_image):
    """A list command is an argv: no word splitting, no expansion."""
    with running(base_image) as s:
        res = s.exec(["printf", "%s|", "a b", "$HOME", "*"])
        assert res.stdout == "a b|$HOME|*|"
        assert s.exec(["false"]).return_code == 1
        assert s.exec(["/no/such/binary"]).return_code != 0


def test_exec_as_user(base_image):
    """``user=`` runs as that account (name or uid); the default is the image's USER (root here)."""
    with running(base_image) as s:
        assert s.exec("id -u").stdout.strip() == "0"
        assert s.exec("id -un; id -u; id -g", user="agent").stdout.split() == ["agent", "1234", "1234"]
        assert s.exec("id -u; id -g", user=1234).stdout.split() == ["1234", "1234"]
        res = s.exec("touch /etc/agent-was-here", user="agent")
        assert res.return_code != 0 and "Permission denied" in res.stderr
        assert s.exec("echo hi > /logs/agent/x && cat /logs/agent/x", user="agent").stdout == "hi\n"


def test_files_and_background_processes_persist_between_execs(base_image):
    """A file written and a daemon started by one exec are there for the next, as with docker exec."""
    with running(base_image) as s:
        assert s.exec("echo kept > /app/state.txt && mkdir -p /var/tmp/d").ok
        assert s.exec("nohup sleep 4321 >/dev/null 2>&1 &").ok
        assert s.exec("cat /app/state.txt").stdout == "kept\n"
        assert "sleep 4321" in processes(s)


def test_localhost_resolves_offline_and_dev_shm_is_shared_memory(base_image):
    """Like Docker: /etc/hosts names localhost (offline tasks run local servers), and /dev/shm is
    a world-writable tmpfs that a non-root agent can use for POSIX shared memory."""
    with running(base_image, network=False) as s:
        assert "localhost" in s.exec("getent hosts localhost").stdout
        assert s.exec("hostname -f").stdout == "sandbox\n"
        res = s.exec("timeout 3 bash -c '</dev/tcp/localhost/9'")  # resolves; nobody listens
        assert res.return_code != 0 and "Connection refused" in res.stderr, res.stderr
        assert s.exec("stat -c %a /dev/shm").stdout == "1777\n"
        assert s.exec("echo x > /dev/shm/seg && cat /dev/shm/seg", user="agent").stdout == "x\n"


def test_concurrent_execs(base_image):
    """Execs from several threads at once (Harbor calls from worker threads) all run correctly."""
    with running(base_image) as s:
        results = {}

        def work(i):
            results[i] = s.exec(f"echo {i} > /tmp/f{i} && cat /tmp/f{i}")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {i: r.stdout for i, r in results.items()} == {i: f"{i}\n" for i in range(8)}


def test_many_sandboxes_start_and_stop_in_parallel(base_image):
    """Six sandboxes started, used and stopped from six threads at once are independent and clean."""
    outputs, errors = {}, []

    def one(i):
        try:
            with running(base_image) as s:
                s.write_file("/app/id.txt", f"{i}\n")
                outputs[i] = s.exec("cat /app/id.txt; ls /proc | grep -cE '^[0-9]+$'").stdout.split()
        except Exception as e:  # reported below with the thread's index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert {i: out[0] for i, out in outputs.items()} == {i: str(i) for i in range(6)}
    assert all(int(out[1]) <= 5 for out in outputs.values())  # each sees only its own processes


def test_upload_and_download_round_trips(base_image, tmp_path):
    """upload_file/upload_dir/write_file go in and read_file/download_file/download_dir come back intact."""
    blob = os.urandom(300_000) + bytes(range(256))
    src = tmp_path / "in" / "blob.bin"
    src.parent.mkdir()
    src.write_bytes(blob)
    src.chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "top.txt").write_text("top\n")
    (tree / "sub" / "deeper" / "leaf.txt").write_text("leaf\n")
    (tree / "sub" / "link").symlink_to("deeper/leaf.txt")
    with running(base_image) as s:
        s.upload_file(src, "/data/new/dir/blob.bin")
        assert s.read_file("/data/new/dir/blob.bin") == blob
        assert s.exec("stat -c '%a %u' /data/new/dir/blob.bin").stdout == "755 0\n"
        s.upload_dir(tree, "/data/tree")
        assert s.exec("cd /data/tree && find . | sort").stdout.split() == [
            ".", "./sub", "./sub/deeper", "./sub/deeper/leaf.txt", "./sub/link", "./top.txt"]
        assert s.exec("readlink /data/tree/sub/link && cat /data/tree/sub/link").stdout == "deeper/leaf.txt\nleaf\n"
        s.write_file("/data/written.bin", bytes(range(256)) * 10, mode=0o600)
        assert s.read_file("/data/written.bin") == bytes(range(256)) * 10
        assert s.exec("stat -c %a /data/written.bin").stdout == "600\n"
        s.write_file("/data/text.txt", "héllo\n")
        assert s.read_file("/data/text.txt") == "héllo\n".encode()
        s.download_file("/data/new/dir/blob.bin", tmp_path / "out" / "nested" / "blob.bin")
        assert (tmp_path / "out" / "nested" / "blob.bin").read_bytes() == blob
        s.download_dir("/data/tree", tmp_path / "back")
        assert (tmp_path / "back" / "sub" / "deeper" / "leaf.txt").read_text() == "leaf\n"
        link = tmp_path / "back" / "sub" / "link"  # links are resolved, never carried (transfer)
        assert not link.is_symlink() and link.read_text() == "leaf\n"
        assert (tmp_path / "back" / "top.txt").read_text() == "top\n"
        with pytest.raises(FileNotFoundError):
            s.read_file("/data/missing.txt")
        with pytest.raises(FileNotFoundError):
            s.read_file("/data/tree")  # a directory is not a file
        # the agent's account can read what root uploaded to its logs dir
        s.write_file("/logs/agent/note.txt", "n\n")
        assert s.exec("cat /logs/agent/note.txt", user="agent").stdout == "n\n"


def test_download_dir_skips_links_that_leave_the_target(base_image, tmp_path):
    """Links planted by the agent (absolute, or escaping with ..) are skipped, never followed on the
    host; the rest of the directory still comes back (a link that stays inside, as a copy)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    with running(base_image) as s:
        assert s.exec(f"mkdir -p /out/d && ln -s {victim} /out/abs && ln -s ../../../../../..{tmp_path} /out/up"
                      " && echo data > /out/plain.txt && ln -s plain.txt /out/inside && ln -s / /out/d/root").ok
        target = tmp_path / "dl"
        s.download_dir("/out", target)
        assert sorted(os.listdir(target)) == ["d", "inside", "plain.txt"]
        assert os.listdir(target / "d") == []
        assert (target / "inside").read_text() == "data\n" and not (target / "inside").is_symlink()
    assert victim.read_text() == "untouched\n"


def test_output_flood_is_capped_and_the_sandbox_stays_usable(base_image):
    """``yes | head -c 50M`` keeps only head and tail of the output (4 MiB); the sandbox still works."""
    with running(base_image) as s:
        res = s.exec("yes | head -c 50M", timeout_sec=60)
        assert res.ok
        assert res.truncated_bytes == 50 * MB - 4 * MB
        assert len(res.stdout.encode()) < 4 * MB + 200
        assert res.stdout.startswith("y\ny\n") and res.stdout.endswith("y\ny\n")
        assert "truncated by evokit" in res.stdout
        small = s.exec("seq 1 100000", max_output_bytes=1000)
        assert small.stdout.startswith("1\n2\n") and small.stdout.endswith("99999\n100000\n")
        assert len(small.stdout) < 1100
        assert s.exec("echo still-usable").stdout == "still-usable\n"


def test_endless_output_with_timeout_is_killed_and_capped(base_image):
    """``yes`` with a timeout: killed at the timeout (code 124), output capped, no ``yes`` left running."""
    with running(base_image) as s:
        t0 = time.monotonic()
        res = s.exec("yes", timeout_sec=3)
        assert time.monotonic() - t0 < 10
        assert res.timed_out and res.return_code == 124 and not res.ok
        assert len(res.stdout.encode()) < 4 * MB + 200 and res.truncated_bytes > 0
        assert "yes" not in processes(s).split()
        assert s.exec("echo ok").stdout == "ok\n"


def test_timeout_kills_the_command_and_its_children(base_image):
    """A command past ``timeout_sec`` returns timed_out with code 124; it and its children are gone."""
    with running(base_image) as s:
        t0 = time.monotonic()
        res = s.exec("sleep 1111 & sleep 2222; echo never", timeout_sec=2)
        assert time.monotonic() - t0 < 5
        assert res.timed_out and res.return_code == 124 and "never" not in res.stdout
        left = processes(s)
        assert "sleep 1111" not in left and "sleep 2222" not in left
        assert s.exec("echo after").stdout == "after\n"


def test_exec_after_stop_raises(base_image):
    """A stopped sandbox refuses commands with SandboxError; stop is idempotent."""
    s = Sandbox(base_image).start()
    assert s.running
    s.stop()
    assert not s.running
    with pytest.raises(SandboxError):
        s.exec("true")
    s.stop()
    with pytest.raises(SandboxError):
        Sandbox(base_image).exec("true")  # never started


def test_failed_start_raises_and_leaves_nothing(base_image):
    """A sandbox whose image layers are missing fails to start with SandboxError and cleans up."""
    broken = Image(key="broken", root=base_image.root, lowerdirs=("layers/does-not-exist",))
    s = Sandbox(broken)
    with pytest.raises(SandboxError, match="failed to start"):
        s.start()
    assert not (RUN_DIR / s.id).exists()
    found = subprocess.run(["find", "/sys/fs/cgroup", "-name", f"evokit-{s.id}"],
                           capture_output=True, text=True).stdout
    assert found == ""


# ---------------------------------------------------------------- the resource-limit class
@pytest.mark.parametrize(("field", "value", "why"), [
    ("memory_mb", 10**12, "absurdly large"),
    ("memory_mb", -1, "must be positive"),
    ("memory_mb", 0, "must be positive"),
    ("cpus", 0, "must be positive"),
    ("cpus", -1, "must be positive"),
    ("cpus", 0.001, "too small"),
    ("storage_mb", 0, "must be positive"),
    ("storage_mb", 4, "too small"),
])
def test_bad_limits_in_task_toml_are_clear_errors_naming_the_field(tmp_path, field, value, why):
    """Zero, negative, too small or absurd limits in task.toml fail when the task is read, with the
    file and the field named: never silently unlimited, never a crash inside start()."""
    from sandbox_support import write_harbor_task

    from evokit.sandbox.task_env import limits_from_config, sandbox_for_task
    from evokit.tasks import TaskFormatError, load_task

    task = write_harbor_task(tmp_path / "task")
    toml = (task / "task.toml").read_text()
    toml = "\n".join(line for line in toml.splitlines() if not line.startswith(field))
    (task / "task.toml").write_text(toml.replace("[environment]\n", f"[environment]\n{field} = {value}\n"))
    with pytest.raises(TaskFormatError, match=rf"task.toml: \[environment\] {field} = {value}: {why}"):
        load_task(task)
    with pytest.raises(SandboxError, match=rf"{task}/task.toml: \[environment\] {field} = {value}: {why}"):
        sandbox_for_task(task, image=object())  # refused before any image or sandbox exists
    from harbor.models.task.task import Task
    with pytest.raises(SandboxError, match=why):
        limits_from_config(Task(task).config.environment)


def test_limits_validation_rejects_non_numbers_and_keeps_good_values():
    """Limits itself checks every field (the Harbor path and direct callers alike)."""
    from evokit.tasks.limits import LimitsError

    for bad in ({"memory_mb": True}, {"memory_mb": 512.5}, {"cpus": "2"}, {"cpus": float("nan")},
                {"pids": 0}, {"pids": 10**9}):
        with pytest.raises(LimitsError, match=next(iter(bad))):
            Limits(**bad)
    assert Limits(cpus=0.5, memory_mb=512, storage_mb=256, pids=64).cpus == 0.5
    assert Limits(cpus=None, memory_mb=None, storage_mb=None, pids=None).memory_mb is None


def test_small_valid_limits_start_and_apply(base_image):
    """The smallest accepted values really run (cpus 0.01, 16 MB memory/storage, 16 pids)."""
    with running(base_image, limits=Limits(cpus=0.01, memory_mb=16, storage_mb=16, pids=16)) as s:
        assert s.exec("echo ok").stdout == "ok\n"


# ---------------------------------------------------------------- the borrowed-process class
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_pid1_is_the_anchor_and_no_agent_can_take_it_over(base_image, user):
    """The sandbox's only harness process in the agent's view is pid 1, evokit's anchor (no bwrap
    inside: ``--as-pid-1``). The injector (``tests/data/inject.c``) is refused both ways, ptrace
    (EPERM) and a write to ``/proc/1/mem`` (EACCES); ``kill -9 1`` does nothing; ``environ``,
    ``maps`` and ``root`` of pid 1 are closed. The same injector takes over a ``sleep`` of the
    agent's own (the control: the attack is real), and ``kill_commands`` ends that one and finds
    the anchor unchanged."""
    with running(base_image) as s:
        inj = place_injector(s)
        anchor_id = process_identity(s.pid1)
        assert s.exec("cat /proc/1/comm", user=user).stdout == "evokit-init\n"
        seen = s.exec("cat /proc/[0-9]*/comm", user=user).stdout.split()
        assert seen.count("evokit-init") == 1 and set(seen) <= {"evokit-init", "bash", "cat"}, seen
        daemon = "while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done"
        res = s.exec(f"{inj} ptrace 1 '{daemon}'; {inj} mem 1 '{daemon}'; kill -9 1; sleep 0.3; cat /proc/1/comm; "
                     "cat /proc/1/environ /proc/1/maps; ls /proc/1/root/", user=user)
        assert res.stdout.splitlines() == ["refused: ptrace attach: Operation not permitted",
                                           "refused: open /proc/PID/mem for writing: Permission denied",
                                           "evokit-init"], res.stdout
        assert res.stderr.count("Permission denied") == 3, res.stderr
        control = s.exec(f"sleep 1000 >/dev/null 2>&1 & p=$!; sleep 0.2; {inj} ptrace $p 'echo taken > /tmp/marker-{user}; "
                         f"exec sleep 999'; sleep 0.5; cat /tmp/marker-{user}", user=user, timeout_sec=10)
        assert control.stdout == "injected\ntaken\n", control
        assert s.kill_commands() >= 1  # the taken-over sleep (a command's process) ends; the anchor is spared
        assert process_identity(s.pid1) == anchor_id
        assert "sleep 999" not in processes(s)


def test_a_spared_process_that_changed_is_sabotage(base_image):
    """``kill_commands`` checks every process it spares by program and start time: here the
    sandbox's slirp4netns (outside the agent's reach, so the host ends it to make the change) is
    gone, and the check says so as :class:`SandboxSabotaged` (a SandboxError: reward 0 upstream)."""
    with running(base_image, network=True) as s:
        assert s.kill_commands() == 0  # unchanged: no complaint
        slirp = next(p for p, (name, _) in s._spared.items() if name == "slirp4netns")
        os.kill(slirp, 9)
        for _ in range(100):
            if process_identity(slirp) is None:
                break
            time.sleep(0.01)
        with pytest.raises(SandboxSabotaged, match=r"sabotage: slirp4netns \(host pid \d+\) is gone"):
            s.kill_commands()
        assert isinstance(SandboxSabotaged("x"), SandboxError)


def test_anchor_is_freestanding_and_reaps_orphans(base_image):
    """The anchor is a static binary with no interpreter (it runs in any image, musl or none), and as
    pid 1 it reaps orphans: 50 daemonised children that exit leave no zombie behind."""
    head = enter.anchor().read_bytes()[:4096]
    assert head[:4] == b"\x7fELF" and b"ld-linux" not in head and b"ld-musl" not in head
    with running(base_image) as s:
        s.exec("for i in $(seq 50); do (sleep 0.1 &) ; done")
        time.sleep(0.6)
        states = s.exec("cat /proc/[0-9]*/stat 2>/dev/null | awk '{print $3}' | sort | uniq -c").stdout
        assert " Z" not in states, states


# ---------------------------------------------------------------- the verifier's private namespaces
UP = "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7070) 2>/dev/null && exit 0; sleep 0.05; done; exit 1"
SCAN = ('for p in /proc/[0-9]*; do c=$(tr "\\0" " " < $p/cmdline 2>/dev/null); '
        'case "$c" in *verifier-pro[b]e*) echo "${p#/proc/} $c" >> /app/seen;; esac; done')


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_verifier_namespace_is_out_of_the_agents_reach(base_image, user, tmp_path):
    """The tests' side of a shared-mode sandbox: it sees the agent's files and reaches its services
    (a TCP server on localhost), but the agent's daemon, looking for the verifier's processes in
    ``/proc``, writing ``/logs/verifier/reward.txt`` and reading ``/tests`` all the while, finds
    nothing, writes nothing the host reads and reads no key. The control: the same scan sees a
    process of that name started as an ordinary command. Stopping the namespace ends its processes."""
    with running(base_image) as s:
        assert s.exec("mkdir -p /app && chmod 777 /app && echo agent-work > /app/work.txt").ok
        server = ("perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalAddr=>\"127.0.0.1:7070\",Listen=>5,"
                  "ReuseAddr=>1) or die; while($c=$s->accept){print $c \"pong\\n\"; close $c}' >/dev/null 2>&1 &")
        daemon = (f"while :; do {SCAN}; echo 1 > /logs/verifier/reward.txt 2>/dev/null; "
                  "cat /tests/* >> /app/stolen 2>/dev/null; sleep 0.02; done")
        assert s.exec(f"{server} nohup sh -c '{daemon}' >/dev/null 2>&1 &", user=user).ok
        assert s.exec(UP).ok
        (tmp_path / "keys").mkdir()
        (tmp_path / "keys" / "answer.txt").write_text("the-answer\n")
        with s.verifier_namespace() as v:
            v.upload_dir(tmp_path / "keys", "/tests")
            res = v.exec("exec -a verifier-probe bash -c 'cat /app/work.txt; exec 3<>/dev/tcp/127.0.0.1/7070; "
                         "head -1 <&3; cat /proc/1/comm; echo 0 > /logs/verifier/reward.txt; sleep 1'",
                         user="root", timeout_sec=20)
            assert res.stdout == "agent-work\npong\nevokit-init\n", res
            v.stop()
            assert v.read_file("/logs/verifier/reward.txt", 100) == b"0\n"  # the tests' own, never the daemon's
        assert s.exec("sleep 0.2; cat /app/seen /app/stolen 2>/dev/null; true").stdout == ""
        s.exec("exec -a verifier-probe sleep 1", user=user)  # the control: an ordinary command is seen
        assert "verifier-probe" in s.exec("sleep 0.2; cat /app/seen").stdout
        assert s.exec("cat /logs/verifier/reward.txt").stdout == "1\n"  # the daemon wrote only its own copy
        assert s.kill_commands() >= 2


def test_verifier_mounts_refuse_a_planted_link(base_image, tmp_path):
    """An agent that makes ``/tests`` a link to ``/etc`` (root) gets no verifier: the helper opens
    every component of a mount target without following links, so nothing is mounted over the
    sandbox's ``/etc`` and the host's is untouched."""
    with running(base_image) as s:
        assert s.exec("rm -rf /tests && ln -s /etc /tests").ok
        with pytest.raises(VerifierSetupError, match="a link or a file where a directory belongs"):
            s.verifier_namespace()
        assert s.exec("test -f /etc/passwd && readlink /tests").stdout == "/etc\n"
        assert s.exec("true").ok
