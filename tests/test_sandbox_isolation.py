"""The isolation battery: what an agent inside a running sandbox can and cannot reach.

Every command here runs *as the agent* (the image's default user, root inside the sandbox,
which is what Harbor agents get) in a started sandbox, and every test also checks, through
``running``, that after ``stop`` nothing of the sandbox is left on the host: no process in its
cgroup or namespaces, no mount of its state dir in any process's mountinfo, no state dir under
/run/evokit, no ``evokit-<id>`` cgroup.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import BASE_DOCKERFILE
from harbor.models.task.task import Task
from sandbox_support import make_context, running, sandbox_processes, trace, write_harbor_task

from evokit.sandbox import Limits, Sandbox, build_image
from evokit.sandbox.task_env import sandbox_for_task

MB = 1024 * 1024
# Grep everywhere the agent can read, except pseudo-filesystems that never end or hold no files.
GREP_ALL = "grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev"


def agent(sandbox, command: str, **kw):
    """Run ``command`` as the agent would (default user, default cwd)."""
    return sandbox.exec(command, **kw)


def test_host_files_and_environment_are_invisible(base_image, tmp_path, monkeypatch):
    """Files on the host (a tmp dir, /root) and the host process's environment are out of reach."""
    tokens = [uuid.uuid4().hex for _ in range(3)]
    secret = tmp_path / "secret.txt"
    secret.write_text(tokens[0])
    root_secret = Path("/root") / f"evokit-secret-{tokens[1][:8]}.txt"
    root_secret.write_text(tokens[1])
    monkeypatch.setenv("EVOKIT_TEST_SECRET", tokens[2])  # e.g. an API key of the harness
    try:
        with running(base_image) as s:
            for path in (secret, root_secret, Path.home() / ".cache" / "evokit"):
                assert agent(s, f"ls {path}").return_code != 0, path
            res = agent(s, f"{GREP_ALL} -e {tokens[0]} -e {tokens[1]} -e {tokens[2]} /", timeout_sec=120)
            assert res.return_code == 1 and res.stdout == "", res.stdout  # 1 = searched, no match
            res = agent(s, f"cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c -e {tokens[2]} -e EVOKIT_TEST_SECRET")
            assert res.stdout.strip() == "0"
            assert agent(s, "find / -xdev -name 'evokit-secret-*' 2>/dev/null").stdout == ""
            # pid 1 is the sandbox's own anchor, not dumpable: its root is closed to the agent, and
            # the root of an agent's own process is the sandbox's root
            assert agent(s, "readlink /proc/1/root").return_code != 0
            assert agent(s, "readlink /proc/$$/root").stdout == "/\n"
            assert agent(s, "ls /proc/$$/root/").stdout == agent(s, "ls /").stdout
            assert agent(s, f"cat /proc/$$/root{secret}").return_code != 0
            assert agent(s, "cat /proc/$$/root/app/ready.txt").stdout == "ready\n"
    finally:
        root_secret.unlink()


def test_task_tests_and_solution_cannot_be_found(tmp_path, sandbox_cache):
    """A task's tests/ and solution/ on the host are nowhere in its sandbox, by name or by content."""
    marker = f"marker-{uuid.uuid4().hex}"
    task_dir = write_harbor_task(tmp_path / "my-task", marker=marker)
    image = build_image(task_dir / "environment", root=sandbox_cache)
    with running(sandbox_for_task(Task(task_dir), image=image)) as s:
        res = agent(s, "find / \\( -path /proc -o -path /sys \\) -prune -o "
                       "\\( -name solve.sh -o -name test.sh -o -name task.toml -o -name 'my-task' \\) -print")
        assert res.ok and res.stdout == "", res.stdout
        res = agent(s, f"{GREP_ALL} {marker} /", timeout_sec=120)
        assert res.return_code == 1 and res.stdout == ""
        assert agent(s, "ls /tests /solution").return_code != 0


def test_stale_reward_written_by_the_agent_is_not_the_verdict(tmp_path, sandbox_cache):
    """An agent that writes reward files and plants a fake /tests cannot fool a verifier flow that
    removes stale rewards, uploads the real tests and runs them: the tests' own reward wins."""
    task_dir = write_harbor_task(tmp_path / "task")
    image = build_image(task_dir / "environment", root=sandbox_cache)
    with running(sandbox_for_task(Task(task_dir), image=image)) as s:
        hack = ("echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
                " && mkdir -p /tests /app/fake && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n'"
                " > /app/fake/test.sh && ln -s /app/fake/test.sh /tests/test.sh")
        assert agent(s, hack).ok
        # the verifier: remove stale rewards, upload the real tests, run them
        assert s.exec("rm -f /logs/verifier/reward.txt /logs/verifier/reward.json", user="root").ok
        s.upload_dir(task_dir / "tests", "/tests")
        res = s.exec("bash /tests/test.sh", user="root")
        assert res.ok, res.stderr
        assert s.read_file("/logs/verifier/reward.txt").strip() == b"0"  # the agent never wrote out.txt
        assert s.exec("test -e /logs/verifier/reward.json").return_code == 1
        assert s.exec("test -L /tests/test.sh").return_code == 1  # the planted link was replaced


def test_no_network_means_no_network(base_image):
    """network=False: DNS fails, TCP to a public IP fails, and the only interface is lo."""
    with running(base_image, network=False) as s:
        assert agent(s, "getent hosts pypi.org", timeout_sec=20).return_code != 0
        t0 = time.monotonic()
        res = agent(s, "timeout 3 bash -c 'echo > /dev/tcp/1.1.1.1/53' && echo CONNECTED", timeout_sec=10)
        assert "CONNECTED" not in res.stdout and res.return_code != 0
        assert time.monotonic() - t0 < 6
        ifaces = agent(s, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
        assert ifaces == ["lo"]


def test_public_network_resolves_and_connects(base_image):
    """network=True gives the host's network: DNS resolves and a TCP connection to PyPI opens."""
    with running(base_image, network=True) as s:
        res = agent(s, "getent hosts pypi.org", timeout_sec=30)
        assert res.ok and "pypi" in res.stdout, res.stderr
        res = agent(s, "timeout 10 bash -c 'echo > /dev/tcp/pypi.org/443' && echo CONNECTED", timeout_sec=20)
        assert "CONNECTED" in res.stdout, res.stderr
        ifaces = agent(s, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
        assert set(ifaces) - {"lo"}


def test_fork_bomb_is_contained_by_the_pids_limit(base_image):
    """A fork bomb hits the sandbox's pids limit; the host can still fork; the sandbox recovers; stop cleans up."""
    with running(base_image, limits=Limits(pids=128, storage_mb=256)) as s:
        pids_dir = next(d for d in s.cgroup.dirs if (d / "pids.max").exists())
        assert (pids_dir / "pids.max").read_text().strip() == "128"
        result = {}
        # the trailing sleep keeps the exec alive until its timeout kills the bomb's process group
        bomb = threading.Thread(target=lambda: result.update(
            res=agent(s, ":(){ :|:& };:; sleep 100", timeout_sec=6)))
        bomb.start()
        time.sleep(2)
        host = subprocess.run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do /bin/true; done; echo host-ok"],
                              capture_output=True, text=True, timeout=10)
        assert host.stdout == "host-ok\n"
        peak = max(int((pids_dir / "pids.current").read_text()) for _ in range(20))
        assert peak <= 128
        bomb.join(timeout=30)
        assert result["res"].timed_out
        events = (pids_dir / "pids.events").read_text()  # "max N": N forks refused by the limit
        assert int(events.split()[1]) > 0, events
        deadline = time.monotonic() + 10
        while (res := agent(s, "echo alive", timeout_sec=5)).stdout != "alive\n" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert res.stdout == "alive\n"


def test_sleep_past_the_timeout_returns_promptly(base_image):
    """``sleep 1000`` with timeout_sec=2 comes back timed out (code 124) within about 5 s."""
    with running(base_image) as s:
        t0 = time.monotonic()
        res = agent(s, "sleep 1000", timeout_sec=2)
        assert res.timed_out and res.return_code == 124
        assert time.monotonic() - t0 < 5


def test_filling_the_disk_stops_at_storage_mb(base_image):
    """``dd`` of 10 GB with storage_mb=64 fails with ENOSPC; the host's disk does not grow."""
    watched = ["/", "/run", "/tmp", str(base_image.root)]
    before = {p: shutil.disk_usage(p).used for p in watched}
    with running(base_image, limits=Limits(storage_mb=64)) as s:
        res = agent(s, "dd if=/dev/zero of=/app/big bs=1M count=10000", timeout_sec=60)
        assert res.return_code != 0 and "No space left on device" in res.stderr
        size = int(agent(s, "stat -c %s /app/big").stdout)
        assert 32 * MB < size <= 64 * MB
        for p in watched:
            assert shutil.disk_usage(p).used - before[p] < 64 * MB, p
        res = agent(s, "dd if=/dev/zero of=/tmp/more bs=1M count=100")
        assert "No space left on device" in res.stderr  # /tmp and / share the one limited layer
        assert agent(s, "rm /app/big /tmp/more && echo ok").stdout == "ok\n"


def test_memory_hog_is_killed_at_memory_mb(base_image):
    """Buffering 600 MB with memory_mb=128 gets the process OOM-killed inside the sandbox only."""
    with running(base_image, limits=Limits(memory_mb=128)) as s:
        res = agent(s, "head -c 600M /dev/zero | tail > /dev/null", timeout_sec=60)
        assert res.return_code in (137, -9), (res.return_code, res.stderr)
        assert s.cgroup.oom_killed()
        assert agent(s, "echo still-here").stdout == "still-here\n"


def test_background_daemons_survive_execs_but_not_stop(base_image):
    """``setsid``/``nohup`` daemons keep running between execs and are gone after stop."""
    with running(base_image) as s:
        t = trace(s)
        t0 = time.monotonic()
        assert agent(s, "setsid sleep 1001 &").ok  # holds the output pipe: must not hang exec
        assert time.monotonic() - t0 < 5
        assert agent(s, "nohup sleep 1002 > /dev/null 2>&1 &").ok
        assert agent(s, "setsid sleep 1003 & sleep 100", timeout_sec=1).timed_out
        inside = agent(s, r"cat /proc/[0-9]*/cmdline | tr '\0' ' '").stdout
        assert all(f"sleep {n}" in inside for n in (1001, 1002, 1003)), inside
        on_host = " | ".join(sandbox_processes(t))
        assert all(f"sleep {n}" in on_host for n in (1001, 1002, 1003)), on_host
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
    assert not [p for p in ps if p in ("sleep 1001", "sleep 1002", "sleep 1003")], ps


def test_agent_has_no_dangerous_capabilities(base_image, monkeypatch):
    """No mounts, no namespace games, no host sysctls, no raw disk through mknod, no host init."""
    monkeypatch.setenv("EVOKIT_HOST_ONLY", "host-env-value")
    st = os.stat("/")
    with running(base_image) as s:
        assert agent(s, "mount -t tmpfs x /mnt").return_code != 0
        assert agent(s, "mount --bind /app /mnt").return_code != 0
        assert agent(s, "unshare -m true").return_code != 0
        assert agent(s, "nsenter -t 1 -m true").return_code != 0
        for path in ("/proc/sys/vm/drop_caches", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname"):
            res = agent(s, f"echo 1 > {path}")
            assert res.return_code != 0, path
        assert agent(s, "echo h > /proc/sysrq-trigger").return_code != 0
        # a block device for the host's root disk can be made, but never opened (nodev)
        res = agent(s, f"mknod /tmp/disk b {os.major(st.st_dev)} {os.minor(st.st_dev)} && head -c 512 /tmp/disk | wc -c")
        assert res.stdout.strip() in ("", "0"), res.stdout
        assert agent(s, "dmesg").return_code != 0
        assert agent(s, "ls /sys").stdout == ""
        # /proc/1 is the sandbox's init, not the host's, and carries none of the host's environment
        assert "process_api" not in agent(s, r"tr '\0' ' ' < /proc/1/cmdline").stdout
        environ = agent(s, r"tr '\0' '\n' < /proc/1/environ").stdout
        assert "EVOKIT_HOST_ONLY" not in environ and "HOME=" not in environ, environ
        caps = agent(s, "grep CapEff /proc/self/status").stdout.split()[1]
        assert int(caps, 16) & (1 << 21) == 0  # no CAP_SYS_ADMIN
        assert agent(s, "grep NoNewPrivs /proc/self/status").stdout.split()[1] == "1"


def test_agent_sees_only_its_own_processes(base_image):
    """``ls /proc`` inside shows only sandbox pids; host processes cannot be seen or signalled."""
    host_pid = os.getpid()
    with running(base_image) as s:
        pids = agent(s, "ls /proc | grep -E '^[0-9]+$'").stdout.split()
        assert 2 <= len(pids) <= 8, pids
        cmdlines = agent(s, r"for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done").stdout
        assert "pytest" not in cmdlines and "process_api" not in cmdlines
        res = agent(s, f"kill -0 {host_pid} 2>&1 || echo gone; cat /proc/{host_pid}/cmdline 2>/dev/null")
        assert "pytest" not in res.stdout


@pytest.mark.parametrize("user", ["root", "agent"])
def test_agent_cannot_escape_through_proc_root_links(base_image, tmp_path, user):
    """/proc/*/root and /proc/*/cwd of every visible process lead back into the sandbox."""
    (tmp_path / "outside.txt").write_text("outside")
    with running(base_image) as s:
        res = agent(s, f"for p in /proc/[0-9]*; do cat $p/root{tmp_path}/outside.txt $p/cwd/../..{tmp_path}/outside.txt;"
                       " done 2>/dev/null; true", user=user)
        assert "outside" not in res.stdout


def test_two_sandboxes_do_not_see_each_other(base_image):
    """Two sandboxes of one image have separate files, processes and /tmp."""
    with running(base_image) as a, running(base_image) as b:
        assert agent(a, "echo a > /tmp/who && nohup sleep 3131 >/dev/null 2>&1 &").ok
        assert agent(b, "cat /tmp/who").return_code != 0
        assert "sleep 3131" not in agent(b, r"cat /proc/[0-9]*/cmdline | tr '\0' ' '").stdout
        assert a.exec("cat /tmp/who").stdout == "a\n"


def test_stop_with_processes_mid_exec_cleans_up(base_image):
    """Stopping while a command is still running ends that command and leaves nothing behind."""
    s = Sandbox(base_image)
    with running(s):
        out = {}
        th = threading.Thread(target=lambda: out.update(res=s.exec("sleep 500; echo done")))
        th.start()
        time.sleep(0.5)
    th.join(timeout=10)
    assert not th.is_alive() and "done" not in out["res"].stdout


# ---------------------------------------------------------------- kernel keyrings (reward daemons)
@pytest.fixture(scope="module")
def keyring_image(sandbox_cache, tmp_path_factory):
    """The base image plus the host's ``keyctl`` (keyutils) binary and library, copied in offline."""
    keyctl = shutil.which("keyctl")
    assert keyctl, "the keyring tests need keyutils on the host (scripts/setup.sh installs it)"
    lib = next(line.split("=>")[1].split()[0] for line in subprocess.run(
        ["ldd", keyctl], capture_output=True, text=True, check=True).stdout.splitlines() if "libkeyutils" in line)
    ctx = make_context(tmp_path_factory.mktemp("keyring-ctx"), BASE_DOCKERFILE + (
        f"COPY keyctl /usr/bin/keyctl\nCOPY libkeyutils.so.1 {Path(lib).parent}/libkeyutils.so.1\n"),
        {"keyctl": Path(keyctl).read_bytes(), "libkeyutils.so.1": Path(lib).resolve().read_bytes()})
    os.chmod(ctx / "keyctl", 0o755)
    return build_image(ctx, root=sandbox_cache)


def host_keyctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["keyctl", *args], capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize("user", ["root", "agent"])
def test_host_keyring_secrets_are_unreachable(keyring_image, user):
    """A key the host adds to root's user keyring (@u, shared by every uid-0 process) and to its
    session keyring cannot be read, found or listed from a sandbox, as root or unprivileged:
    keyring syscalls answer EPERM and /proc/keys, /proc/key-users are masked."""
    name, secret = f"evokit-secret-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    ids = [host_keyctl("add", "user", name, secret, ring).stdout.strip() for ring in ("@u", "@s")]
    assert all(i.isdigit() for i in ids), ids
    try:
        assert host_keyctl("print", ids[0]).stdout.strip() == secret  # the host itself can read it
        with running(keyring_image) as s:
            probes = [f"keyctl print {i}" for i in ids] + [f"keyctl pipe {i}" for i in ids] + [
                f"keyctl search @u user {name}", f"keyctl search @s user {name}", f"keyctl request user {name}",
                "keyctl show @u", "keyctl show @s", "keyctl rdescribe @u", "cat /proc/keys", "cat /proc/key-users"]
            for probe in probes:
                res = agent(s, probe, user=user)
                assert res.return_code != 0, (probe, res.stdout)
                assert secret not in res.stdout + res.stderr and name not in res.stdout + res.stderr, probe
            res = agent(s, "keyctl show @u", user=user)
            assert "Operation not permitted" in res.stderr, res.stderr
            res = agent(s, f"{GREP_ALL} -e {secret} -e {name} /", user=user, timeout_sec=120)
            assert res.stdout == "", res.stdout
    finally:
        for i, ring in zip(ids, ("@u", "@s"), strict=True):
            host_keyctl("unlink", i, ring)


@pytest.mark.parametrize("user", ["root", "agent"])
def test_sandboxes_cannot_pass_messages_through_keys(keyring_image, user):
    """Sandbox A cannot leave a key (in @u, @s, @us or a new keyring) for sandbox B or the host."""
    name, msg = f"evokit-msg-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with running(keyring_image) as a, running(keyring_image) as b:
        for ring in ("@u", "@s", "@us", "@p"):
            res = agent(a, f"keyctl add user {name} {msg} {ring}", user=user)
            assert res.return_code != 0 and "Operation not permitted" in res.stderr, (ring, res.stdout)
        assert agent(a, f"keyctl newring {name} @u", user=user).return_code != 0
        for ring in ("@u", "@s", "@us"):
            res = agent(b, f"keyctl search {ring} user {name}", user=user)
            assert res.return_code != 0 and msg not in res.stdout
    assert host_keyctl("search", "@u", "user", name).returncode != 0
    assert name not in Path("/proc/keys").read_text()


# ---------------------------------------------------------------- network: host loopback, abstract sockets
class HostServers:
    """A TCP server on the host's 127.0.0.1 and an abstract unix socket, both recording accepts."""

    def __init__(self):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.abstract = f"evokit-test-{uuid.uuid4().hex[:8]}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.abstract)
        self.unix.listen()
        self.accepted: list[str] = []
        self._threads = [threading.Thread(target=self._serve, args=(s, kind), daemon=True)
                         for s, kind in ((self.tcp, "tcp"), (self.unix, "unix"))]
        for t in self._threads:
            t.start()

    def _serve(self, srv, kind):
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            self.accepted.append(kind)
            conn.sendall(b"host-service-secret\n")
            conn.close()

    def close(self):
        for s in (self.tcp, self.unix):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def host_servers():
    servers = HostServers()
    # the servers are reachable from the host itself, so a refusal below is the sandbox's doing
    with socket.create_connection(("127.0.0.1", servers.port), timeout=5) as c:
        assert c.recv(100) == b"host-service-secret\n"
    servers.accepted.clear()
    yield servers
    servers.close()


def reach_host_commands(port: int, abstract: str) -> list[str]:
    perl_unix = ("perl -MSocket -e 'socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die; "
                 f"connect($s, pack_sockaddr_un(\"\\0{abstract}\")) or die \"refused: $!\\n\"; print <$s>'")
    tcp = [f"timeout 3 bash -c 'exec 3<>/dev/tcp/{host}/{port}; cat <&3'"
           for host in ("127.0.0.1", "localhost", "10.0.2.2", "10.0.2.3", "::1")]
    return [*tcp, perl_unix]


@pytest.mark.parametrize("network", [True, False], ids=["public", "no-network"])
@pytest.mark.parametrize("user", ["root", "agent"])
def test_host_loopback_and_abstract_sockets_are_unreachable(base_image, host_servers, network, user):
    """A host TCP service on 127.0.0.1 and a host abstract unix socket are out of reach of every
    sandbox, public or not, as root or unprivileged: the sandbox has its own network namespace
    (lo + slirp's tap0), slirp refuses its gateway's mapping to host loopback, and no interface
    of the host is there to sniff with AF_PACKET."""
    with running(base_image, network=network) as s:
        for cmd in reach_host_commands(host_servers.port, host_servers.abstract):
            res = agent(s, cmd, user=user, timeout_sec=15)
            assert "host-service-secret" not in res.stdout, cmd
        assert host_servers.abstract not in agent(s, "cat /proc/net/unix", user=user).stdout
        ifaces = agent(s, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
        assert sorted(ifaces) == (["lo", "tap0"] if network else ["lo"])
        host_ifaces = {line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]}
        assert not (set(ifaces) & host_ifaces - {"lo"})
    assert host_servers.accepted == []


def test_build_steps_cannot_reach_host_loopback(sandbox_cache, tmp_path, host_servers):
    """A RUN step (even of a no-network task: builds always have outbound access) cannot reach
    the host's loopback services or abstract sockets; what it saw is baked into the layer."""
    cmds = " ; ".join(f"{{ {c} ; }} >> /seen 2>&1" for c in reach_host_commands(host_servers.port,
                                                                                  host_servers.abstract))
    ctx = make_context(tmp_path / "ctx", f"FROM debian:bookworm-slim\nRUN {cmds}; cat /proc/net/unix >> /seen;"
                                         " tail -n +3 /proc/net/dev >> /seen; true\n")
    image = build_image(ctx, root=sandbox_cache)
    seen = image.find("/seen").read_text()
    assert "host-service-secret" not in seen and host_servers.abstract not in seen, seen
    assert "eth0" not in seen and "tap0" in seen
    assert host_servers.accepted == []


def test_build_steps_have_outbound_access(sandbox_cache, tmp_path):
    """Outbound access of a build step: ``apt-get update`` against the Debian mirror succeeds."""
    ctx = make_context(tmp_path / "ctx", "FROM debian:bookworm-slim\nRUN apt-get update -q && touch /apt-ok\n")
    image = build_image(ctx, root=sandbox_cache, step_timeout_sec=300)
    assert image.find("/apt-ok") is not None


@pytest.mark.parametrize("network", [True, False], ids=["public", "no-network"])
def test_loopback_inside_the_sandbox_works(base_image, network):
    """A task may run a local server: the sandbox's own loopback is up (as with Docker's
    ``--network none``), and ``localhost`` resolves to it."""
    server = ("perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalAddr => \"127.0.0.1\", "
              "LocalPort => 8765, Listen => 1, ReuseAddr => 1) or die \"listen: $!\"; "
              "if (fork() == 0) { my $c = IO::Socket::INET->new(\"localhost:8765\") or die \"connect: $!\"; "
              "print <$c>; exit 0 } my $c = $s->accept; print $c \"hello-local\\n\"; close $c; wait'")
    with running(base_image, network=network) as s:
        res = agent(s, server, timeout_sec=20)
        assert res.stdout == "hello-local\n", res.stderr


@pytest.mark.parametrize("network", [True, False], ids=["public", "no-network"])
def test_af_packet_does_not_see_host_loopback_traffic(base_image, host_servers, network):
    """Root in the sandbox has CAP_NET_RAW (Docker's default set) and opens an AF_PACKET socket
    on all interfaces while the host talks to its own 127.0.0.1 service: the host's packets are
    never captured, because no host interface is in the sandbox's network namespace."""
    token = uuid.uuid4().hex
    sniff = ("perl -e 'socket(my $s, 17, 3, 0x0300) or die \"socket: $!\\n\"; print \"open\\n\"; "
             "$SIG{ALRM} = sub { exit 0 }; alarm 4; my $n = 0; "
             f"while (recv($s, my $buf, 65535, 0)) {{ $n++; print \"CAPTURED\\n\" if index($buf, \"{token}\") >= 0 }}'")
    stop = threading.Event()

    def chatter():  # the host's own loopback traffic, carrying the token
        while not stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", host_servers.port), 2) as c:
                c.sendall(token.encode())
            time.sleep(0.05)

    t = threading.Thread(target=chatter, daemon=True)
    t.start()
    try:
        with running(base_image, network=network) as s:
            res = agent(s, sniff, timeout_sec=20)
    finally:
        stop.set()
        t.join(timeout=5)
    assert res.stdout.startswith("open"), res.stderr  # the sniffer really ran
    assert "CAPTURED" not in res.stdout
    assert len(host_servers.accepted) > 5  # and the host really was talking meanwhile


@pytest.fixture
def shared_host_mount(tmp_path):
    """A host mount under a *shared* parent mount (what dockerd's /var/lib/docker overlays and a
    systemd host's / look like): an unmount propagated out of a sandbox would remove it."""
    parent, child = tmp_path / "shared", tmp_path / "shared" / "child"
    parent.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "evokit-test-parent", str(parent)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(parent)], check=True)
        child.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "evokit-test-child", str(child)], check=True)
        (child / "alive").write_text("yes")
        yield child
    finally:
        subprocess.run(["umount", "-R", str(parent)], check=False)


def test_public_sandbox_and_build_step_leave_host_mounts_alone(base_image, sandbox_cache, tmp_path,
                                                               shared_host_mount):
    """slirp4netns's own sandbox pivots and detaches its old root; run in the host's mount
    namespace that detach propagated through shared mounts and unmounted the host's (measured:
    every Docker overlay). It runs in a private mount namespace, so the host keeps its mounts."""
    with running(base_image, network=True) as s:
        assert agent(s, "getent hosts deb.debian.org", timeout_sec=30).ok
    ctx = make_context(tmp_path / "ctx", f"FROM debian:bookworm-slim\nRUN echo {uuid.uuid4().hex} > /x\n")
    build_image(ctx, root=sandbox_cache)
    assert (shared_host_mount / "alive").read_text() == "yes"
    assert f" {shared_host_mount} " in Path("/proc/self/mountinfo").read_text()


@pytest.mark.parametrize("user", ["root", "agent"])
def test_kill_commands_leaves_no_survivor_a_moment_to_act(base_image, user):
    """Between the agent phase and the verifier, ``kill_commands`` ends every agent process.
    Killed one at a time, a shell whose ``sleep`` dies first runs its next command (here: an
    echo standing for a forged reward) before its own SIGKILL; a respawning watchdog likewise.
    Everything is stopped before anything is killed, so nothing runs after the call. (With 150
    chains a one-at-a-time kill lets an echo through in 2 of 3 rounds, measured.)"""
    with running(base_image) as s:
        for _ in range(3):
            assert agent(s, "rm -f /tmp/flag; for i in $(seq 150); do (sleep 300; echo $i >> /tmp/flag) >/dev/null 2>&1 &"
                            " done; (while :; do sleep 0.01 & wait; echo w >> /tmp/flag; done) >/dev/null 2>&1 &"
                            " sleep 0.3; true",
                         user=user, timeout_sec=20).ok
            assert s.kill_commands() >= 151
            after = agent(s, "cat /tmp/flag 2>/dev/null; true").stdout
            assert set(after.split()) <= {"w"}, after  # no chain's echo ran (its sleep never ends)
            time.sleep(0.3)
            assert agent(s, "cat /tmp/flag 2>/dev/null; true").stdout == after  # nothing runs any more
            assert "sleep" not in agent(s, r"cat /proc/[0-9]*/cmdline | tr '\0' ' ' | sed 's/sleep infinity//g'").stdout
