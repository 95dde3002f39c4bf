"""Plans (ordered scenario–skill steps) and their rendering into Harbor task folders.

A :class:`Plan` is EE's ξ_E = ((σ1, κ1), …, (σL, κL)) made concrete: each :class:`Step`
names a catalog scenario and skill, optional fixed parameters, and optionally the earlier
step whose output it consumes (``input``), which is how length edits insert *dependent*
steps. ``render(plan, seed)`` is deterministic: the same plan and seed give byte-identical
folders; another seed gives other data with the same structure.

Data depend on (seed, the step's ``data`` id, scenario) but not on the skill, so replacing a
skill (EE's ``skill`` direction) keeps the situation and changes only the technique asked for,
and inserting steps (``length``) keeps the data of the steps already there.

Plans of foreign tasks come from :mod:`evokit.extract` (an LLM maps them onto the catalog).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokit.catalog import (
    OUT_DIR,
    CatalogError,
    Dataset,
    StepContext,
    StepSpec,
    compatible,
    scenario,
    skill,
)
from evokit.tasks import EvokitMetadata, Lineage, default_task_config, write_task

#: Tools every catalog task image has. One shared layer: built once, reused by every task.
BASE_PACKAGES = ("jq", "sqlite3", "git", "python3", "gawk", "bc", "file", "xz-utils")
DOCKERFILE_BASE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends "
    f"{' '.join(BASE_PACKAGES)} && rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
)


class PlanError(ValueError):
    """A plan that cannot be rendered; the message names the step."""


@dataclass(frozen=True)
class Step:
    """One (σ, κ) pair of a plan, with its parameters and optional input dependency."""

    scenario: str
    skill: str
    params: tuple[tuple[str, Any], ...] = ()  # frozen dict; render fills the rest from the seed
    input: int | None = None  # 1-based index of the earlier step whose output this step reads

    def with_params(self, params: dict) -> Step:
        return Step(self.scenario, self.skill, tuple(sorted(params.items())), self.input)

    def to_dict(self) -> dict:
        d: dict = {"scenario": self.scenario, "skill": self.skill}
        if self.params:
            d["params"] = dict(self.params)
        if self.input is not None:
            d["input"] = self.input
        return d

    @staticmethod
    def from_dict(d: dict) -> Step:
        return Step(d["scenario"], d["skill"], tuple(sorted((d.get("params") or {}).items())), d.get("input"))


@dataclass(frozen=True)
class Plan:
    """An ordered tuple of steps; ``goal`` is EE's instruction context g (free text, optional)."""

    steps: tuple[Step, ...]
    goal: str = ""

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))

    def __len__(self) -> int:
        return len(self.steps)

    def validate(self) -> None:
        """Names, compatibility and dependencies, each error naming its step."""
        if not self.steps:
            raise PlanError("a plan needs at least one step")
        for i, st in enumerate(self.steps, 1):
            where = f"step {i} ({st.scenario} × {st.skill})"
            try:
                scenario(st.scenario)
                skill(st.skill)
            except CatalogError as e:
                raise PlanError(f"{where}: {e}") from None
            if not compatible(st.scenario, st.skill):
                raise PlanError(f"{where}: skill {st.skill!r} does not apply to scenario {st.scenario!r} "
                                f"(it needs {sorted(skill(st.skill).needs - scenario(st.scenario).offers)})")
            if st.input is not None and not 1 <= st.input < i:
                raise PlanError(f"{where}: input={st.input} must name an earlier step (1..{i - 1})")

    def to_records(self) -> list[dict]:
        return [s.to_dict() for s in self.steps]

    @staticmethod
    def from_records(records: list[dict], goal: str = "") -> Plan:
        return Plan(tuple(Step.from_dict(r) for r in records), goal)

    def to_json(self) -> str:
        return json.dumps({"goal": self.goal, "steps": self.to_records()}, sort_keys=True)


@dataclass
class RenderedTask:
    """What :func:`compose` produced, before it is written to disk."""

    plan: Plan  # with every parameter filled in
    instruction: str
    dockerfile: str
    environment_files: dict[str, bytes] = field(default_factory=dict)
    tests: dict[str, bytes] = field(default_factory=dict)
    solution: dict[str, bytes] = field(default_factory=dict)
    specs: list[StepSpec] = field(default_factory=list)


def _rng(seed: int, *parts) -> random.Random:
    return random.Random(":".join(map(str, ("evokit", seed, *parts))))


def compose(plan: Plan, seed: int) -> RenderedTask:
    """Render every step and assemble instruction, image, tests and solution (in memory)."""
    plan.validate()
    specs: list[StepSpec] = []
    filled: list[Step] = []
    env_files: dict[str, bytes] = {}
    setup: list[str] = []
    for i, st in enumerate(plan.steps, 1):
        where = f"step {i} ({st.scenario} × {st.skill})"
        params = dict(st.params)
        if st.input is None:
            # Data are keyed by a per-step "data" id (default: the step's position), recorded in
            # the plan, so that an evolution edit that inserts steps keeps every old step's data.
            key = params.setdefault("data", i)
            # "data_seed" pins the seed of this step's data: a merged task (evokit.evolve.baselines)
            # keeps the data each part had under its own render seed.
            dataset: Dataset = scenario(st.scenario).make(_rng(params.get("data_seed", seed), "data", key,
                                                               st.scenario))
            data_dir = f"/app/step{i}"
            for name, data in dataset.files.items():
                env_files[f"data/step{i}/{name}"] = data
            setup += [cmd.replace("{dir}", data_dir) for cmd in dataset.setup]
        else:
            dataset = specs[st.input - 1].output_dataset
            if dataset is None:
                raise PlanError(f"{where}: step {st.input} ({plan.steps[st.input - 1].skill}) makes no file "
                                "a later step can read")
            if dataset.scenario != st.scenario:
                raise PlanError(f"{where}: step {st.input}'s output is a {dataset.scenario} file, "
                                f"not {st.scenario}")
            data_dir = OUT_DIR
        ctx = StepContext(rng=_rng(params.get("data_seed", seed), "step", params.get("data", i), st.scenario,
                               st.skill), index=i,
                          data_dir=data_dir, dataset=dataset, params=params)
        try:
            spec = skill(st.skill).render(ctx)
        except (KeyError, IndexError, ValueError) as e:
            raise PlanError(f"{where}: cannot render with params {ctx.params}: {e}") from e
        specs.append(spec)
        setup += list(spec.setup)
        filled.append(st.with_params(ctx.params))
    done = Plan(tuple(filled), plan.goal)
    pick = _rng(seed, "wording")
    steps_md = "\n".join(f"{i}. {pick.choice(s.instructions)}" for i, s in enumerate(specs, 1))
    goal = f"{plan.goal}\n\n" if plan.goal else ""
    instruction = (f"# Terminal task\n\n{goal}Work in `/app`. Do the following steps in order; write every "
                   f"result under `{OUT_DIR}` (create it if needed).\n\n{steps_md}\n")
    dockerfile = DOCKERFILE_BASE + ("COPY data/ /app/\n" if env_files else "")
    dockerfile += "".join(f"RUN {cmd}\n" for cmd in setup)
    return RenderedTask(plan=done, instruction=instruction, dockerfile=dockerfile, environment_files=env_files,
                        tests=_tests(specs), solution={"solve.sh": _solution(specs)}, specs=specs)


def _solution(specs: list[StepSpec]) -> bytes:
    body = "\n".join(f"# step {i}\n{s.solution}" for i, s in enumerate(specs, 1))
    # No pipefail: `... | head` legitimately closes its pipe early.
    return f"#!/bin/bash\nset -eu\ncd /app\nmkdir -p {OUT_DIR}\n{body}\n".encode()


_TEST_HEADER = r"""#!/bin/bash
# evokit: one check per step; the reward is 1 only if every step's output is right.
mkdir -p /logs/verifier
norm() { sed -e 's/\r$//' -e '$a\' "$1"; }  # tolerate CRLF and a missing final newline
check() {  # check MODE OUTPUT EXPECTED
  [ -f "$2" ] || { echo "missing $2"; return 1; }
  if [ "$1" = sorted ]; then
    diff <(norm "$2" | LC_ALL=C sort) <(LC_ALL=C sort "$3") > /dev/null
  else
    diff <(norm "$2") "$3" > /dev/null
  fi || { echo "wrong $2"; return 1; }
}
ok=1
"""


def _tests(specs: list[StepSpec]) -> dict[str, bytes]:
    files = {f"expected/step{i}.txt": s.expected for i, s in enumerate(specs, 1)}
    checks = "".join(f"if check {s.compare} {s.output} /tests/expected/step{i}.txt; then s{i}=1; "
                     f"else s{i}=0; ok=0; fi\n" for i, s in enumerate(specs, 1))
    parts = ", ".join(f'\\"step_{i}\\": $s{i}' for i in range(1, len(specs) + 1))
    files["test.sh"] = (_TEST_HEADER + checks + f'echo "{{\\"reward\\": $ok, {parts}}}" > '
                        "/logs/verifier/reward.json\n").encode()
    return files


def render(plan: Plan, seed: int, dest: str | Path, *, lineage: Lineage | None = None,
           difficulty: dict[str, float] | None = None, overwrite: bool = False) -> Path:
    """Write the task of ``plan`` under ``seed`` to ``dest``; the filled plan goes to its metadata."""
    task = compose(plan, seed)
    cfg = default_task_config()
    cfg.metadata.update({"category": "evokit-procedural", "steps": len(task.plan)})
    meta = EvokitMetadata(plan=task.plan.to_records(), seed=seed, goal=plan.goal or None, lineage=lineage,
                          difficulty=difficulty)
    return write_task(dest, instruction=task.instruction, dockerfile=task.dockerfile,
                      environment_files=task.environment_files, tests=task.tests, solution=task.solution,
                      config=cfg, metadata=meta, overwrite=overwrite)
