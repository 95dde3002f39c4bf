"""The rubric rule that keeps the agent's code off the verifier's import path (EE §4.1's rubric).

The verifier runs the task's tests as root, with the answer keys and the reward path, over a copy
of the agent's work. Any interpreter that resolves modules from where that work lands runs the
agent's code as the verifier: the import-path class of reward hacks (docs/trust-model.md). The rule
reads the tests, the task's environment and its Dockerfile statically, as every rubric rule does;
it is one module of its own because telling an agent directory apart in shell, Python and
JavaScript sources takes most of the rubric's code. :mod:`evokit.verify.rubric` lists it in
``DEFAULT_RUBRIC``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evokit.verify.rubric import RubricContext

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
