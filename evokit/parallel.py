"""Run independent jobs in parallel behind one interface: a local pool by default, Ray when asked.

Evolution (one lineage per job), verification (one task per job) and rollouts (one task's group
per job) all reduce to ``executor.map(fn, items, progress=...)``:

* **order is kept**: ``result[i]`` belongs to ``items[i]``;
* **one failure does not stop the others**: every item runs; then a job that raised, or whose
  worker process died (SIGKILL, the OOM killer, a Ray worker crash), is reported as a
  :class:`JobFailure` naming its index and item, raised together in one :class:`ParallelError`
  (``errors="raise"``, the default) or left in its slot of the result (``errors="return"``);
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
* a new local instance takes 5–10 s to start on 2 cores; :meth:`RayExecutor.close` shuts down
  an instance that the executor started itself (Ray also does it at exit). Temp files go to
  ``/tmp/ray`` unless ``temp_dir`` is given; Ray 2.60 turns token authentication on and writes
  its token to ``~/.ray/auth_token`` on first start (harmless locally; a cluster needs its token).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import multiprocessing.connection
import os
import pickle
import reprlib
import signal
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

Progress = Callable[[], Any] | Any  # a callable taking no argument, or anything with .update()

_item_repr = reprlib.Repr(maxstring=120, maxother=120)


@dataclass
class JobFailure:
    """One job that did not return: which item, what went wrong, and the worker's traceback."""

    index: int
    item: Any
    error: str  # "ValueError: message" or "worker died: ..."
    traceback: str = ""

    def __str__(self) -> str:
        return f"job {self.index} (item {_item_repr.repr(self.item)}): {self.error}"


class ParallelError(RuntimeError):
    """Some jobs failed; ``failures`` names each, ``results`` holds the others' results in order."""

    def __init__(self, failures: list[JobFailure], results: list):
        self.failures, self.results = failures, results
        lines = [f"{len(failures)} of {len(results)} jobs failed:", *(f"  {f}" for f in failures)]
        if failures[0].traceback:
            lines += [f"traceback of job {failures[0].index}:", failures[0].traceback.rstrip()]
        super().__init__("\n".join(lines))


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], items: Sequence, *, progress: Progress = None,
            errors: str = "raise") -> list: ...

    def close(self) -> None: ...


def _ticker(progress: Progress) -> Callable[[], Any]:
    if progress is None:
        return lambda: None
    update = getattr(progress, "update", None)  # a tqdm bar; a plain callable has no .update
    return update if callable(update) else progress


def _run(fn: Callable, item: Any) -> tuple[bool, Any]:
    """Call ``fn(item)`` in a worker: ``(True, result)`` or ``(False, (error, traceback))``."""
    try:
        return True, fn(item)
    except Exception as e:
        return False, (f"{type(e).__name__}: {e}", traceback.format_exc())


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


class LocalExecutor:
    """A pool on this machine: threads (default) or processes.

    * ``kind="thread"``: evokit's jobs mostly wait on sandbox subprocesses (bubblewrap trials,
      image builds), which release the GIL, so threads give full parallelism at no start-up cost,
      share caches, and accept any callable (closures, lambdas, bound methods).
    * ``kind="process"``: for Python-heavy work (plan search, difficulty scoring, small learners)
      that the GIL would serialise. Each map starts ``workers`` processes from a forkserver (no
      fork of a threaded parent) and feeds them one job at a time, so a job that kills its process
      (SIGKILL, the OOM killer) fails alone and is named, a new process replaces it, and the others
      go on. Function and items are pickled: use a top-level function (a ``functools.partial`` of
      one is fine), never a closure or lambda; each map pays the workers' start and imports (~1 s).
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
        failures, first = [], None
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = futures[fut]
                    e = fut.exception()
                    if e is None:
                        results[i] = fut.result()
                    else:
                        tb = "".join(traceback.format_exception(e))
                        results[i] = JobFailure(i, items[i], f"{type(e).__name__}: {e}", tb)
                        failures.append(results[i])
                        first = first or e
                    tick()
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
        finally:
            for _, worker in running.values():  # interrupted: stop the busy ones
                worker.process.kill()
            for worker in idle + [w for _, w in running.values()]:
                worker.stop()
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
                local = {"num_cpus": workers, "object_store_memory": object_store_memory, "_temp_dir": temp_dir}
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
        finally:
            for ref in running:  # only when interrupted: stop what is still running
                ray.cancel(ref, force=True)
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
