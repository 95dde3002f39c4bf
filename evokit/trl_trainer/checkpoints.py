"""What a run leaves on disk: metric rows, and the scheduler state inside TRL's checkpoints.

Rows (``steps.jsonl``, one per update; ``rollouts.jsonl``, one per episode): a step row is TRL's
logs (reward, ``frac_reward_zero_std``, completion lengths, step time, evokit's tokens per turn and
seconds in the sandbox) with the row both loops share over them (:mod:`evokit.training.steps`:
``step`` from 0, ``source``, ``served``, the group shares, turns, ``mean_d_t``, the scheduler's position). Checkpoints (model, optimizer,
scheduler state) are TRL's ``checkpoint-N`` folders; evokit adds its scheduler's state to each
(``evokit_scheduler.pkl``), and a resumed run drops the rows of steps after the checkpoint.

This module knows the trainer only through the attributes it reads (``scheduler``,
``last_step``, ``rollout_rows``), so it imports nothing above it.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from evokit.rows import append_rows, keep_rows

SCHEDULER_FILE = "evokit_scheduler.pkl"  # the scheduler state, saved inside each TRL checkpoint


def rows_callback(out: Path, trainer_ref: list):
    """A ``TrainerCallback`` writing ``out``'s rows; ``trainer_ref[0]`` is the trainer, once it is built."""
    from transformers import TrainerCallback

    class Rows(TrainerCallback):
        """steps.jsonl / rollouts.jsonl rows; the scheduler state into each checkpoint; stop when EL is done."""

        def on_log(self, args, state, control, logs=None, **kw):
            tr = trainer_ref[0]
            if not state.is_world_process_zero or not logs or "reward" not in logs:
                return
            row = {**logs, **tr.last_step}  # TRL's logs, then the row both loops share (evokit.training.steps)
            append_rows(out / "steps.jsonl", [row])
            append_rows(out / "rollouts.jsonl", tr.rollout_rows)
            tr.rollout_rows = []

        def on_step_end(self, args, state, control, **kw):
            if trainer_ref[0].scheduler.done():
                control.should_training_stop = control.should_save = True

        def on_save(self, args, state, control, **kw):
            ck = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and ck.is_dir():
                tmp = ck / f".{SCHEDULER_FILE}.tmp"
                tmp.write_bytes(pickle.dumps(trainer_ref[0].scheduler.state_dict()))
                os.replace(tmp, ck / SCHEDULER_FILE)

    return Rows()


def last_checkpoint(trl_dir: Path) -> Path | None:
    """The newest ``checkpoint-N`` holding both TRL's state and evokit's scheduler state."""
    cks = sorted((p for p in trl_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                 key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    return next((p for p in cks if (p / "trainer_state.json").is_file() and (p / SCHEDULER_FILE).is_file()), None)


def resume(out: Path, scheduler) -> Path | None:
    """The checkpoint a run in ``out`` resumes from (None: start afresh), with ``scheduler`` set to
    its state then and the rows of later steps dropped (a crash may have written them)."""
    ck = last_checkpoint(out / "trl")
    if ck is not None:
        scheduler.load_state_dict(pickle.loads((ck / SCHEDULER_FILE).read_bytes()))
        step = int(ck.name.split("-")[-1])
        keep_rows(out / "steps.jsonl", lambda r: r["step"] < step)  # checkpoint-N: updates 0 … N−1 are done
        keep_rows(out / "rollouts.jsonl", lambda r: r["step"] < step)
    return ck
