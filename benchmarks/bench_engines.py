"""Container engines vs evokit's sandbox: engine floors and one trial on each path, as ratios.

All rows are measured in one run, on one machine, against the bwrap rows of the same run:

1. **engine floor**: start a container running ``true`` and wait for it — ``docker run --rm``
   (the CLI Harbor uses), ``podman run --rm`` (when podman is installed; ``make engine
   ENGINES=docker,podman``), and ``bwrap`` over the same Debian rootfs with every namespace
   unshared (the baseline, ratio 1).
2. **one oracle trial** of the same example task (build cached, so only start → solution →
   tests → teardown): evokit's direct trial in its bwrap sandbox (the baseline, ratio 1),
   evokit's direct trial on its Docker backend (``EVOKIT_SANDBOX=docker``), Harbor's ``Trial``
   API with evokit's bwrap environment, with Harbor's docker environment made offline-capable
   (:class:`evokit.sandbox.harbor_docker.OfflineDockerEnvironment`, ``init: true``), and the
   same without ``init: true`` (what stock Harbor's compose file does: ``sleep infinity`` as
   pid 1 ignores SIGTERM, so teardown waits out Docker's 10 s stop timeout).

Usage: ``python benchmarks/bench_engines.py [--n 3] [--task examples/tasks/csv-quoted-ledger]``.
Needs a Docker daemon (started here as root if none runs). Prints a table and writes
``results/bench/engines.json``. Medians of ``--n`` runs after one warm-up each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")

from evokit.sandbox.docker_engine import DockerDaemon, client, ensure_debian_base  # noqa: E402
from evokit.sandbox.harbor_docker import COMPOSE_INIT_PATH, OfflineDockerEnvironment  # noqa: E402
from evokit.sandbox.image import cache_root, ensure_base  # noqa: E402
from evokit.tasks import load_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class NoInitDockerEnvironment(OfflineDockerEnvironment):
    """The offline environment without ``init: true``: Harbor's own teardown behaviour."""

    @property
    def _docker_compose_paths(self):
        return [p for p in super()._docker_compose_paths if p != COMPOSE_INIT_PATH]


def median_s(fn, n: int) -> float:
    fn()  # warm-up (builds, caches)
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def run_ok(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def evokit_trial(task, backend: str) -> None:
    os.environ["EVOKIT_SANDBOX"] = backend
    try:
        from evokit.sandbox.task_env import image_for_task
        from evokit.verify import run_trial

        result = run_trial(task, image_for_task(task), kind="oracle")
        assert result.rewards == {"reward": 1.0}, (backend, result.rewards, result.error)
    finally:
        os.environ.pop("EVOKIT_SANDBOX", None)


def harbor_trial(task_dir: Path, import_path: str, trials: Path) -> None:
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    cfg = TrialConfig(task=TaskConfig(path=task_dir), trials_dir=trials, agent=AgentConfig(name="oracle"),
                      environment=EnvironmentConfig(import_path=import_path, delete=False))

    async def go():
        return await (await Trial.create(cfg)).run()

    result = asyncio.run(go())
    rewards = result.verifier_result.rewards if result.verifier_result else None
    assert rewards == {"reward": 1.0}, (import_path, rewards, result.exception_info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--task", type=Path, default=ROOT / "examples" / "tasks" / "csv-quoted-ledger")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "engines.json")
    args = ap.parse_args()
    daemon = DockerDaemon.ensure()
    try:
        c = client()
        ensure_debian_base(c)
        rootfs = cache_root() / ensure_base("bookworm", cache_root())
        floors = {"bwrap": median_s(lambda: run_ok(["bwrap", "--ro-bind", str(rootfs), "/", "--dev", "/dev",
                                                     "--proc", "/proc", "--unshare-all", "--die-with-parent",
                                                     "true"]), 20)}
        floors["docker run"] = median_s(lambda: run_ok(["docker", "run", "--rm", "--network", "none",
                                                        "debian:bookworm-slim", "true"]), 10)
        if shutil.which("podman"):
            if subprocess.run(["podman", "image", "exists", "docker.io/library/debian:bookworm-slim"]).returncode:
                # Offline, as for docker: the same rootfs, imported (podman has its own image store).
                subprocess.run(f"tar -C {rootfs} --numeric-owner -c . | podman import - "
                               "docker.io/library/debian:bookworm-slim", shell=True, check=True,
                               stdout=subprocess.DEVNULL)
            floors["podman run"] = median_s(lambda: run_ok(["podman", "run", "--rm", "--network", "none",
                                                            "docker.io/library/debian:bookworm-slim", "true"]), 10)
        task = load_task(args.task)
        trials: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
            trials["evokit sandbox (bwrap)"] = median_s(lambda: evokit_trial(task, "local"), args.n)
            trials["evokit Docker backend"] = median_s(lambda: evokit_trial(task, "docker"), args.n)
            for name, path in [("Harbor + evokit bwrap env", "evokit.sandbox:BubblewrapEnvironment"),
                               ("Harbor + Docker (init)", "evokit.sandbox.harbor_docker:OfflineDockerEnvironment"),
                               ("Harbor + Docker (no init, stock)", f"{__name__}:NoInitDockerEnvironment")]:
                trials[name] = median_s(lambda p=path: harbor_trial(args.task, p, Path(tmp) / "trials"),
                                        max(1, args.n if "no init" not in name else 1))
    finally:
        daemon.stop()
    rows = ([("floor", k, v, v / floors["bwrap"]) for k, v in floors.items()]
            + [("trial", k, v, v / trials["evokit sandbox (bwrap)"]) for k, v in trials.items()])
    print(f"{'kind':6} {'path':34} {'median':>10} {'ratio':>8}")
    for kind, name, secs, ratio in rows:
        print(f"{kind:6} {name:34} {secs * 1000:8.0f}ms {ratio:7.1f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"task": args.task.name, "n": args.n, "rows": [
        {"kind": k, "path": p, "median_s": round(s, 4), "ratio_vs_bwrap": round(r, 2)} for k, p, s, r in rows]},
        indent=2) + "\n")


if __name__ == "__main__":
    main()
