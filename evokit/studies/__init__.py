"""Studies: the computations behind the notebooks, each writing rows (JSONL) under a results folder.

A notebook makes one call into a study, which computes (or resumes) and writes its rows; the
notebook then reads the rows and draws. Nothing a figure shows is computed in a notebook.
"""
