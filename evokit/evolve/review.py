"""The plan reviewer: a rubric over a proposed plan, whose reasons go back to the proposer (EE §4).

Rules (each returns a reason when it fails):

* ``valid``: every pair is compatible and every dependency is satisfied (the plan renders);
* ``direction``: the edit is of the declared kind: ``length`` keeps every old step in order and
  adds steps; ``scenario`` changes situations only (skills kept); ``skill`` changes techniques
  only (situations kept);
* ``effort``: ``low`` touches one step, ``high`` one contiguous span, ``max`` anything;
* ``harder`` (the **D_T gate**, ``difficulty_gate``): D_T rises under the reference distribution,
  and so does the part of it the direction targets (L for length, the scenario term, the skill
  term). With the gate off (``EvolveConfig.difficulty_gate = False``) this rule is not applied, so
  that a figure which reports D_T across generations measures whether edits raise it instead of
  showing a rule of the harness (with the rule on, "every edit raises D_T" is true by construction);
* ``novel``: the plan is no copy of an environment already in the lineage.
"""

from __future__ import annotations

from evokit.difficulty import Reference, score
from evokit.evolve.edits import TERM
from evokit.plan import Plan, PlanError, Step, compose


def _core(s: Step) -> tuple:
    return (s.scenario, s.skill)


def changed_positions(parent: Plan, child: Plan, direction: str) -> list[int] | str:
    """Positions of the child that the edit inserted or replaced, or a reason it is not that kind of edit."""
    if direction == "length":
        if len(child) <= len(parent):
            return f"a length edit must add steps ({len(parent)} → {len(child)})"
        # the old steps must survive, in order, as a subsequence (greedy match)
        j, kept = 0, []
        for i, st in enumerate(child.steps):
            if j < len(parent) and _core(st) == _core(parent.steps[j]) and \
                    dict(st.params).get("data") == dict(parent.steps[j].params).get("data"):
                kept.append(i)
                j += 1
        if j < len(parent):
            return "a length edit must keep every existing step, in order"
        return [i for i in range(len(child)) if i not in kept]
    if len(child) != len(parent):
        return f"a {direction} edit keeps the number of steps ({len(parent)} → {len(child)})"
    changed = []
    for i, (a, b) in enumerate(zip(parent.steps, child.steps, strict=True)):
        if direction == "scenario":
            if a.skill != b.skill:
                return f"step {i + 1}: a scenario edit must keep the skill ({a.skill} → {b.skill})"
            if a.scenario != b.scenario:
                changed.append(i)
        elif direction == "skill":
            if a.scenario != b.scenario:
                return f"step {i + 1}: a skill edit must keep the scenario ({a.scenario} → {b.scenario})"
            if a.skill != b.skill:
                changed.append(i)
    if not changed:
        return f"the {direction} edit changes no step"
    return changed


class PlanReviewer:
    """Accept or reject a proposed plan with reasons (an empty list means accepted)."""

    def __init__(self, ref: Reference, seed_of_render: int = 0, *, difficulty_gate: bool = True):
        self.ref, self.difficulty_gate = ref, difficulty_gate

    def review(self, parent: Plan, child: Plan, direction: str, effort: str, *, seed: int,
               seen: set[str] = frozenset(), call_seed: int | None = None) -> list[str]:
        reasons: list[str] = []
        try:
            compose(child, seed)
        except PlanError as e:
            return [f"valid: {e}"]
        changed = changed_positions(parent, child, direction)
        if isinstance(changed, str):
            reasons.append(f"direction: {changed}")
        else:
            if effort == "low" and len(changed) != 1:
                reasons.append(f"effort: low effort touches exactly one step, this edit touches {len(changed)}")
            if effort == "high" and changed != list(range(changed[0], changed[-1] + 1)):
                reasons.append(f"effort: high effort touches one contiguous span, this edit touches "
                               f"steps {[c + 1 for c in changed]}")
        if self.difficulty_gate:
            reasons += self._harder(parent, child, direction, changed)
        if child.to_json() in seen:
            reasons.append("novel: this plan is already in the lineage")
        return reasons

    def _harder(self, parent: Plan, child: Plan, direction: str, changed: list[int] | str) -> list[str]:
        """The D_T gate: D_T and the part of it the direction targets must rise."""
        reasons = []
        before, after = score(parent, self.ref), score(child, self.ref)
        if after.total <= before.total:
            reasons.append(f"harder: D_T does not rise ({before.total:.2f} → {after.total:.2f})")
        term = TERM.get(direction)
        if term and not isinstance(changed, str) and getattr(after, term) <= getattr(before, term):
            reasons.append(f"direction: a {direction} edit must raise the {term.replace('_', ' ')} of D_T "
                           f"({getattr(before, term):.2f} → {getattr(after, term):.2f})")
        return reasons
