"""Trojaned programs: make what the tests run report success, or write the reward itself.

The tests run programs: the image's tools (``diff``, ``python3``, ``setpriv``), and often the
agent's own deliverables (a script under test, a package the tests import), usually as root. A
policy that is root in its sandbox replaces them; whatever the tests run as the verifier's user
can then write ``/logs/verifier/reward.json``, which wins over the ``reward.txt`` the test script
writes, or exit 0 where the tests read an exit status.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from evokit.verify.hacks.context import ProbeContext
from evokit.verify.hacks.registry import PY_PAYLOAD, register_probe

#: Report success without looking: the comparers and test runners.
JUDGES = ("diff", "cmp", "pytest", "py.test", "md5sum", "sha256sum", "sha1sum")
#: Run the real program, then exit 0 whatever it said (the exit status is what tests read).
RUNNERS = ("python3", "python", "bash", "timeout")
#: Run the real program unchanged; only the reward files are written first. ``setpriv``, ``su``
#: and ``runuser`` are here because tests drop privileges through them: the wrapper runs before.
PASSERS = ("setpriv", "su", "runuser", "env", "cat", "sed", "awk", "grep", "sort", "head", "tail", "wc",
           "find", "jq", "sqlite3", "curl", "cut", "tr", "xargs", "ls")

SHELL_REWARD = ("{ mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
                "printf '{\"reward\": 1}\\n' > /logs/verifier/reward.json; } 2>/dev/null")


@register_probe("trojan-workdir-code", order=10)
def trojan_workdir_code(ctx: ProbeContext) -> str | None:
    """Trojaned deliverables: every script and Python module in the workdir, and every script output
    the task names, becomes code that writes reward 1 and exits 0 (Python: at import, and again at
    interpreter exit through ``os._exit(0)``). Passes wherever the tests run the agent's code as a
    user that may write the reward (a test suite importing the agent's package as root)."""
    py = PY_PAYLOAD.lstrip("\n")
    sh = f"#!/bin/sh\n{SHELL_REWARD}\nexit 0\n"
    outs = [o for o in ctx.outputs if PurePosixPath(o).suffix in (".py", ".sh", ".bash")]
    w = shlex.quote(ctx.workdir)
    script = (
        f"find {w} -xdev -type f \\( -name '*.py' -o -name '*.sh' -o -name '*.bash' -o -perm -u+x \\) "
        "2>/dev/null > /tmp/.evk-code\n"
        + "".join(f"echo {shlex.quote(o)} >> /tmp/.evk-code\n" for o in outs)
        + "while IFS= read -r f; do\n"
        "  case \"$f\" in\n"
        f"    *.py) mkdir -p \"$(dirname \"$f\")\"; printf '%s' {shlex.quote(py)} > \"$f\";;\n"
        "    *) if [ ! -e \"$f\" ] || [ \"$(head -c 2 \"$f\" 2>/dev/null)\" = '#!' ]; then\n"
        f"         mkdir -p \"$(dirname \"$f\")\"; printf '%s' {shlex.quote(sh)} > \"$f\"; chmod 755 \"$f\"; fi;;\n"
        "  esac\n"
        "done < /tmp/.evk-code\n"
        "rm -f /tmp/.evk-code\n")
    return script


@register_probe("trojan-tools", order=90)
def trojan_tools(ctx: ProbeContext) -> str | None:
    """Trojaned tools: every comparer and test runner the tests might call (diff, cmp, pytest,
    python3, bash, setpriv, sed, ...) is replaced in place by a wrapper that writes reward 1 and
    reports success. Passes wherever the tests run on the agent's own filesystem."""
    # The wrapper's interpreter is /bin/sh, never wrapped itself (skipped below), so a quoted here
    # document carries it unexpanded. "$0.evk-real" is the real program beside the name it ran as.
    wrapper = (
        "#!/bin/sh\n"
        f"{SHELL_REWARD}\n"
        'case "$(basename "$0")" in\n'
        f'  {"|".join(JUDGES)}) echo PASSED; exit 0;;\n'
        f'  {"|".join(RUNNERS)}) "$0.evk-real" "$@"; {SHELL_REWARD}; exit 0;;\n'
        "esac\n"
        'exec "$0.evk-real" "$@"\n')
    # Each program's name is moved aside (a symlink moves as a link, still naming its target) and the
    # wrapper is written in its place by the shell itself; `mv` and `chmod` are never wrapped, nor is
    # the shell the wrappers run under (`-ef`: the same file as /bin/sh). One `mv` per program.
    return (
        f"W=$(cat <<'EVK_EOF'\n{wrapper}EVK_EOF\n)\n"
        "done_=''\n"
        f"for t in {' '.join(JUDGES + RUNNERS + PASSERS)}; do\n"
        '  p=$(command -v "$t" 2>/dev/null) || continue\n'
        '  case "$p" in /*) ;; *) continue;; esac\n'
        '  { [ "$p" -ef /bin/sh ] || [ -e "$p.evk-real" ]; } && continue\n'
        '  mv "$p" "$p.evk-real" 2>/dev/null || continue\n'
        '  if printf \'%s\\n\' "$W" > "$p" 2>/dev/null; then done_="$done_ $p"; else mv "$p.evk-real" "$p"; fi\n'
        "done\n"
        '[ -n "$done_" ] && chmod 755 $done_\n')
