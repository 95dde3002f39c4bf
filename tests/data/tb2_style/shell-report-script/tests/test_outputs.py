"""Checks for shell-report-script: the agent's script on the given logs and on unseen ones."""
import os
import subprocess
import tempfile
from pathlib import Path

SCRIPT = "/home/analyst/report.sh"


def report(folder):
    return subprocess.run([SCRIPT, str(folder)], capture_output=True, text=True, check=True, timeout=30).stdout


def test_executable():
    assert os.access(SCRIPT, os.X_OK)


def test_given_logs():
    assert report("/home/analyst/access") == "2xx 4 3200\n3xx 1 0\n4xx 2 64\n5xx 1 0\n"


def test_unseen_logs():
    with tempfile.TemporaryDirectory() as d:
        Path(d, "a.log").write_text("t GET /x 200 10\nt GET /y 204 5\n")
        Path(d, "b.log").write_text("t GET /z 503 1\n")
        Path(d, "notes.txt").write_text("t GET /ignored 200 999\n")
        assert report(d) == "2xx 2 15\n3xx 0 0\n4xx 0 0\n5xx 1 1\n"
