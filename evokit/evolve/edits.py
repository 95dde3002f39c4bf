"""Plan edits along EE's three directions at three efforts, and the procedural proposer.

EE's proposer edits the extracted plan ξ_E along one **direction** (papers.md, "the evolution
harness"): ``length`` inserts scenario–skill pairs (with their dependencies), ``scenario``
replaces a situation and keeps its technique, ``skill`` replaces a technique and keeps its
situation. **Effort** bounds how much one edit may touch: ``low`` one pair, ``high`` one
contiguous span (the paper's default), ``max`` anything.

The procedural proposer draws candidates that obey direction and effort and prefers rarer
ones under p_T (the point of the method: rarer situations and techniques are what make a task
harder independently of any model): each candidate is weighted by the D_T it adds. Every
candidate that would make the task harder is checked by rendering it in memory, so dependency
breaks never reach the reviewer.

Cost: a proposal draws up to ``4 × candidates`` plans. They are scored by D_T first (cheap) and
only the ones that pass are rendered, through a :class:`~evokit.plan.RenderCache` shared by the
whole proposal, so the parent's steps (and their data) are generated once, not once per
candidate. Neither changes which edit a seed chooses (``tests/test_evolve.py`` pins it).

**The D_T gate** (``difficulty_gate``, default on: EvolveConfig.difficulty_gate) is evokit's
addition, not EE's method: EE computes no numeric D_T and has no such gate (its proposer and
reviewer judge difficulty in words). With it, a candidate must raise D_T and its direction's
part of D_T, and is chosen in proportion to that gain; by construction it also removes EE's own
explanation of low effort (edits that need not be harder), so an effort claim is read with it
off (docs/preregistration.md, claim 1). Without it (where a figure reports D_T, its rise must be a measurement, not a rule), the
proposer keeps only its rarity-weighted drawing of new steps and returns the first
candidate that renders: whether D_T rises is then measured, not guaranteed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evokit.catalog import compatible, scenarios_for, skills_for
from evokit.difficulty import Reference, score
from evokit.plan import Plan, PlanError, RenderCache, Step, compose

DIRECTIONS = ("length", "scenario", "skill")
EFFORTS = ("low", "high", "max")
MAX_SPAN = 3  # longest span a high/max edit inserts or replaces
MAX_PLAN = 12  # never grow a plan beyond this many steps
#: The part of D_T each direction targets (see evokit.difficulty's decomposition).
TERM = {"length": "length_term", "scenario": "scenario_term", "skill": "skill_term"}


@dataclass(frozen=True)
class Edit:
    """A proposed plan and where it differs from its parent (positions in the new plan)."""

    plan: Plan
    direction: str
    effort: str
    changed: tuple[int, ...]  # 0-based positions of inserted or replaced steps


def _data_keys(plan: Plan) -> list[int]:
    return [dict(s.params).get("data", i + 1) for i, s in enumerate(plan.steps)]


def fresh_key(plan: Plan, n: int = 0) -> int:
    return max(_data_keys(plan), default=0) + 1 + n


def insert_steps(plan: Plan, pos: int, new: list[Step]) -> Plan:
    """Insert ``new`` at ``pos`` (0-based), renumbering the ``input`` links that point past it."""
    k = len(new)
    old = [Step(s.scenario, s.skill, s.params, s.input + k if s.input is not None and s.input > pos else s.input)
           for s in plan.steps]
    return Plan(tuple(old[:pos] + new + old[pos:]), plan.goal)


def replace_steps(plan: Plan, repl: dict[int, Step]) -> Plan:
    return Plan(tuple(repl.get(i, s) for i, s in enumerate(plan.steps)), plan.goal)


def renders(plan: Plan, seed: int, cache: RenderCache | None = None) -> bool:
    try:
        compose(plan, seed, cache=cache)
        return True
    except PlanError:
        return False


class ProceduralProposer:
    """Propose edits by sampling the catalog, weighted towards rarer choices under ``ref``."""

    def __init__(self, ref: Reference, *, candidates: int = 24, rarity_power: float = 2.0,
                 difficulty_gate: bool = True):
        self.ref, self.candidates, self.rarity_power = ref, candidates, rarity_power
        self.difficulty_gate = difficulty_gate
        # Catalog lookups, memoised (the catalog does not change during a run): skills_for and
        # scenarios_for sort the whole registry on every call.
        self._skills: dict[str, list[str]] = {}
        self._scenarios: dict[str, list[str]] = {}
        self._pairs: list[tuple[str, str]] | None = None

    def _skills_for(self, scenario: str) -> list[str]:
        if scenario not in self._skills:
            self._skills[scenario] = skills_for(scenario)
        return self._skills[scenario]

    def _scenarios_for(self, skill: str) -> list[str]:
        if skill not in self._scenarios:
            self._scenarios[skill] = [s for s in scenarios_for(skill) if compatible(s, skill)]
        return self._scenarios[skill]

    def _all_pairs(self) -> list[tuple[str, str]]:
        if self._pairs is None:
            self._pairs = [(s, k) for s in self.ref.scenarios for k in self._skills_for(s)]
        return self._pairs

    # -- per-step costs under p_T
    def _d(self, scenario: str, skill: str) -> float:
        i, j = self.ref._s_index[scenario], self.ref._k_index[skill]
        return float(-self.ref.log_scenario[i] - self.ref.log_skill[i, j])

    def _pick(self, rng: random.Random, options: list, cost) -> object:
        weights = [max(cost(o), 1e-6) ** self.rarity_power for o in options]
        return rng.choices(options, weights)[0]

    def _new_step(self, rng: random.Random, plan: Plan, prev: int | None, seed: int, key: int,
                  cache: RenderCache | None = None) -> Step | None:
        """A step to insert; consumes step ``prev``'s output when that output can be read."""
        if prev is not None and rng.random() < 0.6:
            try:
                out = compose(Plan(plan.steps[: prev + 1], plan.goal), seed, cache=cache).specs[-1].output_dataset
            except PlanError:  # an earlier insert of this candidate does not render: drop the candidate
                return None
            if out is not None:
                sk = self._pick(rng, self._skills_for(out.scenario), lambda k: self._d(out.scenario, k))
                return Step(out.scenario, sk, (), prev + 1)
        s, k = self._pick(rng, self._all_pairs(), lambda p: self._d(*p))
        return Step(s, k, (("data", key),))

    def propose(self, plan: Plan, direction: str, effort: str, *, seed: int, rng: random.Random,
                exclude: set[str] = frozenset()) -> Edit | None:
        """One edit obeying direction and effort that renders, not in ``exclude``; None if none found."""
        if direction not in DIRECTIONS or effort not in EFFORTS:
            raise ValueError(f"direction must be one of {DIRECTIONS} and effort one of {EFFORTS}")
        before = score(plan, self.ref)
        cache = RenderCache()  # the candidates share the parent's steps: render those once
        found: list[tuple[Edit, float]] = []
        for _ in range(self.candidates * 4):
            edit = getattr(self, f"_{direction}")(plan, effort, seed, rng, cache)
            if edit is None or edit.plan.to_json() in exclude:
                continue
            if not self.difficulty_gate:  # no D_T check: the first candidate that renders
                if renders(edit.plan, seed, cache):
                    return edit
                continue
            after = score(edit.plan, self.ref)
            # The edit must make the task harder *along its own direction* (EE: each direction
            # targets one source of difficulty) and harder overall. Checked before rendering (the
            # expensive part): the same candidates pass as with the checks the other way round.
            gain = getattr(after, TERM[direction]) - getattr(before, TERM[direction])
            if gain > 0 and after.total > before.total and renders(edit.plan, seed, cache):
                found.append((edit, gain))
            if len(found) >= self.candidates:
                break
        if not found:
            return None
        return self._pick(rng, found, lambda eg: eg[1])[0]

    # -- the three directions
    def _span(self, n: int, effort: str, rng: random.Random) -> list[int]:
        """Positions an edit may touch: one (low), a contiguous run (high), any subset (max)."""
        if effort == "low":
            return [rng.randrange(n)]
        size = rng.randint(1, min(MAX_SPAN, n))
        if effort == "high":
            start = rng.randrange(n - size + 1)
            return list(range(start, start + size))
        return sorted(rng.sample(range(n), size))

    def _length(self, plan: Plan, effort: str, seed: int, rng: random.Random,
                cache: RenderCache | None = None) -> Edit | None:
        if len(plan) >= MAX_PLAN:
            return None
        n_new = 1 if effort == "low" else rng.randint(1, min(MAX_SPAN, MAX_PLAN - len(plan)))
        if effort == "max":  # insert at several independent positions
            cur, changed = plan, []
            for j in range(n_new):
                pos = rng.randrange(len(cur) + 1)
                st = self._new_step(rng, cur, pos - 1 if pos else None, seed, fresh_key(plan, j), cache)
                if st is None:
                    return None
                cur = insert_steps(cur, pos, [st])
                changed = [c + 1 if c >= pos else c for c in changed] + [pos]
            return Edit(cur, "length", effort, tuple(sorted(changed)))
        pos = rng.randrange(len(plan) + 1)
        new, cur = [], plan
        for j in range(n_new):  # a contiguous chain: each inserted step may read the one before
            st = self._new_step(rng, cur, pos + j - 1 if pos + j else None, seed, fresh_key(plan, j), cache)
            if st is None:
                return None
            cur = insert_steps(cur, pos + j, [st])
            new.append(st)
        return Edit(cur, "length", effort, tuple(range(pos, pos + n_new)))

    def _scenario(self, plan: Plan, effort: str, seed: int, rng: random.Random,
                  cache: RenderCache | None = None) -> Edit | None:
        repl = {}
        for j, i in enumerate(self._span(len(plan), effort, rng)):
            st = plan.steps[i]
            options = [s for s in self._scenarios_for(st.skill) if s != st.scenario]
            if not options:
                return None
            s2 = self._pick(rng, options, lambda s, k=st.skill: self._d(s, k))
            # A new situation has its own data, so the step reads no earlier output.
            repl[i] = Step(s2, st.skill, (("data", fresh_key(plan, j)),))
        return Edit(replace_steps(plan, repl), "scenario", effort, tuple(sorted(repl)))

    def _skill(self, plan: Plan, effort: str, seed: int, rng: random.Random,
               cache: RenderCache | None = None) -> Edit | None:
        repl = {}
        for i in self._span(len(plan), effort, rng):
            st = plan.steps[i]
            options = [k for k in self._skills_for(st.scenario) if k != st.skill]
            if not options:
                return None
            k2 = self._pick(rng, options, lambda k, s=st.scenario: self._d(s, k))
            keep = tuple((k, v) for k, v in st.params if k == "data")  # same data, new technique
            repl[i] = Step(st.scenario, k2, keep, st.input)
        return Edit(replace_steps(plan, repl), "skill", effort, tuple(sorted(repl)))
