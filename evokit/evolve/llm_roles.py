"""The LLM backend of the evolution harness: proposer, plan reviewer and modifier (EE §4).

EE runs all three roles with an LLM. Here each role sends one prompt (``evokit/prompts/evolve_*.md``)
through :meth:`LLMClient.chat_json`, whose validate function turns the reply into a typed result
or raises a ValueError naming the problem. That text goes back to the model for another try; once
the retry budget is spent the role fails with :class:`LLMReplyError` (a ValueError, counted in
``client.usage.invalid_replies``), which the harness records as a rejection with its reasons.

* :class:`LLMProposer` asks for the whole edited plan in the reply shape of :mod:`evokit.extract`
  (``"<scenario>/<skill>"`` catalog pairs, or ``"other"`` with descriptions). Its validator lines the
  reply up with the parent (kept steps keep their data and dependencies, new ones get fresh data)
  and applies the reviewer's direction and effort rules, renderability (catalog-only plans) and
  novelty, so that most bad proposals are fixed inside one conversation.
* :class:`LLMReviewer` runs the procedural :class:`PlanReviewer` rubric first; a plan with
  free-text ``other:`` steps can be neither rendered nor scored under p_T, so for it only the
  direction, effort and novelty rules apply (the prompt says which checks were skipped). Then
  the LLM judges the edit against a short rubric; its reasons go back to the proposer.
* :class:`LLMModifier` edits the real files of any Harbor task: it shows instruction.md,
  environment/, tests/ and solution/ (big files truncated, binaries named only) and asks for the
  residual ΔE as ``{"files": {path: full content | null}, "summary": ...}``. The reply is checked
  (paths confined to those four parts, task.toml untouched, tests/test.sh and solution/solve.sh
  kept; since every edit changes steps, instruction, tests and solution must all change), applied
  to a copy of the parent and stamped with evokit metadata (the edited plan, the lineage).

Departures from EE:

1. Plans use the catalog vocabulary, with free text only where nothing fits (EE's are free text):
   catalog plans keep D_T computable and let the procedural rubric check them exactly.
2. Replies are not seeded, so a resumed LLM run may choose differently from an uninterrupted one
   (the procedural backend is deterministic).
3. An endpoint failure (:class:`evokit.llm.LLMError`, e.g. a prompt over the server's context) is
   not a rejection: it stops the run, because it says nothing about the edit.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from evokit.catalog import SCENARIOS, SKILLS, pairs, scenarios_for, skills_for
from evokit.difficulty import Reference, catalog_reference, score
from evokit.evolve.edits import DIRECTIONS, EFFORTS, MAX_PLAN, Edit, _fresh_key
from evokit.evolve.harness import Backend
from evokit.evolve.review import PlanReviewer, _changed_positions
from evokit.extract import _TEMPLATE_TEXT, OTHER, _catalog_text, _schema, extract
from evokit.llm import LLMClient, LLMReplyError, prompt
from evokit.plan import Plan, PlanError, Step, compose
from evokit.tasks import (
    IGNORED_NAMES,
    EvokitMetadata,
    content_hash,
    load_task,
    read_metadata,
    write_metadata,
)

log = logging.getLogger(__name__)

SYSTEM = {"role": "system", "content": "You reply with JSON only."}
_PLACEHOLDER = re.compile(r"^<[^<>\n]{1,60}>$")  # "<full new text>": the prompt's example copied

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
    every = pairs()  # first: it loads the catalog that _catalog_text lists
    known = [st for st in plan.steps if not is_free_text(st)]
    if direction == "length" or not known:
        return _catalog_text(), [f"{s}/{k}" for s, k in every] + [OTHER]
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


def _feedback(reasons: Sequence[str], header: str) -> str:
    return f"{header}\n" + "\n".join(f"- {r}" for r in reasons[-6:]) + "\n" if reasons else ""


# ---------------------------------------------------------------------------- proposer
def parse_steps(reply, max_steps: int = MAX_PLAN) -> list[Step]:
    """Reply → steps, as :func:`evokit.extract.validate_reply` but up to ``max_steps`` and never truncated."""
    if not isinstance(reply, dict) or not isinstance(reply.get("steps"), list) or not reply["steps"]:
        raise ValueError('expected an object {"steps": [...]} with at least one step')
    if len(reply["steps"]) > max_steps:
        raise ValueError(f"a plan has at most {max_steps} steps, this one has {len(reply['steps'])}")
    known = set(pairs())
    steps = []
    for i, item in enumerate(reply["steps"], 1):
        if not isinstance(item, dict) or not isinstance(item.get("pair"), str):
            raise ValueError(f'step {i}: expected {{"pair": "<scenario>/<skill>"}}, got {item!r}')
        pair = item["pair"].strip()
        if pair == OTHER:
            s, k = (str(item.get(f) or "").strip() for f in ("other_scenario", "other_skill"))
            if not s or not k or {s.lower(), k.lower()} & _TEMPLATE_TEXT:
                raise ValueError(f"step {i}: with pair 'other', describe the scenario and the skill in "
                                 "other_scenario and other_skill (not 'none')")
            scenario, skill = f"{OTHER}:{s}", f"{OTHER}:{k}"
        else:
            scenario, _, skill = pair.partition("/")
            if (scenario, skill) not in known:
                hint = "unknown scenario" if scenario not in SCENARIOS else (
                    "unknown skill" if skill not in SKILLS else "skill does not apply to that scenario")
                raise ValueError(f"step {i}: {pair!r} is not a catalog pair ({hint}); use a listed pair or 'other'")
        reads = item.get("reads_previous", False)
        if not isinstance(reads, bool):
            raise ValueError(f"step {i}: reads_previous must be true or false")
        if reads and i == 1:
            raise ValueError("step 1: reads_previous must be false (there is no earlier step)")
        steps.append(Step(scenario, skill, input=i - 1 if reads else None))
    return steps


def _norm(name: str) -> str:
    return " ".join(name.lower().split())


def _same(a: Step, b: Step) -> bool:
    return _norm(a.scenario) == _norm(b.scenario) and _norm(a.skill) == _norm(b.skill)


def _fresh(st: Step, parent: Plan, n: int) -> Step:
    """A new step that reads no earlier output gets its own data id (as the procedural proposer does)."""
    if st.input is None and not is_free_text(st):
        return Step(st.scenario, st.skill, (("data", _fresh_key(parent, n)),))
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
        changed = _changed_positions(parent, plan, direction)
        if isinstance(changed, str):
            raise ValueError(f"not a {direction} edit: {changed}")
        if problem := effort_problem(changed, effort):
            raise ValueError(f"wrong size of edit: {problem}")
        if not has_free_text(plan):
            try:
                compose(plan, seed)
            except PlanError as e:
                raise ValueError(f"the plan cannot be built: {e}") from None
            except Exception as e:  # a skill's renderer that fails on unexpected parameters
                raise ValueError(f"the plan cannot be built: {type(e).__name__} {e}") from None
        if plan.to_json() in exclude:
            raise ValueError("this plan was already proposed or is already in the lineage; propose another edit")
        return Edit(plan, direction, effort, tuple(changed))

    return validate


class LLMProposer:
    """EE's proposer: the LLM edits the plan along one direction within the effort."""

    def __init__(self, client: LLMClient, *, retries: int = 2, instruction_chars: int = 800):
        self.client, self.retries, self.instruction_chars = client, retries, instruction_chars

    def propose(self, plan: Plan, direction: str, effort: str, *, seed: int, rng=None,
                exclude: Collection[str] = frozenset(), feedback: Sequence[str] = (),
                task_dir: Path | None = None) -> Edit | None:
        if direction not in DIRECTIONS or effort not in EFFORTS:
            raise ValueError(f"direction must be one of {DIRECTIONS} and effort one of {EFFORTS}")
        if not plan.steps and task_dir is not None:  # a foreign task: recover its plan first
            plan = extract(task_dir, self.client, retries=self.retries)
        if direction == "length" and len(plan) >= MAX_PLAN:
            return None
        instruction = "(not available)"
        if task_dir is not None and (Path(task_dir) / "instruction.md").is_file():
            instruction = (Path(task_dir) / "instruction.md").read_text(errors="replace")[: self.instruction_chars]
        catalog, names = options(plan, direction)
        schema = _schema(names)
        n = len(plan)  # the number of steps the edit must produce, for constrained decoding
        steps = schema["properties"]["steps"]
        steps["minItems"], steps["maxItems"] = (n + 1, MAX_PLAN) if direction == "length" else (n, n)
        text = prompt("evolve_propose", catalog=catalog, instruction=instruction, plan=plan_json(plan),
                      direction=direction, direction_rule=DIRECTION_RULES[direction], effort=effort,
                      effort_rule=EFFORT_RULES[effort],
                      feedback=_feedback(feedback, "Earlier proposals were rejected for these reasons:"))
        return self.client.chat_json([SYSTEM, {"role": "user", "content": text}],
                                     proposal_validator(plan, direction, effort, seed=seed, exclude=exclude),
                                     what=f"{direction} edit", retries=self.retries, json_schema=schema)


# ---------------------------------------------------------------------------- reviewer
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
    reasons = [r.strip() for r in reasons if r.strip() and not _PLACEHOLDER.match(r.strip())]
    if not reasons:
        raise ValueError('a rejection ("accept": false) needs at least one reason the proposer can act on')
    return [f"reviewer: {r}" for r in reasons[:5]]


class LLMReviewer:
    """The procedural rubric first (it is exact where it applies), then the LLM's rubric."""

    def __init__(self, client: LLMClient, ref: Reference | None = None, *,
                 rubric: Sequence[str] = DEFAULT_RUBRIC, retries: int = 2):
        self.client, self.retries, self.rubric = client, retries, tuple(rubric)
        self.ref = ref or catalog_reference()  # the harness scores accepted plans with it
        self.procedural = PlanReviewer(self.ref)

    def procedural_review(self, parent: Plan, child: Plan, direction: str, effort: str, *, seed: int,
                          seen: Collection[str] = frozenset()) -> tuple[list[str], list[str]]:
        """(reasons, checks that could not apply) of the procedural rubric."""
        if not (has_free_text(parent) or has_free_text(child)):
            return self.procedural.review(parent, child, direction, effort, seed=seed, seen=seen), []
        reasons = []
        changed = _changed_positions(parent, child, direction)
        if isinstance(changed, str):
            reasons.append(f"direction: {changed}")
        elif problem := effort_problem(changed, effort):
            reasons.append(f"effort: {problem}")
        if child.to_json() in seen:
            reasons.append("novel: this plan is already in the lineage")
        return reasons, ["valid (free-text steps cannot be rendered)",
                         "harder (free-text steps have no p_T, so neither D_T nor the term of it the "
                         "direction targets can be computed)"]

    def review(self, parent: Plan, child: Plan, direction: str, effort: str, *, seed: int,
               seen: Collection[str] = frozenset()) -> list[str]:
        reasons, skipped = self.procedural_review(parent, child, direction, effort, seed=seed, seen=seen)
        if reasons:
            return reasons
        if skipped:
            log.info("plan with free-text steps: procedural checks skipped: %s", "; ".join(skipped))
        changed = _changed_positions(parent, child, direction)
        passed = "direction, effort, novel" + ("" if skipped else ", valid (it renders), harder (D_T and the term its direction targets rise)")
        text = prompt("evolve_review", parent=plan_json(parent), child=plan_json(child), direction=direction,
                      effort=effort, changed=", ".join(str(c + 1) for c in changed), passed=passed,
                      skipped=f"Not checked (judge these yourself): {'; '.join(skipped)}." if skipped else "",
                      rubric="\n".join(f"{i}. {r}" for i, r in enumerate(self.rubric, 1)))
        try:
            return self.client.chat_json([SYSTEM, {"role": "user", "content": text}], validate_review,
                                         what="plan review", retries=self.retries, json_schema=REVIEW_SCHEMA)
        except LLMReplyError as e:  # the harness only catches the proposer's: a rejection with its reason
            return [f"reviewer: {e}"]


# ---------------------------------------------------------------------------- modifier
EDITABLE_DIRS = ("environment", "tests", "solution")
KEEP = ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh")  # never deleted
RESIDUAL_SCHEMA = {"type": "object", "required": ["files", "summary"], "properties": {
    "files": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
    "summary": {"type": "string", "maxLength": 300}}}


@dataclass(frozen=True)
class Residual:
    """EE's ΔE: the full new content of each changed file (None deletes it), by path in the task folder."""

    files: dict[str, str | None]
    summary: str


def check_path(rel) -> str:
    """A path the modifier may write, normalised; ValueError says why not."""
    if not isinstance(rel, str) or not rel.strip():
        raise ValueError(f"file path {rel!r}: must be a non-empty string")
    p = PurePosixPath(rel)
    if p.is_absolute():
        raise ValueError(f"{rel!r}: absolute paths are not allowed; give a path relative to the task "
                         "folder, e.g. tests/test.sh")
    if ".." in p.parts or "\\" in rel:
        raise ValueError(f"{rel!r}: '..' and backslashes are not allowed; stay inside the task folder")
    path = p.as_posix()
    if path == "task.toml":
        raise ValueError("task.toml cannot be edited: evokit writes its configuration and metadata")
    if path != "instruction.md" and (len(p.parts) < 2 or p.parts[0] not in EDITABLE_DIRS):
        raise ValueError(f"{rel!r}: only instruction.md and files under environment/, tests/ and solution/ "
                         "may be edited")
    return path


def validate_residual(reply, existing: Collection[str] | None = None, dirs: Collection[str] = ()) -> Residual:
    """reply → :class:`Residual`. ``existing``: the parent's files (deleting another is an error)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("files"), dict):
        raise ValueError('expected {"files": {"<relative path>": "<full new content>" or null}, "summary": "..."}')
    if not reply["files"]:
        raise ValueError('"files" is empty: change at least instruction.md and the files the new steps need')
    summary = reply.get("summary", "")
    if not isinstance(summary, str):
        raise ValueError('"summary" must be a string')
    files: dict[str, str | None] = {}
    for rel, content in reply["files"].items():
        path = check_path(rel)
        if path in files:
            raise ValueError(f"{rel!r}: names {path} a second time")
        if path in dirs:
            raise ValueError(f"{path}: is a folder of the task; name the files inside it")
        if content is None:
            if path in KEEP:
                raise ValueError(f"{path}: cannot be deleted, every task needs it; give its new content instead")
            if existing is not None and path not in existing:
                raise ValueError(f"{path}: cannot be deleted, the task has no such file")
        elif not isinstance(content, str):
            raise ValueError(f"{path}: the content must be a string (the full new file) or null to delete it")
        elif path in KEEP and not content.strip():
            raise ValueError(f"{path}: must not be empty")
        elif _PLACEHOLDER.match(content.strip()):
            raise ValueError(f"{path}: {content.strip()!r} is the example's placeholder; write the real content")
        files[path] = content
    return Residual(files, summary.strip())


def require_changes(parent_dir: Path, residual: Residual) -> Residual:
    """Every edit changes the plan's steps, so what the agent is asked (instruction.md), what is
    checked (tests/) and the reference solution (solution/) must all change."""
    def differs(rel: str, content: str | None) -> bool:
        path = Path(parent_dir) / rel
        return content is None or not path.is_file() or path.read_bytes() != content.encode("utf-8")

    changed = [rel for rel, content in residual.files.items() if differs(rel, content)]
    missing = [part for part in ("instruction.md", "tests/", "solution/")
               if not any(rel == part or rel.startswith(part) for rel in changed)]
    if missing:
        raise ValueError(f"the new steps need changes to {', '.join(missing)} too (this reply changes "
                         f"{', '.join(changed) or 'nothing'}): give the full new content of those files")
    return residual


def _head(path: Path, limit: int) -> str | None:
    """The first ``limit`` bytes of a text file, decoded; None for a binary file (NUL bytes, not UTF-8)."""
    with open(path, "rb") as f:
        data = f.read(limit)
    if b"\0" in data[:8192]:
        return None
    try:  # incremental: a character cut at the limit is not an error
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=len(data) < limit)
    except UnicodeDecodeError:
        return None


def task_files(task_dir: Path) -> tuple[list[str], list[str]]:
    """(files, folders) the modifier may see, relative to the task folder, in prompt order."""
    files, dirs = [], []
    for part in ("instruction.md", *EDITABLE_DIRS):
        root = task_dir / part
        if root.is_file():
            files.append(part)
        for p in sorted(root.rglob("*")) if root.is_dir() else []:
            if IGNORED_NAMES & set(p.relative_to(task_dir).parts):
                continue
            (dirs if p.is_dir() else files).append(p.relative_to(task_dir).as_posix())
    first = [f for f in KEEP if f in files]  # then the rest, small files first: more of them fit
    rest = sorted((f for f in files if f not in first), key=lambda f: ((task_dir / f).stat().st_size, f))
    return first + rest, dirs


def files_text(task_dir: Path, files: Sequence[str], *, file_chars: int, total_chars: int) -> str:
    """The files as prompt text: big ones cut at ``file_chars``, binaries and the over-budget ones named only."""
    parts, used = [], 0
    for rel in files:
        path = task_dir / rel
        size = path.stat().st_size
        text = _head(path, 4 * file_chars + 4)  # enough bytes for file_chars characters
        keep = "not shown: leave it out of your reply to keep it"
        if text is None:
            parts.append(f"=== {rel} (binary, {size} bytes, {keep}) ===")
        elif used >= total_chars:
            parts.append(f"=== {rel} ({size} bytes, {keep}) ===")
        else:
            shown = text[: min(file_chars, total_chars - used)]
            cut = len(shown.encode("utf-8")) < size
            parts.append(f"=== {rel} ({size} bytes{', only its start is shown: leave it out to keep it' if cut else ''})"
                         f" ===\n{shown}")
            used += len(shown)
    return "\n".join(parts)


def apply_residual(parent_dir: str | Path, residual: Residual, dest: str | Path,
                   metadata: EvokitMetadata | None = None) -> Path:
    """Copy the parent to ``dest`` with ``residual`` applied and ``metadata`` stamped; Harbor must load it.

    The copy is built in a hidden sibling and renamed into place, so a rejected edit never leaves
    a folder at ``dest``.
    """
    parent_dir, dest = Path(parent_dir), Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest}: already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        shutil.copytree(parent_dir, staged, symlinks=True, dirs_exist_ok=True)
        root = staged.resolve()
        for rel, content in residual.files.items():
            target = staged / check_path(rel)
            if not target.parent.resolve().is_relative_to(root):  # a symlinked folder leading outside
                raise ValueError(f"{rel}: leads outside the task folder")
            if target.is_symlink() or content is None:
                target.unlink(missing_ok=True)
            if content is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
                os.chmod(target, 0o755 if rel.endswith(".sh") or content.startswith("#!") else 0o644)
        if metadata is not None:
            write_metadata(staged, metadata.model_copy(update={"content_hash": content_hash(staged)}))
        load_task(staged)  # never hand over a folder Harbor would reject
        os.rename(staged, dest)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return dest


class LLMModifier:
    """EE's modifier: the LLM writes ΔE (instruction, environment, tests, solution) for the accepted plan."""

    def __init__(self, client: LLMClient, ref: Reference | None = None, *, retries: int = 2,
                 file_chars: int = 3000, total_chars: int = 12000):
        self.client, self.retries = client, retries
        self.ref = ref or catalog_reference()
        self.file_chars, self.total_chars = file_chars, total_chars  # prompt budget for the task's files

    def modify(self, parent_dir: Path, parent: Plan, edit: Edit, dest: Path, *, seed: int, attempt: int = 0,
               feedback: Sequence[str] = (), lineage=None) -> Path:
        parent_dir = Path(parent_dir)
        files, dirs = task_files(parent_dir)
        pairs()  # load the catalog (step descriptions)
        changed = "\n".join(f"{describe_step(i, edit.plan.steps[i])} (new)" for i in edit.changed)
        text = prompt("evolve_modify", direction=edit.direction, changed=changed,
                      parent="\n".join(describe_step(i, s) for i, s in enumerate(parent.steps)),
                      child="\n".join(describe_step(i, s) for i, s in enumerate(edit.plan.steps)),
                      files=files_text(parent_dir, files, file_chars=self.file_chars, total_chars=self.total_chars),
                      feedback=_feedback(feedback, "Your previous version failed verification:"))

        def validate(reply) -> Residual:
            return require_changes(parent_dir, validate_residual(reply, files, dirs))

        residual = self.client.chat_json([SYSTEM, {"role": "user", "content": text}], validate,
                                         what=f"modification of {parent_dir.name} (attempt {attempt + 1})",
                                         retries=self.retries, json_schema=RESIDUAL_SCHEMA)
        old = read_metadata(parent_dir)
        meta = EvokitMetadata(
            plan=edit.plan.to_records(), seed=seed if old is None or old.seed is None else old.seed,
            goal=edit.plan.goal or None, lineage=lineage,
            difficulty=None if has_free_text(edit.plan) else score(edit.plan, self.ref).as_dict())
        log.info("modifier: %s", residual.summary or "(no summary)")
        return apply_residual(parent_dir, residual, dest, meta)


def llm_backend(client: LLMClient, *, ref: Reference | None = None, retries: int = 2,
                file_chars: int = 3000, total_chars: int = 12000) -> Backend:
    """The three roles on one client; ``usage`` reports the client's calls, tokens and invalid replies."""
    ref = ref or catalog_reference()
    return Backend("llm", LLMProposer(client, retries=retries), LLMReviewer(client, ref, retries=retries),
                   LLMModifier(client, ref, retries=retries, file_chars=file_chars, total_chars=total_chars),
                   usage=lambda: asdict(client.usage))
