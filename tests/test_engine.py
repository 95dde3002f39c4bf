"""scripts/engine.sh (`make engine`): Docker Compose V2 as a CLI plugin that every checkout can use.

Runs the real script against a scratch ``DOCKER_CONFIG`` (the machine's engine is already installed
by ``make check``'s ``engine`` step, so nothing is installed here) and the real ``docker`` client.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def engine(config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_CONFIG": str(config)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "engine.sh")], env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_compose_plugin_is_a_copy_that_outlives_the_checkout_that_installed_it(tmp_path):
    """The plugin folder is shared by every checkout on the machine: a link into one checkout's
    .venv (here a stale one, as a deleted clone leaves) breaks `docker compose` everywhere."""
    plugin = tmp_path / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir()
    plugin.symlink_to(tmp_path / "gone" / ".venv" / "compose" / "docker-compose")
    done = engine(tmp_path)
    assert done.returncode == 0, done.stderr
    assert plugin.is_file() and not plugin.is_symlink() and os.access(plugin, os.X_OK)
    before = plugin.stat().st_mtime_ns
    assert engine(tmp_path).returncode == 0 and plugin.stat().st_mtime_ns == before  # idempotent: not rewritten
    version = subprocess.run(["docker", "compose", "version"], env={**os.environ, "DOCKER_CONFIG": str(tmp_path)},
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "Docker Compose version v2" in version.stdout
