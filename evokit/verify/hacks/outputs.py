"""Outputs that exist but answer nothing: placeholders, and the instruction's own examples.

Weak tests check that an output exists, parses, or has the right header, not that it is right.
A policy finds that out at once: it writes every output the task names with the least it can.

Deviation, stated: the audit's "empty file", "0", "[]", "{}" and "header-only copy" are one
probe here, one placeholder per output chosen by its kind (a test that accepts an empty file
accepts these too, since each exists and parses), so the battery stays small.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

from evokit.verify.hacks.context import ProbeContext, inline_examples, nearest_example
from evokit.verify.hacks.registry import register_probe

MAX_EXAMPLE = 64 << 10  # bytes of one example written to an output


def _write(path: str, text: str) -> str:
    p = shlex.quote(path)
    return (f"mkdir -p {shlex.quote(str(PurePosixPath(path).parent))}; rm -rf {p}; "
            f"printf '%s' {shlex.quote(text[:MAX_EXAMPLE])} > {p}\n")


def _mention(ctx: ProbeContext, out: str) -> str:
    return next((p for p in ctx.paragraphs if out in p), "")


def placeholder(ctx: ProbeContext, out: str) -> str:
    """The shell that writes ``out``'s placeholder (module docstring): a table gets the header of an
    input of its kind, JSON an empty object or list, a script a no-op, anything else ``0``."""
    suffix = PurePosixPath(out).suffix.lower()
    if suffix in (".csv", ".tsv", ".psv"):
        src = next((i for i in ctx.inputs if PurePosixPath(i).suffix.lower() == suffix), None)
        if src is not None:
            o = shlex.quote(out)
            return (f"mkdir -p {shlex.quote(str(PurePosixPath(out).parent))}; rm -rf {o}; "
                    f"head -n 1 {shlex.quote(src)} > {o}\n")
        header = next((s for s in inline_examples(ctx, out) if ("," if suffix == ".csv" else "\t") in s), "")
        return _write(out, header + "\n" if header else "")
    if suffix == ".json":
        listy = re.search(r"\b(array|list)\b", _mention(ctx, out), re.I)
        return _write(out, "[]\n" if listy else "{}\n")
    if suffix in (".jsonl", ".ndjson"):
        return _write(out, "{}\n")
    if suffix in (".sh", ".bash"):
        return _write(out, "#!/bin/sh\nexit 0\n") + f"chmod +x {shlex.quote(out)}\n"
    if suffix == ".py":
        return _write(out, "pass\n")
    return _write(out, "0\n")


@register_probe("placeholder-outputs", claims_outputs=True, order=0)
def placeholder_outputs(ctx: ProbeContext) -> str | None:
    """Empty and placeholder outputs: every folder the task names is made and every output written
    with a placeholder (``0``, ``{}``/``[]``, a header-only copy of an input, a no-op script).
    Passes tests that only check that outputs exist or parse."""
    if not ctx.outputs and not ctx.output_dirs:
        return None
    script = "".join(f"mkdir -p {shlex.quote(d)}\n" for d in ctx.output_dirs)
    return script + "".join(placeholder(ctx, o) for o in ctx.outputs)


@register_probe("instruction-examples", claims_outputs=True)
def instruction_examples(ctx: ProbeContext) -> str | None:
    """Outputs copied from the instruction's examples: each output gets the code block nearest its
    mention (else the example lines in its paragraphs). Passes tests whose expected answer is the
    example the instruction shows."""
    script = ""
    for out in ctx.outputs:
        block = nearest_example(ctx, out)
        if block is None:
            lines = [s for s in inline_examples(ctx, out) if s != PurePosixPath(out).name]
            block = "\n".join(lines) + "\n" if lines else None
        if block:
            script += _write(out, block)
    return script or None
