"""Tests for evokit.sandbox.harbor_docker: evokit tasks under Harbor's docker backend, for real.

``harbor run`` (Harbor's own CLI, in a subprocess) against the real Docker daemon of
``docker_support.docker_daemon`` (started here if none runs; these tests fail, not skip, without
one; ``make engine`` installs docker.io and compose v2). What they show:

* stock ``harbor run -e docker`` refuses every evokit task on a machine without a registry
  (its egress sidecar images cannot be pulled) — if a Harbor upgrade changes that, this test says so;
* with ``--env evokit.sandbox.harbor_docker:OfflineDockerEnvironment`` (Harbor's docker
  environment + ``network_mode: none`` + ``init: true``) the examples, procedural seeds and
  evolved offspring score oracle 1.0 and nop 0.0;
* the container really has no network and runs ``docker-init`` as pid 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docker_support import docker_client, docker_daemon  # noqa: F401
from sandbox_support import write_harbor_task

from evokit.evolve import EvolveConfig, evolve
from evokit.lineage import LineageStore
from evokit.seeds import make_seeds, seed_dirs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
HARBOR = str(Path(sys.executable).with_name("harbor"))
IMPORT_PATH = "evokit.sandbox.harbor_docker:OfflineDockerEnvironment"
# The oracle writes "hi" only if the container has no interface but lo and pid 1 is docker-init.
SOLVE_OFFLINE_WITH_INIT = (
    "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ');"
    " init=$(tr '\\0' ' ' < /proc/1/cmdline);"
    ' if [ "$ifaces" = "lo " ] && case "$init" in *docker-init*) true;; *) false;; esac;'
    " then echo hi > /app/out.txt; else echo \"leaked: $ifaces / $init\" > /app/out.txt; fi"
)


def harbor_run(path: Path, agent: str, jobs: Path, env_arg: str = IMPORT_PATH) -> list[dict]:
    """``harbor run -p PATH -a AGENT -e ENV`` (images kept between runs); the trials' result.json."""
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "COLUMNS": "200"}
    res = subprocess.run([HARBOR, "run", "-p", str(path), "-a", agent, "-e", env_arg, "-o", str(jobs),
                          "-n", "2", "--no-delete", "-y"], capture_output=True, text=True, env=env, timeout=900)
    results = [json.loads(p.read_text()) for p in sorted(jobs.glob("*/*/result.json"))]
    assert results, f"harbor run wrote no trial (exit {res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return results


def rewards(results: list[dict]) -> dict[str, float | str]:
    """Task name → reward, or the exception Harbor recorded for its trial."""
    out: dict[str, float | str] = {}
    for r in results:
        exc = r.get("exception_info")
        if exc is None:
            out[r["task_name"]] = r["verifier_result"]["rewards"]["reward"]
        elif not isinstance(out.get(r["task_name"]), float):
            out[r["task_name"]] = f"{exc['exception_type']}: {exc['exception_message'][:300]}"
    return out


def test_stock_harbor_docker_refuses_evokit_tasks_offline(docker_daemon, tmp_path):  # noqa: F811
    """Harbor's egress sidecar images cannot be pulled here, so no-network is refused."""
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "COLUMNS": "300"}
    res = subprocess.run([HARBOR, "run", "-p", str(EXAMPLES / "csv-quoted-ledger"), "-a", "oracle", "-e", "docker",
                          "-o", str(tmp_path / "jobs"), "-y"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode != 0 and "network_mode='no-network' is not supported" in res.stdout + res.stderr


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_examples_score_oracle_1_and_nop_0(agent, expected, docker_client, tmp_path):  # noqa: F811
    got = rewards(harbor_run(EXAMPLES, agent, tmp_path / "jobs"))
    assert got == {p.name: expected for p in sorted(EXAMPLES.iterdir()) if (p / "task.toml").is_file()}, got


@pytest.fixture(scope="module")
def seeds_and_offspring(tmp_path_factory) -> Path:
    """Two procedural seeds and one generation of offspring per lineage, in one dataset folder."""
    base = tmp_path_factory.mktemp("evolved")
    make_seeds(2, 0, base / "seeds", progress=False)
    seeds = seed_dirs(base / "seeds")
    store: LineageStore = evolve(seeds, base / "store", EvolveConfig(generations=1), progress=False)
    offspring = [store.path(e) for e in store.envs() if e.generation >= 1]
    assert len(offspring) >= 1, "evolution accepted no offspring"
    dataset = base / "dataset"
    dataset.mkdir()
    for task in [*seeds, *offspring]:
        (dataset / task.name).symlink_to(task)
    return dataset


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_seeds_and_evolved_offspring_score_oracle_1_and_nop_0(agent, expected, seeds_and_offspring,
                                                              docker_client, tmp_path):  # noqa: F811
    got = rewards(harbor_run(seeds_and_offspring, agent, tmp_path / "jobs"))
    assert got == dict.fromkeys(got, expected) and len(got) == len(list(seeds_and_offspring.iterdir())), got


def test_the_container_has_no_network_and_docker_init_as_pid_1(docker_client, tmp_path):  # noqa: F811
    task = write_harbor_task(tmp_path / "offline", solve=SOLVE_OFFLINE_WITH_INIT)
    assert rewards(harbor_run(task, "oracle", tmp_path / "jobs")) == {"offline": 1.0}
