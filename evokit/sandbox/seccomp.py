"""A seccomp filter for every sandboxed process: the kernel keyring syscalls answer EPERM.

Why: the kernel's keyrings are not namespaced by the mount/pid/net namespaces a sandbox gets.
A sandbox runs as real root (uid 0, see :mod:`evokit.sandbox.bwrap`), and root's user keyring
``@u`` belongs to uid 0 everywhere, so without a filter an agent could read the host's secrets
(``keyctl print``), plant keys for another sandbox to read (a channel A -> B) and list host key
names. Docker's default seccomp profile answers ``add_key``, ``keyctl`` and ``request_key``
with EPERM for the same reason (moby profiles/seccomp/default.json); we do the same, and mask
``/proc/keys`` and ``/proc/key-users`` (:data:`evokit.sandbox.bwrap.MASKED_PROC`), which list
the keys a uid may view without any syscall of the keyring family.

Since every keyring syscall is refused, a sandbox can neither join nor read any keyring, so it
needs no fresh session keyring of its own (what ``KEYCTL_JOIN_SESSION_KEYRING`` would give): a
stated deviation from runc, which joins one and also filters.

The program is classic BPF (``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k, native byte
order), what ``bwrap --seccomp FD`` loads before it execs the sandboxed command. It checks the
syscall's architecture first, because a syscall number means a different call under another
ABI: x86_64, i386 (``int 0x80`` from a 64-bit process) and aarch64 each get their own numbers;
x32 calls (numbers with bit 30 set) and unknown architectures kill the process, as Docker's
profile refuses architectures it does not list.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

# <linux/audit.h>
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
# <linux/seccomp.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
# <linux/filter.h>: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
# offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
NR_OFFSET, ARCH_OFFSET = 0, 4
X32_SYSCALL_BIT = 0x40000000
EPERM = 1

#: Syscall numbers per architecture (arch/x86/entry/syscalls/syscall_64.tbl and syscall_32.tbl;
#: include/uapi/asm-generic/unistd.h for aarch64).
SYSCALLS: dict[int, dict[str, int]] = {
    AUDIT_ARCH_X86_64: {"add_key": 248, "request_key": 249, "keyctl": 250},
    AUDIT_ARCH_I386: {"add_key": 286, "request_key": 287, "keyctl": 288},
    AUDIT_ARCH_AARCH64: {"add_key": 217, "request_key": 218, "keyctl": 219},
}
#: What a sandboxed process may not call (Docker's default profile refuses these too).
DENIED = ("add_key", "keyctl", "request_key")


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(denied: Iterable[str] = DENIED, errno: int = EPERM) -> bytes:
    """The filter: per known architecture, ``denied`` → ``SECCOMP_RET_ERRNO | errno``, else allow.

    Layout (classic BPF jumps only forward): load the arch; one ``jeq`` per architecture to its
    block; kill (no architecture matched); the blocks, each loading the syscall number, (x86_64
    only) jumping to the final kill for x32 calls, testing each denied number and allowing the
    rest; then one shared ``ret ERRNO`` and one shared ``ret KILL``.
    """
    denied = tuple(denied)
    for name in denied:
        for arch, table in SYSCALLS.items():
            if name not in table:
                raise ValueError(f"seccomp: no syscall number for {name!r} on arch {arch:#x}")
    blocks = []
    for arch, table in SYSCALLS.items():
        ops = ["ld_nr", *(["x32"] if arch == AUDIT_ARCH_X86_64 else []),
               *(("deny", table[name]) for name in denied), "allow"]
        blocks.append(ops)
    starts, pos = [], 1 + len(SYSCALLS) + 1
    for ops in blocks:
        starts.append(pos)
        pos += len(ops)
    errno_at, kill_at = pos, pos + 1
    out = [_insn(LD_ABS, ARCH_OFFSET)]
    for i, arch in enumerate(SYSCALLS):
        out.append(_insn(JEQ, arch, jt=starts[i] - (1 + i) - 1))
    out.append(_insn(RET, SECCOMP_RET_KILL_PROCESS))
    for ops, start in zip(blocks, starts, strict=True):
        for here, op in enumerate(ops, start):
            if op == "ld_nr":
                out.append(_insn(LD_ABS, NR_OFFSET))
            elif op == "x32":
                out.append(_insn(JGE, X32_SYSCALL_BIT, jt=kill_at - here - 1))
            elif op == "allow":
                out.append(_insn(RET, SECCOMP_RET_ALLOW))
            else:
                out.append(_insn(JEQ, op[1], jt=errno_at - here - 1))
    out.append(_insn(RET, SECCOMP_RET_ERRNO | (errno & 0xFFFF)))
    out.append(_insn(RET, SECCOMP_RET_KILL_PROCESS))
    return b"".join(out)


def fd() -> int:
    """A readable fd holding :func:`program`, for one ``bwrap --seccomp FD`` (bwrap reads it to EOF).

    A pipe, not a file: each bwrap needs its own read offset, and 100-odd bytes fit in a pipe's
    buffer, so writing never blocks. The caller passes it to the child and closes it after.
    """
    r, w = os.pipe()
    try:
        os.write(w, _PROGRAM)
    finally:
        os.close(w)
    return r


_PROGRAM = program()
