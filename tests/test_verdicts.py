"""scripts/verdicts.py: the verdicts of several seed blocks side by side, read from the runs' summaries,
with a claim whose verdict changes between blocks called unstable."""

from __future__ import annotations

import json
from pathlib import Path

from script_support import load_script


def write(root: Path, name: str, block: int, summary: dict) -> None:
    (root / "notebooks").mkdir(parents=True, exist_ok=True)
    (root / "notebooks" / f"{name}.ipynb").write_text("{}")
    p = root / "results" / (f"block{block}" if block else "") / name / "summary.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(summary))


def test_blocks_side_by_side_with_unstable_and_withheld_verdicts(tmp_path, capsys):
    v = load_script("verdicts", tmp_path)
    write(tmp_path, "a", 0, {"reproduced": "yes", "x": 1})
    write(tmp_path, "a", 100, {"reproduced": "tie"})
    write(tmp_path, "b", 0, {"calibration": {"reproduced": "no"}, "peak_reproduced": "no verdict (precondition: runs 5, needs ≥ 10)"})
    write(tmp_path, "b", 100, {"calibration": {"reproduced": "no"}, "peak_reproduced": "no verdict (precondition: runs 5, needs ≥ 10)"})
    write(tmp_path, "c", 0, {"reproduced": {"peak": "yes", "final": "tie"}})  # not run on block 100
    rows = {(r["notebook"], r["verdict"]): r for r in v.table([0, 100], root=tmp_path)}
    assert rows["a", "reproduced"]["agree"] == "**unstable**"
    assert rows["b", "calibration.reproduced"]["agree"] == "yes"
    assert rows["b", "peak_reproduced"]["blocks"][100] == "withheld (runs 5, needs ≥ 10)"
    assert rows["b", "peak_reproduced"]["agree"] == "—"  # a withheld block gives no verdict to agree with
    assert rows["c", "reproduced.peak"]["blocks"] == {0: "yes", 100: None} and rows["c", "reproduced.peak"]["agree"] == "—"
    assert rows["c", "reproduced.final"]["blocks"][0] == "tie"
    brief = {(r["notebook"], r["verdict"]): r for r in v.table([0, 100], root=tmp_path, brief=True)}
    assert brief["b", "peak_reproduced"]["blocks"][100] == "withheld"
    assert v.main(["0", "100"]) == 0 and "| `a` | reproduced | yes | tie | **unstable** |" in capsys.readouterr().out


def test_no_runs_is_one_line_and_exit_2(tmp_path, capsys):
    v = load_script("verdicts", tmp_path)
    (tmp_path / "notebooks").mkdir()
    assert v.main(["7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make reproduce" in err


def test_units_runs_are_read_from_their_own_folder(tmp_path, capsys):
    """``--units 10`` reads results/units10/[blockN/]: the smoke runs beside them are not mixed in."""
    v = load_script("verdicts", tmp_path)
    write(tmp_path, "a", 0, {"reproduced": "no verdict (precondition: units 5, needs ≥ 10)"})
    p = tmp_path / "results" / "units10" / "block100" / "a" / "summary.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"reproduced": "tie"}))
    assert v.table([100], root=tmp_path, units=10)[0]["blocks"] == {100: "tie"}
    assert v.table([0], root=tmp_path, units=10) == [] and v.table([0], root=tmp_path)[0]["blocks"][0].startswith("withheld")
    assert v.main(["0", "--units", "10"]) == 2 and "units10" in capsys.readouterr().err
