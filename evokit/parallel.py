"""Run independent jobs in parallel behind one interface: a local pool by default, Ray when asked.

Evolution (one lineage per job), verification (one task per job) and rollouts (one task's group
per job) all reduce to ``executor.map(fn, items, progress=...)``:

* **order is kept**: ``result[i]`` belongs to ``items[i]``;
* **one failure does not stop the others**: every item runs; then a job that raised, or whose
  worker process died (SIGKILL, the OOM killer, a Ray worker crash), is reported as a
  :class:`JobFailure` naming its index and item, raised together in one :class:`ParallelError`
  (``errors="raise"``, the default) or left in its slot of the result (``errors="return"``);
* **Ctrl-C stops everything within seconds** (:func:`interrupt`): queued jobs never start,
  running ones are interrupted (threads: a :class:`JobInterrupted` raised into each; processes and
  Ray workers: stopped), and every sandbox and build step this process holds is killed through
  its cgroup, which releases a job thread blocked on a sandbox's subprocess. The interrupted
  jobs record nothing more, so whatever they wrote before stays and a resumed run (``evolve``,
  ``seeds``) redoes only the unfinished work. The KeyboardInterrupt then reaches the caller;
* **progress**: ``progress`` is a ``tqdm`` bar (``update()`` is called) or any callable taking no
  argument; it is called once per finished item, failed ones included, in the calling thread.
  A job may also tick a live ``tqdm`` bar it captured (``evolve`` ticks once per generation):
  threads share it, and :class:`RayExecutor` relays the ticks from its workers to the driver's
  bar (``kind="process"`` does not: there only the per-item ``progress`` moves).

Executors (:func:`make_executor` builds one from CLI options):

* :class:`LocalExecutor` ``kind="thread"`` (default), ``kind="process"``;
* :class:`RayExecutor`: a local Ray instance (``ray.init()``) or a cluster (``address=``).

Ray on a laptop or CI VM, offline (checked on 2 cores with ray 2.60):

* ``RAY_USAGE_STATS_ENABLED=0`` is set (``setdefault``) before ``ray.init``: no usage report;
* a local instance is started with ``num_cpus=workers``, no dashboard, worker logs kept out of the
  driver's output, and ``PYTHONPATH`` set to the driver's ``sys.path`` while it starts, so that
  functions from scripts and test modules (not only installed packages) import in the workers;
* workers inherit the environment of the process that started the instance, so set variables such
  as ``HARBOR_TELEMETRY=0`` before creating the executor (on a cluster: in the cluster's setup);
* Ray starts its processes with SIGINT blocked, so a terminal's Ctrl-C reaches only the driver:
  on KeyboardInterrupt the map force-cancels its running tasks (killing their workers) and then
  removes the sandboxes those workers held (:func:`evokit.sandbox.stale.clean`: their leases are
  free once the workers are dead). A local instance is started with Ray's
  ``kill_child_processes_on_worker_exit`` off: Ray would kill a worker's sandbox before the worker,
  and the job, seeing its command end, could go on for a few lines (measured: 3 of 12 interrupted
  maps wrote past the command). On a cluster, start Ray with
  ``RAY_kill_child_processes_on_worker_exit=0`` for the same guarantee;
* a new local instance takes 5–10 s to start on 2 cores (40 s measured on a loaded one); :meth:`RayExecutor.close` shuts down
  an instance that the executor started itself (Ray also does it at exit). Temp files go to
  ``/tmp/ray`` unless ``temp_dir`` is given; Ray 2.60 turns token authentication on and writes
  its token to ``~/.ray/auth_token`` on first start (harmless locally; a cluster needs its token).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import io
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import reprlib
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evokit.errors import EvokitError, UserError

Progress = Callable[[], Any] | Any  # a callable taking no argument, or anything with .update()

_item_repr = reprlib.Repr(maxstring=120, maxother=120)


#: How long an interrupted map waits for its jobs to unwind (their sandboxes are already killed).
INTERRUPT_GRACE_S = 2.0


@dataclass
class JobFailure:
    """One job that did not return: which item, what went wrong, and the worker's traceback.

    ``exception`` is the exception itself where it could travel back (always for threads; from a
    process or Ray worker when it pickles), so that a caller can tell a user's mistake (a bad
    endpoint, a malformed task) from a bug; None for a worker that died.
    """

    index: int
    item: Any
    error: str  # "ValueError: message" or "worker died: ..."
    traceback: str = ""
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"job {self.index} (item {_item_repr.repr(self.item)}): {self.error}"


class ParallelError(EvokitError, RuntimeError):
    """Some jobs failed; ``failures`` names each, ``results`` holds the others' results in order.

    ``str()`` holds every failure and the first one's traceback (for logs and ``--debug``);
    :attr:`summary` is one line without tracebacks, and :meth:`common_error` the first job's error
    when every job failed the user's way (a :class:`evokit.errors.UserError`).
    """

    def __init__(self, failures: list[JobFailure], results: list):
        self.failures, self.results = failures, results
        lines = [f"{len(failures)} of {len(results)} jobs failed:", *(f"  {f}" for f in failures)]
        if failures[0].traceback:
            lines += [f"traceback of job {failures[0].index}:", failures[0].traceback.rstrip()]
        super().__init__("\n".join(lines))

    @property
    def summary(self) -> str:
        """One line: how many failed and the first failure (its message's first line)."""
        first = self.failures[0]
        message = (first.error.strip().splitlines() or [""])[0]
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        return (f"{len(self.failures)} of {len(self.results)} jobs failed; job {first.index} "
                f"(item {_item_repr.repr(first.item)}): {message}{more}")

    def common_error(self, classes: tuple[type[BaseException], ...] = (UserError,)) -> BaseException | None:
        """The first failed job's exception when every failed job raised one of ``classes`` (by
        default :class:`evokit.errors.UserError`: jobs that failed the user's way, each for its own
        reason or all for one, e.g. an endpoint that is down); else None (a job died, or one of them
        is a bug: that is what the caller must report)."""
        errors = [f.exception for f in self.failures]
        if any(e is None or not isinstance(e, classes) for e in errors):
            return None
        return errors[0]


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], items: Sequence, *, progress: Progress = None,
            errors: str = "raise") -> list: ...

    def close(self) -> None: ...


def _ticker(progress: Progress) -> Callable[[], Any]:
    if progress is None:
        return lambda: None
    update = getattr(progress, "update", None)  # a tqdm bar; a plain callable has no .update
    return update if callable(update) else progress


def _portable(e: BaseException) -> BaseException | None:
    """``e`` if it survives pickling (to travel from a worker to the caller), else None."""
    try:
        return pickle.loads(pickle.dumps(e))
    except Exception:
        return None


def _run(fn: Callable, item: Any) -> tuple[bool, Any]:
    """Call ``fn(item)`` in a worker: ``(True, result)`` or ``(False, (error, traceback, exception))``."""
    try:
        return True, fn(item)
    except Exception as e:
        return False, (f"{type(e).__name__}: {e}", traceback.format_exc(), _portable(e))


def _finish(results: list, failures: list[JobFailure], errors: str, cause: BaseException | None = None) -> list:
    if failures and errors == "raise":
        raise ParallelError(sorted(failures, key=lambda f: f.index), results) from cause
    return results


def _check_errors(errors: str) -> None:
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = " (e.g. the OOM killer or os.kill)" if name == "SIGKILL" else ""
        return f"worker process died: killed by {name}{why}; its result is lost"
    return f"worker process exited with code {exitcode} before returning a result"


# ------------------------------------------------------------------------------------ interrupts
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


class _Run:
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


_RUNS: set[_Run] = set()
_RUNS_LOCK = threading.Lock()


@contextlib.contextmanager
def _registered(run: _Run) -> Iterator[_Run]:
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
    groups = [Path(d) for e in leases for d in e.cgroup_dirs if Path(d).name == f"evokit-{e.id}"]
    killed = 0
    for d in groups:
        killed += _kill_cgroup(d)
    return killed


def _cgroup_pids(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_cgroup(d: Path, timeout: float = 1.0) -> int:
    """SIGKILL the members of one cgroup (``cgroup.kill`` on v2, else each pid until none is left)."""
    if not _cgroup_pids(d):
        return 0
    try:
        (d / "cgroup.kill").write_text("1")
        return 1
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while (pids := _cgroup_pids(d)) and time.monotonic() < deadline:  # a forking member needs rounds
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return 1


def _clean_stale_sandboxes() -> None:
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
                if not _readable(self._r, timeout):
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


class LocalExecutor:
    """A pool on this machine: threads (default) or processes.

    * ``kind="thread"``: evokit's jobs mostly wait on sandbox subprocesses (bubblewrap trials,
      image builds), which release the GIL, so threads give full parallelism at no start-up cost,
      share caches, and accept any callable (closures, lambdas, bound methods). The threads are
      daemons, each taking the next job from a shared queue: an interrupted map returns (raises)
      after at most :data:`INTERRUPT_GRACE_S` even if a job is still blocked (say on an LLM
      request), and the process can exit without waiting for it (``concurrent.futures`` joins its
      workers at exit, which would make Ctrl-C wait for every queued job).
    * ``kind="process"``: for Python-heavy work (plan search, difficulty scoring, small learners)
      that the GIL would serialise. Each map starts ``workers`` processes from a forkserver (no
      fork of a threaded parent) and feeds them one job at a time, so a job that kills its process
      (SIGKILL, the OOM killer) fails alone and is named, a new process replaces it, and the others
      go on. Function and items are pickled: use a top-level function (a ``functools.partial`` of
      one is fine), never a closure or lambda; each map pays the workers' start and imports (~1 s).
      Workers ignore SIGINT (the terminal sends it to the whole process group): on Ctrl-C the
      parent kills the busy ones and removes the sandboxes they held.
    """

    def __init__(self, workers: int = 2, kind: str = "thread"):
        if kind not in ("thread", "process"):
            raise ValueError(f"LocalExecutor kind must be 'thread' or 'process', not {kind!r}")
        if workers < 1:
            raise ValueError(f"workers must be ≥ 1, not {workers}")
        self.workers, self.kind = workers, kind

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers}, kind={self.kind!r})"

    def map(self, fn: Callable[[Any], Any], items: Sequence, *, progress: Progress = None,
            errors: str = "raise") -> list:
        _check_errors(errors)
        items = list(items)
        if self.kind == "thread":
            return self._map_threads(fn, items, _ticker(progress), errors)
        return self._map_processes(fn, items, _ticker(progress), errors)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _map_threads(self, fn, items, tick, errors) -> list:
        results: list = [None] * len(items)
        failures: list[JobFailure] = []
        first: BaseException | None = None
        run = _Run()
        todo = collections.deque(enumerate(items))
        finished: queue.SimpleQueue = queue.SimpleQueue()  # (index, ok, result or exception)

        def work() -> None:
            try:
                while not run.stop.is_set():
                    try:
                        i, item = todo.popleft()
                    except IndexError:
                        return
                    with run.job():
                        try:
                            out = (i, True, fn(item))
                        except BaseException as e:  # noqa: BLE001 - a KeyboardInterrupt is re-raised by the map
                            out = (i, False, e)
                    finished.put(out)
            except BaseException as e:  # noqa: BLE001 - JobInterrupted landing between two jobs
                finished.put((None, False, e))

        threads = [threading.Thread(target=work, name=f"evokit-job-{k}", daemon=True)
                   for k in range(min(self.workers, len(items)))]
        with _registered(run):
            try:
                for t in threads:
                    t.start()
                left = len(items)
                while left:
                    i, ok, out = finished.get()
                    if not ok and isinstance(out, KeyboardInterrupt):  # a job was interrupted: so is the map
                        raise out
                    if ok:
                        results[i] = out
                    else:
                        tb = "".join(traceback.format_exception(out))
                        results[i] = JobFailure(i, items[i], f"{type(out).__name__}: {out}", tb, out)
                        failures.append(results[i])
                        first = first or out
                    left -= 1
                    tick()
            except KeyboardInterrupt:
                interrupt()
                deadline = time.monotonic() + INTERRUPT_GRACE_S
                for t in threads:
                    t.join(max(0.0, deadline - time.monotonic()))
                raise
            except BaseException:
                run.cancel()
                raise
        return _finish(results, failures, errors, first)

    def _map_processes(self, fn, items, tick, errors) -> list:
        try:
            blob = pickle.dumps(fn)
        except Exception as e:
            raise TypeError(
                f"LocalExecutor(kind='process') cannot send {fn!r} to a process ({e}); it needs a "
                "picklable top-level function (functools.partial of one is fine), not a closure or "
                "lambda: use kind='thread', RayExecutor (cloudpickle), or a module-level function") from e
        results: list = [None] * len(items)
        failures: list[JobFailure] = []
        todo = list(enumerate(items))[::-1]
        idle = [_Worker() for _ in range(min(self.workers, len(items)))]
        running: dict = {}  # the parent's end of a busy worker's pipe → (index, worker)
        try:
            while todo or running:
                while todo and idle:
                    i, item = todo.pop()
                    worker = idle.pop()
                    try:
                        worker.conn.send((blob, item))
                    except Exception as e:
                        raise TypeError(f"LocalExecutor(kind='process') cannot send item {i} "
                                        f"({_item_repr.repr(item)}) to a process: {e}") from e
                    running[worker.conn] = (i, worker)
                for conn in multiprocessing.connection.wait(list(running)):
                    i, worker = running.pop(conn)
                    try:
                        ok, payload = conn.recv()
                    except (EOFError, OSError):  # the worker died with the job: it alone fails
                        ok, payload = False, (_death(worker.stop()), "")
                        worker = _Worker() if todo else None
                    if ok:
                        results[i] = payload
                    else:
                        results[i] = JobFailure(i, items[i], *payload)
                        failures.append(results[i])
                    if worker is not None:
                        idle.append(worker)
                    tick()
        except KeyboardInterrupt:
            interrupt()  # this process's own sandboxes, and thread maps of other threads
            raise
        finally:
            for _, worker in running.values():  # interrupted: stop the busy ones
                worker.process.kill()
            for worker in idle + [w for _, w in running.values()]:
                worker.stop()
            if running:  # the killed workers' sandboxes: their leases are free now
                _clean_stale_sandboxes()
        return _finish(results, failures, errors)


class _Worker:
    """One process of the process pool, fed one job at a time through a pipe, so that its death
    is blamed on exactly the job it was running."""

    def __init__(self):
        ctx = multiprocessing.get_context("forkserver")  # no fork of a threaded parent
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_loop, args=(child,), daemon=True, name="evokit-worker")
        self.process.start()
        child.close()  # the worker holds the only other end: EOF here means it died

    def stop(self) -> int | None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.conn.close()
        self.process.join(timeout=5)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        return self.process.exitcode


def _worker_loop(conn) -> None:
    # The terminal's Ctrl-C reaches the whole process group; the parent decides what stops (it
    # kills busy workers), so a worker never dies of it mid-job with a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    last, fn = None, None
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        blob, item = job
        if blob != last:  # the same function for a whole map: unpickle it once
            last, fn = blob, pickle.loads(blob)
        out = _run(fn, item)
        try:
            conn.send(out)
        except Exception as e:  # the result itself cannot be pickled
            conn.send((False, (f"result of type {type(out[1]).__name__} cannot be sent back: {e}",
                               traceback.format_exc())))


# ------------------------------------------------------------------------------------------ Ray
def _new_lock(reentrant: bool):
    return threading.RLock() if reentrant else threading.Lock()


_LOCK, _RLOCK = type(threading.Lock()), type(threading.RLock())


def _dumps(obj, bars: dict | None = None, relay: str | None = None) -> bytes:
    """cloudpickle, except for two kinds of driver-side objects that a job may capture.

    * A thread lock becomes a fresh lock in the worker: a lock guards state within one process,
      so a new one is the only meaningful copy (without this, an object holding a lock, such as
      :class:`evokit.lineage.LineageStore`, could not be sent to a Ray worker at all).
    * A live ``tqdm`` bar (when ``bars`` is given) becomes a :class:`_RemoteBar` whose
      ``update(n)`` reaches the driver's bar through the ``relay`` actor: a job that ticks a bar
      per generation (``evolve``) shows lineages × generations under Ray as it does locally.
    """
    from ray import cloudpickle

    tqdm_std = sys.modules.get("tqdm.std")

    class Pickler(cloudpickle.CloudPickler):
        def reducer_override(self, o):
            if type(o) in (_LOCK, _RLOCK):
                return _new_lock, (type(o) is _RLOCK,)
            if bars is not None and tqdm_std is not None and isinstance(o, tqdm_std.tqdm):
                if o.disable:
                    return _RemoteBar, (None, 0)
                bars[id(o)] = o
                return _RemoteBar, (relay, id(o))
            return super().reducer_override(o)

    buf = io.BytesIO()
    Pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


class _RemoteBar:
    """Stands in a Ray worker for a tqdm bar of the driver; ``update(n)`` is forwarded there."""

    def __init__(self, relay: str | None, key: int):
        self.relay, self.key, self._handle = relay, key, None

    def update(self, n: float = 1) -> None:
        import ray

        if self.relay is None:  # a disabled bar
            return
        if self._handle is None:
            self._handle = ray.get_actor(self.relay)
        ray.get(self._handle.add.remote(self.key, n))  # synchronous: counted before the job returns

    def close(self) -> None:
        pass


class _Relay:
    """A Ray actor that collects bar ticks from workers until the driver takes them."""

    def __init__(self):
        self.counts: dict[int, float] = {}

    def add(self, key: int, n: float) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def take(self) -> dict[int, float]:
        out, self.counts = self.counts, {}
        return out


@contextlib.contextmanager
def _environ(name: str, value: str | None):
    """Set one environment variable for the duration of a block (None: leave it alone)."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _ray_job(fn_blob: bytes, item_blob: bytes) -> tuple[bool, Any]:
    from ray import cloudpickle

    return _run(cloudpickle.loads(fn_blob), cloudpickle.loads(item_blob))


class RayExecutor:
    """Jobs as Ray tasks: a local instance (``address=None``) or a cluster (``address="ray://…"``
    or ``"auto"``). ``fn`` travels by cloudpickle, so closures and lambdas are fine; on a cluster
    everything they use must exist on every node (evokit installed, task folders on shared disk).

    ``workers``: jobs in flight at once (and the CPUs of a local instance); None: as many as Ray
    schedules (all cores locally). A job whose worker dies is not retried (``max_retries=0``): it
    is reported like a killed local process, since evokit's jobs write to disk and are resumable.
    """

    def __init__(self, workers: int | None = None, address: str | None = None, *,
                 object_store_memory: int | None = None, temp_dir: str | None = None):
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.workers, self.address = workers, address
        self.started = not ray.is_initialized()  # we own the instance (and shut it down in close)
        if self.started:
            local = {}
            if not address:
                # Ray's force-cancel kills a worker's children before the worker itself, so a job
                # whose sandbox was just killed could run on for a few lines (and write results)
                # before its worker exits. Kept alive, the children die after the worker (bwrap's
                # --die-with-parent), and the map then cleans their sandboxes.
                local = {"num_cpus": workers, "object_store_memory": object_store_memory, "_temp_dir": temp_dir,
                         "_system_config": {"kill_child_processes_on_worker_exit": False}}
            # A local instance's workers inherit this environment: with the driver's sys.path as
            # their PYTHONPATH they import what the driver imports (scripts, test modules), and
            # unlike runtime_env={"env_vars": ...} this keeps Ray's pre-started workers usable.
            path = os.pathsep.join(p for p in sys.path if p) if not address else None
            with _environ("PYTHONPATH", path):
                ray.init(address=address or None, include_dashboard=False, ignore_reinit_error=True,
                         log_to_driver=False, **local)
        self._remote = ray.remote(max_retries=0)(_ray_job)

    def __repr__(self) -> str:
        return f"RayExecutor(workers={self.workers}, address={self.address!r})"

    def map(self, fn: Callable[[Any], Any], items: Sequence, *, progress: Progress = None,
            errors: str = "raise") -> list:
        import ray

        _check_errors(errors)
        items, tick = list(items), _ticker(progress)
        bars: dict = {}  # live tqdm bars captured by fn, fed through a relay actor
        relay_name = f"evokit-progress-{uuid.uuid4().hex}"
        try:
            fn_ref = ray.put(_dumps(fn, bars, relay_name))
        except Exception as e:
            raise TypeError(f"RayExecutor cannot pickle {fn!r} for the workers: {e}") from e
        relay = (ray.remote(num_cpus=0)(_Relay).options(name=relay_name).remote() if bars else None)
        results: list = [None] * len(items)
        failures: list[JobFailure] = []
        todo = list(enumerate(items))[::-1]
        running: dict = {}  # ObjectRef → index
        limit = self.workers or len(items)

        def drain():
            for key, n in ray.get(relay.take.remote()).items():
                bars[key].update(n)

        try:
            while todo or running:
                while todo and len(running) < limit:
                    i, item = todo.pop()
                    running[self._remote.remote(fn_ref, _dumps(item))] = i
                done, _ = ray.wait(list(running), num_returns=1, timeout=0.5 if relay else None)
                if relay:
                    drain()
                for ref in done:
                    i = running.pop(ref)
                    try:
                        ok, payload = ray.get(ref)
                    except ray.exceptions.RayError as e:  # the worker died (killed, OOM) or Ray failed
                        first = (str(e).strip().splitlines() or [""])[0]
                        ok, payload = False, (f"Ray worker died or failed: {type(e).__name__}: {first}", str(e))
                    if ok:
                        results[i] = payload
                    else:
                        results[i] = JobFailure(i, items[i], *payload)
                        failures.append(results[i])
                    tick()
        except KeyboardInterrupt:
            interrupt()  # this process's own sandboxes, and thread maps of other threads
            raise
        finally:
            if running:  # only when interrupted: stop what is still running
                for ref in running:
                    ray.cancel(ref, force=True)
                # The killed workers' sandboxes (state with a free lease now) on this machine.
                with contextlib.suppress(Exception):
                    ray.wait(list(running), num_returns=len(running), timeout=INTERRUPT_GRACE_S)
                _clean_stale_sandboxes()
            if relay:
                try:
                    drain()
                finally:
                    ray.kill(relay)
        return _finish(results, failures, errors)

    def close(self) -> None:
        import ray

        if self.started and ray.is_initialized():
            ray.shutdown()
        self.started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_executor(kind: str = "local", workers: int = 2, ray_address: str | None = None) -> Executor:
    """The executor a CLI asked for: ``local`` (threads), ``process`` or ``ray`` (``ray_address``
    None: a local instance with ``workers`` CPUs; else that cluster)."""
    if ray_address and kind != "ray":
        raise ValueError(f"--ray-address needs --executor ray (got --executor {kind})")
    if kind in ("local", "thread"):
        return LocalExecutor(workers, "thread")
    if kind == "process":
        return LocalExecutor(workers, "process")
    if kind == "ray":
        return RayExecutor(workers, ray_address)
    raise ValueError(f"executor must be local, process or ray, not {kind!r}")


def _readable(fd: int, timeout: float | None) -> bool:
    """Whether ``fd`` is readable within ``timeout`` seconds. ``poll``, not ``select``: a long-lived
    process (a notebook kernel, a test worker) may hold descriptors numbered past select's 1024."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else timeout * 1000))
