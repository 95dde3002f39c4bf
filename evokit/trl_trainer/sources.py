"""The TRL path's hold on a task source: which task each GRPO group ("slot") is served, and the feedback.

The dataset TRL reads is ``tasks_per_step`` rows, one per slot; the trainer asks the
:class:`Scheduler` for the slots' tasks when TRL starts generating a batch (:meth:`Scheduler.begin_batch`)
and gives it the groups' rollout records after the rewards (:meth:`Scheduler.feedback`). The
scheduler holds any task source of :mod:`evokit.sources` (EL, random or D_T order, GenEnv's
simulator, a new curriculum …) and its state; it draws batch t with :func:`evokit.seeding.step_rng`
(seed, t) and builds the feedback with :func:`evokit.sources.group_results`, as the CPU loop does,
so one source on the same results reaches the same state in both loops. Its state is saved into
each TRL checkpoint (:mod:`.checkpoints`), so a resumed run serves the same tasks as an uninterrupted one.

When the source is done (EL: every lineage passed) it serves the tasks it served last, and the
run stops at the end of that step (:mod:`.checkpoints`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evokit.grpo import SUCCESS
from evokit.seeding import step_rng
from evokit.sources import GroupResult, Run, TaskRef, TaskSource, group_results


class Scheduler:
    """A task source and its state, driven batch by batch by :class:`~evokit.trl_trainer.trainer.EvokitGRPOTrainer`."""

    def __init__(self, source: TaskSource, run: Run):
        self.source, self.run = source, run
        self.state = source.init(run)
        self.batches = 0
        self.last: list[TaskRef] = []

    @property
    def name(self) -> str:
        return self.source.name

    def task_paths(self) -> list[Path]:
        """Task folders the source is known to serve up front (for the set-up's context check)."""
        envs = getattr(self.source, "envs", None) or ()
        return sorted({Path(e.path) for e in envs if e.path is not None})

    def done(self) -> bool:
        return self.source.done(self.state)

    def begin_batch(self, n: int) -> list[TaskRef]:
        self.state, refs = self.source.sample(self.state, step_rng(self.run.seed, self.batches), n)
        self.batches += 1
        if len(refs) < n:  # the source is done: serve where it ended (training stops at this step's end)
            pool = refs or self.last
            if not pool:
                raise RuntimeError(f"task source {self.source.name!r} served no task at its first batch")
            refs = [pool[i % len(pool)] for i in range(n)]
        self.last = list(refs)
        return self.last

    def feedback(self, records: Sequence[dict], refs: Sequence[TaskRef], success: float = SUCCESS
                 ) -> list[GroupResult]:
        """The batch's rollout records (with their ``slot``) back into the source; returns the groups' results."""
        by_slot: list[list[dict]] = [[] for _ in refs]
        for r in records:
            by_slot[int(r["slot"])].append(r)
        results = group_results(refs, by_slot, success)
        if not self.done():
            self.state = self.source.update(self.state, results)
        return results

    def summary(self) -> dict:
        return self.source.summary(self.state)

    def position(self) -> dict[str, float]:
        """The summary's numbers, for TRL's logs (``scheduler/<name>``)."""
        return {f"scheduler/{k}": float(v) for k, v in self.summary().items()
                if isinstance(v, int | float) and not isinstance(v, bool)}

    def state_dict(self) -> dict:
        return {"state": self.state, "batches": self.batches, "last": self.last}

    def load_state_dict(self, d: dict) -> None:
        self.state, self.batches, self.last = d["state"], d["batches"], d["last"]

