"""An independent held-out benchmark: fixed, verified procedural tasks drawn apart from every method's tasks.

EE §5.1 compares evolution, co-evolution and the environment ensemble, and GenEnv reports data
efficiency, on benchmarks none of the methods generated or trained on. Held-out environments that
evolution itself made would favour evolution, so this module gives every method one benchmark
that no method made.

* **Drawn apart.** The tasks are made like EE's seeds (:func:`evokit.seeds.make_seeds`: domain
  balanced, lengths cycling, half with rare skills, each verified by oracle, null and rubric) but
  every random choice is keyed by the benchmark's own namespace (:data:`NAMESPACE`), never by a
  seed pool's, so no choice of study seed makes a seed pool, an evolved store or a simulator
  draw the same random stream.
* **Checked apart.** Independence of streams does not rule out a coincidence, so
  :func:`check_disjoint` compares content hashes (:func:`evokit.tasks.content_hash`: everything the
  agent and verifier see, not ``task.toml``) with any task sets a study names, and raises
  :class:`BenchmarkOverlapError` naming each shared task and the set it came from. Disjointness is
  by task: the same (scenario, skill) pairs recur with other data, as a benchmark tests skills,
  not memorised tasks.
* **Fixed.** :data:`BENCHMARK` is the one configuration the notebooks use; ``out/benchmark.json``
  records the config a folder was built with, and another config for the same folder is refused
  (a benchmark that changes between methods is not a benchmark). Never trained on: the studies
  pass these folders only as ``eval_tasks`` (:func:`evokit.train.train`).

Deviation, stated: EE's and GenEnv's benchmarks are external (e.g. Terminal-Bench); ours is drawn
from the same catalog as the training tasks, so it measures transfer to unseen tasks of the same
world, not to another world.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evokit.errors import UserError
from evokit.seeds import make_seeds
from evokit.tasks import content_hash
from evokit.verify import VerifyConfig

NAMESPACE = "evokit-benchmark"  # keys every random choice (evokit.seeds uses "evokit-seed")
#: Rollouts per benchmark task at every evaluation of a registered-size run (docs/preregistration.md,
#: claims 6 and 9): one rollout per task leaves a pass rate of a sampling policy too noisy to detect 0.05.
REGISTERED_ROLLOUTS = 8
#: The benchmark pass-rate difference a registered design is sized to detect with 80 % power (claims 6, 9).
DETECTABLE = 0.05
PREFIX = "bench"  # folder names: bench-NNNN


class BenchmarkError(UserError, ValueError):
    """A benchmark folder built with another config, or a config that cannot be built."""


class BenchmarkOverlapError(BenchmarkError):
    """A benchmark task has the same content as a task of a set it must stay apart from."""


@dataclass(frozen=True)
class BenchmarkConfig:
    """The held-out benchmark: how many tasks, their lengths, the draw seed (:data:`BENCHMARK` is the fixed one)."""

    n_tasks: int = 39  # 13 domains × 3 lengths: every domain at every length once (pass rate in steps of 2.6 %)
    min_steps: int = 1  # lengths step min..max after each round of domains (evokit.seeds.seed_specs)
    max_steps: int = 3
    seed: int = 0  # the benchmark's own draw; independent of every study seed (module docstring)
    verify: VerifyConfig = field(default_factory=VerifyConfig)

    def __post_init__(self):
        if not (isinstance(self.n_tasks, int) and self.n_tasks >= 1):
            raise BenchmarkError(f"BenchmarkConfig.n_tasks must be a positive integer, got {self.n_tasks!r}")
        if not 1 <= self.min_steps <= self.max_steps:
            raise BenchmarkError(f"BenchmarkConfig needs 1 <= min_steps <= max_steps, got "
                                 f"{self.min_steps}, {self.max_steps}")

    def key(self) -> dict:
        """What ``benchmark.json`` records (and what must match to reuse a folder)."""
        d = asdict(self)
        d["verify"] = {k: v for k, v in d["verify"].items() if k in ("oracle_threshold", "null_max_reward",
                                                                     "reward_key", "determinism_runs")}
        return {"namespace": NAMESPACE, **d}


#: The benchmark every notebook evaluates on: one benchmark for every method, so scores compare.
BENCHMARK = BenchmarkConfig()


def check_disjoint(benchmark: Iterable[str | Path], others: Mapping[str, Iterable[str | Path]]) -> None:
    """Raise :class:`BenchmarkOverlapError` if a benchmark task has the content of a task in one of ``others``.

    ``others`` names each task set (``{"evolution store": [...], "seeds": [...]}``) so the error
    says which set and which folders collide.
    """
    mine: dict[str, Path] = {content_hash(p): Path(p) for p in benchmark}
    clashes = []
    for name, tasks in others.items():
        for t in tasks:
            h = content_hash(t)
            if h in mine:
                clashes.append(f"{mine[h]} = {name}: {t}")
    if clashes:
        raise BenchmarkOverlapError(
            f"{len(clashes)} benchmark task(s) share their content with a training set, so the benchmark is not "
            f"held out: {'; '.join(clashes[:5])}{' …' if len(clashes) > 5 else ''}. Drop those tasks from the "
            "training set or build the benchmark with another BenchmarkConfig.seed")


def benchmark_tasks(out: str | Path, config: BenchmarkConfig = BENCHMARK, *,
                    disjoint_from: Mapping[str, Iterable[str | Path]] | None = None, workers: int = 2,
                    progress: bool = False) -> list[Path]:
    """The benchmark's task folders (``out/bench-NNNN``), built once and reused; checked apart from ``disjoint_from``.

    Raises :class:`BenchmarkError` if ``out`` holds a benchmark of another config, and
    :class:`BenchmarkOverlapError` if a task of ``disjoint_from`` has a benchmark task's content.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = out / "benchmark.json"
    if record.exists():
        old = json.loads(record.read_text())
        if old != config.key():
            raise BenchmarkError(f"{out} holds a benchmark built with {old}, not {config.key()}; use another "
                                 "folder for another benchmark (or delete this one)")
    else:
        record.write_text(json.dumps(config.key(), indent=2, sort_keys=True) + "\n")
    rows = make_seeds(config.n_tasks, config.seed, out, workers=workers, config=config.verify, progress=progress,
                      min_steps=config.min_steps, max_steps=config.max_steps, namespace=NAMESPACE, prefix=PREFIX)
    tasks = [out / r["name"] for r in rows]
    if disjoint_from:
        check_disjoint(tasks, disjoint_from)
    return tasks
