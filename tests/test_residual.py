"""The modifier's residual ΔE (evokit.evolve.residual): paths confined to the task, required
changes, and a valid residual applied to a copy of a hand-written task (a folder Harbor loads)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from evokit.evolve.residual import (
    Residual,
    apply_residual,
    check_path,
    require_changes,
    validate_residual,
)
from evokit.plan import Plan, Step
from evokit.tasks import Lineage, load_task, read_metadata

ROOT = Path(__file__).resolve().parents[1]
PIPES = ROOT / "examples" / "tasks" / "pipes-top-ips"


@pytest.mark.parametrize(("files", "message"), [
    ({"/etc/passwd": "x"}, "absolute paths"),
    ({"tests/../../evil.sh": "x"}, r"'\.\.'"),
    ({"task.toml": "x"}, "task.toml cannot be edited"),
    ({"README.md": "x"}, "only instruction.md"),
    ({"tests": "x"}, "only instruction.md"),
    ({"tests/test.sh": None}, "tests/test.sh: cannot be deleted"),
    ({"solution/solve.sh": None}, "solution/solve.sh: cannot be deleted"),
    ({"tests/nothing.txt": None}, "no such file"),
    ({"tests/test.sh": 3}, "must be a string"),
    ({"tests/test.sh": "  "}, "must not be empty"),
    ({"instruction.md": "<full new text>"}, "placeholder"),
    ({"environment/data": "x"}, "is a folder"),
    ({}, "is empty"),
])
def test_residual_validator_confines_paths(files, message):
    """The modifier may only write instruction.md, environment/, tests/ and solution/, and keeps the scripts."""
    with pytest.raises(ValueError, match=message):
        validate_residual({"files": files, "summary": "s"}, existing={"tests/test.sh", "solution/solve.sh"},
                          dirs={"environment/data"})
    with pytest.raises(ValueError, match="expected"):
        validate_residual(["not", "an", "object"])
    assert check_path("./tests//test.sh") == "tests/test.sh"


def test_a_residual_must_change_instruction_tests_and_solution():
    """New steps need a new instruction, new checks and a new reference solution."""
    same = (PIPES / "tests" / "test.sh").read_text()
    with pytest.raises(ValueError, match="tests/, solution/"):
        require_changes(PIPES, Residual({"instruction.md": "new", "tests/test.sh": same}, ""))


def test_apply_residual_to_a_hand_written_task(tmp_path):
    """A valid ΔE on a copy of pipes-top-ips gives a task Harbor loads, with evokit metadata; the parent is untouched."""
    parent = tmp_path / "parent"
    shutil.copytree(PIPES, parent)
    before = {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()}
    plan = Plan((Step("access-log", "topk-count"), Step("other:the saved list", "other:count its lines", (), 1)))
    residual = validate_residual({"files": {
        "instruction.md": (parent / "instruction.md").read_text() + "3. Count the lines of /app/top_ips.txt "
                                                                   "into /app/count.txt.\n",
        "tests/check_count.sh": "#!/bin/bash\n[ \"$(cat /app/count.txt)\" = 5 ]\n",
        "tests/expected_hidden.txt": None,
        "solution/solve.sh": (parent / "solution" / "solve.sh").read_text() + "wc -l < /app/top_ips.txt > /app/count.txt\n",
    }, "summary": "count the saved lines"}, existing={"tests/expected_hidden.txt"})
    from evokit.tasks import EvokitMetadata

    meta = EvokitMetadata(plan=plan.to_records(), lineage=Lineage(parent="0" * 64, generation=1, direction="length",
                                                                  effort="low", lineage_id="L0"))
    dest = apply_residual(parent, residual, tmp_path / "child", meta)
    load_task(dest)
    got = read_metadata(dest)
    assert Plan.from_records(got.plan) == plan and got.lineage.generation == 1 and got.content_hash
    assert "Count the lines" in (dest / "instruction.md").read_text()
    assert not (dest / "tests" / "expected_hidden.txt").exists()
    assert (dest / "tests" / "check_count.sh").stat().st_mode & stat.S_IXUSR
    assert (dest / "environment" / "access.log").read_bytes() == (PIPES / "environment" / "access.log").read_bytes()
    assert {p: p.read_bytes() for p in parent.rglob("*") if p.is_file()} == before
    with pytest.raises(FileExistsError):
        apply_residual(parent, residual, dest, meta)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind
