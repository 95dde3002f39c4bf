"""Vocabulary of the procedural task family: scenarios, skills, datasets, step specs.

EE abstracts a solved episode to scenario–skill steps (σ, κ) (papers.md, "why a task is
hard"). evokit's procedural family makes that structure *exact*: a task is rendered from a
plan of steps, each step pairing a :class:`Scenario` (a realistic terminal situation with
generated data: an access log, a quoted-CSV ledger, a git repository…) with a
:class:`Skill` (a technique that acts on it: top-k counting, a jq selection, a bisect…).

* A scenario makes a :class:`Dataset`: files for the image plus the structured *records* the
  files encode, and :class:`Field` views (a shell snippet that prints one field per
  record). Generators compute every expected answer from the records, never by running
  the oracle, so each test checks the step independently.
* A skill's renderer turns a :class:`StepContext` into a :class:`StepSpec`: paraphrased
  instruction sentences, oracle commands, the expected output, and (for row-preserving
  skills) the dataset its output represents, which a later step may consume (chaining).
* Which skill fits which scenario is decided by the data: a pair is compatible when the
  scenario offers what the skill needs (:attr:`Skill.needs`); quirks such as quoted CSV
  fields make ``cut`` wrong and a CSV parser necessary.

Priors (``Scenario.prior``, ``Skill.prior`` and per-pair weights) are the catalog's
reference distribution p_T: documented guesses of how common each situation and technique
is in real terminal work, with the reasoning next to each number.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from evokit.errors import UserError

#: The output of every step goes here (one file per step), inside the task's workdir.
OUT_DIR = "/app/out"


class CatalogError(UserError, ValueError):
    """An unknown name or an incompatible (scenario, skill) pair; the message names them."""


@dataclass(frozen=True)
class Field:
    """One column of a dataset, as the oracle reads it from the files.

    ``extract`` is a shell snippet with ``{path}`` for the dataset's main file that prints
    this field of every record, one per line, in record order. It encodes the scenario's
    quirks (quoted CSV needs a real parser, nested JSON needs jq).
    """

    name: str
    desc: str  # noun phrase for instructions, e.g. "client IP address"
    kind: str  # "category" | "number" | "time" | "text"
    extract: str
    key: tuple[str, ...] = ()  # where the value sits in a record (default: (name,)); nested for JSON

    def value(self, record: dict):
        for k in self.key or (self.name,):
            record = record[k]
        return record


@dataclass
class Dataset:
    """Data of one scenario instance: files for ``/app/<dir>/`` and the records they encode."""

    scenario: str
    files: dict[str, bytes]  # relative to the step's data dir
    main: str  # the file the fields are read from
    records: list[dict]
    fields: tuple[Field, ...] = ()
    noun: str = "file"  # e.g. "access log", for instructions
    #: shell snippet printing the records whose ``{field}`` equals ``{value}``, in the *same*
    #: format (so a later step can treat the output as this scenario); None if not row-preserving.
    select: Callable[[Field, str], str] | None = None
    serialize: Callable[[list[dict]], bytes] | None = None  # records → main file bytes
    setup: tuple[str, ...] = ()  # build-time RUN commands (``{dir}``: the data dir)
    extra: dict = field(default_factory=dict)  # scenario-specific facts skills may use

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise CatalogError(f"{self.scenario} has no field {name!r}")

    def fields_of(self, kind: str) -> list[Field]:
        return [f for f in self.fields if f.kind == kind]


@dataclass
class StepContext:
    """What a skill renderer gets for one step."""

    rng: random.Random
    index: int  # 1-based step number
    data_dir: str  # absolute dir of this step's input files in the image
    dataset: Dataset  # the input: own scenario data, or an earlier step's output
    params: dict  # fixed parameters from the plan; renderers fill the rest from rng
    #: parameters the plan fixed to a value outside the renderer's options (key → options), for
    #: error messages: such a value is used as given, and if rendering then fails, compose names it.
    off_options: dict = field(default_factory=dict)

    @property
    def path(self) -> str:
        return f"{self.data_dir}/{self.dataset.main}"

    @property
    def out(self) -> str:
        return f"{OUT_DIR}/step{self.index}.txt"

    def choose(self, key: str, options: list):
        """A parameter: the plan's value if given, else a seeded choice (recorded in params)."""
        if key not in self.params:
            self.params[key] = options[self.rng.randrange(len(options))]
        elif not _among(self.params[key], options):
            self.off_options[key] = options
        return self.params[key]


def _among(value, options: list) -> bool:
    try:
        return any(type(value) is type(o) and value == o for o in options)
    except Exception:  # a value whose comparison itself fails is not among the options
        return False


@dataclass
class StepSpec:
    """One rendered step: what the agent is asked, how the oracle does it, what is expected."""

    instructions: list[str]  # ≥ 2 paraphrases; render picks one per seed
    solution: str  # bash commands (run from /app)
    expected: bytes  # the exact expected content of the output file
    output: str  # absolute path the tests check
    compare: str = "exact"  # "exact" | "sorted" (line order free)
    output_dataset: Dataset | None = None  # what the output file is, for chained steps
    setup: tuple[str, ...] = ()  # extra build-time RUN commands


@dataclass(frozen=True)
class Scenario:
    name: str
    domain: str  # for balancing seeds: logs, tabular, json, database, vcs, code, sysadmin, ...
    summary: str
    prior: float  # unnormalised p_T(σ): how common this situation is in real terminal work
    rationale: str  # why that weight
    make: Callable[[random.Random], Dataset]
    offers: frozenset[str]  # capabilities skills may need ("category", "number", "rows", "git", ...)


@dataclass(frozen=True)
class Skill:
    name: str
    summary: str
    prior: float  # unnormalised p_T(κ): how common this technique is across terminal work
    rationale: str
    needs: frozenset[str]  # scenario capabilities required
    render: Callable[[StepContext], StepSpec]
    rare_in: dict[str, float] = field(default_factory=dict)  # scenario → weight multiplier (quirks)


def lines(values) -> bytes:
    """Values as newline-terminated lines (the output format of every text step)."""
    return "".join(f"{v}\n" for v in values).encode()
