"""Which environment to train on next: EE's Evolution-Lineage scheduler and two baselines.

jaxued's pattern (style.md): a scheduler is a frozen source (its environments and config) plus a
plain, printable state record; every call takes the state and returns a new one, so a notebook
can print it and a test can walk every transition. Each scheduler is one class: ``init`` makes the
state, ``draw`` serves environment ids, ``feed`` applies one p̂, and the task-source protocol's
``sample``/``update`` wrap those two.

* **EL** (papers.md, "EE: Evolution-Lineage (EL) scheduler"). Lineage i serves one environment
  at a time, E_{i,g,k} (generation g, k-th of N_{i,g}). After B rollouts with pass rate p̂:

      p̂ ≤ τ            → stay on (g, k)
      p̂ > τ, k < N     → (g, k + 1)
      p̂ > τ, k = N     → (g + 1, 1);  past the last generation the lineage is done.

  B = 8, τ = 6/8, strict ``>`` (advancing needs 7 of 8). The prose's "≥ 6 of 8" is
  ``strict=False``. Choices where the paper is silent:
  1. *Start.* "Start at the earliest generation": generation 0, the seed itself
     (``start_generation = 0``, the default). EE's seeds are kept because a frontier
     model passes them at most 4 of 8 times (evokit's admission: :func:`evokit.seeds.admit_seeds`),
     so they are the first rung of each lineage; ``start_generation = 1`` starts at the earliest evolved one.
  2. *Several lineages.* Each step serves ``n`` environments: the current environment of
     ``n`` active lineages drawn uniformly, without replacement while possible (if ``n``
     exceeds the number of active lineages, whole shuffled rounds are repeated).
  3. *Gaps.* A generation with N = 0 (a branch that ended there) ends the lineage; leading empty
     generations (a lineage given without its seed, :func:`lineage_envs`) are skipped at the start.
  4. *Stale updates* (asynchronous training): :meth:`EL.feed` ignores a pass rate measured on an
     environment the lineage has already left (or on its last one, once passed).
* **Random order** (the paper's comparison): every call draws uniformly over all environments
  of all generations (≥ ``start_generation``) of all lineages, and pass rates change nothing.
* **D_T order** (evokit's own baseline, not in either paper): environments sorted by the
  policy-independent difficulty D_T ascending, ignoring lineages. A frontier of the ``width``
  easiest not-yet-passed environments is served (uniformly, as EL serves lineages); an
  environment leaves the frontier with the same τ rule as EL (p̂ > τ, or ≥ when not strict)
  and the next one in D_T order enters. ``width`` defaults to the number of lineages, so
  that D_T order serves as many environments in parallel as EL does at its start.

Each is a task source (:mod:`evokit.sources`), registered as ``"el"``, ``"random"`` and ``"dt"``,
over environment rows with their folders (:func:`store_envs`, :func:`lineage_envs`). Group size B
is the run's (:class:`evokit.sources.Run`), not a field of :class:`ELConfig`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from evokit.sources import GroupResult, Run, TaskRef, register

EnvId = tuple[str, int, int]  # (lineage, generation g, k), k 1-based as in E_{i,g,k}


@dataclass(frozen=True)
class ELConfig:
    """Hyperparameters of the EL rule (papers.md, EE EL scheduler)."""

    tau: float = 6 / 8  # τ: pass-rate threshold for moving on
    strict: bool = True  # advance on p̂ > τ (the formula); False: p̂ ≥ τ (the prose's "≥ 6 of 8")
    start_generation: int = 0  # EE: "start at the earliest generation" (0 = the seed); 1 = earliest evolved

    def __post_init__(self):
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"ELConfig.tau must lie in [0, 1]; got {self.tau}")
        if self.start_generation < 0:
            raise ValueError(f"ELConfig.start_generation must be ≥ 0; got {self.start_generation}")

    def passes(self, pass_rate: float) -> bool:
        """Whether p̂ moves the cursor on (the τ rule shared by EL and D_T order)."""
        if not 0.0 <= pass_rate <= 1.0:
            raise ValueError(f"pass rate must lie in [0, 1]; got {pass_rate}")
        return pass_rate > self.tau if self.strict else pass_rate >= self.tau

    def successes_to_advance(self, group_size: int) -> int:
        """Fewest successes out of B = ``group_size`` that advance (7 of 8 with the defaults)."""
        return next(s for s in range(group_size + 1) if self.passes(s / group_size))


# ----------------------------------------------------------------------------- the states
@dataclass(frozen=True)
class LineageCursor:
    """Where one lineage stands: its current environment (g, k), whether it is done, N_{i,g}."""

    lineage: str
    generation: int
    k: int
    done: bool
    sizes: tuple[int, ...]  # N_{i,g} for g = 0, 1, … (index = generation; 0 = the seed)
    served: int = 0  # how often EL's draws chose this lineage
    updates: int = 0  # pass rates received on this lineage
    last_pass_rate: float | None = None

    @property
    def env(self) -> EnvId:
        return (self.lineage, self.generation, self.k)

    def moved(self, passed: bool) -> LineageCursor:
        """One EL transition of a lineage: stay, next k, next generation, or end of lineage."""
        if not passed:
            return self
        if self.k < self.sizes[self.generation]:
            return dataclasses.replace(self, k=self.k + 1)
        if _has(self.sizes, self.generation + 1):
            return dataclasses.replace(self, generation=self.generation + 1, k=1)
        return dataclasses.replace(self, done=True)  # keeps pointing at the last environment it passed


@dataclass(frozen=True)
class ELState:
    """EL scheduler state: one cursor per lineage (sorted by lineage id)."""

    config: ELConfig
    cursors: tuple[LineageCursor, ...]

    def cursor(self, lineage: str) -> LineageCursor:
        for c in self.cursors:
            if c.lineage == lineage:
                return c
        raise KeyError(f"unknown lineage {lineage!r}; known: {', '.join(c.lineage for c in self.cursors)}")

    def rows(self) -> list[dict]:
        """One dict per lineage, for a DataFrame in a notebook."""
        return [dataclasses.asdict(c) for c in self.cursors]


@dataclass(frozen=True)
class RandomState:
    """Random order: all environments and how many draws were made."""

    envs: tuple[EnvId, ...]
    step: int = 0


@dataclass(frozen=True)
class DTState:
    """D_T order: environments by ascending D_T; ``passed`` marks those that left the frontier."""

    config: ELConfig
    order: tuple[EnvId, ...]
    d_t: tuple[float, ...]
    passed: tuple[bool, ...]
    width: int

    def frontier(self) -> list[int]:
        """Indices (into ``order``) of the ``width`` easiest environments not yet passed."""
        return [i for i, p in enumerate(self.passed) if not p][: self.width]


def _has(sizes: Sequence[int], g: int) -> bool:
    return 0 <= g < len(sizes) and sizes[g] > 0


def _rounds(rng: np.random.Generator, m: int, n: int) -> list[int]:
    """n indices in [0, m): shuffled rounds, so without replacement while n ≤ m."""
    out: list[int] = []
    while len(out) < n and m:
        out += rng.permutation(m).tolist()
    return out[:n]


class EnvRow(NamedTuple):
    """One environment as the curricula need it (``d_t`` only for D_T order; ``path``: its task folder)."""

    lineage: str
    generation: int
    k: int
    d_t: float | None = None
    path: Path | None = None


def env_rows(records: Iterable[Any]) -> list[EnvRow]:
    """EnvRows from :class:`evokit.lineage.EnvRecord` objects, dicts or tuples (D_T from ``difficulty.total``)."""
    rows = []
    for r in records:
        if isinstance(r, tuple):
            rows.append(EnvRow(*r))
            continue
        get = r.get if isinstance(r, Mapping) else lambda key, default=None, r=r: getattr(r, key, default)
        data = get("data", None) or (r if isinstance(r, Mapping) else {})
        d_t = get("d_t", None)
        if d_t is None and isinstance(data.get("difficulty"), Mapping):
            d_t = data["difficulty"].get("total")
        rows.append(EnvRow(str(get("lineage")), int(get("generation")), int(get("k")), d_t, get("path", None)))
    return rows


def lineage_sizes(rows: Iterable[EnvRow]) -> dict[str, list[int]]:
    """N_{i,g} per lineage and generation; checks that every generation's k run 1..N."""
    ks: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        ks[r.lineage][r.generation].add(r.k)
    sizes = {}
    for lineage, gens in ks.items():
        n = [0] * (max(gens) + 1)
        for g, kk in gens.items():
            if kk != set(range(1, len(kk) + 1)):
                raise ValueError(f"lineage {lineage!r} generation {g}: k must run 1..N, got {sorted(kk)}")
            n[g] = len(kk)
        sizes[lineage] = n
    return sizes


def store_envs(store) -> tuple[EnvRow, ...]:
    """Every environment of an evolved :class:`evokit.lineage.LineageStore` (or its folder), with D_T and folder."""
    from evokit.lineage import LineageStore  # lineage sits above the curricula

    store = store if isinstance(store, LineageStore) else LineageStore(store)
    return tuple(r._replace(path=store.path(e)) for r, e in zip(env_rows(store.envs()), store.envs(), strict=True))


def lineage_envs(lineages: Mapping[str, Sequence[str | Path]], start_generation: int = 1) -> tuple[EnvRow, ...]:
    """Lineages given as task folders in generation order: folder j is E_{i, start_generation + j, 1}.

    Each row's D_T is the one the task records in ``[metadata.evokit]`` (as the evolution harness
    writes it), else its plan scored against the catalog reference (EE §3, as the store's), else
    None (a task with no evokit plan: D_T order refuses it by name).
    """
    return tuple(EnvRow(name, start_generation + j, 1, task_d_t(p), Path(p))
                 for name, dirs in lineages.items() for j, p in enumerate(dirs))


def task_d_t(task_dir: str | Path) -> float | None:
    """D_T of a task folder from its ``[metadata.evokit]`` (recorded, else scored from its plan), or None."""
    from evokit.difficulty import catalog_reference, score
    from evokit.plan import Plan
    from evokit.tasks import read_metadata

    try:
        meta = read_metadata(task_dir)
    except (OSError, ValueError):
        return None
    if meta is None:
        return None
    if meta.difficulty and meta.difficulty.get("total") is not None:
        return float(meta.difficulty["total"])
    if meta.plan:
        return score(Plan.from_records(meta.plan, meta.goal or ""), catalog_reference()).total
    return None


def _refs(envs: Sequence[EnvRow], ids: Sequence[EnvId]) -> list[TaskRef]:
    where = {(e.lineage, e.generation, e.k): e.path for e in envs}
    return [TaskRef(tuple(i), where[tuple(i)]) for i in ids]


def _fed(results: Sequence[GroupResult]):
    """(env id, p̂) of every result with a usable rollout (the module docstring of evokit.sources)."""
    return [(tuple(r.ref.key), r.pass_rate) for r in results if r.pass_rate is not None]


def _checked(envs: Sequence[EnvRow], cfg: ELConfig) -> list[EnvRow]:
    """The environments random and D_T order serve: generations ≥ start_generation (as EL)."""
    if not envs:
        raise ValueError("a curriculum needs environments; the store or task list is empty")
    return [r for r in env_rows(envs) if r.generation >= cfg.start_generation]


@dataclass(frozen=True)
class _OverEnvs:
    """What EL, random and D_T order share as sources: environment rows in, TaskRefs out, p̂ fed one
    by one. Each order's own rule is its ``draw`` (ids served) and ``feed`` (one p̂ applied)."""

    envs: tuple[EnvRow, ...]
    config: ELConfig = ELConfig()

    def sample(self, state, rng, n):
        state, ids = self.draw(state, rng, n)
        return state, _refs(self.envs, ids)

    def update(self, state, results):
        for env, p in _fed(results):
            state = self.feed(state, env, p)
        return state


@register("el")
@dataclass(frozen=True)
class EL(_OverEnvs):
    """EE's Evolution-Lineage scheduler as a task source (module docstring)."""

    name: ClassVar[str] = "el"

    def init(self, run: Run) -> ELState:
        """Every lineage at (g₀, 1), g₀ its earliest generation ≥ start_generation (a lineage given
        without its seed starts at generation 1); a lineage with none starts done."""
        if not self.envs:
            raise ValueError("a curriculum needs environments; the store or task list is empty")
        sizes = lineage_sizes(env_rows(self.envs))
        cursors = []
        for lineage in sorted(sizes):
            n = tuple(sizes[lineage])
            g = next((g for g in range(self.config.start_generation, len(n)) if n[g] > 0),
                     self.config.start_generation)
            cursors.append(LineageCursor(lineage, g, 1, done=not _has(n, g), sizes=n))
        return ELState(self.config, tuple(cursors))

    def current(self, state: ELState) -> list[EnvId]:
        """The current environment (lineage, g, k) of every active lineage."""
        return [c.env for c in state.cursors if not c.done]

    def draw(self, state: ELState, rng: np.random.Generator, n: int) -> tuple[ELState, list[EnvId]]:
        """Serve ``n`` current environments of active lineages (uniform; distinct while possible)."""
        active = [c for c in state.cursors if not c.done]
        picks = [active[i] for i in _rounds(rng, len(active), n)]
        counts: dict[str, int] = defaultdict(int)
        for c in picks:
            counts[c.lineage] += 1
        cursors = tuple(dataclasses.replace(c, served=c.served + counts[c.lineage]) if counts[c.lineage] else c
                        for c in state.cursors)
        return dataclasses.replace(state, cursors=cursors), [c.env for c in picks]

    def feed(self, state: ELState, env: EnvId, p: float) -> ELState:
        """Apply p̂ measured on ``env``; ignored (stale, choice 4) unless ``env`` is its lineage's
        current environment."""
        lineage, g, k = env
        c = state.cursor(lineage)
        if c.done or (g, k) != (c.generation, c.k):
            return state  # measured on an environment this lineage has already left (or passed last)
        passed = state.config.passes(float(p))
        c = dataclasses.replace(c, updates=c.updates + 1, last_pass_rate=float(p))
        return dataclasses.replace(state, cursors=tuple(c.moved(passed) if x.lineage == lineage else x
                                                        for x in state.cursors))

    def done(self, state: ELState) -> bool:
        return all(c.done for c in state.cursors)

    def summary(self, state: ELState) -> dict:
        cs = state.cursors
        return {"mean_generation": float(np.mean([c.generation + (c.k - 1) / max(1, c.sizes[c.generation])
                                                  for c in cs])),
                "lineages_done": sum(c.done for c in cs), "updates": sum(c.updates for c in cs),
                "cursors": {c.lineage: [c.generation, c.k, bool(c.done)] for c in cs}}


@register("random")
@dataclass(frozen=True)
class RandomOrder(_OverEnvs):
    """EE's random order over every environment (generations ≥ start_generation); pass rates change nothing."""

    name: ClassVar[str] = "random"

    def init(self, run: Run) -> RandomState:
        ids = tuple(sorted({(r.lineage, r.generation, r.k) for r in _checked(self.envs, self.config)}))
        if not ids:
            raise ValueError("random order: no environments at generations ≥ start_generation")
        return RandomState(ids)

    def draw(self, state: RandomState, rng: np.random.Generator, n: int) -> tuple[RandomState, list[EnvId]]:
        """``n`` environments uniformly over all of them (distinct while n ≤ their number)."""
        picks = [state.envs[i] for i in _rounds(rng, len(state.envs), n)]
        return dataclasses.replace(state, step=state.step + 1), picks

    def feed(self, state: RandomState, env: EnvId, p: float) -> RandomState:
        return state

    def done(self, state: RandomState) -> bool:
        return False

    def summary(self, state: RandomState) -> dict:
        return {"draws": state.step}


@register("dt")
@dataclass(frozen=True)
class DTOrder(_OverEnvs):
    """evokit's D_T-order baseline (module docstring); ``width`` defaults to the number of lineages."""

    width: int | None = None
    name: ClassVar[str] = "dt"

    def init(self, run: Run) -> DTState:
        """Sort by D_T (ties by id); every environment needs a finite one."""
        items = [((r.lineage, r.generation, r.k), r.d_t) for r in _checked(self.envs, self.config)]
        if not items:
            raise ValueError("D_T order: no environments at generations ≥ start_generation")
        for env, d in items:
            if d is None or not np.isfinite(d):
                raise ValueError(f"D_T order: environment {env} has no finite D_T ({d!r}); D_T order needs one")
        items.sort(key=lambda e: (float(e[1]), e[0]))
        width = self.width if self.width is not None else len({e[0][0] for e in items})
        if width < 1:
            raise ValueError(f"D_T order: width must be ≥ 1; got {width}")
        return DTState(self.config, tuple(e for e, _ in items), tuple(float(d) for _, d in items),
                       (False,) * len(items), width)

    def current(self, state: DTState) -> list[EnvId]:
        """The frontier: the ``width`` easiest environments not yet passed."""
        return [state.order[i] for i in state.frontier()]

    def draw(self, state: DTState, rng: np.random.Generator, n: int) -> tuple[DTState, list[EnvId]]:
        front = self.current(state)
        return state, [front[i] for i in _rounds(rng, len(front), n)]

    def feed(self, state: DTState, env: EnvId, p: float) -> DTState:
        """Retire ``env`` from the frontier when p̂ passes the τ rule (updates on retired envs are ignored)."""
        env = tuple(env)
        try:
            i = state.order.index(env)
        except ValueError:
            raise KeyError(f"D_T order: unknown environment {env}") from None
        if state.passed[i]:
            return state
        if i not in state.frontier():
            raise ValueError(f"D_T order: {env} is not on the frontier (it was never served)")
        if not state.config.passes(float(p)):
            return state
        passed = list(state.passed)
        passed[i] = True
        return dataclasses.replace(state, passed=tuple(passed))

    def done(self, state: DTState) -> bool:
        return all(state.passed)

    def summary(self, state: DTState) -> dict:
        return {"passed": int(sum(state.passed)), "of": len(state.passed)}
