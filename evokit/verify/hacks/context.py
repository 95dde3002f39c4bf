"""What a hack probe knows about a task: what an RL policy could read before acting.

A probe is written the way a reward-hacking policy thinks (arXiv 2606.08960 found about 16 % of
1,968 terminal-agent tasks passable without solving them): it reads the instruction and, since
the agent reads evokit's source and a task's tests are often published, the task's tests, and
guesses where the graded outputs are and where the answer keys will lie when the tests run.
:class:`ProbeContext` is that reading, made once per task and shared by every probe:

* ``outputs``: absolute paths the instruction names, or the tests name under the workdir or a
  declared artifact, that the image does not already hold (what the task asks to create);
* ``inputs``: named paths the image holds as regular files (data the task gives);
* ``keys``: where the verifier's and the oracle's files will be (``/tests/<rel>``,
  ``/solution/<rel>``), the targets of answer-key links;
* ``examples``: the instruction's fenced code blocks, and its inline code spans paragraph by
  paragraph, for probes that hand in the instruction's own examples.

Deviation, stated: relative paths (``out.txt`` after a ``cd``) are not guessed; a task whose
graded outputs are only ever named relatively gives the output probes nothing to write, so
they skip it (a skipped probe never fails a task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harbor.models.task.task import Task

#: An absolute path token: not part of a word, a URL (``http://``) or a variable.
_PATH = re.compile(r"(?<![\w.$~:/\-])(/[A-Za-z0-9_.+\-/]*[A-Za-z0-9_+\-/])")
#: Paths the harness owns or the kernel provides: never a task's output.
HARNESS_PREFIXES = ("/tests", "/solution", "/logs/verifier", "/logs/agent", "/proc", "/sys", "/dev", "/run")
#: Where programs live: a name there is a tool the tests run, not an output.
TOOL_PREFIXES = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/lib", "/lib", "/usr/local/bin", "/usr/share")
_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]+)`")
TEXT_LIMIT = 256 << 10  # bytes of one test file read for paths (larger files are data, not code)


def _norm(path: str) -> str:
    parts = [p for p in PurePosixPath(path).parts[1:] if p not in ("", ".")]
    return str(PurePosixPath("/", *parts))


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def paths_in(text: str) -> list[str]:
    """Absolute paths in ``text``, normalised, in order of first mention, without ``..`` ones.

    >>> paths_in("Write `/app/out.txt` (see /app/in.csv, http://x/y, $HOME/z).")
    ['/app/out.txt', '/app/in.csv']
    """
    out: list[str] = []
    for m in _PATH.finditer(text):
        raw = m.group(1)
        if raw.startswith("//") or ".." in PurePosixPath(raw).parts:
            continue
        p = _norm(raw)
        if p != "/" and p not in out:
            out.append(p)
    return out


def _text_files(root: Path) -> dict[str, str]:
    """``{relative path: text}`` of the small UTF-8 files under ``root`` (binary ones left out)."""
    out = {}
    if not root.is_dir():
        return out
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.stat().st_size <= TEXT_LIMIT:
            try:
                out[str(p.relative_to(root))] = p.read_text()
            except (UnicodeDecodeError, OSError):
                continue
    return out


def _files(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


@dataclass(frozen=True)
class ProbeContext:
    """One task as a hacking policy sees it (module docstring); build it with :func:`probe_context`."""

    name: str  # the task folder's name
    instruction: str
    workdir: str  # [environment].workdir, else the image's WORKDIR
    outputs: tuple[str, ...]  # files to create (not in the image)
    output_dirs: tuple[str, ...]  # named paths that are folders of outputs (a prefix of another, or ending "/")
    inputs: tuple[str, ...]  # named regular files the image holds
    keys: tuple[str, ...]  # /tests/<rel> and /solution/<rel> of the task's own files
    tests_text: str  # every test file's text, joined (for probes that look for what the tests run)
    python: str | None  # the image's python3, if it has one
    examples: tuple[str, ...]  # fenced code blocks of the instruction, in order
    paragraphs: tuple[str, ...]  # the instruction's paragraphs (blank-line separated), in order


def probe_context(task: Task, image=None) -> ProbeContext:
    """Read ``task`` (and ``image``, a local :class:`~evokit.sandbox.Image`, when given) once for every probe.

    Without a local image (a Docker backend image) a named path is taken as an input when a file
    of its name is under ``environment/``, else as an output.
    """
    cfg = task.config
    image_workdir = getattr(image, "workdir", None)
    workdir = _norm(cfg.environment.workdir or image_workdir or "/")
    artifacts = [a if isinstance(a, str) else a.source for a in cfg.artifacts]
    roots = [workdir, *(_norm(a) for a in artifacts if a.startswith("/")), "/logs/artifacts"]
    instruction = task.instruction
    tests = _text_files(task.paths.tests_dir)
    tests_text = "\n".join(tests.values())
    env_names = {PurePosixPath(f).name for f in _files(task.paths.environment_dir)}
    find = getattr(image, "find", None)

    def state(path: str) -> str:
        """"file" (a regular file of the image), "other" (a folder or link) or "absent"."""
        if find is None:
            return "file" if PurePosixPath(path).name in env_names else "absent"
        hit = find(path)
        if hit is None:
            return "absent"
        return "file" if hit.is_file() and not hit.is_symlink() else "other"

    named = paths_in(instruction) + [p for p in paths_in(tests_text) if _under(p, roots)]
    named = [p for p in dict.fromkeys(named)
             if not _under(p, HARNESS_PREFIXES + TOOL_PREFIXES) and p != workdir and p not in roots]
    states = {p: state(p) for p in named}
    dirs = {p for p in named if any(q.startswith(p + "/") for q in named)}
    dirs |= {_norm(m.group(1)) for m in _PATH.finditer(instruction + tests_text) if m.group(1).endswith("/")}
    dirs &= set(named)
    outputs = tuple(p for p in named if p not in dirs and states[p] == "absent")
    inputs = tuple(p for p in named if states[p] == "file")
    keys = tuple([f"/tests/{f}" for f in _files(task.paths.tests_dir) if f != "test.sh"]
                 + [f"/solution/{f}" for f in _files(task.paths.solution_dir)])
    python = None
    if find is not None:
        python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if find(p) is not None), None)
    elif re.search(r"\bpython3?\b", tests_text):
        python = "python3"
    return ProbeContext(
        name=task.paths.task_dir.name, instruction=instruction, workdir=workdir, outputs=outputs,
        output_dirs=tuple(sorted(dirs)), inputs=inputs, keys=keys, tests_text=tests_text, python=python,
        examples=tuple(m.group(2) for m in _FENCE.finditer(instruction)),
        paragraphs=tuple(p for p in re.split(r"\n\s*\n", instruction) if p.strip()))


def inline_examples(ctx: ProbeContext, output: str) -> list[str]:
    """The inline code spans of the paragraphs from the first one naming ``output`` up to the next
    heading, that are neither paths nor the output's name: the instruction's example lines."""
    spans: list[str] = []
    started = False
    for para in ctx.paragraphs:
        if started and para.lstrip().startswith("#"):
            break
        if output in para:
            started = True
        if started:
            spans += [s for s in _INLINE.findall(para) if not s.startswith("/") and s not in spans]
    return spans


def nearest_example(ctx: ProbeContext, output: str) -> str | None:
    """The fenced code block nearest after the first mention of ``output`` (else the last before it)."""
    at = ctx.instruction.find(output)
    if at < 0 or not ctx.examples:
        return ctx.examples[0] if ctx.examples else None
    blocks = [(m.start(), m.group(2)) for m in _FENCE.finditer(ctx.instruction)]
    after = [b for pos, b in blocks if pos > at]
    if after:
        return after[0]
    return [b for pos, b in blocks if pos < at][-1]


def best_key(ctx: ProbeContext, output: str) -> str | None:
    """The answer key most likely to hold ``output``'s expected content, by name.

    Score: same file name 4, same extension 2, each shared name token 1, a key named like an
    answer (``expected``, ``answer``, ``golden``, ``reference``) 1; a test key wins a tie over a
    solution file. None when the task has no key files.
    """
    if not ctx.keys:
        return None
    out = PurePosixPath(output)
    tokens = set(re.split(r"[\W_]+", out.stem.lower())) - {""}

    def score(key: str) -> tuple:
        k = PurePosixPath(key)
        s = 4 * (k.name == out.name) + 2 * (k.suffix.lower() == out.suffix.lower() and bool(out.suffix))
        s += len(tokens & (set(re.split(r"[\W_]+", k.stem.lower())) - {""}))
        s += bool(re.search(r"expect|answer|golden|reference", k.name, re.I))
        return (s, key.startswith("/tests/"), -len(key))

    return max(ctx.keys, key=score)
