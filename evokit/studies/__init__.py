"""Studies: the computations behind the notebooks, each writing rows (JSONL) under a results folder.

A notebook makes one call into a study, which computes (or resumes) and writes its rows; the
notebook then reads the rows and draws. Nothing a figure shows is computed in a notebook.

The training studies, one module each (each states its own departures from the papers):
:mod:`~evokit.studies.warm_start` (what EE's studies share: the learner, the seed admission, each run's
evolved lineages), :mod:`~evokit.studies.curricula` (EL vs random order),
:mod:`~evokit.studies.methods` (evolution vs co-evolution vs ensemble) and
:mod:`~evokit.studies.genenv` (GenEnv's loop, data efficiency and theory).
"""
