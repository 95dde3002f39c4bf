"""The keyring seccomp filter: its bytes run through a classic-BPF interpreter, then the kernel.

The interpreter below executes the generated program the way the kernel's seccomp does (only
the instructions the generator may emit; anything else fails the test), so each verdict for an
(architecture, syscall) pair is checked, not the byte layout. The kernel test loads the same
bytes with ``bwrap --seccomp`` on the host and calls the denied syscalls.
"""

import os
import platform
import struct
import subprocess

import pytest

from evokit.sandbox import seccomp as sc

ALLOW, KILL = sc.SECCOMP_RET_ALLOW, sc.SECCOMP_RET_KILL_PROCESS
EPERM = sc.SECCOMP_RET_ERRNO | 1


def run_bpf(prog: bytes, nr: int, arch: int) -> int:
    """What the filter returns for syscall ``nr`` under ``arch`` (struct seccomp_data, args 0)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *([0] * 6))
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    assert insns and len(prog) % 8 == 0
    acc, pc = 0, 0
    for _ in range(len(insns) + 1):  # forward jumps only: the program ends within len steps
        code, jt, jf, k = insns[pc]
        if code == sc.LD_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (sc.JEQ, sc.JGE):
            taken = acc == k if code == sc.JEQ else acc >= k
            pc += 1 + (jt if taken else jf)
        elif code == sc.RET:
            return k
        else:
            raise AssertionError(f"unexpected BPF opcode {code:#x} at {pc}")
        assert 0 <= pc < len(insns), "jumped out of the program"
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("arch", list(sc.SYSCALLS))
def test_each_architecture_denies_its_keyring_syscalls_and_allows_others(arch):
    prog = sc.program()
    table = sc.SYSCALLS[arch]
    for name in sc.DENIED:
        assert run_bpf(prog, table[name], arch) == EPERM, name
    denied = set(table.values())
    for nr in range(0, 460):
        if nr not in denied:
            assert run_bpf(prog, nr, arch) == ALLOW, nr


def test_other_architectures_and_x32_calls_are_killed():
    """A keyctl number under an unlisted ABI (or x86_64's x32) must not slip through as "allow"."""
    prog = sc.program()
    for arch in (0x40000028, 0xC0000015, 0x0, 0xFFFFFFFF):  # arm, ppc64, junk
        assert run_bpf(prog, 250, arch) == KILL
    keyctl = sc.SYSCALLS[sc.AUDIT_ARCH_X86_64]["keyctl"]
    assert run_bpf(prog, keyctl | sc.X32_SYSCALL_BIT, sc.AUDIT_ARCH_X86_64) == KILL
    assert run_bpf(prog, 0 | sc.X32_SYSCALL_BIT, sc.AUDIT_ARCH_X86_64) == KILL


def test_a_syscall_without_a_number_is_a_clear_error():
    with pytest.raises(ValueError, match="no syscall number for 'nosuchcall'"):
        sc.program(["nosuchcall"])


def test_fd_holds_the_program_once_per_reader():
    fds = [sc.fd(), sc.fd()]
    try:
        for fd in fds:
            assert os.read(fd, 1 << 16) == sc.program()
            assert os.read(fd, 1) == b""
    finally:
        for fd in fds:
            os.close(fd)


def test_kernel_refuses_keyring_syscalls_under_the_filter():
    """bwrap loads the bytes; keyctl/add_key/request_key fail with EPERM, other syscalls work."""
    nr = sc.SYSCALLS[sc.AUDIT_ARCH_X86_64 if platform.machine() == "x86_64" else sc.AUDIT_ARCH_AARCH64]
    probe = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); out = []\n"
             f"for nr, args in (({nr['keyctl']}, (0, -3)), ({nr['add_key']}, (b'user', b'x', b'y', 1, -3)),"
             f" ({nr['request_key']}, (b'user', b'x', 0, -3))):\n"
             "    r = libc.syscall(nr, *args); out.append((r, ctypes.get_errno()))\n"
             "print(out, os.getpid() > 0)")
    fd = sc.fd()
    try:
        res = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--seccomp", str(fd), "python3", "-c", probe],
                             pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[(-1, 1), (-1, 1), (-1, 1)] True"
