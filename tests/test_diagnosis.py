"""Tests for evokit.verify.diagnosis: one line on why the tests failed, read from their real output.

The pytest and unittest outputs are produced here by running those tools on generated test files
(not written by hand), so a change in their format shows up as a failure; the end-to-end tests run
broken third-party-style tasks in the sandbox and read the verdict a user would see.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from evokit.verify import VerifyConfig, verify_task
from evokit.verify.diagnosis import MAX_CHARS, explain_tests

ROOT = Path(__file__).resolve().parent.parent
ETL = ROOT / "tests" / "data" / "tb2_style" / "jsonl-etl-pipeline"

FAILING = """
def test_a():
    assert 1 == 1

def test_b():
    total = 3
    assert total == 4, "totals differ"

def test_c():
    assert "x" in "abc"
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(FAILING)
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_pytest_output_names_the_first_failing_test_and_its_assertion(tmp_path):
    r = _run(tmp_path, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_sample.py")
    why = explain_tests(r.returncode, r.stdout + r.stderr)
    assert why.startswith("test.sh exited 1; test_sample.py::test_b: ")
    assert "totals differ" in why and "2 failed, 1 passed" in why
    assert "test_c" not in why  # the first failure, not a list


def test_pytest_output_without_the_short_summary_uses_the_assertion_line(tmp_path):
    r = _run(tmp_path, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "test_sample.py")
    assert "short test summary" not in r.stdout
    assert "totals differ" in explain_tests(r.returncode, r.stdout)


def test_unittest_output_names_the_test_and_the_exception(tmp_path):
    (tmp_path / "test_ut.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertEqual(1, 1)\n"
        "    def test_sum(self):\n        self.assertEqual(sum([1, 2]), 4)\n")
    r = subprocess.run([sys.executable, "-m", "unittest", "test_ut"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    why = explain_tests(r.returncode, r.stdout + r.stderr)
    assert "test_sum (test_ut.T" in why and "AssertionError: 3 != 4" in why


def test_a_shell_tests_own_verdict_line_beats_the_tail():
    out = "checking /app/out.txt\nFAIL: /app/out.txt has 3 lines, expected 4\n--- a\n+++ b\n@@ -1 +1 @@\n"
    assert explain_tests(0, out) == "test.sh exited 0; FAIL: /app/out.txt has 3 lines, expected 4"
    assert explain_tests(0, "one\ntwo\nthree\nfour\n") == "test.sh exited 0; two | three | four"
    missing = "checking\n/tests/test.sh: line 4: jq: command not found\nwrote 0\ndone\nbye\n"
    assert explain_tests(0, missing) == "test.sh exited 0; /tests/test.sh: line 4: jq: command not found"


def test_silence_and_timeouts_and_size():
    assert explain_tests(2, "") == "test.sh exited 2, printing nothing"
    assert explain_tests(None, "still waiting").startswith("test.sh; ")  # timed out: no exit status
    assert len(explain_tests(1, "FAIL: " + "x" * 5000)) == MAX_CHARS


def test_a_malformed_ctrf_report_falls_back_to_the_output():
    assert explain_tests(1, "FAIL: missing", b"{not json") == "test.sh exited 1; FAIL: missing"
    assert explain_tests(1, "FAIL: missing", b'{"results": {"tests": "x"}}') == "test.sh exited 1; FAIL: missing"


def _broken_etl(tmp_path: Path) -> Path:
    task = tmp_path / "jsonl-etl-pipeline"
    shutil.copytree(ETL, task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nmkdir -p /app/out\necho '{}' > /app/out/revenue.json\n")
    return task


def test_a_failing_oracle_on_a_pytest_task_says_which_test_failed_and_where_the_logs_are(tmp_path):
    """A TB2-style task (pytest with a CTRF report) whose solution is wrong: the oracle check's
    reason names the first failing test and its assertion from the CTRF report, and the kept logs
    hold the tests' full output."""
    v = verify_task(_broken_etl(tmp_path), VerifyConfig(hack_gate=None, determinism_runs=1,
                                                        log_root=tmp_path / "logs"))
    oracle = next(c for c in v.checks if c.name == "oracle")
    assert not oracle.passed
    assert oracle.reason.startswith("reward 0.0 (need ≥ 1.0); test.sh exited 0; test_outputs.py::test_")
    assert "of 3 tests failed" in oracle.reason
    logs = list(Path(v.log_dir).glob("oracle-0/verifier/test-stdout.txt"))
    assert logs and "FAILED" in logs[0].read_text()


def test_a_tests_script_that_dies_before_its_reward_is_named_as_such(tmp_path):
    """``set -e`` and an unknown pytest option: test.sh exits before it writes a reward. The verdict
    says so with pytest's own complaint, not only "the tests wrote no reward file"; the rubric's
    determinism rule does not compare two missing rewards."""
    task = _broken_etl(tmp_path)
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text("#!/bin/bash\nset -e\ncd /tests\npython3 -m pytest --no-such-option test_outputs.py\n"
                       "echo 1 > /logs/verifier/reward.txt\n")
    v = verify_task(task, VerifyConfig(hack_gate=None))
    by = {c.name: c for c in v.checks}
    assert by["oracle"].reason.startswith("test.sh failed before writing a reward (the tests wrote no reward file")
    assert "exited 4" in by["oracle"].reason and "--no-such-option" in by["oracle"].reason
    assert by["rubric:oracle-deterministic"].passed
    assert by["rubric:oracle-deterministic"].reason.startswith("not judged: no oracle run wrote a reward")
