"""The lineage browser in a real browser (slow): scripts/check_browser.py, run as `make check-browser` would.

tests/test_browser.py checks the panel's HTML and the widget's Python side without a front end; this
runs the script that opens ``browse(store, rows)`` in JupyterLab in headless Chromium, moves the
slider and the menu and reads the console. It needs Debian's chromium and chromium-driver
(`make test-slow` installs them through scripts/setup.sh's ``browser`` feature); without them it
fails with the install line rather than skipping, since a slow run that skipped it would say nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_browser.py"
CHECKS = ("store built", "lab opens the notebook", "widget renders", "seed panel", "slider changes the panel",
          "menu changes the lineage", "no console errors")

pytestmark = pytest.mark.slow


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_browser_renders_and_responds_without_js_errors(tmp_path):
    """Every check passes: the widget renders, follows the slider and the menu, and no SEVERE console entry."""
    proc = run_script("--out", str(tmp_path), timeout=1200)
    if proc.returncode == 2:  # Chromium, chromedriver or selenium missing: say what to install
        pytest.fail(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    results = {c["name"]: c for c in report["checks"]}
    assert tuple(results) == CHECKS, list(results)
    assert all(c["ok"] for c in results.values()), [c for c in results.values() if not c["ok"]]
    assert not [e for e in report["console"] if e["level"] == "SEVERE"], report["console"]
    for shot in report["expected"]["screenshots"]:
        assert Path(shot).stat().st_size > 10_000, shot  # a rendered page, not an empty frame
    assert report["versions"]["chromium"] and report["versions"]["jupyterlab"]


def test_missing_chromedriver_is_one_clear_line(tmp_path):
    """No traceback: one line that names what is missing and the apt-get command that installs it."""
    proc = run_script("--out", str(tmp_path), "--chromedriver", str(tmp_path / "no-chromedriver"), timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install -y chromium chromium-driver" in lines[0], proc.stderr
    assert "no-chromedriver" in lines[0] and "Traceback" not in proc.stderr
