"""The project and storage scenarios (git, Python, SQLite, tar, file tree) and their skills.

The contract test (``test_catalog.py``) runs one seed and one parameter choice per pair in the
sandbox. Here every query variant of these skills runs over several seeds, with the host's own
git / sqlite3 / tar / find standing in for the image's (the same Debian tools), and checks:
the oracle reproduces the expected bytes; the naive technique each data quirk targets gets a
different answer (so the quirk matters); data are small and the same for the same seed.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from evokit.catalog import pairs, scenario
from evokit.plan import Plan, Step, compose

MINE = ("git-repo", "python-package", "sqlite-db", "tar-archive", "file-tree")
VARIANTS = {
    "git-log-query": [{"query": q} for q in ("author", "file", "commit-files")],
    "sql-query": [{"query": "status-amount"}, {"query": "unshipped"}],
    "sql-join-aggregate": [{"query": "country"}, {"query": "customer"}],
    "tar-list": [{"query": "files"}, {"query": "largest"}],
    "find-by-size": [{"direction": d, "kib": k} for d in ("smaller", "larger") for k in (1, 2, 3)],
    "find-by-mtime": [{"query": "month"}, {"query": "recent"}],
    "permissions-audit": [{"query": "world-writable"}, {"query": "fix-modes"}],
}
CASES = [(s, k, v) for s, k in pairs() if s in MINE for v in VARIANTS.get(k, [{}])]
SEEDS = range(4)
TOOLS = ("git", "sqlite3", "tar", "find", "touch", "sha256sum")
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                 reason=f"host lacks one of {TOOLS}")


def run_on_host(tmp: Path, s: str, k: str, params: dict, seed: int, solution: str | None = None):
    """Build the one-step task's data under ``tmp`` as the image would, run ``solution`` (default: the
    oracle) with /app mapped to ``tmp/app``; return (output bytes or None, expected bytes)."""
    task = compose(Plan((Step(s, k, tuple(sorted(params.items()))),)), seed)
    for name, data in task.environment_files.items():
        p = tmp / "app" / name.removeprefix("data/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    on_host = lambda text: text.replace("/app", f"{tmp}/app")  # noqa: E731
    env = {**os.environ, "TZ": "UTC", "GIT_CONFIG_SYSTEM": str(tmp / "gitconfig"),
           "GIT_CONFIG_GLOBAL": str(tmp / "gitconfig-global")}
    for line in task.dockerfile.splitlines():
        if line.startswith("RUN ") and "/app/" in line:
            subprocess.run(on_host(line[4:]), shell=True, check=True, env=env)
    script = solution if solution is not None else task.solution["solve.sh"].decode()
    subprocess.run(["bash", "-c", f"mkdir -p /app/out\n{on_host(script)}"], env=env, capture_output=True)
    out = tmp / "app" / "out" / "step1.txt"
    return (out.read_bytes() if out.exists() else None), task.specs[0].expected


@needs_tools
@pytest.mark.parametrize(("s", "k", "params"), CASES, ids=[f"{s}×{k}×{'-'.join(map(str, v.values()))}"
                                                          for s, k, v in CASES])
def test_oracle_reproduces_expected_with_host_tools(tmp_path, s, k, params):
    """For several seeds, the oracle's output equals the (non-empty) expected bytes computed from the records."""
    for seed in SEEDS:
        got, expected = run_on_host(tmp_path / str(seed), s, k, params, seed)
        assert expected.strip(), f"seed {seed}: empty expected output (an empty file would pass)"
        assert got == expected, (seed, got, expected)


#: (scenario, skill, params, oracle text → naive text): the shortcut each quirk is there to defeat.
NAIVE = [
    ("file-tree", "find-by-size", {"direction": "smaller", "kib": 2},
     lambda sol: sol.replace("-size -2048c", "-size -2k")),  # KiB rounding
    ("file-tree", "permissions-audit", {"query": "world-writable"},
     lambda sol: sol.replace("-perm -0002", "-perm /022")),  # group-writable is not world-writable
    ("file-tree", "tree-checksums", {"ext": "csv"},
     lambda sol: sol.replace("-printf '%P\\0' | LC_ALL=C sort -z | xargs -0", "-printf '%P\\n' | LC_ALL=C sort | xargs")),
    ("sqlite-db", "sql-join-aggregate", {"query": "customer"},
     lambda sol: sol.replace("AND o.status != 'cancelled' GROUP", "WHERE o.status != 'cancelled' GROUP")),
    ("sqlite-db", "sql-query", {"query": "unshipped"}, lambda sol: sol.replace("IS NULL", "= NULL")),
    ("tar-archive", "tar-list", {"query": "files"},
     lambda sol: sol.replace("-tvzf", "-tzf").replace("awk '$1 ~ /^-/ {print $6}'", "grep -v '/$'")),
    ("git-repo", "git-log-query", {"query": "author"}, lambda sol: sol.replace("--author=", "--committer=")),
    ("git-repo", "git-revert", {},  # restore the file as it was before the bad commit, losing later changes
     lambda sol: sol.replace("-c user.name='Evokit Oracle' -c user.email=oracle@example.invalid revert --no-edit ",
                             "checkout ").replace("{print $1}') > /dev/null", "{print $1}')^ -- app/settings.conf")
     .replace("show HEAD:", "show :")),
    ("python-package", "python-bugfix", {},  # run check.py without fixing anything
     lambda sol: "\n".join(line for line in sol.splitlines() if not line.startswith("sed -i"))),
]


@needs_tools
@pytest.mark.parametrize(("s", "k", "params", "naive"), NAIVE, ids=[f"{s}×{k}" for s, k, _, _ in NAIVE])
def test_data_quirks_defeat_the_naive_technique(tmp_path, s, k, params, naive):
    """Each quirk changes the answer for every seed tried: the right technique is needed, not optional."""
    for seed in SEEDS:
        task = compose(Plan((Step(s, k, tuple(sorted(params.items()))),)), seed)
        sol = task.solution["solve.sh"].decode()
        alt = naive(sol)
        assert alt != sol, "the naive rewrite did not apply; update NAIVE"
        got, expected = run_on_host(tmp_path / str(seed), s, k, params, seed, alt)
        assert got is not None and got != expected, (seed, got)  # ran, and answered differently


@pytest.mark.parametrize("name", MINE)
def test_scenario_data_small_and_deterministic(name):
    """Same seed, same bytes; under 30 kB of files per instance, over many seeds."""
    sc = scenario(name)
    for seed in range(25):
        a, b = sc.make(random.Random(seed)), sc.make(random.Random(seed))
        assert a.files == b.files and a.records == b.records and a.extra == b.extra
        assert sum(len(v) for v in a.files.values()) < 30_000, (seed, sum(len(v) for v in a.files.values()))
