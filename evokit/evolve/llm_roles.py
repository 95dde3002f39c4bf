"""The LLM backend of the evolution harness: proposer, plan reviewer and modifier (EE §4).

EE runs all three roles with an LLM. Here each role sends one prompt (``evokit/prompts/evolve_*.md``)
through :meth:`LLMClient.chat_json`, whose validate function turns the reply into a typed result
or raises a ValueError naming the problem. That text goes back to the model for another try; once
the retry budget is spent the role fails with :class:`LLMReplyError` (a ValueError, counted in
``client.usage.invalid_replies``), which the harness records as a rejection with its reasons.

* :class:`LLMProposer` asks for the whole edited plan; :func:`evokit.evolve.llm_plans.proposal_validator`
  checks the reply against the parent, the direction and effort rules, renderability and novelty.
* :class:`LLMReviewer` runs the procedural :class:`PlanReviewer` rubric first; a plan with
  free-text ``other:`` steps can be neither rendered nor scored under p_T, so for it only the
  direction, effort and novelty rules apply (the prompt says which checks were skipped). Then
  the LLM judges the edit against a short rubric; its reasons go back to the proposer.
* :class:`LLMModifier` writes the residual ΔE for the accepted plan (:mod:`evokit.evolve.residual`:
  what it is shown, how its reply is checked and applied) and stamps the copy with evokit
  metadata (the edited plan, the lineage).

Each call is sent the seed the harness derives for it (``call_seed``: run seed, lineage,
generation, direction, role and round; see :mod:`evokit.evolve.harness`).

Departures from EE:

1. Plans use the catalog vocabulary, with free text only where nothing fits (EE's are free text):
   catalog plans keep D_T computable and let the procedural rubric check them exactly.
2. Replies are seeded, but only endpoints that honour ``seed`` (llama.cpp, vLLM) make a resumed
   LLM run choose as an uninterrupted one would; hosted APIs may ignore it (the procedural backend
   is deterministic everywhere).
3. An endpoint failure (:class:`evokit.llm.LLMError`, e.g. a prompt over the server's context) is
   not a rejection: it stops the run, because it says nothing about the edit.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import asdict
from pathlib import Path

from evokit.catalog import pairs
from evokit.difficulty import Reference, catalog_reference, score
from evokit.evolve.edits import DIRECTIONS, EFFORTS, MAX_PLAN, Edit
from evokit.evolve.harness import Backend, EvolveConfig
from evokit.evolve.llm_plans import (
    DEFAULT_RUBRIC,
    DIRECTION_RULES,
    EFFORT_RULES,
    REVIEW_SCHEMA,
    describe_step,
    effort_problem,
    feedback_text,
    has_free_text,
    options,
    plan_json,
    proposal_validator,
    validate_review,
)
from evokit.evolve.residual import (
    RESIDUAL_SCHEMA,
    Residual,
    apply_residual,
    files_text,
    require_changes,
    task_files,
    validate_residual,
)
from evokit.evolve.review import PlanReviewer, changed_positions
from evokit.extract import extract, reply_schema
from evokit.llm import LLMClient, LLMReplyError, prompt
from evokit.plan import Plan
from evokit.tasks import EvokitMetadata, read_metadata

log = logging.getLogger(__name__)

SYSTEM = {"role": "system", "content": "You reply with JSON only."}


# ---------------------------------------------------------------------------- proposer
class LLMProposer:
    """EE's proposer: the LLM edits the plan along one direction within the effort."""

    def __init__(self, client: LLMClient, *, retries: int = 2, instruction_chars: int = 800):
        self.client, self.retries, self.instruction_chars = client, retries, instruction_chars

    def propose(self, plan: Plan, direction: str, effort: str, *, seed: int, rng=None,
                exclude: Collection[str] = frozenset(), feedback: Sequence[str] = (),
                task_dir: Path | None = None, call_seed: int | None = None) -> Edit | None:
        if direction not in DIRECTIONS or effort not in EFFORTS:
            raise ValueError(f"direction must be one of {DIRECTIONS} and effort one of {EFFORTS}")
        if not plan.steps and task_dir is not None:  # a foreign task: recover its plan first
            plan = extract(task_dir, self.client, retries=self.retries, seed=call_seed)
        if direction == "length" and len(plan) >= MAX_PLAN:
            return None
        instruction = "(not available)"
        if task_dir is not None and (Path(task_dir) / "instruction.md").is_file():
            instruction = (Path(task_dir) / "instruction.md").read_text(errors="replace")[: self.instruction_chars]
        catalog, names = options(plan, direction)
        schema = reply_schema(names)
        n = len(plan)  # the number of steps the edit must produce, for constrained decoding
        steps = schema["properties"]["steps"]
        steps["minItems"], steps["maxItems"] = (n + 1, MAX_PLAN) if direction == "length" else (n, n)
        text = prompt("evolve_propose", catalog=catalog, instruction=instruction, plan=plan_json(plan),
                      direction=direction, direction_rule=DIRECTION_RULES[direction], effort=effort,
                      effort_rule=EFFORT_RULES[effort],
                      feedback=feedback_text(feedback, "Earlier proposals were rejected for these reasons:"))
        return self.client.chat_json([SYSTEM, {"role": "user", "content": text}],
                                     proposal_validator(plan, direction, effort, seed=seed, exclude=exclude),
                                     what=f"{direction} edit", retries=self.retries, json_schema=schema,
                                     seed=call_seed)


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
        changed = changed_positions(parent, child, direction)
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
               seen: Collection[str] = frozenset(), call_seed: int | None = None) -> list[str]:
        reasons, skipped = self.procedural_review(parent, child, direction, effort, seed=seed, seen=seen)
        if reasons:
            return reasons
        if skipped:
            log.info("plan with free-text steps: procedural checks skipped: %s", "; ".join(skipped))
        changed = changed_positions(parent, child, direction)
        passed = "direction, effort, novel" + ("" if skipped else ", valid (it renders), harder (D_T and the term its direction targets rise)")
        text = prompt("evolve_review", parent=plan_json(parent), child=plan_json(child), direction=direction,
                      effort=effort, changed=", ".join(str(c + 1) for c in changed), passed=passed,
                      skipped=f"Not checked (judge these yourself): {'; '.join(skipped)}." if skipped else "",
                      rubric="\n".join(f"{i}. {r}" for i, r in enumerate(self.rubric, 1)))
        try:
            return self.client.chat_json([SYSTEM, {"role": "user", "content": text}], validate_review,
                                         what="plan review", retries=self.retries, json_schema=REVIEW_SCHEMA,
                                         seed=call_seed)
        except LLMReplyError as e:  # the harness only catches the proposer's: a rejection with its reason
            return [f"reviewer: {e}"]


# ---------------------------------------------------------------------------- modifier
class LLMModifier:
    """EE's modifier: the LLM writes ΔE (instruction, environment, tests, solution) for the accepted plan."""

    def __init__(self, client: LLMClient, ref: Reference | None = None, *, retries: int = 2,
                 file_chars: int = 3000, total_chars: int = 12000):
        self.client, self.retries = client, retries
        self.ref = ref or catalog_reference()
        self.file_chars, self.total_chars = file_chars, total_chars  # prompt budget for the task's files

    def modify(self, parent_dir: Path, parent: Plan, edit: Edit, dest: Path, *, seed: int, attempt: int = 0,
               feedback: Sequence[str] = (), lineage=None, call_seed: int | None = None) -> Path:
        parent_dir = Path(parent_dir)
        files, dirs = task_files(parent_dir)
        pairs()  # load the catalog (step descriptions)
        changed = "\n".join(f"{describe_step(i, edit.plan.steps[i])} (new)" for i in edit.changed)
        text = prompt("evolve_modify", direction=edit.direction, changed=changed,
                      parent="\n".join(describe_step(i, s) for i, s in enumerate(parent.steps)),
                      child="\n".join(describe_step(i, s) for i, s in enumerate(edit.plan.steps)),
                      files=files_text(parent_dir, files, file_chars=self.file_chars, total_chars=self.total_chars),
                      feedback=feedback_text(feedback, "Your previous version failed verification:"))

        def validate(reply) -> Residual:
            return require_changes(parent_dir, validate_residual(reply, files, dirs))

        residual = self.client.chat_json([SYSTEM, {"role": "user", "content": text}], validate,
                                         what=f"modification of {parent_dir.name} (attempt {attempt + 1})",
                                         retries=self.retries, json_schema=RESIDUAL_SCHEMA, seed=call_seed)
        old = read_metadata(parent_dir)
        meta = EvokitMetadata(
            plan=edit.plan.to_records(), seed=seed if old is None or old.seed is None else old.seed,
            goal=edit.plan.goal or None, lineage=lineage,
            difficulty=None if has_free_text(edit.plan) else score(edit.plan, self.ref).as_dict())
        log.info("modifier: %s", residual.summary or "(no summary)")
        return apply_residual(parent_dir, residual, dest, meta)


def llm_backend(client: LLMClient, *, ref: Reference | None = None, retries: int = 2,
                file_chars: int = 3000, total_chars: int = 12000) -> Backend:
    """The three roles on one client; ``usage`` reports the client's calls, tokens and invalid replies.

    Seeds without a plan (ordinary Harbor tasks) get one from :func:`evokit.extract.extract` on the
    same client when their lineage starts (recorded in the store: :func:`evokit.evolve.harness.add_seed`).
    """
    ref = ref or catalog_reference()
    return Backend("llm", LLMProposer(client, retries=retries), LLMReviewer(client, ref, retries=retries),
                   LLMModifier(client, ref, retries=retries, file_chars=file_chars, total_chars=total_chars),
                   usage=lambda: asdict(client.usage), seeded=True,
                   extract=lambda task_dir, seed: extract(task_dir, client, retries=retries, seed=seed))


def max_calls(cfg: EvolveConfig, *, lineages: int, retries: int = 2) -> int:
    """An upper bound on the requests :func:`llm_backend`'s roles send for ``lineages`` lineages of
    ``cfg.generations`` generations: the ETA's denominator (``LLMClient.planned_calls``).

    Per environment (``per_generation`` of them per generation) and direction tried: up to
    ``review_rounds`` proposals and reviews and ``repair_budget + 1`` modifications, each re-asked up to
    ``retries`` times after an invalid reply; plus one plan extraction per seed. Real runs send far
    fewer (a direction accepted in its first round stops the generation), so the ETA is a ceiling.
    """
    asks = retries + 1
    directions = 1 if cfg.direction else len(DIRECTIONS)
    per_direction = cfg.review_rounds * 2 * asks + (cfg.repair_budget + 1) * asks
    return lineages * (cfg.generations * cfg.per_generation * directions * per_direction + asks)
