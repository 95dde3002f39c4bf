"""The rubric verifier: quality rules over a task folder and its oracle / null runs (EE §4.1).

EE's third verifier checks what oracle-passes / null-fails cannot: that the instruction
and tests agree, that nothing leaks, that the task is well-posed. The paper's rubrics are
*adaptive*: defects found by reviewing accepted environments become new rubric items. So
rules here are data: a :class:`Rule` is a name, a one-line description and a pure
function of a :class:`RubricContext`; a :class:`Rubric` is an ordered list of rules that
a user extends in Python (``rubric.with_rules(my_rule)``) or from a TOML file of
pattern rules (:func:`load_pattern_rules`), without touching evokit.

Each rule returns ``(passed, reason)``; the reason is shown to users and, in the
evolution harness, fed back to the modifier, so it says what is wrong and where.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harbor.models.task.config import NetworkMode
from harbor.models.task.task import Task

from evokit.sandbox.image import Image
from evokit.tasks.fetches import first_fetch as _fetch
from evokit.tasks.fetches import test_time_fetches
from evokit.verify.import_path import tests_keep_agent_code_off_the_import_path
from evokit.verify.trial import TrialRun

#: Where task outputs live: the task's workdir plus the usual output roots. Other absolute
#: paths in tests (system files, URL paths inside expected data) are not outputs.
_OUTPUT_ROOTS = ("/app", "/output", "/data", "/srv", "/home", "/workspace", "/mnt")
_ABS_PATH = re.compile(r"(?<![\w.$}/:-])(/(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)")


@dataclass
class RubricContext:
    """Everything a rule may look at."""

    task: Task
    oracle_runs: list[TrialRun] = field(default_factory=list)
    null_run: TrialRun | None = None
    #: The built image, when there is one (verify_task sets it): :func:`outputs_and_inputs` then asks
    #: it which paths exist, instead of reading the Dockerfile alone.
    image: Image | None = None

    @property
    def root(self) -> Path:
        return self.task.paths.task_dir

    def read_tree(self, sub: str) -> dict[str, str]:
        """Text files under ``sub`` (``tests``, ``solution``, ``environment``), by relative path.

        A symlink that leads out of the task folder is skipped: rule reasons quote what they match
        (and go back to the LLM modifier), so no host file may be read through one.
        """
        out = {}
        base = self.root / sub
        root = self.root.resolve()
        for p in sorted(base.rglob("*")) if base.is_dir() else []:
            if p.is_symlink() and not p.resolve().is_relative_to(root):
                continue
            if p.is_file() and p.stat().st_size < 1 << 20:
                try:
                    out[str(p.relative_to(base))] = p.read_text()
                except UnicodeDecodeError:
                    pass
        return out


RuleFn = Callable[[RubricContext], tuple[bool, str]]


@dataclass(frozen=True)
class Rule:
    """One rubric item. ``needs_runs``: evaluated after the oracle/null trials."""

    name: str
    description: str
    check: RuleFn
    needs_runs: bool = False


@dataclass(frozen=True)
class Rubric:
    """An ordered, extensible set of rules."""

    rules: tuple[Rule, ...]

    def with_rules(self, *rules: Rule) -> Rubric:
        names = {r.name for r in rules}
        return Rubric(tuple(r for r in self.rules if r.name not in names) + tuple(rules))

    def without(self, *names: str) -> Rubric:
        return Rubric(tuple(r for r in self.rules if r.name not in names))

    def evaluate(self, ctx: RubricContext, *, runs: bool) -> list[tuple[Rule, bool, str]]:
        out = []
        for rule in self.rules:
            if rule.needs_runs != runs:
                continue
            try:
                ok, reason = rule.check(ctx)
            except Exception as e:  # a broken rule is a failed rule, with the reason
                ok, reason = False, f"rule raised {type(e).__name__}: {e}"
            out.append((rule, ok, reason))
        return out


# ------------------------------------------------------------------------- static rules
def instruction_nonempty(ctx: RubricContext) -> tuple[bool, str]:
    words = len(ctx.task.instruction.split())
    return words >= 5, f"instruction.md has {words} words (need ≥ 5)"


def image_paths(ctx: RubricContext) -> set[str]:
    """Absolute paths the task's image already provides, read from ``environment/Dockerfile``.

    ``COPY``/``ADD`` destinations (each file of a copied folder, mapped to where it lands, with
    ``WORKDIR``/``ARG``/``ENV`` substitution as Docker does it), ``WORKDIR`` folders, and every
    absolute path a ``RUN`` line names (``mkdir -p /app/out``, ``echo … > /app/conf.ini``), in the
    final stage only; ``COPY --from=<stage or image>`` provides its destination. Static: no build
    needed (verify_task asks the built image instead, see :func:`outputs_and_inputs`). A Dockerfile
    the parser refuses is read by its final stage, leniently.
    """
    from evokit.sandbox.dockerfile import (
        DockerfileError,
        parse,
        parse_copy_args,
        parse_key_values,
        substitute,
    )

    env = ctx.root / "environment"
    path = env / "Dockerfile"
    if not path.is_file():
        return set()
    text = path.read_text(errors="replace")
    provided: set[str] = set()
    env_root = env.resolve()
    try:
        instructions = parse(text, path)
    except DockerfileError:
        # Multi-stage (or otherwise unsupported here): read the final stage; what it copies from
        # another stage (COPY --from=...) is provided at its destination.
        last = "FROM " + re.split(r"(?im)^\s*FROM\s", text)[-1]
        for line in re.findall(r"(?im)^\s*(?:COPY|ADD)\s+--from=\S+\s+(.+)$", last):
            provided |= {p for p in _ABS_PATH.findall(line.split()[-1])}
        last = re.sub(r"(?im)^\s*(?:COPY|ADD)\s+--from=.*$", "", last)
        try:
            instructions = parse(last, path)
        except DockerfileError:
            return provided
    # Only the final stage is the image (earlier stages of a multi-stage build are thrown away).
    froms = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    instructions = instructions[froms[-1]:] if froms else instructions
    variables: dict[str, str] = {}
    workdir = "/"
    for ins in instructions:
        try:
            if ins.keyword in {"ENV", "ARG"}:
                variables.update(parse_key_values(substitute(ins.args, variables), ins.keyword, str(ins.line)))
            elif ins.keyword == "WORKDIR":
                workdir = str(Path(workdir, substitute(ins.args.strip(), variables)))
                provided.add(workdir)
            elif ins.keyword in {"COPY", "ADD"}:
                sources, dest = parse_copy_args(substitute(ins.args, variables))
                folder = dest.endswith("/") or len(sources) > 1
                dest = str(Path(workdir, dest))
                if "from" in ins.flags:  # from another stage or image: its files land at dest
                    provided.add(dest)
                    provided |= {str(Path(dest, Path(src).name)) for src in sources if folder}
                    continue
                for src in sources:
                    for hit in _context_files(env, src):
                        if hit.is_dir():
                            provided.add(dest)
                            provided |= {str(Path(dest, f.relative_to(hit))) for f in _walk(hit, env_root)}
                        else:
                            # Docker copies into ``dest`` when it ends with "/" or already is a folder
                            into = folder or dest in provided or dest == workdir
                            provided.add(str(Path(dest, hit.name)) if into else dest)
            elif ins.keyword == "RUN":
                provided |= set(_ABS_PATH.findall(ins.heredoc or ins.args))
        except (DockerfileError, ValueError):
            continue
    return provided


_MAX_CONTEXT_FILES = 20_000  # a build context bigger than this is not walked further (names only, no reads)


def _context_files(env: Path, src: str) -> list[Path]:
    """The build-context entries a COPY source names, confined to ``environment/``.

    The folder may come from an LLM modifier or a third party: a source such as ``../../..`` or a
    symlink out of the context must not make the rubric walk the host (Docker refuses those too).
    """
    root = env.resolve()
    hits = sorted(env.glob(src.lstrip("/"))) if src.strip("/") not in {"", "."} else [env]
    return [h for h in hits or [env / src] if h.resolve().is_relative_to(root)]


def _walk(folder: Path, root: Path) -> list[Path]:
    """Files and folders under ``folder`` without following symlinks out of ``root``, at most
    ``_MAX_CONTEXT_FILES`` of them."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):  # os.walk does not follow symlinked folders
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p.is_symlink() and not p.resolve().is_relative_to(root):
                continue
            out.append(p)
            if len(out) >= _MAX_CONTEXT_FILES:
                return out
    return out


#: What a solution line looks like when it writes a file (shell redirection, in-place edits,
#: copies, Python writes): a path the image provides becomes an output when the solution writes it.
_WRITES = re.compile(r">|\btee\b|\bsed\s+-i|\b(cp|mv|install|touch|patch|chmod|ln)\b|write|open\(.*['\"][wax]")


def solution_writes(ctx: RubricContext, path: str, workdir: str) -> bool:
    """Does a solution file name ``path`` (absolute, or relative to the workdir) on a line that writes?"""
    rel = path.removeprefix(workdir + "/")
    pattern = re.compile(rf"(?<![\w.-]){re.escape(path)}(?![\w.-])|(?<![\w./-]){re.escape(rel)}(?![\w.-])")
    for text in ctx.read_tree("solution").values():
        for line in text.splitlines():
            if pattern.search(line) and _WRITES.search(line):
                return True
    return False


def outputs_and_inputs(ctx: RubricContext) -> tuple[set[str], set[str]]:
    """(outputs, inputs) among the task paths the tests name.

    A *task path* is an absolute path in a test script (``tests/*.sh``, ``*.py``, ``*.bash``) under
    the workdir or a usual data root (``/app``, ``/output``, ``/data``, ``/srv``, ``/home``,
    ``/workspace``, ``/mnt``); system paths and ``/tests``, ``/logs`` are the harness's. An
    **output** is a task path the image does not already provide (it must be produced by the
    agent), or one the image provides but the reference solution writes (a file the agent must
    change). "Provided" is asked of the built image when ``ctx.image`` is set (so files a ``RUN``
    step generates, or a base image ships, count), else read from the Dockerfile (:func:`image_paths`). Every other task path is an **input**: a script the tests invoke
    (``/app/scripts/reset-state.sh``), a fixture they read (``/app/data/readings.csv``).
    """
    workdir = (ctx.task.config.environment.workdir or "/app").rstrip("/")
    roots = {workdir, *_OUTPUT_ROOTS} - {""}
    tested = set()
    for name, text in ctx.read_tree("tests").items():
        if name.endswith((".sh", ".py", ".bash")):
            tested |= {p.rstrip(".") for p in _ABS_PATH.findall(text)
                       if any(p.startswith(r + "/") for r in roots)}
    provided = image_paths(ctx)
    provided |= {str(parent) for p in provided for parent in Path(p).parents}

    def in_image(p: str) -> bool:
        return p in provided or (ctx.image is not None and ctx.image.find(p) is not None)

    inputs = {p for p in tested if in_image(p) and not solution_writes(ctx, p, workdir)}
    return tested - inputs, inputs


def instruction_names_outputs(ctx: RubricContext) -> tuple[bool, str]:
    """Every output the tests check (:func:`outputs_and_inputs`) appears in the instruction.

    Named means: the absolute path, its path relative to the workdir, or its file name occurs in
    instruction.md. Inputs (scripts the tests run, fixtures they read, both shipped in the image)
    need not be named: the agent finds them in the environment.
    """
    instruction = ctx.task.instruction
    workdir = (ctx.task.config.environment.workdir or "/app").rstrip("/")
    outputs, inputs = outputs_and_inputs(ctx)

    def named(p: str) -> bool:
        rel = p.removeprefix(workdir + "/")
        return p in instruction or rel in instruction or Path(p).name in instruction

    missing = sorted(p for p in outputs if not named(p))
    if missing:
        return False, (f"tests check {', '.join(missing)} but instruction.md never names them (outputs: paths "
                       "the image does not provide or the solution writes; name each in instruction.md)")
    return True, f"instruction names all {len(outputs)} outputs the tests check ({len(inputs)} inputs from the image)"


def test_writes_reward(ctx: RubricContext) -> tuple[bool, str]:
    text = "\n".join(ctx.read_tree("tests").values())
    if "reward.txt" in text or "reward.json" in text:
        return True, "tests/ write /logs/verifier/reward.{txt,json}"
    return False, "nothing under tests/ mentions reward.txt or reward.json"


def solution_does_not_read_tests(ctx: RubricContext) -> tuple[bool, str]:
    for name, text in ctx.read_tree("solution").items():
        if re.search(r"(?<![\w.-])/tests(/|\b)", text):
            return False, f"solution/{name} refers to /tests (tests are not available to agents)"
    return True, "solution never refers to /tests"


#: The files of tests/ that hold the checking logic: the entry point and what pytest collects.
#: Other files under tests/ are data or helpers, often pristine copies of inputs the image ships
#: (a reset script, a fixture) kept so the tests can tell whether the agent changed them.
_TEST_LOGIC = re.compile(r"(^|/)(test\.sh|test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")


def environment_does_not_leak(ctx: RubricContext) -> tuple[bool, str]:
    """No solution file and no test logic (tests/test.sh, test_*.py, *_test.py, conftest.py) is
    copied into the image (byte-identical, over 64 bytes).

    Input data or helper scripts duplicated under tests/ (so the tests can recompute an answer or
    check that an input is unchanged) are fine; the tests' checks or the reference solution inside
    the image hand the agent the answer.
    """
    secret = {}
    for sub in ("solution", "tests"):
        for p in (ctx.root / sub).rglob("*"):
            rel = p.relative_to(ctx.root / sub).as_posix()
            if p.is_file() and p.stat().st_size > 64 and (sub == "solution" or _TEST_LOGIC.search(rel)):
                secret[p.read_bytes()] = f"{sub}/{rel}"
    for p in (ctx.root / "environment").rglob("*"):
        if p.is_file() and (hit := secret.get(p.read_bytes())):
            return False, f"environment/{p.relative_to(ctx.root / 'environment')} is a copy of {hit}"
    return True, "no test logic or solution file is copied into the environment"




def tests_offline_when_forbidden(ctx: RubricContext) -> tuple[bool, str]:
    """With no network at test time, tests/ must not install packages or download anything.

    Installs (pip, uv/uvx, apt, npm), ``git clone`` and curl/wget of a non-local URL count;
    requests to the task's own services on the loopback interface (localhost, 127.0.0.1) do not.
    """
    env = ctx.task.config.environment
    verifier = ctx.task.config.verifier
    verifier_mode = verifier.network_mode or env.network_mode
    if verifier_mode == NetworkMode.PUBLIC:
        return True, "the task allows network access during tests"
    allowed = None
    if verifier_mode == NetworkMode.ALLOWLIST:
        allowed = [h.lower() for h in (verifier.allowed_hosts if verifier.network_mode else env.allowed_hosts) or []]
    for name, text in ctx.read_tree("tests").items():
        if hit := _fetch(text, allowed):
            where = "a host not in its allowlist" if allowed is not None else "the task has no network"
            return False, f"tests/{name} fetches at test time ({hit!r}) but {where}"
    return True, "tests fetch nothing at test time" if allowed is None else "tests fetch only from allowed hosts"




def tests_download_nothing(ctx: RubricContext) -> tuple[bool, str]:
    """Where the network is open at test time, the tests still must not fetch anything.

    A reward that depends on a package index or a download server being up and serving the same
    bytes is not a function of the agent's work: verification must be reproducible offline (the
    point of Harbor's ``verifier-network-download`` rule; EE §4.1's verifiers assume it). Tasks
    without network are judged by ``tests-offline``; a task that checks a live service on purpose
    says so the way Harbor reads it, ``ignore = ["verifier-network-download"]`` under
    ``[metadata.harbor.lint]``.
    """
    from evokit.verify.harbor_lint import selected_rules

    verifier, env = ctx.task.config.verifier, ctx.task.config.environment
    if (verifier.network_mode or env.network_mode) != NetworkMode.PUBLIC:
        return True, "the task has no open network at test time (tests-offline judges it)"
    if "verifier-network-download" not in selected_rules(ctx.root):
        return True, "the task states live-service verification ([metadata.harbor.lint] ignores it)"
    hits = [f"tests/{name}: {line!r}" for name, text in ctx.read_tree("tests").items()
            for line in test_time_fetches(text)]
    if hits:
        return False, (f"the tests fetch at verification time ({'; '.join(hits[:3])}"
                       f"{f'; {len(hits) - 3} more' if len(hits) > 3 else ''}): bake them into the image")
    return True, "tests fetch nothing at verification time"


def harbor_lint_clean(ctx: RubricContext) -> tuple[bool, str]:
    """Harbor's own linter, with the rules ``harbor lint`` selects for this task, finds nothing.

    One rubric item lists every finding (``[rule] file:line: message``) so a task is judged by the
    field's format checks as Harbor states them, without evokit keeping a copy of its rules.
    """
    from evokit.verify.harbor_lint import describe, harbor_lint

    findings = harbor_lint(ctx.root)
    if findings:
        return False, "harbor lint: " + "; ".join(describe(f, ctx.root) for f in findings)
    return True, "harbor lint finds nothing"


def timeouts_set(ctx: RubricContext) -> tuple[bool, str]:
    raw = tomllib.loads(ctx.task.paths.config_path.read_text())
    missing = [s for s in ("agent", "verifier") if "timeout_sec" not in raw.get(s, {})]
    if missing:
        return False, f"task.toml sets no timeout_sec in [{'], ['.join(missing)}]"
    return True, "agent and verifier timeouts are set"


# ----------------------------------------------------------------------- rules over runs
def oracle_deterministic(ctx: RubricContext) -> tuple[bool, str]:
    rewards = [r.rewards for r in ctx.oracle_runs]
    if len(rewards) < 2:
        return True, "only one oracle run requested"
    if all(r is None for r in rewards):  # nothing to compare: the oracle check says why
        return True, f"not judged: no oracle run wrote a reward ({ctx.oracle_runs[0].error})"
    if all(r is not None and r == rewards[0] for r in rewards):
        return True, f"oracle gave the same rewards in {len(rewards)} fresh sandboxes"
    # a run without a reward says why (a crash, a timeout, a copy that failed), so the verdict can be read
    shown = [r if r is not None else f"no reward ({run.error or run.why or 'no reason recorded'})"
             for r, run in zip(rewards, ctx.oracle_runs, strict=True)]
    return False, f"oracle rewards differ across fresh sandboxes: {shown}"


def null_writes_reward(ctx: RubricContext) -> tuple[bool, str]:
    run = ctx.null_run
    if run is None or run.rewards is not None:
        return True, "the tests write a reward even when nothing was done"
    return False, f"with no solution the tests crash instead of scoring 0: {run.error}"


DEFAULT_RUBRIC = Rubric((
    Rule("instruction-nonempty", "instruction.md says something", instruction_nonempty),
    Rule("instruction-names-outputs", "the instruction names every output the tests check",
         instruction_names_outputs),
    Rule("test-writes-reward", "tests/test.sh writes a reward file", test_writes_reward),
    Rule("solution-no-tests", "the solution does not read tests/", solution_does_not_read_tests),
    Rule("environment-no-leak", "the image contains no test or solution file", environment_does_not_leak),
    Rule("tests-offline", "tests need no network when the task forbids it", tests_offline_when_forbidden),
    Rule("timeouts-set", "agent and verifier timeouts are set in task.toml", timeouts_set),
    Rule("tests-no-download", "tests download nothing at verification time, even with network",
         tests_download_nothing),
    Rule("harbor-lint", "Harbor's own linter (harbor lint's rules for the task) finds nothing", harbor_lint_clean),
    Rule("tests-import-path", "the tests' interpreters never load code from the agent's workdir",
         tests_keep_agent_code_off_the_import_path),
    Rule("oracle-deterministic", "the oracle passes alike in fresh sandboxes", oracle_deterministic,
         needs_runs=True),
    Rule("null-writes-reward", "the tests score a do-nothing run instead of crashing", null_writes_reward,
         needs_runs=True),
))


def load_pattern_rules(path: str | Path) -> list[Rule]:
    """Rules from a TOML file, for adaptive rubrics without Python::

        [[rule]]
        name = "no-sleep-in-tests"
        description = "tests must not sleep"
        files = "tests"            # tests | solution | environment | instruction
        forbid = "\\bsleep\\s+\\d"    # or: require = "regex"
    """
    data = tomllib.loads(Path(path).read_text())
    rules = []
    for i, spec in enumerate(data.get("rule", [])):
        where = f"{path}: rule #{i + 1}"
        try:
            name, files = spec["name"], spec.get("files", "tests")
        except KeyError as e:
            raise ValueError(f"{where}: missing key {e}") from None
        if ("forbid" in spec) == ("require" in spec):
            raise ValueError(f"{where} ({name}): give exactly one of 'forbid' or 'require'")
        if files not in {"tests", "solution", "environment", "instruction"}:
            raise ValueError(f"{where} ({name}): files must be tests, solution, environment or instruction")
        pattern = re.compile(spec.get("forbid") or spec["require"], re.M)
        rules.append(Rule(name, spec.get("description", name),
                          _pattern_check(pattern, files, forbid="forbid" in spec)))
    return rules


def _pattern_check(pattern: re.Pattern, files: str, *, forbid: bool) -> RuleFn:
    def check(ctx: RubricContext) -> tuple[bool, str]:
        texts = {"instruction.md": ctx.task.instruction} if files == "instruction" else {
            f"{files}/{k}": v for k, v in ctx.read_tree(files).items()}
        hits = [name for name, text in texts.items() if pattern.search(text)]
        if forbid:
            return (not hits, f"/{pattern.pattern}/ found in {', '.join(hits)}" if hits
                    else f"/{pattern.pattern}/ absent")
        return (bool(hits), f"/{pattern.pattern}/ found in {hits[0]}" if hits
                else f"/{pattern.pattern}/ not found in {files}")

    return check


def rubric_from(extra: Iterable[str | Path] = ()) -> Rubric:
    """The default rubric plus the pattern rules of each TOML file in ``extra``."""
    rubric = DEFAULT_RUBRIC
    for path in extra:
        rubric = rubric.with_rules(*load_pattern_rules(path))
    return rubric
