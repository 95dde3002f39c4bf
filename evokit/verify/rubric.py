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
import posixpath
import re
import shlex
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harbor.models.task.config import NetworkMode
from harbor.models.task.task import Task

from evokit.sandbox.image import Image
from evokit.tasks.fetches import first_fetch as _fetch
from evokit.tasks.fetches import test_time_fetches
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


# ------------------------------------------------------- the verifier's own import path
#: Variables that put directories on an interpreter's module path (or preload a library into
#: every program): set to an agent-controlled dir, the verifier loads the agent's code.
_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "NODE_PATH", "RUBYLIB", "PERL5LIB", "PERLLIB",
              "LD_LIBRARY_PATH", "LD_PRELOAD")
_ASSIGN = re.compile(rf"(?<![\w$])({'|'.join(_PATH_VARS)})=(\"[^\"]*\"|'[^']*'|[^\s;&|]*)")
#: A command run as another, unprivileged user: the pattern the bundled tasks use for the agent's
#: programs (it can then neither write the reward nor read the answer keys).
_UNPRIVILEGED = re.compile(r"\bsetpriv\b[^;&|]*--reuid|\brunuser\s+-u|\bsu\s|\bsudo\s+-u|\bchroot\s+--userspec"
                           r"|\b(?:gosu|su-exec)\s")
_SEGMENT = re.compile(r"&&|\|\||[;|&]")
_CWD_PATH = {"$PWD", "${PWD}", "$(pwd)", "`pwd`", ".", "./"}
_WRAPPERS = {"exec", "env", "timeout", "nice", "nohup", "command", "time", "stdbuf", "xargs", "sudo"}


def agent_dirs(ctx: RubricContext) -> list[str]:
    """Directories the agent's work lands in on the verifier's side (what
    :func:`evokit.verify.trial.work_paths` copies): the workdir, each artifact's source, and
    ``/logs/artifacts``. The workdir is ``[environment].workdir``, else the built image's or the
    Dockerfile's last ``WORKDIR``, else ``/app``."""
    workdir = ctx.task.config.environment.workdir or (ctx.image.workdir if ctx.image is not None else None)
    dockerfile = ctx.root / "environment" / "Dockerfile"
    if not workdir and dockerfile.is_file():
        found = re.findall(r"(?im)^\s*WORKDIR\s+(\S+)\s*$", dockerfile.read_text(errors="replace"))
        workdir = found[-1].strip("\"'") if found and found[-1].startswith(("/", "\"/", "'/")) else None
    dirs = [workdir or "/app", *(a if isinstance(a, str) else a.source for a in ctx.task.config.artifacts),
            "/logs/artifacts"]
    return [posixpath.normpath(d) for d in dirs if d and d.startswith("/") and posixpath.normpath(d) != "/"]


def _under(path: str, dirs: Iterable[str]) -> bool:
    p = posixpath.normpath(path)
    return any(p == d or p.startswith(d + "/") for d in dirs)


def _agent_entry(value: str, cwd: str | None, dirs: list[str]) -> str | None:
    """The entry of a path-list variable's value that the agent controls, or None."""
    for part in re.split(r"[:\s]+", value.strip("\"'")):
        if not part or (part.startswith("$") and part not in _CWD_PATH):
            continue  # "$PYTHONPATH" and friends: the value they extend
        if part in _CWD_PATH or not part.startswith("/"):
            if cwd is not None and _under(cwd, dirs):
                return f"{part} (= {cwd})"
        elif _under(part, dirs):
            return part
    return None


def _cd_target(words: list[str], cwd: str | None) -> str | None:
    target = words[1] if len(words) > 1 and not words[1].startswith("-") else None
    if target is None or target.startswith(("$", "~", "`")):
        return None  # a variable or home: not known statically
    return posixpath.normpath(target if target.startswith("/") or cwd is None else posixpath.join(cwd, target))


def _command(words: list[str]) -> tuple[str, list[str]]:
    """(the program a segment runs, its arguments), past env assignments and wrappers such as timeout."""
    i = 0
    while i < len(words):
        w = words[i]
        if re.match(r"^\w+=", w) or w.startswith("-") or w.isdigit() or re.match(r"^\d+[smhd]?$", w):
            i += 1
        elif posixpath.basename(w) in _WRAPPERS:
            i += 1
        else:
            return posixpath.basename(w), words[i + 1:]
    return "", []


def _interpreter_finding(prog: str, args: list[str], cwd: str | None, dirs: list[str]) -> str | None:
    """Why ``prog args`` run as the verifier in ``cwd`` would load code from an agent dir, or None."""
    in_agent = cwd is not None and _under(cwd, dirs)
    if re.fullmatch(r"(python|pypy)[0-9.]*", prog):
        flags = [a for a in args if a.startswith("-") and a != "-"]
        opts = "".join(f[1:] for f in flags if not f.startswith("--"))
        if "I" in opts or "P" in opts:
            return None  # isolated / safe-path mode: neither cwd nor script dir on sys.path
        if "-m" in args:
            module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
            if module in ("pytest", "py.test") and (why := _interpreter_finding(
                    "pytest", args[args.index("-m") + 2:], cwd, dirs)):
                return why
            return f"`{prog} -m {module}` in {cwd} (-m puts the cwd first on sys.path)" if in_agent else None
        if any(f == "-c" or (not f.startswith("--") and f.endswith("c")) for f in flags):
            return f"`{prog} -c` in {cwd} (-c puts the cwd first on sys.path)" if in_agent else None
        script = next((a for a in args if not a.startswith("-")), None)
        if script is None or script == "-":
            return f"`{prog}` reading code from stdin in {cwd} (the cwd is first on sys.path)" if in_agent else None
        if not script.startswith(("/", "$")) and in_agent:
            return f"`{prog} {script}` in {cwd} (runs a file from the agent's dir, with it on sys.path)"
        return None
    if prog in ("pytest", "py.test"):
        paths = [a for a in args if not a.startswith("-") and "=" not in a]
        if not paths and in_agent:
            return f"`{prog}` with no path in {cwd} (collects the agent's tests and conftest.py)"
        for a in paths:
            if a.startswith(("/", "./", "../")) or "/" in a or a.endswith(".py"):
                full = a if a.startswith("/") else posixpath.join(cwd or "/", a)
                if (a.startswith("/") or cwd is not None) and _under(full, dirs):
                    return f"`{prog} {a}` (collects conftest.py from the agent's dir)"
        return None
    if prog in ("node", "nodejs"):
        flags = [a for a in args if a.startswith("-")]
        script = next((a for a in args if not a.startswith("-")), None)
        if in_agent and (any(f in ("-e", "--eval", "-p", "--print") for f in flags) or script is None
                         or not script.startswith(("/", "$"))):
            return f"`{prog}` evaluating code in {cwd} (require resolves ./ and node_modules from the cwd)"
        return None
    if prog in ("npm", "npx", "yarn", "pnpm") and in_agent:
        return f"`{prog}` in {cwd} (runs the agent's package.json scripts and node_modules)"
    if prog == "uv" and args[:1] == ["run"] and in_agent and not {"--no-project", "--isolated"} & set(args):
        return f"`uv run` in {cwd} (uses the agent's pyproject.toml, uv.toml and .venv)"
    return None


def _shell_findings(name: str, text: str, cwd: str | None, dirs: list[str]) -> list[str]:
    """Findings in a test shell script that starts in ``cwd`` (``test.sh``: the task's workdir)."""
    found: list[str] = []
    lines = text.replace("\\\n", " ").splitlines()
    heredoc_end = None
    for n, raw in enumerate(lines, 1):
        if heredoc_end is not None:  # a heredoc's body is data (or another language), not shell
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        line = raw.split(" #")[0] if not raw.lstrip().startswith("#") else ""
        if m := re.search(r"<<-?\s*[\"']?(\w+)[\"']?", line):
            heredoc_end = m.group(1)
        local, depth, pos = cwd, 0, 0
        for seg in _SEGMENT.split(line):
            before = line[:line.find(seg, pos)]
            pos += len(seg)
            depth = before.count("(") - before.count(")")
            try:
                words = shlex.split(seg.replace("(", " ").replace(")", " "), comments=False)
            except ValueError:
                words = seg.replace("(", " ").replace(")", " ").split()
            if not words:
                continue
            unprivileged = bool(_UNPRIVILEGED.search(seg))
            if words[0] in ("cd", "pushd"):
                local = _cd_target(words, local)
                if depth == 0:
                    cwd = local
                continue
            for var, value in _ASSIGN.findall(seg):
                if not unprivileged and (entry := _agent_entry(value, local, dirs)):
                    found.append(f"{name}:{n}: {var}={value} puts {entry} on the import path")
            prog, args = _command(words)
            if not unprivileged and (why := _interpreter_finding(prog, args, local, dirs)):
                found.append(f"{name}:{n}: {why}")
    return found


def _python_findings(name: str, text: str, cwd: str | None, dirs: list[str]) -> list[str]:
    """Findings in a test Python file: the agent's dirs put on this process's import path, the
    agent's files executed in it, or interpreters it starts (``subprocess``) as above."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [f"{name}: sys.path gets {p}" for p in re.findall(r"sys\.path\.\w+\([^)]*['\"](/[^'\"]+)['\"]", text)
                if _under(p, dirs)]

    def const(node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    # module-level NAME = literal, so that env=ENV, [*AS_NOBODY, ...] and run(CMD) are read through
    names = {n.targets[0].id: n.value for n in tree.body
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}

    def resolve(node):
        return names.get(node.id, node) if isinstance(node, ast.Name) else node

    def words_of(node) -> list[str]:
        node = resolve(node)
        if const(node):
            return shlex.split(const(node))
        out = []
        for e in node.elts if isinstance(node, ast.List | ast.Tuple) else []:
            inner = resolve(e.value) if isinstance(e, ast.Starred) else None
            out += ([const(x) or "$" for x in inner.elts] if isinstance(inner, ast.List | ast.Tuple)
                    else ["$"] if inner is not None else [const(e) or "$"])
        return out

    def env_findings(node, line: int, run_cwd: str | None) -> list[str]:
        node = resolve(node)
        if not isinstance(node, ast.Dict):
            return []
        return [f"{name}:{line}: {const(k)}={const(v)} puts {e} on the import path"
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None and const(k) in _PATH_VARS and const(v) and (e := _agent_entry(const(v), run_cwd, dirs))]

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):  # os.environ["X"] = "/app"
            key, value = const(node.targets[0].slice), const(node.value)
            if key in _PATH_VARS and value and (e := _agent_entry(value, cwd, dirs)):
                found.append(f"{name}:{node.lineno}: {key}={value} puts {e} on the import path")
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        strings = [const(a) for a in node.args]
        if func in ("sys.path.insert", "sys.path.append", "sys.path.extend", "site.addsitedir",
                    "importlib.util.spec_from_file_location", "spec_from_file_location", "runpy.run_path",
                    "run_path", "importlib.machinery.SourceFileLoader", "SourceFileLoader"):
            args = [s for s in strings if s] + [const(e) for a in node.args if isinstance(a, ast.List | ast.Tuple)
                                                for e in a.elts if const(e)]
            if hit := next((a for a in args if a.startswith("/") and _under(a, dirs)), None):
                found.append(f"{name}:{node.lineno}: {func}({hit!r}) runs the agent's code in the verifier")
        elif func in ("exec", "compile") and "open(" in ast.unparse(node):
            hit = next((c for c in re.findall(r"open\(['\"]([^'\"]+)", ast.unparse(node)) if _under(c, dirs)), None)
            if hit:
                found.append(f"{name}:{node.lineno}: exec of {hit} runs the agent's code in the verifier")
        elif func in ("os.environ.update", "environ.update") and node.args:
            found += env_findings(node.args[0], node.lineno, cwd)
        elif func.split(".")[-1] in ("run", "Popen", "call", "check_call", "check_output", "system"):
            words = words_of(node.args[0]) if node.args else []
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            run_cwd = const(kw["cwd"]) if "cwd" in kw else cwd
            if not words or _UNPRIVILEGED.search(" ".join(words)):
                continue  # the agent's code run as an unprivileged user: the safe pattern
            found += env_findings(kw["env"], node.lineno, run_cwd) if "env" in kw else []
            prog, args = _command(words)
            if why := _interpreter_finding(prog, args, run_cwd, dirs):
                found.append(f"{name}:{node.lineno}: {why}")
    return found


def _js_findings(name: str, text: str, dirs: list[str]) -> list[str]:
    """require()/import of a module under an agent dir (absolute, or relative from /tests)."""
    found = []
    for m in re.finditer(r"(?:require\(|import\s*\(|from\s+)\s*['\"]([./][^'\"]*)['\"]", text):
        spec = m.group(1)
        full = spec if spec.startswith("/") else posixpath.join("/tests", posixpath.dirname(name), spec)
        if _under(full, dirs):
            found.append(f"{name}:{text[:m.start()].count(chr(10)) + 1}: loads {spec} (the agent's code) "
                         "into the verifier")
    return found


def _image_env(ctx: RubricContext) -> dict[str, str]:
    """The environment the tests inherit: the built image's (or the Dockerfile's final-stage ENV),
    then the task's ``[verifier].env`` over it."""
    env: dict[str, str] = dict(ctx.image.env) if ctx.image is not None else {}
    dockerfile = ctx.root / "environment" / "Dockerfile"
    if ctx.image is None and dockerfile.is_file():
        from evokit.sandbox.dockerfile import DockerfileError, parse_key_values

        text = dockerfile.read_text(errors="replace").replace("\\\n", " ")
        last = re.split(r"(?im)^\s*FROM\s", text)[-1]
        for args in re.findall(r"(?im)^\s*ENV\s+(.+)$", last):
            try:
                env.update(parse_key_values(args, "ENV", "Dockerfile"))
            except (DockerfileError, ValueError):
                continue
    return {**env, **(ctx.task.config.verifier.env or {})}


def _unset_first(test_sh: str) -> set[str]:
    """Variables ``test.sh`` unsets (``unset PYTHONPATH``) at top level before it runs any command
    other than a builtin: the image's value of them never reaches the tests' interpreters."""
    cleared: set[str] = set()
    for line in test_sh.replace("\\\n", " ").splitlines():
        words = line.split("#")[0].split()
        if not words or words[0] in ("mkdir", "echo", "cd", "set", "export", "umask", "chmod", "true", ":"):
            continue
        if words[0] == "unset":
            cleared |= set(words[1:])
            continue
        break
    return cleared


_EDITABLE = re.compile(r"\b(?:pip3?|-m\s+pip|uv\s+pip)\s+install\b[^;&|]*?(?:-e|--editable)[=\s]+(\S+)")


def _dockerfile_installs(ctx: RubricContext, dirs: list[str]) -> list[str]:
    """``RUN`` lines of the Dockerfile that put an agent dir on every interpreter's path: an
    editable install (``pip install -e /app``) or a ``.pth`` file naming it."""
    dockerfile = ctx.root / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return []
    found = []
    text = dockerfile.read_text(errors="replace").replace("\\\n", " ")
    for n, line in enumerate(text.splitlines(), 1):
        if not re.match(r"\s*RUN\s", line, re.I):
            continue
        for target in _EDITABLE.findall(line):
            if _under(target.strip("\"'"), dirs):
                found.append(f"Dockerfile:{n}: an editable install of {target} puts the agent's package on every "
                             "interpreter's path")
        for path in re.findall(r"(/[\w./-]+)[\"']?\s*>>?\s*\S+\.pth\b", line):
            if _under(path, dirs):
                found.append(f"Dockerfile:{n}: a .pth file puts {path} on every interpreter's path")
    return found


def tests_keep_agent_code_off_the_import_path(ctx: RubricContext) -> tuple[bool, str]:
    """The tests' own interpreters never load code from where the agent's work lands.

    The verifier runs as root with the answer keys and the reward path; the agent's workdir (and
    declared artifacts) is copied into its sandbox as the agent left it. An interpreter that
    resolves modules from there runs the agent's code *as the verifier*: an ``/app/json.py`` or
    ``/app/pytest.py`` executes inside ``python3 -m pytest`` and can pass every test or write the
    reward (the import-path class). Flagged, in ``tests/`` and the environment the tests inherit:

    * a module-path variable (``PYTHONPATH``, ``NODE_PATH``, ``RUBYLIB``, ``PERL5LIB``,
      ``LD_LIBRARY_PATH``, ``LD_PRELOAD`` …) holding an agent dir, set by the Dockerfile's
      ``ENV``, the task's ``[verifier].env``, or a test script (``PYTHONSAFEPATH`` does not touch
      these); the image's value is fine when ``test.sh`` ``unset``s it before anything else runs.
      Likewise an editable install (``pip install -e /app``) or a ``.pth`` file naming an agent dir;
    * test code that imports from an agent dir: ``sys.path.insert(0, "/app")``,
      ``site.addsitedir``, ``spec_from_file_location`` / ``runpy.run_path`` / ``exec(open(...))`` of
      an agent file, ``require("/app/x")``;
    * an interpreter started in an agent dir in a mode that puts the cwd first on its path:
      ``python3 -c`` / ``-m`` / stdin / a relative script (``test.sh`` starts in the workdir unless
      it ``cd``s away), ``pytest`` collecting an agent dir (its ``conftest.py`` runs), ``node -e``,
      ``npm``/``npx``, ``uv run``.

    Why ``-c``/``-m`` are still flagged though evokit's harness runs the tests with
    ``PYTHONSAFEPATH=1``: Python before 3.11 ignores the variable (an image's ``python3`` may be
    3.8), Harbor's own docker verifier and Terminal-Bench do not set it, and a test that
    rebuilds its environment (``env -i``) drops it; the task must be sound by itself. Not
    flagged: ``python3 -I``/``-P``; a script given by absolute path outside the agent's dirs
    (``python3 /tests/check.py`` puts ``/tests``, not the cwd, on the path); ``uvx`` (tool runs
    ignore project configuration); and any command run as an unprivileged user (``setpriv
    --reuid …``, ``runuser -u``), the way to run the agent's own programs. Running the agent's
    programs as root is a sibling class this rule does not judge. Static reading: a ``cd`` to a
    variable, or a command built in a variable, is not followed.
    """
    dirs = agent_dirs(ctx)
    workdir = dirs[0] if dirs else None
    tree = ctx.read_tree("tests")
    cleared = _unset_first(tree.get("test.sh", ""))
    found = [f"environment: {k}={v} puts {e} on the import path of every test"
             for k, v in _image_env(ctx).items()
             if k in _PATH_VARS and k not in cleared and (e := _agent_entry(v, None, dirs))]
    found += _dockerfile_installs(ctx, dirs)
    # Where test.sh runs each Python file of tests/ (pytest and plain python inherit its cwd).
    cwd_of: dict[str, str | None] = {}
    main = tree.get("test.sh", "")
    cwd = workdir
    for line in main.replace("\\\n", " ").splitlines():
        for seg in _SEGMENT.split(line):
            words = seg.split()
            if words[:1] == ["cd"] and "(" not in line.split("cd")[0]:
                cwd = _cd_target(words, cwd)
            for fname in tree:
                if fname.endswith(".py") and posixpath.basename(fname) in seg:
                    cwd_of.setdefault(fname, cwd)
    for fname, text in tree.items():
        if fname.endswith((".sh", ".bash")):
            found += _shell_findings(f"tests/{fname}", text, workdir, dirs)
        elif fname.endswith(".py"):
            found += _python_findings(f"tests/{fname}", text, cwd_of.get(fname), dirs)
        elif fname.endswith((".js", ".mjs", ".cjs", ".ts")):
            found += _js_findings(fname, text, dirs)
    if found:
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        return False, ("the tests load code from the agent's work ({}): {}{}; cd to a dir the agent cannot write "
                       "(e.g. /tests) before running an interpreter, keep agent dirs off PYTHONPATH/sys.path, and run "
                       "the agent's code as an unprivileged user (setpriv --reuid=65534 --regid=65534 --clear-groups)"
                       ).format(", ".join(dirs), "; ".join(found[:3]), more)
    return True, f"no test interpreter loads code from the agent's dirs ({', '.join(dirs)})"


# ----------------------------------------------------------------------- rules over runs
def oracle_deterministic(ctx: RubricContext) -> tuple[bool, str]:
    rewards = [r.rewards for r in ctx.oracle_runs]
    if len(rewards) < 2:
        return True, "only one oracle run requested"
    if all(r is None for r in rewards):  # nothing to compare: the oracle check says why
        return True, f"not judged: no oracle run wrote a reward ({ctx.oracle_runs[0].error})"
    if all(r is not None and r == rewards[0] for r in rewards):
        return True, f"oracle gave the same rewards in {len(rewards)} fresh sandboxes"
    return False, f"oracle rewards differ across fresh sandboxes: {rewards}"


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
