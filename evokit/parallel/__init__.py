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

One module each: :mod:`~evokit.parallel.jobs` (failures and what a map returns),
:mod:`~evokit.parallel.ctrl_c` (interrupts and the CLI's SIGINT handling),
:mod:`~evokit.parallel.local` (threads, processes) and :mod:`~evokit.parallel.ray_executor`.

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

from evokit.parallel.ctrl_c import (
    INTERRUPT_GRACE_S,
    CtrlC,
    JobInterrupted,
    interrupt,
    kill_own_sandboxes,
)
from evokit.parallel.jobs import Executor, JobFailure, ParallelError, Progress
from evokit.parallel.local import LocalExecutor
from evokit.parallel.ray_executor import RayExecutor

__all__ = ["INTERRUPT_GRACE_S", "CtrlC", "Executor", "JobFailure", "JobInterrupted", "LocalExecutor", "ParallelError",
           "Progress", "RayExecutor", "interrupt", "kill_own_sandboxes", "make_executor"]


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
