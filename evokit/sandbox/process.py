"""Run a host process with bounded output, an optional stdin payload and a hard timeout.

Agents can flood stdout (``yes``), hang (``sleep infinity``) or spawn children that
outlive their parent. ``subprocess.communicate`` buffers everything in memory and
only kills the direct child on timeout, so we read both pipes in threads, keep the
first and last ``max_output_bytes // 2`` bytes of each stream, and on timeout kill
the whole process group (every process started for the command, inside and outside
the sandbox's namespaces, shares it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024  # bytes kept per stream (head + tail)


class _Clock:
    """Seconds spent waiting on sandbox processes, for the benchmarks' sandbox-vs-Python split."""

    def __init__(self):
        self.seconds, self._lock = 0.0, threading.Lock()

    def add(self, dt: float) -> None:
        with self._lock:
            self.seconds += dt


SUBPROCESS_CLOCK = _Clock()
TIMEOUT_EXIT_CODE = 124  # what GNU timeout returns; Harbor's agents read it the same way


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one command: decoded output, exit status, and whether it was killed."""

    stdout: str
    stderr: str
    return_code: int
    timed_out: bool = False
    duration_sec: float = 0.0
    truncated_bytes: int = 0  # bytes dropped from the middle of stdout + stderr
    stdout_bytes: bytes = b""  # raw stdout, only when asked for (file transfers)

    @property
    def ok(self) -> bool:
        return self.return_code == 0 and not self.timed_out


class HeadTail:
    """A command's output capped to a head and a tail of at most ``cap // 2`` bytes each, with a marker
    saying how much was dropped between them: the one output rule of every sandbox backend."""

    def __init__(self, cap: int):
        self.half, self.head, self.tail, self.dropped = max(cap // 2, 1), bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                self.dropped += len(self.tail) - self.half
                del self.tail[: len(self.tail) - self.half]

    def raw(self) -> bytes:
        marker = f"\n[... {self.dropped} bytes truncated by evokit ...]\n".encode() if self.dropped else b""
        return bytes(self.head + marker + self.tail)

    def text(self) -> str:
        return self.raw().decode("utf-8", errors="replace")


class _CappedReader(threading.Thread, HeadTail):
    """Drain a pipe into a :class:`HeadTail`."""

    def __init__(self, pipe, cap: int):
        threading.Thread.__init__(self, daemon=True)
        HeadTail.__init__(self, cap)
        self.pipe = pipe

    def run(self) -> None:
        while chunk := self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536):
            self.add(chunk)
        self.pipe.close()


def run_capped(
    argv: Sequence[str],
    *,
    stdin: bytes | BinaryIO | None = None,
    timeout_sec: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    preexec_fn: Callable[[], None] | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
    keep_bytes: bool = False,
) -> ExecResult:
    """Run ``argv`` in its own process group; kill the group on timeout.

    ``stdin`` is bytes (written by a thread) or an open file, which the process reads
    directly (a ``COPY`` payload on disk: never loaded into memory).
    """
    t0 = time.monotonic()
    as_file = stdin is not None and not isinstance(stdin, bytes | bytearray | memoryview)
    proc = subprocess.Popen(
        list(argv),
        stdin=stdin if as_file else subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    if on_start:
        on_start(proc)
    readers = [_CappedReader(proc.stdout, max_output_bytes), _CappedReader(proc.stderr, max_output_bytes)]
    for r in readers:
        r.start()
    if stdin is not None and not as_file:
        writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
        writer.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_sec)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        proc.wait()
    # A daemonised grandchild may hold the pipes open; never wait on it forever, and wait
    # once for both pipes (two 2 s joins made every `cmd &` exec take 4 s).
    deadline = time.monotonic() + 2.0
    for r in readers:
        r.join(timeout=max(0.0, deadline - time.monotonic()))
    return ExecResult(
        stdout=readers[0].text(),
        stderr=readers[1].text(),
        return_code=TIMEOUT_EXIT_CODE if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_sec=_elapsed(t0),
        truncated_bytes=readers[0].dropped + readers[1].dropped,
        stdout_bytes=readers[0].raw() if keep_bytes else b"",
    )


def _elapsed(t0: float) -> float:
    dt = time.monotonic() - t0
    SUBPROCESS_CLOCK.add(dt)
    return dt


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def kill_group(pgid: int) -> None:
    """SIGKILL a process group, ignoring one that is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
