"""evokit.rows: JSONL rows survive a killed writer, and odd values are written as numbers or strings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from evokit.rows import append_rows, dumps, keep_rows, read_rows


def test_round_trip_with_numpy_torch_and_paths(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert append_rows(path, [{"a": np.float32(0.5), "b": np.int64(3), "c": torch.tensor(2.0), "d": Path("/x")}]) == 1
    assert append_rows(path, []) == 0
    assert read_rows(path) == [{"a": 0.5, "b": 3, "c": 2.0, "d": "/x"}]
    assert dumps({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'  # same row, same bytes


def test_a_torn_last_line_is_ignored_and_missing_files_are_empty(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_rows(path, [{"step": 0}, {"step": 1}])
    with open(path, "a") as f:
        f.write('{"step": 2, "rew')  # a writer killed mid-line
    assert [r["step"] for r in read_rows(path)] == [0, 1]
    assert read_rows(tmp_path / "none.jsonl") == []


def test_keep_rows_rewrites_atomically(tmp_path):
    path = tmp_path / "steps.jsonl"
    append_rows(path, [{"step": s} for s in range(5)])
    with open(path, "a") as f:
        f.write("{torn")
    keep_rows(path, lambda r: r["step"] < 3)
    assert [r["step"] for r in read_rows(path)] == [0, 1, 2]
    assert path.read_text().endswith("\n") and not list(tmp_path.glob(".*.tmp"))
    keep_rows(tmp_path / "absent.jsonl", lambda r: True)  # nothing to do
    assert not (tmp_path / "absent.jsonl").exists()
