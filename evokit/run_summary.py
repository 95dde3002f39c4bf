"""What a training run's ``steps.jsonl`` rows say at its end: progress, pass@k, and whether GRPO had a signal.

GRPO learns only from groups whose rewards differ: a group whose rollouts all pass or all fail
gets Â = 0 for every rollout (:func:`evokit.grpo.group_advantages`) and moves nothing. A run whose
tasks are all too easy or all too hard therefore ends with a loss curve and no learning, and says
so only to whoever reads the rows. :func:`summarize_steps` reads them; :func:`summary_lines` puts
the answer in a few lines that ``evokit train`` prints when it ends.

* **Groups** are the *served* groups of each row (``row["served"]``: one task, ``n`` usable
  rollouts, ``successes`` of them passing); groups replayed from a pool (GenEnv's D_train) were
  counted when first served and are not counted again.
* **Pass rate, first vs last**: successes over usable rollouts pooled over the first and over the
  last :data:`WINDOW_SHARE` of the steps (at least one step each).
* **pass@1 and pass@k** (:func:`evokit.stats.pass_at_k`, Chen et al. 2021) are averaged over
  groups, each a (task, step) pair; the policy changes between steps, so they describe the run as
  it went, not its final policy (held-out evaluation, ``evals.jsonl``, does that). k is the
  largest number of usable rollouts in a group (the group size B unless rollouts were masked);
  groups with fewer usable rollouts are left out of pass@k and counted.
* **No learning signal**: the share of groups whose every advantage is 0, as the update counted it
  (the row's ``dead_group_share``, replayed groups included since the update learns from them: all
  rewards equal, or fewer than two usable rollouts); at :data:`NO_SIGNAL_SHARE` or more the summary warns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evokit.rows import read_rows
from evokit.stats import pass_at_k

#: Share of dead groups (every Â = 0) at which a run is reported as having had no learning signal:
#: with 9 groups in 10 giving no gradient, the update rests on a tenth of the rollouts at most.
NO_SIGNAL_SHARE = 0.9
#: Share of the steps whose pooled pass rate is compared, at the start and at the end of the run.
WINDOW_SHARE = 0.2


@dataclass(frozen=True)
class RunSummary:
    """A training run's rows reduced to what a researcher checks first (module docstring)."""

    steps: int
    groups: int  # served groups with at least one usable rollout
    window: int  # steps pooled at each end for the first/last pass rate
    first_pass_rate: float | None
    last_pass_rate: float | None
    pass_at_1: float | None
    k: int | None  # the k of pass@k (None: no group had two usable rollouts)
    pass_at_k: float | None
    groups_at_k: int  # groups with at least k usable rollouts
    unsolved_share: float  # every usable rollout failed
    solved_share: float  # every usable rollout passed
    partially_solved_share: float  # 1..n-1 of n passed: the groups GRPO learns from
    dead_share: float  # every Â = 0, as the update counted it
    no_signal: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _pooled(rows: Sequence[dict]) -> float | None:
    served = [s for r in rows for s in r.get("served", [])]
    n = sum(s["n"] for s in served)
    return sum(s["successes"] for s in served) / n if n else None


def _dead_share(rows: Sequence[dict], served: Sequence[dict]) -> float:
    """The update's own dead-group count, weighted by groups; served groups where a row lacks it."""
    if rows and all("dead_group_share" in r and "n_groups" in r for r in rows):
        total = sum(r["n_groups"] for r in rows)
        return sum(r["dead_group_share"] * r["n_groups"] for r in rows) / total if total else 1.0
    dead = [s["n"] < 2 or s["successes"] in (0, s["n"]) for s in served]
    return sum(dead) / len(dead) if dead else 1.0


def summarize_steps(rows: Sequence[dict]) -> RunSummary:
    """The :class:`RunSummary` of a run's ``steps.jsonl`` rows (in step order)."""
    rows = sorted(rows, key=lambda r: r["step"])
    if not rows:
        raise ValueError("no steps.jsonl rows: the run made no GRPO update")
    window = max(1, math.floor(len(rows) * WINDOW_SHARE))
    served = [s for r in rows for s in r.get("served", []) if s["n"] > 0]
    k = max((s["n"] for s in served), default=0)
    at_k = [s for s in served if s["n"] >= k]
    share = (lambda pred: sum(map(pred, served)) / len(served)) if served else (lambda pred: 0.0)
    dead = _dead_share(rows, served)
    return RunSummary(
        steps=len(rows), groups=len(served), window=window,
        first_pass_rate=_pooled(rows[:window]), last_pass_rate=_pooled(rows[-window:]),
        pass_at_1=sum(s["successes"] / s["n"] for s in served) / len(served) if served else None,
        k=k if k >= 2 else None,
        pass_at_k=sum(pass_at_k(s["n"], s["successes"], k) for s in at_k) / len(at_k) if k >= 2 else None,
        groups_at_k=len(at_k) if k >= 2 else 0,
        unsolved_share=share(lambda s: s["successes"] == 0), solved_share=share(lambda s: s["successes"] == s["n"]),
        partially_solved_share=share(lambda s: 0 < s["successes"] < s["n"]),
        dead_share=dead, no_signal=dead >= NO_SIGNAL_SHARE)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f} %"


def summary_lines(s: RunSummary) -> list[str]:
    """A few plain lines for a terminal; the last one a warning when the run had no learning signal."""
    span = "step" if s.window == 1 else f"{s.window} steps"
    lines = [f"{s.steps} step(s), {s.groups} group(s) served",
             f"pass rate: {_pct(s.first_pass_rate)} in the first {span}, {_pct(s.last_pass_rate)} in the last {span}",
             f"pass@1 {_pct(s.pass_at_1)}" + (f", pass@{s.k} {_pct(s.pass_at_k)} (over {s.groups_at_k} group(s) "
                                               f"with {s.k} usable rollouts)" if s.k else ""),
             f"groups: {_pct(s.partially_solved_share)} partially solved, {_pct(s.solved_share)} all pass, "
             f"{_pct(s.unsolved_share)} all fail; {_pct(s.dead_share)} dead (every advantage 0)"]
    if s.no_signal:
        if s.k is None:
            cause = "no group had two usable rollouts to compare (group size 1, or rollouts masked)"
        elif s.solved_share >= s.unsolved_share:
            cause = "the tasks were too easy for this learner"
        else:
            cause = "the tasks were too hard for this learner"
        lines.append(f"warning: no learning signal: {_pct(s.dead_share)} of groups gave GRPO no gradient "
                     f"(threshold {_pct(NO_SIGNAL_SHARE)}): {cause}")
    return lines


def run_report(out: str | Path) -> list[str]:
    """:func:`summary_lines` of the run in folder ``out`` (its ``steps.jsonl``), or one line saying it made no update."""
    path = Path(out) / "steps.jsonl"
    rows = read_rows(path)
    return summary_lines(summarize_steps(rows)) if rows else [f"{path}: no rows, the run made no GRPO update"]
