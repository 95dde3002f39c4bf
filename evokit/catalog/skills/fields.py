"""Generic skills over a dataset's fields: counting, top-k, sums, selection, checksums.

Each renderer composes the scenario's field extractors (which carry the scenario's quirks)
with one technique, and computes the expected output from the records in Python, in the
same byte order the oracle's ``LC_ALL=C`` pipeline produces.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict

from evokit.catalog.base import Dataset, Field, Skill, StepContext, StepSpec, lines
from evokit.catalog.registry import register_skill
from evokit.catalog.scenarios.records import text_list_dataset


# Helpers shared by the skill modules (fields, textops, sysops, filesystem).
def field_expr(ctx: StepContext, f: Field) -> str:
    """The shell expression that extracts field ``f`` from the step's input file."""
    return f.extract.replace("{path}", ctx.path)


def field_values(ctx: StepContext, f: Field) -> list[str]:
    """Field ``f`` of every record of the step's dataset, as text."""
    return [str(f.value(r)) for r in ctx.dataset.records]


def c_order(s: str) -> bytes:  # LC_ALL=C sort order
    return s.encode()


def derived_list(ctx: StepContext, items: list[str], what: str) -> Dataset:
    """The step's output as a one-item-per-line dataset that the next step can read."""
    return text_list_dataset(items, f"step{ctx.index}.txt", what)


def pick_field(ctx: StepContext, kind: str) -> Field:
    """A field of ``kind`` chosen by the step's seeded context."""
    options = ctx.dataset.fields_of(kind)
    name = ctx.choose(f"{kind}_field", [f.name for f in options])
    return ctx.dataset.field(name)


def topk(ctx: StepContext) -> StepSpec:
    f = pick_field(ctx, "category")
    counts = Counter(field_values(ctx, f))
    k = ctx.choose("k", [3, 4, 5])
    top = sorted(counts.items(), key=lambda kv: (-kv[1], c_order(kv[0])))[:k]
    out = [f"{c} {v}" for v, c in top]
    sol = (f"{field_expr(ctx, f)} | LC_ALL=C sort | uniq -c | LC_ALL=C sort -k1,1nr -k2 | head -n {k} "
           f"| sed -E 's/^ *([0-9]+) /\\1 /' > {ctx.out}")
    d = ctx.dataset.noun
    return StepSpec(
        instructions=[
            f"From the {d} `{ctx.path}`, find the {k} most frequent values of the {f.desc} and write them to "
            f"`{ctx.out}` as `<count> <value>` lines, most frequent first (ties: value in byte order).",
            f"Count how often each {f.desc} occurs in `{ctx.path}` ({d}); save the top {k} to `{ctx.out}`, one "
            f"`<count> <value>` per line, highest count first, ties broken by byte order of the value.",
        ],
        solution=sol, expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "count/value lines"))


def distinct(ctx: StepContext) -> StepSpec:
    f = pick_field(ctx, "category")
    vals = sorted(set(field_values(ctx, f)), key=c_order)
    return StepSpec(
        instructions=[
            f"List every distinct {f.desc} in `{ctx.path}` once, sorted in byte order (LC_ALL=C), into `{ctx.out}`.",
            f"Write the unique values of the {f.desc} found in the {ctx.dataset.noun} `{ctx.path}` to `{ctx.out}`, "
            f"one per line, in C-locale sort order.",
        ],
        solution=f"{field_expr(ctx, f)} | LC_ALL=C sort -u > {ctx.out}", expected=lines(vals), output=ctx.out,
        output_dataset=derived_list(ctx, vals, "distinct values"))


def count_matching(ctx: StepContext) -> StepSpec:
    f = pick_field(ctx, "category")
    vals = field_values(ctx, f)
    v = ctx.choose("value", sorted(set(vals), key=c_order))
    n = vals.count(v)
    return StepSpec(
        instructions=[
            f"How many records of `{ctx.path}` have the {f.desc} exactly equal to `{v}`? Write the number to `{ctx.out}`.",
            f"Count the entries in the {ctx.dataset.noun} `{ctx.path}` whose {f.desc} is `{v}`; put just the count "
            f"in `{ctx.out}`.",
        ],
        solution=f"{field_expr(ctx, f)} | grep -cxF -- '{v}' > {ctx.out}", expected=lines([n]), output=ctx.out)


def sum_field(ctx: StepContext) -> StepSpec:
    f = pick_field(ctx, "number")
    total = sum(int(v) for v in field_values(ctx, f))
    return StepSpec(
        instructions=[
            f"Add up the {f.desc} over all records of `{ctx.path}` and write the total (an integer) to `{ctx.out}`.",
            f"Compute the sum of the {f.desc} column of the {ctx.dataset.noun} `{ctx.path}`; save it to `{ctx.out}`.",
        ],
        solution=f"{field_expr(ctx, f)} | awk '{{s += $1}} END {{printf \"%d\\n\", s}}' > {ctx.out}",
        expected=lines([total]), output=ctx.out)


def group_sum(ctx: StepContext) -> StepSpec:
    c, n = pick_field(ctx, "category"), pick_field(ctx, "number")
    sums: dict[str, int] = defaultdict(int)
    for k, v in zip(field_values(ctx, c), field_values(ctx, n), strict=True):
        sums[k] += int(v)
    out = [f"{k}\t{sums[k]}" for k in sorted(sums, key=c_order)]
    sol = (f"paste -d '\\t' <({field_expr(ctx, c)}) <({field_expr(ctx, n)}) | awk -F '\\t' '{{s[$1] += $2}} "
           f"END {{for (k in s) printf \"%s\\t%d\\n\", k, s[k]}}' | LC_ALL=C sort > {ctx.out}")
    return StepSpec(
        instructions=[
            f"For each {c.desc} in `{ctx.path}`, total the {n.desc}. Write `<{c.name}><TAB><total>` lines to "
            f"`{ctx.out}`, sorted by {c.name} in byte order.",
            f"Group the records of the {ctx.dataset.noun} `{ctx.path}` by {c.desc} and sum their {n.desc}; "
            f"save one tab-separated `{c.name}`/total pair per line to `{ctx.out}`, in C-locale order.",
        ],
        solution=sol, expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "key/total lines"))


def max_record(ctx: StepContext) -> StepSpec:
    c, n = pick_field(ctx, "category"), pick_field(ctx, "number")
    pairs = list(zip(field_values(ctx, c), (int(v) for v in field_values(ctx, n)), strict=True))
    best = sorted(pairs, key=lambda p: (-p[1], c_order(p[0])))[0]
    sol = (f"paste -d '\\t' <({field_expr(ctx, c)}) <({field_expr(ctx, n)}) | LC_ALL=C sort -t \"$(printf '\\t')\" -k2,2nr -k1,1 "
           f"| head -n 1 > {ctx.out}")
    return StepSpec(
        instructions=[
            f"Find the record of `{ctx.path}` with the largest {n.desc} and write `<{c.name}><TAB><{n.name}>` for it "
            f"to `{ctx.out}` (ties: smallest {c.name} in byte order).",
            f"Which {c.desc} has the single highest {n.desc} in the {ctx.dataset.noun} `{ctx.path}`? Save "
            f"`{c.name}`, a tab, and that value to `{ctx.out}`; break ties by byte order of the {c.name}.",
        ],
        solution=sol, expected=lines([f"{best[0]}\t{best[1]}"]), output=ctx.out)


def filter_rows(ctx: StepContext) -> StepSpec:
    ds = ctx.dataset
    f = pick_field(ctx, "category")
    vals = field_values(ctx, f)
    v = ctx.choose("value", sorted(set(vals), key=c_order))
    keep = [r for r, x in zip(ds.records, vals, strict=True) if x == v]
    data = ds.serialize(keep)
    out_ds = Dataset(scenario=ds.scenario, files={f"step{ctx.index}.txt": data}, main=f"step{ctx.index}.txt",
                     records=keep, fields=ds.fields, noun=ds.noun, select=ds.select, serialize=ds.serialize,
                     extra=ds.extra)
    return StepSpec(
        instructions=[
            f"Keep only the records of `{ctx.path}` whose {f.desc} is `{v}`, in their original order and format, "
            f"and write them to `{ctx.out}`.",
            f"Filter the {ds.noun} `{ctx.path}` down to the entries with {f.desc} equal to `{v}`; save them "
            f"unchanged (same format, same order) in `{ctx.out}`.",
        ],
        solution=ds.select(f, v).replace("{path}", ctx.path) + f" > {ctx.out}",
        expected=data, output=ctx.out, output_dataset=out_ds)


def count_records(ctx: StepContext) -> StepSpec:
    f = ctx.dataset.fields[0]
    return StepSpec(
        instructions=[
            f"Count the records in `{ctx.path}` ({ctx.dataset.noun}; a header row is not a record) and write the "
            f"number to `{ctx.out}`.",
            f"How many entries does the {ctx.dataset.noun} `{ctx.path}` hold? Write the count to `{ctx.out}`.",
        ],
        solution=f"{field_expr(ctx, f)} | wc -l > {ctx.out}", expected=lines([len(ctx.dataset.records)]), output=ctx.out)


def checksum(ctx: StepContext) -> StepSpec:
    digest = hashlib.sha256(ctx.dataset.files[ctx.dataset.main]).hexdigest()
    return StepSpec(
        instructions=[
            f"Write the SHA-256 digest of `{ctx.path}` (64 hex characters, nothing else) to `{ctx.out}`.",
            f"Compute the sha256 checksum of the file `{ctx.path}` and save only the hex digest in `{ctx.out}`.",
        ],
        solution=f"sha256sum {ctx.path} | cut -d ' ' -f 1 > {ctx.out}", expected=lines([digest]), output=ctx.out)


_CAT = frozenset({"category"})
for skill in (
    Skill("topk-count", "count values and keep the k most frequent (sort | uniq -c | sort -rn | head)", 9.0,
          "The canonical shell idiom; appears in nearly every log or data exploration.", _CAT, topk),
    Skill("distinct-values", "list unique values (sort -u)", 8.0,
          "Deduplicating a column is one of the first things anyone does with data.", _CAT, distinct),
    Skill("count-matching", "count records with a given value (grep -c)", 8.0,
          "Counting matches is ubiquitous (grep -c, wc -l).", _CAT, count_matching),
    Skill("sum-field", "sum a numeric column (awk)", 6.0,
          "Totals with awk are common but need knowing awk's accumulators.", frozenset({"number"}), sum_field),
    Skill("group-sum", "sum a number per key (awk associative arrays)", 4.0,
          "Group-by in awk is a step up: associative arrays and an END block.",
          frozenset({"category", "number"}), group_sum),
    Skill("max-record", "the record with the largest value (sort -k nr | head -1)", 5.0,
          "Sorting by a numeric key with tie-breaks is routine but easy to get subtly wrong.",
          frozenset({"category", "number"}), max_record),
    Skill("filter-rows", "keep the records matching a value, same format", 8.0,
          "Filtering rows (grep/awk/jq select) is the most common transformation of all.",
          frozenset({"rows", "category"}), filter_rows, rare_in={"csv-ledger": 0.4, "jsonl-events": 0.6}),
    Skill("count-records", "count the records of a file (wc -l, header-aware)", 7.0,
          "Counting lines is trivial and frequent; headers and multi-line records make it less so.",
          frozenset({"rows"}), count_records),
    Skill("checksum", "sha256 digest of a file (sha256sum)", 4.0,
          "Integrity checks are common in ops work, rarer in data work.", frozenset({"file"}), checksum),
):
    register_skill(skill)
