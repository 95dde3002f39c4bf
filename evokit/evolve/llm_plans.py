"""Plans in the LLM roles' prompts and replies: how a plan is shown, and how a reply is checked.

The LLM proposer and reviewer (:mod:`evokit.evolve.llm_roles`) exchange plans as JSON in the reply
shape of :mod:`evokit.extract` (``"<scenario>/<skill>"`` catalog pairs, or ``"other"`` with
descriptions). This module holds the pure parts: the direction and effort rules the prompts state,
the text a plan becomes in a prompt, and the validators that turn a reply into a typed result or
raise a ValueError naming the problem (that text goes back to the model for another try).

:func:`proposal_validator` lines a reply up with the parent (kept steps keep their data and
dependencies, new ones get fresh data) and applies the reviewer's direction and effort rules,
renderability (catalog-only plans) and novelty, so that most bad proposals are fixed inside one
conversation.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from evokit.catalog import SCENARIOS, SKILLS, pairs, scenarios_for, skills_for
from evokit.evolve.edits import MAX_PLAN, Edit, fresh_key
from evokit.evolve.review import changed_positions
from evokit.extract import OTHER, catalog_text, validate_reply
from evokit.plan import Plan, PlanError, Step, compose

PLACEHOLDER = re.compile(r"^<[^<>\n]{1,60}>$")  # "<full new text>": the prompt's example copied

DIRECTION_RULES = {
    "length": "insert new steps and keep every existing step, in the same order. A new step may work "
              "on the previous step's output (reads_previous true).",
    "scenario": "replace the SCENARIO (the situation) of some steps with a different, rarer one and keep "
                "each step's SKILL. Keep the number of steps.",
    "skill": "replace the SKILL (the technique) of some steps with a different, rarer one that applies "
             "to the same SCENARIO. Keep the number of steps.",
}
EFFORT_RULES = {
    "low": "change exactly one step.",
    "high": "change one contiguous run of neighbouring steps (one to three steps).",
    "max": "change as many steps as you like.",
}
#: The LLM reviewer's rubric; EE's rubrics are adaptive: pass more items to :class:`LLMReviewer`.
DEFAULT_RUBRIC = (
    "The edited plan is one coherent task: a solver can do its steps in order in a Linux terminal, "
    "and a script can check each step's result.",
    "The edit moves along its direction: length adds dependent work, scenario a rarer situation for "
    "the same technique, skill a rarer technique for the same situation.",
    "Free-text ('other') steps are concrete: they say what input they read and what result they produce.",
    "No step repeats another step.",
)


# ---------------------------------------------------------------------------- plans in prompts
def is_free_text(step: Step) -> bool:
    """A step outside the catalog (``other:…`` scenario or skill): it cannot be rendered or scored."""
    return step.scenario.startswith(f"{OTHER}:") or step.skill.startswith(f"{OTHER}:")


def has_free_text(plan: Plan) -> bool:
    return any(is_free_text(s) for s in plan.steps)


def plan_json(plan: Plan) -> str:
    """The plan in the reply shape of the proposer (one step per line), for prompts."""
    lines = []
    for st in plan.steps:
        if is_free_text(st):
            pair = OTHER
            scen, sk = st.scenario.removeprefix(f"{OTHER}:"), st.skill.removeprefix(f"{OTHER}:")
        else:
            pair, scen, sk = f"{st.scenario}/{st.skill}", "none", "none"
        lines.append(f'  {{"pair": "{pair}", "other_scenario": "{scen}", "other_skill": "{sk}", '
                     f'"reads_previous": {"true" if st.input is not None else "false"}}}')
    return '{"steps": [\n' + ",\n".join(lines) + "\n]}"


def describe_step(i: int, st: Step) -> str:
    """``step 3: access-log/topk-count — <situation>; <technique>`` (i is 0-based)."""
    where = f" (works on step {st.input}'s output)" if st.input is not None else ""
    if is_free_text(st):
        return f"step {i + 1}: {st.scenario.removeprefix(f'{OTHER}:')} — {st.skill.removeprefix(f'{OTHER}:')}{where}"
    return f"step {i + 1}: {st.scenario}/{st.skill} — {SCENARIOS[st.scenario].summary}; " \
           f"{SKILLS[st.skill].summary}{where}"


def options(plan: Plan, direction: str) -> tuple[str, list[str]]:
    """The catalog part the edit may use (prompt text) and the pair names a reply may contain.

    A length edit may insert any pair; a skill edit only needs the skills of the plan's scenarios,
    a scenario edit only the scenarios of its skills: a short, focused list (and a smaller
    grammar for constrained decoding).
    """
    every = pairs()  # first: it loads the catalog that catalog_text lists
    known = [st for st in plan.steps if not is_free_text(st)]
    if direction == "length" or not known:
        return catalog_text(), [f"{s}/{k}" for s, k in every] + [OTHER]
    lines, names = [], []
    if direction == "skill":
        for scen in dict.fromkeys(st.scenario for st in known):
            lines.append(f"- scenario {scen}: {SCENARIOS[scen].summary}. Its skills:")
            lines += [f"    {scen}/{k}: {SKILLS[k].summary}" for k in skills_for(scen)]
            names += [f"{scen}/{k}" for k in skills_for(scen)]
    else:
        for sk in dict.fromkeys(st.skill for st in known):
            lines.append(f"- skill {sk}: {SKILLS[sk].summary}. Its scenarios:")
            lines += [f"    {s}/{sk}: {SCENARIOS[s].summary}" for s in scenarios_for(sk)]
            names += [f"{s}/{sk}" for s in scenarios_for(sk)]
    names += [f"{st.scenario}/{st.skill}" for st in known]  # the kept steps, copied as they are
    return "\n".join(lines), sorted(set(names)) + [OTHER]


def feedback_text(reasons: Sequence[str], header: str) -> str:
    return f"{header}\n" + "\n".join(f"- {r}" for r in reasons[-6:]) + "\n" if reasons else ""


# ---------------------------------------------------------------------------- proposals
def parse_steps(reply, max_steps: int = MAX_PLAN) -> list[Step]:
    """Reply → steps, as :func:`evokit.extract.validate_reply` (up to ``max_steps``, never truncated)."""
    return list(validate_reply(reply, max_steps).steps)


def _norm(name: str) -> str:
    return " ".join(name.lower().split())


def _same(a: Step, b: Step) -> bool:
    return _norm(a.scenario) == _norm(b.scenario) and _norm(a.skill) == _norm(b.skill)


def _fresh(st: Step, parent: Plan, n: int) -> Step:
    """A new step that reads no earlier output gets its own data id (as the procedural proposer does)."""
    if st.input is None and not is_free_text(st):
        return Step(st.scenario, st.skill, (("data", fresh_key(parent, n)),))
    return Step(st.scenario, st.skill, (), st.input)


def align(parent: Plan, proposed: Sequence[Step], direction: str) -> Plan:
    """The proposed steps as an edit of ``parent``.

    Steps the edit keeps are the parent's own (data, parameters, dependencies renumbered after
    inserts); a new skill keeps its step's data and input (same situation); a new scenario or an
    inserted step gets fresh data. A reply that is not this kind of edit comes back as proposed,
    and the direction rule then says what is wrong with it.
    """
    if direction == "length":
        where: dict[int, int] = {}  # parent index → child index (greedy subsequence match)
        for i, st in enumerate(proposed):
            if len(where) < len(parent) and _same(st, parent.steps[len(where)]):
                where[len(where)] = i
        if len(where) < len(parent):
            return Plan(tuple(proposed), parent.goal)
        kept = {i: j for j, i in where.items()}
        out, n_new = [], 0
        for i, st in enumerate(proposed):
            if i in kept:
                old = parent.steps[kept[i]]
                out.append(Step(old.scenario, old.skill, old.params,
                                None if old.input is None else where[old.input - 1] + 1))
            else:
                out.append(_fresh(st, parent, n_new))
                n_new += 1
        return Plan(tuple(out), parent.goal)
    if len(proposed) != len(parent):
        return Plan(tuple(proposed), parent.goal)
    out, n_new = [], 0
    for old, new in zip(parent.steps, proposed, strict=True):
        if _same(old, new):
            out.append(old)
        elif direction == "skill" and _norm(old.scenario) == _norm(new.scenario):
            out.append(Step(old.scenario, new.skill, tuple((k, v) for k, v in old.params if k == "data"), old.input))
        elif direction == "scenario" and _norm(old.skill) == _norm(new.skill):
            out.append(_fresh(Step(new.scenario, old.skill, (), new.input), parent, n_new))
            n_new += 1
        else:
            out.append(new)
    return Plan(tuple(out), parent.goal)


def effort_problem(changed: list[int], effort: str) -> str | None:
    """The reviewer's effort rule: low = one step, high = one contiguous span, max = anything."""
    if effort == "low" and len(changed) != 1:
        return f"low effort touches exactly one step, this edit touches {len(changed)}"
    if effort == "high" and changed != list(range(changed[0], changed[-1] + 1)):
        return f"high effort touches one contiguous span, this edit touches steps {[c + 1 for c in changed]}"
    return None


def proposal_validator(parent: Plan, direction: str, effort: str, *, seed: int,
                       exclude: Collection[str] = frozenset()):
    """reply → :class:`Edit`; each ValueError says what is wrong with the edit (sent back to the model)."""

    def validate(reply) -> Edit:
        plan = align(parent, parse_steps(reply), direction)
        changed = changed_positions(parent, plan, direction)
        if isinstance(changed, str):
            raise ValueError(f"not a {direction} edit: {changed}")
        if problem := effort_problem(changed, effort):
            raise ValueError(f"wrong size of edit: {problem}")
        if not has_free_text(plan):
            try:
                compose(plan, seed)
            except PlanError as e:  # every render failure is one (naming the step and parameter)
                raise ValueError(f"the plan cannot be built: {e}") from None
        if plan.to_json() in exclude:
            raise ValueError("this plan was already proposed or is already in the lineage; propose another edit")
        return Edit(plan, direction, effort, tuple(changed))

    return validate


# ---------------------------------------------------------------------------- reviews
REVIEW_SCHEMA = {"type": "object", "required": ["accept", "reasons"], "properties": {
    "accept": {"type": "boolean"},
    "reasons": {"type": "array", "maxItems": 5, "items": {"type": "string", "minLength": 3, "maxLength": 200}}}}


def validate_review(reply) -> list[str]:
    """``{"accept": bool, "reasons": [...]}`` → reasons (empty = accepted); a rejection needs a reason."""
    if not isinstance(reply, dict) or not isinstance(reply.get("accept"), bool):
        raise ValueError('expected {"accept": true or false, "reasons": ["..."]}')
    reasons = reply.get("reasons", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise ValueError('"reasons" must be a list of strings')
    if reply["accept"]:
        return []
    reasons = [r.strip() for r in reasons if r.strip() and not PLACEHOLDER.match(r.strip())]
    if not reasons:
        raise ValueError('a rejection ("accept": false) needs at least one reason the proposer can act on')
    return [f"reviewer: {r}" for r in reasons[:5]]
