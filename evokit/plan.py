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
from evokit.errors import UserError
from evokit.tasks import EvokitMetadata, Lineage, default_task_config, write_task

#: Tools every catalog task image has. One shared layer: built once, reused by every task.
BASE_PACKAGES = ("jq", "sqlite3", "git", "python3", "gawk", "bc", "file", "xz-utils")
DOCKERFILE_BASE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends "
    f"{' '.join(BASE_PACKAGES)} && rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
)


class PlanError(UserError, ValueError):
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
        """A step from its record; PlanError names a missing or malformed field."""
        if not isinstance(d, dict) or not isinstance(d.get("scenario"), str) or not isinstance(d.get("skill"), str):
            raise PlanError(f"step record {d!r}: needs string fields 'scenario' and 'skill'")
        params = d.get("params") or {}
        if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
            raise PlanError(f"step record {d!r}: 'params' must be an object with string keys")
        return Step(d["scenario"], d["skill"], tuple(sorted(params.items())), d.get("input"))


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
            if not isinstance(st.scenario, str) or not isinstance(st.skill, str):
                raise PlanError(f"{where}: scenario and skill must be names (strings)")
            if st.input is not None and (isinstance(st.input, bool) or not isinstance(st.input, int)):
                raise PlanError(f"{where}: input={st.input!r} must be the number of an earlier step (1..{i - 1})")
            if not all(isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str) for kv in st.params):
                raise PlanError(f"{where}: params must be (name, value) pairs, got {st.params!r}")
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


class RenderCache:
    """Memo of step rendering, for rendering many plans that share steps (the proposer's candidates).

    A step's data depend only on (data seed, data id, scenario) and its rendered spec only on those,
    its skill, position, fixed parameters and input dataset, so plans that keep most of a parent's
    steps re-render only the new ones. Entries are shared, never copied: renderers treat datasets
    and specs as read-only. Use one cache per batch of related plans (it is not bounded).
    """

    def __init__(self):
        self.datasets: dict[tuple, Dataset] = {}
        self.steps: dict[tuple, tuple[Dataset, StepSpec, dict]] = {}


def _fixed(params: dict) -> dict:
    """The parameters a plan fixed that a renderer reads (not the data keys)."""
    return {k: v for k, v in params.items() if k not in ("data", "data_seed")}


def _render_error(where: str, given: dict, ctx: StepContext, e: Exception) -> PlanError:
    """Name the parameter a failed render is most likely due to (one fixed outside its options)."""
    cause = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    off = {k: v for k, v in ctx.off_options.items() if k in given}
    if off:
        k, options = next(iter(off.items()))
        shown = ", ".join(map(repr, options[:8])) + (", …" if len(options) > 8 else "")
        return PlanError(f"{where}: param {k}={given[k]!r} does not fit this step's data (expected one of "
                         f"{shown}; or leave it out and the renderer chooses): {cause}")
    fixed = _fixed(given)
    if fixed:
        return PlanError(f"{where}: cannot render with params {fixed} (leave them out and the renderer "
                         f"chooses): {cause}")
    return PlanError(f"{where}: cannot render: {cause}")


def _render_step(i: int, st: Step, seed: int, input_dataset: Dataset | None,
                 cache: RenderCache | None) -> tuple[Dataset, StepSpec, dict]:
    """(the data it reads, spec, filled params) of step ``i`` (1-based); PlanError names step and param."""
    where = f"step {i} ({st.scenario} × {st.skill})"
    params = dict(st.params)
    # Data are keyed by a per-step "data" id (default: the step's position), recorded in the plan,
    # so that an evolution edit that inserts steps keeps every old step's data. "data_seed" pins the
    # seed of this step's data: a merged task (evokit.evolve.ensemble) keeps the data each part had
    # under its own render seed.
    key = params.setdefault("data", i) if input_dataset is None else params.get("data", i)
    data_seed = params.get("data_seed", seed)
    step_key = None
    if cache is not None:
        try:
            step_key = (i, st.scenario, st.skill, repr(sorted(params.items())), seed, id(input_dataset))
            hit = cache.steps.get(step_key)
        except TypeError:  # parameters that cannot be ordered or printed: render without the cache
            step_key = hit = None
        if hit is not None and (input_dataset is None or hit[0] is input_dataset):
            return hit[0], hit[1], dict(hit[2])
    if input_dataset is None:
        data_key = (repr(data_seed), repr(key), st.scenario)
        dataset = cache.datasets.get(data_key) if cache is not None else None
        if dataset is None:
            try:
                dataset = scenario(st.scenario).make(_rng(data_seed, "data", key, st.scenario))
            except Exception as e:
                raise PlanError(f"{where}: cannot make its data with data={key!r}, data_seed={data_seed!r}: "
                                f"{type(e).__name__}: {e}") from e
            if cache is not None:
                cache.datasets[data_key] = dataset
        data_dir = f"/app/step{i}"
    else:
        dataset, data_dir = input_dataset, OUT_DIR
    ctx = StepContext(rng=_rng(data_seed, "step", key, st.scenario, st.skill), index=i, data_dir=data_dir,
                      dataset=dataset, params=params)
    given = dict(params)
    try:
        spec = skill(st.skill).render(ctx)
    except Exception as e:  # any failure of a renderer on these parameters (StopIteration, TypeError, …)
        raise _render_error(where, given, ctx, e) from e
    if step_key is not None:
        cache.steps[step_key] = (dataset, spec, dict(ctx.params))
    return dataset, spec, ctx.params


def compose(plan: Plan, seed: int, *, cache: RenderCache | None = None) -> RenderedTask:
    """Render every step and assemble instruction, image, tests and solution (in memory).

    Every failure is a :class:`PlanError` naming the step (and the parameter, where one is to
    blame). ``cache`` shares step renders between calls (same result, less work).
    """
    plan.validate()
    specs: list[StepSpec] = []
    filled: list[Step] = []
    env_files: dict[str, bytes] = {}
    setup: list[str] = []
    for i, st in enumerate(plan.steps, 1):
        input_dataset = None
        if st.input is not None:
            input_dataset = specs[st.input - 1].output_dataset
            where = f"step {i} ({st.scenario} × {st.skill})"
            if input_dataset is None:
                raise PlanError(f"{where}: step {st.input} ({plan.steps[st.input - 1].skill}) makes no file "
                                "a later step can read")
            if input_dataset.scenario != st.scenario:
                raise PlanError(f"{where}: step {st.input}'s output is a {input_dataset.scenario} file, "
                                f"not {st.scenario}")
        dataset, spec, params = _render_step(i, st, seed, input_dataset, cache)
        if input_dataset is None:
            for name, data in dataset.files.items():
                env_files[f"data/step{i}/{name}"] = data
            setup += [cmd.replace("{dir}", f"/app/step{i}") for cmd in dataset.setup]
        specs.append(spec)
        setup += list(spec.setup)
        filled.append(st.with_params(params))
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
