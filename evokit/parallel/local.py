"""The local executor: a thread pool (default) or worker processes.

Threads suit jobs that wait on sandboxes and endpoints (most of evokit's); processes suit CPU-bound
Python, and a process that dies (SIGKILL, the OOM killer) becomes that job's :class:`JobFailure`.
"""

from __future__ import annotations

import collections
import multiprocessing
import multiprocessing.connection
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from evokit.parallel.ctrl_c import (
    INTERRUPT_GRACE_S,
    JobRun,
    clean_stale_sandboxes,
    interrupt,
    registered,
)
from evokit.parallel.jobs import (
    JobFailure,
    Progress,
    check_errors,
    death_message,
    finish,
    item_repr,
    run_job,
    ticker,
)


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
        check_errors(errors)
        items = list(items)
        if self.kind == "thread":
            return self._map_threads(fn, items, ticker(progress), errors)
        return self._map_processes(fn, items, ticker(progress), errors)

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
        run = JobRun()
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
        with registered(run):
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
        return finish(results, failures, errors, first)

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
                                        f"({item_repr.repr(item)}) to a process: {e}") from e
                    running[worker.conn] = (i, worker)
                for conn in multiprocessing.connection.wait(list(running)):
                    i, worker = running.pop(conn)
                    try:
                        ok, payload = conn.recv()
                    except (EOFError, OSError):  # the worker died with the job: it alone fails
                        ok, payload = False, (death_message(worker.stop()), "")
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
                clean_stale_sandboxes()
        return finish(results, failures, errors)


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
        out = run_job(fn, item)
        try:
            conn.send(out)
        except Exception as e:  # the result itself cannot be pickled
            conn.send((False, (f"result of type {type(out[1]).__name__} cannot be sent back: {e}",
                               traceback.format_exc())))


# ------------------------------------------------------------------------------------------ Ray
