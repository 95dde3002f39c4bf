"""Curricula added as plug-ins: every module in this folder is imported when sources are listed.

A new curriculum is one module here that defines a frozen source class implementing
:class:`evokit.sources.TaskSource` and registers it with ``@evokit.sources.register("name")``,
plus one test; ``evokit train --curriculum name``, ``evokit train-llm --curriculum name`` and
both training loops then run it without an edit anywhere else (:func:`evokit.sources.source_names`
finds it). A source that trains on evolved environments declares a field ``envs``: the CLI
and :func:`evokit.sources.source_from` fill it from a lineage store or a list of task folders.
:mod:`evokit.curricula.replay` is the example.

A curriculum in another package joins the same way through the ``evokit.sources`` entry-point
group (``[project.entry-points."evokit.sources"] name = "package.module"``).
"""
