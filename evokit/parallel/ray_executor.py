"""The Ray executor: jobs as Ray tasks on a local instance or a cluster (the package docstring says how
it runs offline and how Ctrl-C reaches its workers).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from evokit.parallel.ctrl_c import INTERRUPT_GRACE_S, clean_stale_sandboxes, interrupt
from evokit.parallel.jobs import JobFailure, Progress, check_errors, finish, run_job, ticker


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

    return run_job(cloudpickle.loads(fn_blob), cloudpickle.loads(item_blob))


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

        check_errors(errors)
        items, tick = list(items), ticker(progress)
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
                clean_stale_sandboxes()
            if relay:
                try:
                    drain()
                finally:
                    ray.kill(relay)
        return finish(results, failures, errors)

    def close(self) -> None:
        import ray

        if self.started and ray.is_initialized():
            ray.shutdown()
        self.started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
