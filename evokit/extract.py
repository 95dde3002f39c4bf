"""Recover a task's plan ξ_E: exactly for evokit tasks, through an LLM for any other Harbor task.

EE's proposer starts by extracting the (σ, κ) sequence of the current environment. For tasks
evokit rendered, the plan is in ``[metadata.evokit]``; for anybody else's task we ask an LLM to
map it onto the catalog vocabulary, allowing free text ("other") when nothing fits. The reply is
validated (known pair names, dependencies on earlier steps, at most ``max_steps`` steps: a longer
plan is rejected, never cut) and the validation error is sent back for another try; after the
retry budget the call fails with every reason (:class:`LLMReplyError`).
With a server that supports schema-constrained decoding (llama.cpp, vLLM) the reply is also
constrained to the catalog's pairs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evokit.catalog import SCENARIOS, SKILLS, pairs
from evokit.llm import LLMClient, prompt
from evokit.plan import Plan, PlanError, Step
from evokit.tasks import load_task, read_metadata

OTHER = "other"
#: Default longest plan an extraction may return (``extract(..., max_steps=)`` overrides it). The
#: papers give no bound; 8 keeps prompts and grammars small while covering the catalog's seeds (2–5
#: steps) and hand-written tasks; a longer reply is rejected with its length, never truncated.
MAX_STEPS = 8
_TEMPLATE_TEXT = {"none", "n/a", ""}


def plan_of(path: str | Path) -> Plan | None:
    """The exact plan of an evokit-rendered task (None for a foreign task)."""
    meta = read_metadata(path)
    if meta is None or not meta.plan:
        return None
    return Plan.from_records(meta.plan, goal=meta.goal or "")


def reply_schema(names: list[str], max_steps: int = MAX_STEPS) -> dict:
    return {"type": "object", "required": ["steps"], "properties": {"steps": {
        "type": "array", "minItems": 1, "maxItems": max_steps, "items": {
            # Grammars cannot say "descriptions only when pair is other", so they are always
            # required (ignored for catalog pairs): a constrained model can then always answer.
            "type": "object", "required": ["pair", "other_scenario", "other_skill", "reads_previous"], "properties": {
                "pair": {"type": "string", "enum": names},
                "other_scenario": {"type": "string", "minLength": 2, "maxLength": 60},
                "other_skill": {"type": "string", "minLength": 2, "maxLength": 60},
                "reads_previous": {"type": "boolean"}}}}}}


def validate_reply(reply, max_steps: int = MAX_STEPS) -> Plan:
    """JSON reply → Plan; raises ValueError naming the offending step (fed back to the model).

    A plan longer than ``max_steps`` is rejected with its length (the model is asked to merge or
    drop steps), never silently cut.
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("steps"), list) or not reply["steps"]:
        raise ValueError('expected an object {"steps": [...]} with at least one step')
    if len(reply["steps"]) > max_steps:
        raise ValueError(f"the plan has {len(reply['steps'])} steps; at most {max_steps} steps are allowed: "
                         "merge related steps or leave out minor ones")
    known = set(pairs())
    steps = []
    for i, item in enumerate(reply["steps"], 1):
        if not isinstance(item, dict) or not isinstance(item.get("pair"), str):
            raise ValueError(f'step {i}: expected {{"pair": "<scenario>/<skill>"}}, got {item!r}')
        pair = item["pair"].strip()
        if pair == OTHER:
            s = str(item.get("other_scenario") or "").strip()
            k = str(item.get("other_skill") or "").strip()
            if not s or not k:
                raise ValueError(f"step {i}: 'other' needs other_scenario and other_skill descriptions: describe "
                                 "the scenario and the skill")
            if {s.lower(), k.lower()} & _TEMPLATE_TEXT:
                raise ValueError(f"step {i}: with pair 'other', describe the scenario and the skill (not 'none')")
            scenario, skill = f"{OTHER}:{s}", f"{OTHER}:{k}"
        else:
            scenario, _, skill = pair.partition("/")
            if (scenario, skill) not in known:
                hint = "unknown scenario" if scenario not in SCENARIOS else (
                    "unknown skill" if skill not in SKILLS else "skill does not apply to that scenario")
                raise ValueError(f"step {i}: {pair!r} is not a catalog pair ({hint}); use one of the listed "
                                 "pairs or 'other'")
        reads = item.get("reads_previous", False)
        if not isinstance(reads, bool):
            raise ValueError(f"step {i}: reads_previous must be true or false")
        if reads and i == 1:
            raise ValueError("step 1: reads_previous must be false (there is no earlier step)")
        steps.append(Step(scenario, skill, input=i - 1 if reads else None))
    return Plan(tuple(steps))


def catalog_text() -> str:
    """Scenarios and skills listed once each (listing every pair would not fit small contexts)."""
    pairs()  # loads the catalog: in a fresh process SCENARIOS/SKILLS are empty until then
    scen = "\n".join(f"- {s}: {SCENARIOS[s].summary}" for s in sorted(SCENARIOS))
    sk = "\n".join(f"- {k}: {SKILLS[k].summary}" for k in sorted(SKILLS))
    return f"SCENARIOS:\n{scen}\n\nSKILLS:\n{sk}\n\nA pair is written <scenario>/<skill>, e.g. access-log/topk-count."


def extract(path: str | Path, client: LLMClient | None = None, *, retries: int = 2, max_steps: int = MAX_STEPS,
            seed: int | None = None) -> Plan:
    """The plan of the task at ``path``: exact from metadata, else through ``client``.

    ``max_steps`` bounds the extracted plan (longer replies are sent back with their length);
    ``seed`` is sent with the LLM call (see :meth:`LLMClient.chat_json`).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, not {max_steps}")
    exact = plan_of(path)
    if exact is not None:
        return exact
    if client is None:
        raise PlanError(f"{path} is not an evokit task (no plan in [metadata.evokit]); pass an LLM client "
                        "(--model/--api-base) to extract its plan")
    task = load_task(path)
    dockerfile = task.paths.environment_dir / "Dockerfile"
    tests = task.paths.tests_dir
    test_sh = (tests / "test.sh").read_text(errors="replace") if (tests / "test.sh").is_file() else ""
    listing = ", ".join(sorted(str(p.relative_to(tests)) for p in tests.rglob("*") if p.is_file()))
    text = prompt("extract_plan", catalog=catalog_text(), instruction=task.instruction[:2000],
                  environment=dockerfile.read_text(errors="replace")[:800] if dockerfile.is_file() else "(none)",
                  tests=f"{listing}\n{test_sh[:600]}", max_steps=str(max_steps))
    names = [f"{s}/{k}" for s, k in pairs()] + [OTHER]
    plan = client.chat_json([{"role": "system", "content": "You reply with JSON only."},
                             {"role": "user", "content": text}], lambda reply: validate_reply(reply, max_steps),
                            what=f"plan extraction for {path}", retries=retries,
                            json_schema=reply_schema(names, max_steps), seed=seed)
    return Plan(plan.steps, goal=task.instruction.strip().splitlines()[0][:200] if task.instruction.strip() else "")


# ---------------------------------------------------------------------------- grounding
#: Below this share of grounded steps an extracted plan is taken not to describe its task.
GROUNDED_MIN = 0.5
#: Words too common in task folders to tell one task's data from another's.
_GENERIC = frozenset("""the and with for from that this whose each one ones file files list lines line plain text
    data record records value values output input step earlier previous small several some""".split())
_WORD = re.compile(r"[a-z][a-z0-9]+")
#: Bytes of a task's own files read for grounding (instruction, environment, tests, solution).
_TASK_TEXT_BYTES = 200_000


@dataclass(frozen=True)
class Grounding:
    """How far an extracted plan is about the task it came from (:func:`grounding`)."""

    score: float  # share of steps whose scenario is grounded, 0..1
    ungrounded: tuple[str, ...]  # the steps (``scenario/skill``) whose scenario words occur nowhere in the task

    @property
    def fits(self) -> bool:
        return self.score >= GROUNDED_MIN


def scenario_words(scenario: str) -> set[str]:
    """The words that name a step's data: a catalog scenario's name (``sensor-csv`` → sensor, csv), or the
    free text of an ``other:`` scenario; generic words (file, lines, data, …) and two-letter words left out."""
    text = scenario.partition(":")[2] if scenario.startswith(f"{OTHER}:") else scenario.replace("-", " ")
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _GENERIC}


def task_words(path: str | Path) -> set[str]:
    """The words of a task: its instruction, every file's path, and the text of its files (up to
    ``_TASK_TEXT_BYTES`` in all, so a task with large data files is read in bounded time)."""
    root, budget, parts = Path(path), _TASK_TEXT_BYTES, []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        parts.append(str(f.relative_to(root)))
        if budget > 0:
            with open(f, "rb") as fh:
                data = fh.read(min(budget, 20_000))
            budget -= len(data)
            parts.append(data.decode(errors="replace"))
    return set(_WORD.findall(" ".join(parts).lower().replace("_", " ")))


def grounding(plan: Plan, path: str | Path) -> Grounding:
    """Whether an LLM-extracted plan describes the task at ``path``: a step is grounded when at least half
    the words naming its scenario (:func:`scenario_words`) occur in the task (:func:`task_words`), matched
    on their first five letters so that rotate/rotation or sqlite/sqlite3 meet; the score is the share of
    grounded steps (a step with no naming words counts as grounded).

    Lenient by design: it catches a plan about other data altogether (a FASTA plan for a log-rotation
    task, what a small model produces when it ignores the task), not a wrong skill. Skills are not
    checked: their words (count, sum, list) occur in most tasks and would ground anything. Neither paper
    checks extracted plans; EE's proposer trusts its own reading of the environment.
    """
    words = task_words(path)
    stems = {w[:5] for w in words}
    missing = []
    for st in plan.steps:
        named = scenario_words(st.scenario)
        if 2 * sum(w[:5] in stems for w in named) < len(named):  # fewer than half of them occur
            missing.append(f"{st.scenario}/{st.skill}")
    steps = len(plan.steps) or 1
    return Grounding(score=(steps - len(missing)) / steps, ungrounded=tuple(missing))
