"""Checks for log-rotate-fix: rotation order, content kept, KEEP honoured."""
import hashlib
import os
import subprocess
from pathlib import Path

LOGS = Path("/app/logs")
RESET = "/app/scripts/reset-state.sh"
ROTATE = "/app/scripts/rotate.sh"


def run(script, **env):
    subprocess.run(["bash", script], check=True, env={**os.environ, **env}, timeout=30)


def test_reset_script_untouched():
    digest = hashlib.sha256(Path(RESET).read_bytes()).hexdigest()
    assert digest == hashlib.sha256(Path("/tests/reset-state.sh").read_bytes()).hexdigest()


def test_one_rotation_keeps_everything():
    run(RESET)
    run(ROTATE)
    assert (LOGS / "app.log").read_text() == ""
    assert (LOGS / "app.log.1").read_text().splitlines() == ["current line 1", "current line 2", "current line 3"]
    assert (LOGS / "app.log.2").read_text().splitlines() == ["older line 1", "older line 2"]
    assert (LOGS / "app.log.3").read_text().splitlines() == ["oldest line"]


def test_keep_limit_drops_the_oldest():
    run(RESET)
    run(ROTATE)
    run(ROTATE)
    assert sorted(p.name for p in LOGS.iterdir()) == ["app.log", "app.log.1", "app.log.2", "app.log.3"]
    assert (LOGS / "app.log.3").read_text().splitlines() == ["older line 1", "older line 2"]


def test_keep_from_the_environment():
    run(RESET)
    run(ROTATE, KEEP="1")
    assert sorted(p.name for p in LOGS.iterdir()) == ["app.log", "app.log.1"]
    assert (LOGS / "app.log.1").read_text().startswith("current line 1")
