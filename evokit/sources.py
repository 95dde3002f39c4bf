"""Task sources: which task each GRPO group is served, and where its results go back.

One protocol for every curriculum of both papers, state in and state out as jaxued's level
sampler: a source is a frozen (hyperparameter) object, its state a plain value that a loop
keeps, checkpoints and passes back.

    state = source.init(run)                       # run: group size B, seed, output folder
    state, tasks = source.sample(state, rng, n)    # n TaskRefs, one per GRPO group
    state = source.update(state, results)          # one GroupResult per served task
    source.done(state), source.summary(state)      # stop?  a small JSON-able view for the rows

Both training loops drive sources only through this protocol: the CPU learner's
:func:`evokit.train.train` and the TRL path's :class:`evokit.trl_trainer.sources.Scheduler`.
The draw of step t uses :func:`evokit.seeding.step_rng` (seed, t), so the same source serves
the same tasks in either loop, and a resumed run the same as an uninterrupted one.

Sources are registered by name (:func:`register`, :func:`make_source`; the CLI and the loops build
them from a store or task folders with :func:`evokit.curricula.source_from`); the
built-in ones live with their concept: EE's EL, random and D_T order (:mod:`evokit.curriculum`),
GenEnv's simulator (:mod:`evokit.genenv.source`), the co-evolution refresh
(:mod:`evokit.evolve.coevolution`) and an in-process task for GPU hosts without a sandbox
(:class:`InProcess`, here). A new curriculum is one module in :mod:`evokit.curricula` (found
there without a list to edit; :mod:`evokit.curricula.replay` is the example) or in another
package through the ``evokit.sources`` entry-point group.

Deviation from the papers, stated here: the pass rate fed back is successes / usable rollouts
(:mod:`evokit.grpo`); a group with no usable rollout changes no source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from evokit.errors import UserError
from evokit.grpo import SUCCESS, GroupStats, group_stats


@dataclass(frozen=True)
class TaskRef:
    """One task a GRPO group is served: the source's key for it and its Harbor folder (None: in-process)."""

    key: tuple
    path: Path | None


@dataclass(frozen=True)
class GroupResult:
    """What one served task gave: its statistics and its rollout rows (dicts, as ``rollouts.jsonl`` holds them)."""

    ref: TaskRef
    stats: GroupStats
    rows: tuple[dict, ...] = ()

    @property
    def pass_rate(self) -> float | None:
        return self.stats.pass_rate


def group_results(refs: Sequence[TaskRef], groups: Sequence[Sequence[dict]], success: float = SUCCESS
                  ) -> list[GroupResult]:
    """One :class:`GroupResult` per served task from its rollout rows; both loops build their feedback here."""
    if len(refs) != len(groups):
        raise ValueError(f"{len(refs)} tasks served but {len(groups)} groups of results")
    return [GroupResult(ref, group_stats(rows, success), tuple(rows)) for ref, rows in zip(refs, groups, strict=True)]


@dataclass(frozen=True)
class Run:
    """What a source needs to know of the run: group size B, seed, and where generated tasks may go."""

    group_size: int
    seed: int = 0
    out: Path | None = None

    def __post_init__(self):
        if self.group_size < 1:
            raise ValueError(f"group size B must be ≥ 1; got {self.group_size}")


@runtime_checkable
class TaskSource(Protocol):
    """What a training loop needs of a curriculum (module docstring)."""

    name: str

    def init(self, run: Run) -> Any: ...

    def sample(self, state: Any, rng: np.random.Generator, n: int) -> tuple[Any, list[TaskRef]]: ...

    def update(self, state: Any, results: Sequence[GroupResult]) -> Any: ...

    def done(self, state: Any) -> bool: ...

    def summary(self, state: Any) -> dict: ...


# ----------------------------------------------------------------------------- registry
SOURCES: dict[str, Callable[..., TaskSource]] = {}
#: Modules whose sources live with their concept (EE's schedulers, GenEnv, co-evolution); plug-ins
#: are found in :mod:`evokit.curricula` and through the entry-point group :data:`ENTRY_POINTS`.
BUILTIN_MODULES = ("evokit.curriculum", "evokit.genenv.source", "evokit.evolve.coevolution")
PLUGIN_PACKAGE = "evokit.curricula"
ENTRY_POINTS = "evokit.sources"


class SourceError(UserError, ValueError):
    """A source that cannot be built from what it was given (a name, a store, task folders, options)."""


def register(name: str):
    """Class decorator: make the source constructible by name (:func:`make_source`)."""
    def deco(cls):
        if name in SOURCES and SOURCES[name] is not cls:
            raise ValueError(f"task source {name!r} is registered twice ({SOURCES[name].__module__} and {cls.__module__})")
        SOURCES[name] = cls
        return cls
    return deco


def _discover() -> None:
    """Import every module that registers sources: the built-ins, the plug-in folder, the entry points."""
    package = importlib.import_module(PLUGIN_PACKAGE)
    modules = [*BUILTIN_MODULES, *(f"{PLUGIN_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(package.__path__))]
    for mod in modules:
        importlib.import_module(mod)
    for ep in entry_points(group=ENTRY_POINTS):
        try:
            ep.load()
        except Exception as e:  # a broken third-party plug-in names itself instead of breaking every source
            raise SourceError(f"the task source plug-in {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(e).__name__}: {e}") from e


def source_names() -> list[str]:
    """Every registered source (module docstring: built-ins, :mod:`evokit.curricula`, entry points)."""
    _discover()
    return sorted(SOURCES)




def make_source(name: str, **options) -> TaskSource:
    """The source registered as ``name``, built with ``options`` (its dataclass fields)."""
    names = source_names()
    if name not in SOURCES:
        raise ValueError(f"unknown task source {name!r}; choose one of {', '.join(names)}")
    cls = SOURCES[name]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set(options)
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"task source {name!r} takes no option(s) {unknown}; its options: {sorted(fields)}")
    return cls(**options)


def describe(source: TaskSource) -> dict:
    """A JSON-able identity of a source (name and options; long tuples by count and hash): what a run records
    in ``config.json`` and compares at resume."""
    out: dict[str, Any] = {"name": source.name}
    if not dataclasses.is_dataclass(source):
        return {**out, "type": type(source).__name__}
    for f in dataclasses.fields(source):
        v = getattr(source, f.name)
        text = json.dumps(_plain(v), sort_keys=True, default=str)
        # A config (a dataclass) is kept whole: readers such as studies.genenv.genenv_frame look its fields up.
        out[f.name] = _plain(v) if len(text) <= 200 or dataclasses.is_dataclass(v) else {
            "n": len(v) if isinstance(v, Sequence | Mapping) else None,
            "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
    return out


def _plain(v):
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _plain(dataclasses.asdict(v))
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, Iterable) and not isinstance(v, str | bytes):
        return [_plain(x) for x in v]
    return str(v) if isinstance(v, Path) else v


@register("none")
@dataclass(frozen=True)
class InProcess:
    """No sandbox: one in-process task (TRL path only; the reward is a function of the completion).

    For machines without bubblewrap (GPU hosts) and for measuring the TRL wrapper's own overhead
    (:mod:`evokit.trl_trainer.env` gives it the share of distinct tokens as its reward).
    """

    name: ClassVar[str] = "none"
    INSTRUCTION: ClassVar[str] = "List the files in /app with the bash tool, then say done."

    def init(self, run: Run) -> int:
        return 0

    def sample(self, state: int, rng, n):
        return state + 1, [TaskRef(("none", 0, 1), None)] * n

    def update(self, state: int, results) -> int:
        return state

    def done(self, state: int) -> bool:
        return False

    def summary(self, state: int) -> dict:
        return {"batches": state}
