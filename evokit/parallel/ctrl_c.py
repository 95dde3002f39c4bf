"""Ctrl-C: stop every map of this process within seconds, and the sandboxes its jobs hold.

:func:`interrupt` raises :class:`JobInterrupted` into each job thread and kills every sandbox and
build step of this process through its cgroup (a thread blocked on a sandbox's subprocess returns
once it dies); :class:`CtrlC` is the CLI's SIGINT handling. The executors call :func:`interrupt`
on KeyboardInterrupt (the package docstring says what each kind of worker does).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: How long an interrupted map waits for its jobs to unwind (their sandboxes are already killed).
INTERRUPT_GRACE_S = 2.0


class JobInterrupted(KeyboardInterrupt):
    """Raised into a job's thread by :func:`interrupt`: the run was stopped (Ctrl-C)."""


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    """Raise ``exc`` in another thread of this process the next time it runs Python code.

    A thread blocked in a system call (a sandbox's ``waitpid``) raises it once the call returns,
    which :func:`interrupt` brings about by killing the sandbox. Only a KeyboardInterrupt is ever
    raised this way, so ``except Exception`` clauses on the way let it through: an interrupted job
    unwinds through its ``finally`` blocks (which stop its sandboxes) and records nothing more.
    """
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class JobRun:
    """One thread map in progress: its stop flag and the threads now inside one of its jobs."""

    def __init__(self):
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._in_job: set[int] = set()

    @contextlib.contextmanager
    def job(self) -> Iterator[None]:
        ident = threading.get_ident()
        with self._lock:
            self._in_job.add(ident)
        try:
            yield
        finally:
            with self._lock:
                self._in_job.discard(ident)

    def cancel(self) -> None:
        """No job starts any more; each running one gets :class:`JobInterrupted` (once)."""
        self.stop.set()
        with self._lock:
            running, self._in_job = self._in_job, set()
        for ident in running:
            _raise_in(ident, JobInterrupted)


_RUNS: set[JobRun] = set()
_RUNS_LOCK = threading.Lock()


@contextlib.contextmanager
def registered(run: JobRun) -> Iterator[JobRun]:
    with _RUNS_LOCK:
        _RUNS.add(run)
    try:
        yield run
    finally:
        with _RUNS_LOCK:
            _RUNS.discard(run)


def interrupt() -> int:
    """Stop this process's parallel work now; returns how many sandbox cgroups were killed.

    What Ctrl-C does (the executors call it on KeyboardInterrupt, ``evokit``'s SIGINT handler from a
    thread of its own; calling it twice is harmless): every thread map in progress starts no
    further job and raises :class:`JobInterrupted` into its running jobs, then every sandbox and
    build step this process holds is killed through its cgroup (leases of this pid,
    :func:`evokit.sandbox.stale.leases_of`). Killing the processes is what releases a job blocked
    in a sandbox's subprocess: each sandbox runs in a session of its own, so the terminal's SIGINT
    never reaches it. The job's own ``Sandbox.stop`` (thread-safe) then removes the state.
    Process and Ray workers are stopped by their map, which sees the KeyboardInterrupt itself.
    """
    with _RUNS_LOCK:
        runs = list(_RUNS)
    for run in runs:
        run.cancel()
    return kill_own_sandboxes()


def kill_own_sandboxes() -> int:
    """SIGKILL every process of every sandbox and build step this process holds (not their state).

    Returns how many cgroups had processes. Through the cgroups named in this process's leases:
    a sandbox's commands run in sessions of their own, and would survive a process-group signal.
    """
    try:
        from evokit.sandbox import stale

        leases = stale.leases_of(os.getpid())
    except Exception:  # no sandbox support here (or no run dir): nothing of ours to kill
        return 0
    from evokit.sandbox.cgroup import kill_members

    groups = [Path(d) for e in leases for d in e.cgroup_dirs if Path(d).name == f"evokit-{e.id}"]
    return sum(kill_members(d) for d in groups)


def clean_stale_sandboxes() -> None:
    """Remove the sandboxes of workers just killed (their leases are free now; live ones are never touched)."""
    try:
        from evokit.sandbox import stale

        stale.clean()
    except Exception:  # best effort: the next sandbox start cleans up too (stale.clean_once)
        pass


class CtrlC:
    """Ctrl-C for a command-line process: stop the work at once, be gone by a deadline.

    ``with CtrlC(deadline_s, on_exit) as ctrl_c:`` in the main thread (``evokit``'s ``main``):

    * SIGINT's handler raises KeyboardInterrupt in the main thread, so the command unwinds (the
      executors stop their maps, :func:`interrupt`); it also marks :attr:`pressed`;
    * the signal also reaches a watcher thread, through :func:`signal.set_wakeup_fd` (written by
      the C-level handler at once), so stopping starts even while the main thread sits in a C call
      that a Python handler must wait for (Ray's start-up waits so for seconds): the watcher runs
      :func:`interrupt` (in a thread of its own), and if the process still lives ``deadline_s``
      after the press, say a job is stuck in an LLM request or Ray is slow to shut down, it calls
      ``on_exit()`` (the one line) and ``os._exit(130)``. A second Ctrl-C does that at once;
    * leaving the block without a Ctrl-C puts the previous handler and wakeup fd back. After one,
      both stay: the process is on its way out, and the deadline must hold through its shutdown.

    A command that installs a SIGINT handler of its own (``serve-llm``) is left alone: the
    watcher acts only while the handler is this one. Outside the main thread it does nothing.
    """

    def __init__(self, deadline_s: float, on_exit: Callable[[], Any] = lambda: None):
        self.deadline_s, self.on_exit = deadline_s, on_exit
        self.pressed_at: float | None = None  # set by the watcher
        self.raised = False  # set by the handler
        self._active = False

    @property
    def pressed(self) -> bool:
        return self.raised or self.pressed_at is not None

    def _handler(self, signum, frame) -> None:
        self.raised = True
        raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)  # the C-level handler never blocks on it
        self._old_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, self._handler)
        self._active = True
        threading.Thread(target=self._watch, name="evokit-ctrl-c", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._active or self.pressed:
            return
        if signal.getsignal(signal.SIGINT) == self._handler:
            signal.signal(signal.SIGINT, self._old_handler)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._w)  # the watcher reads EOF and ends
        self._active = False

    def _watch(self) -> None:
        try:
            while True:
                timeout = (None if self.pressed_at is None
                           else max(0.0, self.pressed_at + self.deadline_s - time.monotonic()))
                if not readable(self._r, timeout):
                    break  # the deadline passed
                data = os.read(self._r, 64)
                if not data:
                    return  # the block ended without a Ctrl-C
                if signal.SIGINT not in data or signal.getsignal(signal.SIGINT) != self._handler:
                    continue
                if self.pressed_at is not None:
                    break  # a second Ctrl-C: out now
                self.pressed_at = time.monotonic()
                threading.Thread(target=interrupt, name="evokit-interrupt", daemon=True).start()
        finally:
            if self.pressed_at is None:
                os.close(self._r)
        with contextlib.suppress(Exception):
            self.on_exit()
            sys.stderr.flush()
        os._exit(130)



def readable(fd: int, timeout: float | None) -> bool:
    """Whether ``fd`` is readable within ``timeout`` seconds. ``poll``, not ``select``: a long-lived
    process (a notebook kernel, a test worker) may hold descriptors numbered past select's 1024."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else timeout * 1000))
