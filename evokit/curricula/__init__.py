"""Curricula added as plug-ins: every module in this folder is imported when sources are listed.

A new curriculum is one module here that defines a frozen source class implementing
:class:`evokit.sources.TaskSource` and registers it with ``@evokit.sources.register("name")``,
plus one test; ``evokit train --curriculum name``, ``evokit train-llm --curriculum name`` and
both training loops then run it without an edit anywhere else (:func:`evokit.sources.source_names`
finds it). A source that trains on evolved environments declares a field ``envs``: the CLI
and :func:`source_from` fill it from a lineage store or a list of task folders.
:mod:`evokit.curricula.replay` is the example.

A curriculum in another package joins the same way through the ``evokit.sources`` entry-point
group (``[project.entry-points."evokit.sources"] name = "package.module"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from evokit.curriculum import lineage_envs, store_envs
from evokit.sources import SOURCES, SourceError, TaskSource, make_source, source_names


def takes_envs(name: str) -> bool:
    """Whether the source ``name`` trains on evolved environments (it has a field ``envs``)."""
    source_names()
    cls = SOURCES.get(name)
    return cls is not None and dataclasses.is_dataclass(cls) and "envs" in {f.name for f in dataclasses.fields(cls)}


def source_from(name: str, *, store=None, tasks: Sequence[str | Path] = (), **options) -> TaskSource:
    """A registered source by name, as the CLI and both training loops build it.

    A source with a field ``envs`` (:func:`takes_envs`) gets its environments from ``store`` (a
    lineage store made by ``evokit evolve``) or from ``tasks`` (each task folder its own
    one-environment lineage at the start generation); the other sources take ``options`` only.
    Anything wrong is a :class:`SourceError` naming it.
    """
    from evokit.lineage import LineageStore  # lineage sits above the curricula

    names = source_names()
    if name not in SOURCES:
        raise SourceError(f"unknown task source {name!r}; choose one of {', '.join(names)}")
    if takes_envs(name):
        if store is None and not tasks:
            raise SourceError(f"source {name!r} needs a lineage store (made by `evokit evolve`) or task folders")
        if store is not None and not isinstance(store, LineageStore) and not Path(store).is_dir():
            raise SourceError(f"no lineage store at {store}; make one with `evokit evolve`")
        envs = store_envs(store) if store is not None else lineage_envs({Path(t).name: [t] for t in tasks})
        if not envs:
            raise SourceError(f"source {name!r}: {store or 'the task list'} holds no environments")
        options = {"envs": envs, **options}
    elif store is not None or tasks:
        raise SourceError(f"source {name!r} takes no lineage store or task folders (it makes its own tasks)")
    try:
        return make_source(name, **options)
    except (TypeError, ValueError) as e:
        raise SourceError(f"task source {name!r}: {e}") from None
