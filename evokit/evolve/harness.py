"""The evolution harness: per generation, plan refinement then environment refinement (EE §4).

For each lineage and generation g (papers.md, "the evolution harness"):

1. shuffle the three directions (or use the pinned one); for each in turn:
2. **plan refinement**: the proposer edits the current plan ξ_E along the direction within the
   effort; the reviewer's rubric accepts it or returns reasons, which go back to the proposer,
   for at most ``review_rounds`` rounds;
3. **environment refinement**: the modifier turns the accepted plan into a new task folder; the
   three verifiers run (oracle, null, rubric), and evokit's hack gate (:mod:`evokit.verify.hacks`:
   a child that a generic hack passes is rejected, "hack gate: <probe>"); failures go back to the
   modifier until the ``repair_budget`` is spent. Each verification's gate outcome is recorded with
   the child's env or reject record (``hack_gate``), whence :func:`evokit.lineage.hack_rates`;
4. the first direction that yields a verified environment is the generation's offspring E_{i,g,k};
   if all three fail, the lineage branch ends (for k = 1) or generation g keeps the k − 1 it has.

**N_{i,g} environments per generation** (``EvolveConfig.per_generation``; EE's E_{i,g,k}, k = 1..N,
which EL walks before moving to g + 1). The N siblings of generation g are all edits of the
same parent, E_{i,g−1,1} (the seed for g = 1), each with its own seeded choices (sibling k's
direction order and edits are keyed by k as well) and never a plan already in the lineage; the
next generation grows from E_{i,g,1}. The paper does not say which environment of a generation
the next one grows from; the first is our choice. ``per_generation = 1`` is one chain, with
the same records as before the field existed.

Every random choice is keyed by (seed, lineage, generation), so a run resumed after a crash
makes the same choices as an uninterrupted one (see :mod:`evokit.lineage`). LLM roles get a seed
for each call the same way: ``llm_seed = call_seed(run seed, lineage, generation, direction)`` is
recorded with the direction's reject or env record, and round r of the proposer and reviewer and
attempt a of the modifier are sent ``role_seed(llm_seed, role, r)`` (retries inside one
conversation: :meth:`evokit.llm.LLMClient.chat_json`). A resumed run thus asks the same questions
with the same seeds; whether it gets the same answers depends on the endpoint (:mod:`evokit.llm`).

The roles are pluggable (:class:`Backend`): the procedural backend (offline, deterministic, built
on the catalog) or the LLM backend (:mod:`evokit.evolve.llm_roles`).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from evokit.difficulty import Reference, catalog_reference, score
from evokit.errors import UserError
from evokit.evolve.edits import DIRECTIONS, EFFORTS, Edit, ProceduralProposer
from evokit.evolve.metrics import mutation
from evokit.evolve.review import PlanReviewer
from evokit.lineage import EnvRecord, LineageStore, StoreError, check_cause, gate_row
from evokit.llm import LLMReplyError
from evokit.plan import Plan, render
from evokit.seeding import call_seed
from evokit.tasks import EvokitMetadata, Lineage, content_hash, read_metadata, write_metadata
from evokit.verify import Verdict, VerifyConfig, verify_task


@dataclass(frozen=True)
class EvolveConfig:
    """One evolution run. Defaults follow EE: 15 generations, high effort, all three directions."""

    generations: int = 15  # EE: 15 generations per lineage
    effort: str = "high"  # EE's default effort: one contiguous span
    direction: str | None = None  # pin one direction (the paper's per-direction ablation); None: shuffle all
    review_rounds: int = 3  # proposer ⇄ reviewer rounds per direction
    repair_budget: int = 2  # extra modifier attempts after a failed verification
    seed: int = 0
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    #: The D_T gate of the procedural proposer and reviewer (an edit must raise D_T and its
    #: direction's part): evokit's addition, EE has none (it computes no D_T). Off where a figure
    #: reports D_T, so that its rise is measured, not imposed.
    difficulty_gate: bool = True
    per_generation: int = 1  # N_{i,g}: environments per generation (EE's E_{i,g,k}); module docstring

    def __post_init__(self):
        if not (isinstance(self.per_generation, int) and self.per_generation >= 1):
            raise ValueError(f"per_generation (N_{{i,g}}) must be an integer ≥ 1, not {self.per_generation!r}")
        if self.effort not in EFFORTS:
            raise ValueError(f"effort must be one of {EFFORTS}, not {self.effort!r}")
        if self.direction is not None and self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {self.direction!r}")

    def key(self) -> dict:
        """What must match for a store to be resumed with this config."""
        d = asdict(self)
        if self.difficulty_gate:  # stores made before the gate was a parameter resume unchanged
            del d["difficulty_gate"]
        if self.per_generation == 1:  # stores made before the field existed resume unchanged
            del d["per_generation"]
        d["verify"] = {k: v for k, v in d["verify"].items() if k in ("oracle_threshold", "null_max_reward",
                                                                     "reward_key", "determinism_runs")}
        if self.verify.hack_gate != VerifyConfig().hack_gate:  # stores made with the default gate keep their key
            d["verify"]["hack_gate"] = None if self.verify.hack_gate is None else asdict(self.verify.hack_gate)
        return d


# ``seed`` is the task's render seed; ``call_seed`` the seed for the role's LLM calls (ignored by
# the procedural roles).
class Proposer(Protocol):
    def propose(self, plan: Plan, direction: str, effort: str, *, seed: int, rng: random.Random,
                exclude: set[str], feedback: list[str], task_dir: Path, call_seed: int | None = None) -> Edit | None: ...


class Reviewer(Protocol):
    def review(self, parent: Plan, child: Plan, direction: str, effort: str, *, seed: int,
               seen: set[str], call_seed: int | None = None) -> list[str]: ...


class Modifier(Protocol):
    def modify(self, parent_dir: Path, parent: Plan, edit: Edit, dest: Path, *, seed: int, attempt: int,
               feedback: list[str], lineage: Lineage, call_seed: int | None = None) -> Path: ...


@dataclass
class Backend:
    """The three LLM-able roles of the harness (the verifiers are always :func:`verify_task`)."""

    name: str
    proposer: Proposer
    reviewer: Reviewer
    modifier: Modifier
    usage: Callable[[], dict] = dict  # LLM usage so far (calls, tokens, invalid replies)
    seeded: bool = False  # its roles send call seeds: records carry the direction's llm_seed
    #: Recovers the plan of a seed without one (a foreign Harbor task): ``extract(task_dir, seed)``.
    #: None: such seeds are refused with the command that extracts their plan.
    extract: Callable[[Path, int | None], Plan] | None = None


class _ProceduralProposerRole:
    def __init__(self, ref: Reference, difficulty_gate: bool = True):
        self.inner = ProceduralProposer(ref, difficulty_gate=difficulty_gate)

    def propose(self, plan, direction, effort, *, seed, rng, exclude, feedback, task_dir, call_seed=None):
        return self.inner.propose(plan, direction, effort, seed=seed, rng=rng, exclude=exclude)


class ProceduralModifier:
    """Render the accepted plan with the parent's seed: unchanged steps keep their data.

    A repair attempt moves the new steps to fresh data ids (other data, same structure).
    """

    def __init__(self, ref: Reference):
        self.ref = ref

    def modify(self, parent_dir, parent, edit, dest, *, seed, attempt, feedback, lineage, call_seed=None):
        plan = edit.plan
        if attempt:
            from evokit.plan import Step

            steps = list(plan.steps)
            for i in edit.changed:
                params = dict(steps[i].params)
                if "data" in params:
                    params["data"] = params["data"] + 1000 * attempt
                steps[i] = Step(steps[i].scenario, steps[i].skill, tuple(sorted(params.items())), steps[i].input)
            plan = Plan(tuple(steps), plan.goal)
        return render(plan, seed, dest, lineage=lineage, difficulty=score(plan, self.ref).as_dict())


def procedural_backend(ref: Reference | None = None, *, difficulty_gate: bool = True) -> Backend:
    ref = ref or catalog_reference()
    return Backend("procedural", _ProceduralProposerRole(ref, difficulty_gate),
                   PlanReviewer(ref, difficulty_gate=difficulty_gate), ProceduralModifier(ref))


# ---------------------------------------------------------------------------- one lineage
def _rng(cfg: EvolveConfig, lineage: str, g: int, *parts) -> random.Random:
    return random.Random(":".join(map(str, ("evokit-evolve", cfg.seed, lineage, g, *parts))))


def _sibling(k: int) -> tuple:
    """The extra key part of sibling k's choices: none for k = 1 (one chain keeps its old choices)."""
    return () if k == 1 else (f"k{k}",)


def role_seed(llm_seed: int, role: str, n: int) -> int:
    """The seed of round (or repair attempt) ``n`` of ``role`` ("propose", "review", "modify")."""
    return call_seed(llm_seed, role, n)


class ForeignSeedError(UserError, ValueError):
    """A seed without a plan, given to a backend that cannot extract one; the message says what to run."""


def _plan_and_seed(task_dir: Path) -> tuple[Plan, int]:
    meta = read_metadata(task_dir)
    if meta is None or not meta.plan:
        raise ForeignSeedError(
            f"{task_dir}: not an evokit task (no plan in [metadata.evokit]); evolve it with the LLM backend "
            "(--backend llm --model M [--api-base URL]: its plan is extracted and recorded), or record a plan "
            f"first with `evokit extract {task_dir} --model M --api-base URL --write`")
    return Plan.from_records(meta.plan, meta.goal or ""), meta.seed or 0


def plan_difficulty(plan: Plan, ref: Reference) -> dict:
    """D_T and its parts; {} for a plan with free-text (``other:``) steps, which have no p_T."""
    if any(":" in st.scenario or ":" in st.skill for st in plan.steps):
        return {}
    return score(plan, ref).as_dict()


def failure_reason(c) -> str:
    """A failed check as the modifier and the records see it; the hack gate's reason already names it
    ("hack gate: <probe> (reward r)")."""
    return c.reason if c.name == "hack-gate" else f"{c.name}: {c.reason}"


def verdict_summary(v: Verdict) -> dict:
    return {"passed": v.passed, "failures": [failure_reason(c) for c in v.failures], "rewards": v.rewards}


def evolve_generation(store: LineageStore, backend: Backend, cfg: EvolveConfig, lineage: str,
                      parent: EnvRecord, seen: set[str], k: int = 1) -> EnvRecord | None:
    """Try directions in a seeded order until one yields a verified child E_{i,g,k}; record everything."""
    g = parent.generation + 1
    sib = _sibling(k)
    parent_dir = store.path(parent)
    plan, seed = _plan_and_seed(parent_dir)
    directions = [cfg.direction] if cfg.direction else list(DIRECTIONS)
    if not cfg.direction:
        _rng(cfg, lineage, g, "order", *sib).shuffle(directions)
    for direction in directions:
        t0 = time.monotonic()
        rng = _rng(cfg, lineage, g, direction, *sib)
        llm_seed = call_seed(cfg.seed, lineage, g, direction, *sib)
        seeded = {"llm_seed": llm_seed} if backend.seeded else {}
        if k > 1:
            seeded["k"] = k  # reject records of sibling k are its own (the store keys records by k)
        feedback: list[str] = []
        tried: set[str] = set(seen)
        edit, cause = None, "no proposal"  # the cause of the last failed round (lineage.CAUSES)
        for r in range(cfg.review_rounds):
            try:
                proposal = backend.proposer.propose(plan, direction, cfg.effort, seed=seed, rng=rng, exclude=tried,
                                                    feedback=feedback, task_dir=parent_dir,
                                                    call_seed=role_seed(llm_seed, "propose", r))
            except ValueError as e:  # an LLM reply that never validated: a rejection with its reason
                feedback.append(f"proposer: {e}")
                cause = "proposal invalid"
                continue
            if proposal is None:
                feedback.append("proposer: no edit of this kind found")
                cause = "no proposal"
                break
            tried.add(proposal.plan.to_json())
            reasons = backend.reviewer.review(plan, proposal.plan, direction, cfg.effort, seed=seed, seen=seen,
                                              call_seed=role_seed(llm_seed, "review", r))
            if not reasons:
                edit = proposal
                break
            feedback += reasons
            cause = "review refused"
        if edit is None:
            store.append({"kind": "reject", "lineage": lineage, "generation": g, "direction": direction,
                          "stage": "plan", "cause": cause, "reasons": feedback[-6:], **seeded})
            continue
        child = _build_and_verify(store, backend, cfg, lineage, g, parent, parent_dir, plan, seed, edit, t0,
                                  llm_seed, k, seen)
        if child is not None:
            return child
    if k > 1:  # generation g keeps the k − 1 siblings it has; the lineage goes on from E_{i,g,1}
        store.append({"kind": "reject", "lineage": lineage, "generation": g, "k": k, "stage": "sibling",
                      "reasons": ["every direction failed for this sibling; the generation keeps "
                                  f"{k - 1} environment(s)"]})
        return None
    store.append({"kind": "end", "lineage": lineage, "generation": g,
                  "reason": "every direction failed (see the reject records)"})
    return None


def _build_and_verify(store, backend, cfg, lineage, g, parent, parent_dir, plan, seed, edit, t0, llm_seed, k=1,
                      seen=frozenset()):
    feedback: list[str] = []
    gates: list[dict] = []  # the hack gate's outcome of each verified attempt (hack rates)
    repairs: list[dict] = []  # why each attempt before the verified one failed (a child's record keeps it)
    seeded = {"llm_seed": llm_seed} if backend.seeded else {}
    if k > 1:
        seeded["k"] = k
    with tempfile.TemporaryDirectory(dir=store.root, prefix=".work-") as work:
        for attempt in range(cfg.repair_budget + 1):
            dest = Path(work) / f"attempt-{attempt}"
            try:
                folder = backend.modifier.modify(
                    parent_dir, plan, edit, dest, seed=seed, attempt=attempt, feedback=feedback,
                    lineage=Lineage(parent=parent.content_hash, generation=g, direction=edit.direction,
                                    effort=edit.effort, lineage_id=lineage),
                    call_seed=role_seed(llm_seed, "modify", attempt))
            except (ValueError, OSError) as e:  # a modifier reply that never validated, a bad file
                feedback = [f"modifier: {e}"]
                repairs.append({"attempt": attempt, "reasons": feedback})
                continue
            new_plan, _ = _plan_and_seed(folder)
            if new_plan.to_json() in seen:
                # The proposal's plan leaves parameters to the renderer; with them filled in it can be
                # an environment the lineage already has (a sibling's): not novel, not an offspring.
                feedback = ["novel: the rendered plan is already in the lineage"]
                shutil.rmtree(dest, ignore_errors=True)
                break
            verdict = verify_task(folder, cfg.verify)
            if verdict.hack_gate is not None:
                gates.append(gate_row(verdict.hack_gate, attempt))
            if verdict.passed:
                mut = mutation(parent_dir, folder)
                # Free-text ("other:") steps of LLM plans have no p_T: D_T is left out for them.
                diff = plan_difficulty(new_plan, backend_ref(backend))
                name, h = store.add_task(folder)
                rec = EnvRecord(lineage, g, k, name, h, parent.content_hash, edit.direction, edit.effort, {
                    "plan": new_plan.to_records(), "changed": list(edit.changed), "difficulty": diff,
                    "mutation": mut, "verdict": verdict_summary(verdict), "attempts": attempt + 1,
                    "seconds": round(time.monotonic() - t0, 3), "usage": backend.usage(),
                    **({"hack_gate": gates} if gates else {}), **({"repairs": repairs} if repairs else {}),
                    **seeded})
                store.add_env(rec)
                return rec
            feedback = [failure_reason(c) for c in verdict.failures]
            repairs.append({"attempt": attempt, "reasons": feedback})
            shutil.rmtree(dest, ignore_errors=True)
    # The last attempt's failing checks, every one (the oracle's names the first failing test); the
    # cause is the first of them, in the verifiers' order (oracle, null, hack gate, rubric).
    store.append({"kind": "reject", "lineage": lineage, "generation": g, "direction": edit.direction,
                  "stage": "verify", "cause": check_cause(feedback[0]) if feedback else "unknown",
                  "reasons": feedback, **({"hack_gate": gates} if gates else {}), **seeded})
    return None


def backend_ref(backend: Backend) -> Reference:
    return getattr(backend.reviewer, "ref", None) or catalog_reference()


def add_seed(store: LineageStore, seed_dir: Path, lineage: str, backend: Backend | None = None,
             call_seed: int | None = None) -> EnvRecord:
    """Generation 0 of a lineage: the seed task itself (idempotent).

    A seed without a plan (an ordinary Harbor task) gets one from ``backend.extract`` (the LLM
    backend asks its model, EE's first proposer step); the plan is recorded in the store's copy's
    ``[metadata.evokit]`` and in the record (``"extracted": true``), never in the user's folder, so
    every later generation reads it like an evokit task's. ``call_seed`` seeds that LLM call.
    """
    for e in store.lineage(lineage):
        if e.generation == 0:
            return e
    extracted = False
    try:
        plan, _ = _plan_and_seed(seed_dir)
    except ForeignSeedError:
        if backend is None or backend.extract is None:
            raise
        plan, extracted = backend.extract(Path(seed_dir), call_seed), True
    tmp = Path(tempfile.mkdtemp(dir=store.root, prefix=".seed-"))
    try:
        shutil.copytree(seed_dir, tmp / "t")
        if extracted:
            old = read_metadata(tmp / "t")
            meta = (old or EvokitMetadata()).model_copy(update={
                "plan": plan.to_records(), "seed": 0, "goal": plan.goal or None,
                "difficulty": plan_difficulty(plan, catalog_reference()) or None, "content_hash": None})
            write_metadata(tmp / "t", meta)
        name, h = store.add_task(tmp / "t")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec = EnvRecord(lineage, 0, 1, name, h, None, None, None, {
        "plan": plan.to_records(), "difficulty": plan_difficulty(plan, catalog_reference()),
        "seed_dir": str(seed_dir), "seed_hash": content_hash(seed_dir), **({"extracted": True} if extracted else {})})
    store.add_env(rec)
    return rec


def check_seeds(store: LineageStore, lineages: list[tuple[str, Path]]) -> None:
    """Refuse a seed list that would give a stored lineage another seed, or a stored seed another lineage.

    Lineage names follow the seeds' sorted order, so more seeds (a larger ``--limit``, new seed
    folders that sort after the others) add lineages and leave the stored ones as they are; a seed
    that sorts in between renames the ones after it, and a changed seed changes its lineage's root.
    """
    stored = {}  # lineage → its seed's hash
    for e in store.envs():
        if e.generation == 0:
            h = e.data.get("seed_hash") or (None if e.data.get("extracted") else e.content_hash)
            if h is not None:
                stored[e.lineage] = h
    by_hash = {h: name for name, h in stored.items()}
    for name, seed_dir in lineages:
        h = content_hash(seed_dir)
        if name in stored and stored[name] != h:
            why = f"lineage {name} was grown from another seed than {seed_dir} (the seed changed)"
        elif name not in stored and by_hash.get(h) not in (None, name):
            why = f"{seed_dir} is the seed of lineage {by_hash[h]} but would start lineage {name} (a new seed sorts before it)"
        else:
            continue
        raise StoreError(f"{store.root}: {why}; use a new --out, or add only seeds that sort after the stored ones")


def evolve_lineage(store: LineageStore, backend: Backend, cfg: EvolveConfig, lineage: str, seed_dir: Path,
                   on_generation: Callable[[], None] = lambda: None) -> list[EnvRecord]:
    """Run (or resume) one lineage to ``cfg.generations`` generations or until it ends."""
    if lineage in store.ended() and not store.lineage(lineage):
        return []  # its seed's plan could not be extracted (see the end record)
    try:
        add_seed(store, seed_dir, lineage, backend, call_seed(cfg.seed, lineage, 0, "extract"))
    except LLMReplyError as e:  # the model never gave a valid plan: this lineage cannot start; the others go on
        store.append({"kind": "end", "lineage": lineage, "generation": 0,
                      "reason": f"plan extraction failed: {e}"})
        return []
    envs = store.lineage(lineage)
    if lineage in store.ended():
        for _ in {e.generation for e in envs[1:]}:
            on_generation()
        return envs
    for _ in range(1, envs[-1].generation):  # generations finished before this run (the last may be partial)
        on_generation()
    seen = {Plan.from_records(e.data["plan"]).to_json() for e in envs}
    full = {r["generation"] for r in store.records()  # generations whose next sibling failed
            if r["kind"] == "reject" and r.get("stage") == "sibling" and r["lineage"] == lineage}
    last = envs[-1].generation
    while True:
        siblings = [e for e in envs if e.generation == last]
        if last >= 1 and len(siblings) < cfg.per_generation and last not in full:  # finish generation `last`
            parent = next(e for e in envs if e.generation == last - 1 and e.k == 1)
            child = evolve_generation(store, backend, cfg, lineage, parent, seen, k=len(siblings) + 1)
            if child is None:
                full.add(last)
            else:
                seen.add(Plan.from_records(child.data["plan"]).to_json())
                envs.append(child)
            continue
        if last >= 1:
            on_generation()
        if last >= cfg.generations:
            break
        child = evolve_generation(store, backend, cfg, lineage, siblings[0], seen)  # E_{i,last+1,1}
        if child is None:
            on_generation()
            break
        seen.add(Plan.from_records(child.data["plan"]).to_json())
        envs.append(child)
        last = child.generation
    return store.lineage(lineage)
