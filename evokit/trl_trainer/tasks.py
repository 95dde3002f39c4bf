"""Which task each GRPO group is served, and where its pass rate goes back.

The dataset TRL reads is ``tasks_per_step`` rows, one per GRPO group ("slot"); the trainer asks a
*scheduler* for the slots' tasks when TRL starts generating a batch (:meth:`begin_batch`) and gives
it the groups' results after the rewards (:meth:`update`). A scheduler is EE's EL / random / D_T
order over environments E_{i,g,k} on disk (:class:`CurriculumTasks`, state in and out through
:mod:`evokit.curriculum`), GenEnv's co-evolving simulator (:class:`GenEnvTasks`: α-curriculum
reward, difficulty filter, RWR update, D_env) or one in-process task (:class:`InProcessTasks`).
Every scheduler has ``done``, ``begin_batch``, ``update``, ``summary``, ``position``,
``state_dict`` and ``load_state_dict`` (saved into each TRL checkpoint, so a resumed run serves
the same tasks as an uninterrupted one).

Deviations from the papers, stated here: the pass rate fed back is successes / unmasked rollouts
(masked rollouts do not count); an all-masked group leaves the scheduler unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evokit.curriculum import ELConfig, EnvId, make_curriculum
from evokit.rows import keep_rows
from evokit.trl_trainer.config import SetupError


@dataclass(frozen=True)
class TaskRef:
    """One task a GRPO group is served: its scheduler key and its Harbor folder (None: in-process)."""

    key: tuple
    path: Path | None


@dataclass(frozen=True)
class GroupResult:
    """What one group of one batch gave: solved / unmasked rollouts, and how many were masked."""

    slot: int
    ref: TaskRef
    solved: int
    n: int
    masked: int
    mean_reward: float | None

    @property
    def pass_rate(self) -> float | None:
        return self.solved / self.n if self.n else None


def group_shares(results: Sequence[GroupResult]) -> tuple[float, float]:
    """(dead, partially solved) shares of a batch's groups, counting unmasked rollouts only.

    A group is dead when its unmasked rewards are all equal (or fewer than two are left): its
    GRPO advantages are all 0. Partially solved: 1..n−1 of its n unmasked rollouts solved.

    >>> g = lambda solved, n: GroupResult(0, TaskRef(("x", 1, 1), None), solved, n, 0, None)
    >>> group_shares([g(0, 4), g(2, 4), g(4, 4), g(1, 1)])
    (0.75, 0.25)
    """
    if not results:
        return 1.0, 0.0
    dead = [r.n < 2 or r.solved in (0, r.n) for r in results]
    partial = [0 < r.solved < r.n for r in results]
    return float(np.mean(dead)), float(np.mean(partial))


class CurriculumTasks:
    """EE's curricula (EL, random order, D_T order) over environments E_{i,g,k} on disk.

    The curriculum's state is a plain record (:mod:`evokit.curriculum`); the draw of batch t is
    seeded by (seed, t), so a resumed run serves the same tasks as an uninterrupted one.
    """

    def __init__(self, envs: Mapping[EnvId, Path], curriculum: str = "el", el: ELConfig = ELConfig(),
                 seed: int = 0, d_t: Mapping[EnvId, float] | None = None):
        if not envs:
            raise SetupError("no environments to train on")
        self.envs = {tuple(k): Path(v) for k, v in envs.items()}
        rows = [(*k, (d_t or {}).get(k)) for k in self.envs]
        self.curriculum, self.state = make_curriculum(curriculum, rows, el, seed=seed)
        self.name, self.seed, self.batches = curriculum, seed, 0
        self.last: list[TaskRef] = []

    @classmethod
    def from_store(cls, store, curriculum: str = "el", el: ELConfig = ELConfig(), seed: int = 0):
        """Every environment of an evolved :class:`evokit.lineage.LineageStore` (D_T from its records)."""
        from evokit.lineage import LineageStore

        store = store if isinstance(store, LineageStore) else LineageStore(store)
        recs = store.envs()
        return cls({(e.lineage, e.generation, e.k): store.path(e) for e in recs}, curriculum, el, seed,
                   {(e.lineage, e.generation, e.k): (e.data.get("difficulty") or {}).get("total") for e in recs})

    @classmethod
    def from_lineages(cls, lineages: Mapping[str, Sequence[str | Path]], curriculum: str = "el",
                      el: ELConfig = ELConfig(), seed: int = 0):
        """Lineages given as task folders in generation order: folder j is E_{i, start_generation + j, 1}."""
        g0 = el.start_generation
        return cls({(name, g0 + j, 1): Path(p) for name, dirs in lineages.items() for j, p in enumerate(dirs)},
                   curriculum, el, seed)

    def done(self) -> bool:
        return self.curriculum.done(self.state)

    def begin_batch(self, n: int) -> list[TaskRef]:
        rng = np.random.default_rng([self.seed, self.batches])
        self.batches += 1
        self.state, ids = self.curriculum.sample(self.state, rng, n)
        refs = [TaskRef(tuple(i), self.envs[tuple(i)]) for i in ids]
        if len(refs) < n:  # the curriculum is done: serve where it ended (training stops at this step's end)
            pool = refs or self.last or [TaskRef(k, p) for k, p in self.envs.items()]
            refs = [pool[i % len(pool)] for i in range(n)]
        self.last = refs
        return refs

    def update(self, results: Sequence[GroupResult]) -> None:
        for r in results:
            if r.pass_rate is not None and not self.done():
                self.state = self.curriculum.update(self.state, r.ref.key, r.pass_rate)

    def summary(self) -> dict:
        cursors = getattr(self.state, "cursors", None)
        if cursors is not None:
            return {c.lineage: {"generation": c.generation, "k": c.k, "done": c.done, "updates": c.updates,
                                "last_pass_rate": c.last_pass_rate} for c in cursors}
        if hasattr(self.state, "passed"):
            return {"passed": int(sum(self.state.passed)), "of": len(self.state.passed)}
        return {"draws": int(getattr(self.state, "step", 0))}

    def position(self) -> dict[str, float]:
        """Numbers for the logs: EL's mean generation and finished lineages, D_T's passed count."""
        cursors = getattr(self.state, "cursors", None)
        if cursors is not None:
            return {"scheduler/mean_generation": float(np.mean([c.generation + (c.k - 1) / max(1, c.sizes[c.generation])
                                                                for c in cursors])),
                    "scheduler/lineages_done": float(sum(c.done for c in cursors)),
                    "scheduler/updates": float(sum(c.updates for c in cursors))}
        if hasattr(self.state, "passed"):
            return {"scheduler/passed": float(sum(self.state.passed))}
        return {"scheduler/draws": float(getattr(self.state, "step", 0))}

    def state_dict(self) -> dict:
        return {"state": self.state, "batches": self.batches, "last": self.last}

    def load_state_dict(self, d: dict) -> None:
        self.state, self.batches, self.last = d["state"], d["batches"], d["last"]


class GenEnvTasks:
    """GenEnv's co-evolving environment: the procedural simulator writes each batch's tasks.

    Batch t is one GenEnv batch: ``n`` tasks for one context (contexts taken in turn). After it,
    p̂ = solved / unmasked over the batch gives R_env = exp(−β(p̂ − α)²); a batch with
    |p̂ − α| ≤ k_min updates the simulator by RWR (:func:`evokit.genenv.rwr_update`, KL-capped to
    the initial simulator) and joins D_env (``pools/d_env.jsonl``). An *LLM* simulator is trained
    on the same D_env by :func:`evokit.trl_trainer.update_llm_simulator`.
    """

    def __init__(self, out: str | Path, cfg=None, seed: int = 0):
        from evokit import genenv
        from evokit.train import GenEnvConfig

        self.cfg = cfg or GenEnvConfig()
        self.out, self.seed, self.batches = Path(out), seed, 0
        self.sim = genenv.init_simulator(min_len=self.cfg.min_len, max_len=self.cfg.max_len, render_seed=seed,
                                         learning=self.cfg.learning, contexts=self.cfg.contexts)
        self.init_sim, self.pending, self.last = self.sim, [], []

    def done(self) -> bool:
        return False

    def begin_batch(self, n: int) -> list[TaskRef]:
        from evokit import genenv
        from evokit.plan import render

        rng = np.random.default_rng([self.seed, self.batches])
        contexts = sorted(self.sim.contexts)
        context = contexts[self.batches % len(contexts)]
        plans = genenv.sample_plans(self.sim, context, n, rng)
        refs = []
        for i, plan in enumerate(plans):
            dest = self.out / "tasks" / f"b{self.batches:05d}-{i}"
            if not dest.exists():
                render(plan, self.sim.render_seed, dest)
            refs.append(TaskRef(("genenv", self.batches, i), dest))
        self.pending = [(self.batches, context, plans)]
        self.batches += 1
        self.last = refs
        return refs

    def update(self, results: Sequence[GroupResult]) -> None:
        from evokit import genenv

        if not self.pending:
            return
        batch, context, plans = self.pending.pop()
        n = sum(r.n for r in results)
        if not n:
            return
        p = sum(r.solved for r in results) / n
        r_env = float(genenv.alpha_reward(p, self.cfg.alpha, self.cfg.beta))
        if bool(genenv.difficulty_filter(p, self.cfg.alpha, self.cfg.k_min)):
            w = float(np.exp(self.cfg.lam * r_env))
            if self.cfg.learning:
                self.sim = genenv.rwr_update(self.sim, [(pl, w) for pl in plans], lr=self.cfg.sim_lr,
                                             kl_coef=self.cfg.kl_coef, init_sim=self.init_sim, max_kl=self.cfg.max_kl)
            genenv.Pools(self.out / "pools").add_env(
                [genenv.env_row(pl, w, p_hat=p, r_env=r_env, epoch=batch, context=context) for pl in plans])

    def summary(self) -> dict:
        from evokit import genenv

        return {"batches": self.batches, "sim_updates": self.sim.updates,
                "sim_kl": genenv.simulator_kl(self.sim, self.init_sim)}

    def position(self) -> dict[str, float]:
        s = self.summary()
        return {"scheduler/sim_updates": float(s["sim_updates"]), "scheduler/sim_kl": float(s["sim_kl"])}

    def state_dict(self) -> dict:
        return {"sim": self.sim, "batches": self.batches, "last": self.last}

    def load_state_dict(self, d: dict) -> None:
        self.sim, self.batches, self.last = d["sim"], d["batches"], d["last"]
        keep_rows(self.out / "pools" / "d_env.jsonl", lambda r: r.get("epoch", 0) < self.batches)


class InProcessTasks:
    """No sandbox: one in-process task whose reward is a trivial function of the completion.

    For machines without bubblewrap (GPU hosts) and for measuring the wrapper's own overhead. The
    reward is the share of distinct tokens in the completion (varies, so GRPO has a signal).
    """

    INSTRUCTION = "List the files in /app with the bash tool, then say done."

    def __init__(self):
        self.batches = 0

    def done(self) -> bool:
        return False

    def begin_batch(self, n: int) -> list[TaskRef]:
        self.batches += 1
        return [TaskRef(("none", 0, 1), None)] * n

    def update(self, results) -> None:
        pass

    def summary(self) -> dict:
        return {"batches": self.batches}

    def position(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, d: dict) -> None:
        self.batches = d["batches"]


def make_scheduler(source: str, *, store=None, tasks: Sequence[str | Path] = (), curriculum: str = "el",
                   el: ELConfig = ELConfig(), out: str | Path | None = None, seed: int = 0, genenv_cfg=None):
    """A task scheduler by name: ``store`` (a lineage store), ``tasks`` (folders, one lineage each), ``genenv``, ``none``."""
    if source == "store":
        if store is None:
            raise SetupError("source 'store' needs store= (made by `evokit evolve`)")
        return CurriculumTasks.from_store(store, curriculum, el, seed)
    if source == "tasks":
        if not tasks:
            raise SetupError("source 'tasks' needs task folders")
        # each folder is its own one-environment lineage at the start generation
        return CurriculumTasks.from_lineages({Path(t).name: [t] for t in tasks}, curriculum, el, seed)
    if source == "genenv":
        if out is None:
            raise SetupError("source 'genenv' needs out= (where generated tasks and pools go)")
        return GenEnvTasks(Path(out), genenv_cfg, seed)
    if source == "none":
        return InProcessTasks()
    raise SetupError(f"unknown task source {source!r}: choose store, tasks, genenv or none")
