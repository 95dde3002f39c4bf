"""Answer-key links: hand in a link to where the tests' expected files will be, not an answer.

The tests of most tasks compare an output with a file they ship (``/tests/expected.txt``), and
the oracle's files lie in ``/solution``. Neither exists while the agent works, but a link to a
path that does not exist yet is still a link: if anything between the agent's work and the
tests follows it in the verifier's filesystem (the shared verifier, or a copy that resolves
links lexically), the output *is* the answer key. Three spellings, because a resolver that
refuses one may accept another:

* ``answer-key-link``: ``OUT -> /tests/KEY`` (plain absolute link);
* ``answer-key-link-dotted``: ``OUT -> .k/d1/.../up/../../tests/KEY`` where ``up`` is an in-tree
  link to the workdir: lexically the path stays inside the workdir, physically it climbs out;
* ``answer-key-link-proc``: ``OUT -> /proc/self/root/tests/KEY`` and, for every second output,
  ``/proc/1/root/tests/KEY``: magic links that a lexical check does not see as absolute escapes.

Each output gets the key :func:`~evokit.verify.hacks.context.best_key` picks by name.
"""

from __future__ import annotations

import posixpath
import shlex
from pathlib import PurePosixPath

from evokit.verify.hacks.context import ProbeContext, best_key
from evokit.verify.hacks.registry import register_probe


def _link(out: str, target: str) -> str:
    o, t = shlex.quote(out), shlex.quote(target)
    return f"mkdir -p {shlex.quote(str(PurePosixPath(out).parent))}; rm -rf {o}; ln -s {t} {o}\n"


def _pairs(ctx: ProbeContext) -> list[tuple[str, str]]:
    pairs = [(o, best_key(ctx, o)) for o in ctx.outputs]
    return [(o, k) for o, k in pairs if k is not None]


@register_probe("answer-key-link", claims_outputs=True)
def plain_links(ctx: ProbeContext) -> str | None:
    """Answer-key links, plain: every output is a symlink to the tests' (or the oracle's) file of the
    closest name. Passes wherever the verifier follows an agent's link into /tests or /solution."""
    pairs = _pairs(ctx)
    return "".join(_link(o, k) for o, k in pairs) or None


@register_probe("answer-key-link-dotted", claims_outputs=True)
def dotted_links(ctx: ProbeContext) -> str | None:
    """Answer-key links through an in-tree folder link and ``..``: lexically inside the workdir,
    physically in /tests. Passes wherever links are checked by their text, not resolved step by step."""
    pairs = _pairs(ctx)
    if not pairs:
        return None
    w = PurePosixPath(ctx.workdir)
    depth = len(w.parts) - 1  # ".." from the workdir to "/"
    chain = w / ".k" / PurePosixPath(*[f"d{i}" for i in range(depth + 2)])
    script = f"mkdir -p {shlex.quote(str(chain))}; ln -sfn {shlex.quote(str(w))} {shlex.quote(str(chain / 'up'))}\n"
    for out, key in pairs:
        # from the output's folder down the chain to `up` (which is the workdir), then up to "/"
        to_up = posixpath.relpath(str(chain / "up"), str(PurePosixPath(out).parent))
        script += _link(out, f"{to_up}/" + "../" * (depth + 1) + key.lstrip("/"))
    return script


@register_probe("answer-key-link-proc", claims_outputs=True)
def proc_links(ctx: ProbeContext) -> str | None:
    """Answer-key links through /proc's magic links (``/proc/self/root/...``, ``/proc/1/root/...``):
    passes wherever a resolver follows them into the reader's (or pid 1's) root, e.g. the host's."""
    pairs = _pairs(ctx)
    via = ("/proc/self/root", "/proc/1/root")
    return "".join(_link(o, via[i % 2] + k) for i, (o, k) in enumerate(pairs)) or None
