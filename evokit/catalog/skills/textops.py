"""Text-processing skills: regex extraction, ordered dedupe, multi-key sorts, set operations,
joins, base64 decoding and FASTA statistics.

As in :mod:`evokit.catalog.skills.fields`, every expected output is computed in Python from
the dataset's records (or the text the scenario says the technique reads), in the byte order
of the oracle's ``LC_ALL=C`` pipeline.
"""

from __future__ import annotations

import re

from evokit.catalog.base import Skill, StepContext, StepSpec, lines
from evokit.catalog.registry import register_skill
from evokit.catalog.skills.fields import c_order, derived_list, field_expr, field_values, pick_field


def _needs_files(ctx: StepContext, *names: str | None) -> None:
    """Cross-file skills read sibling files of the scenario: a chained step's output has none."""
    missing = [n for n in names if n is not None and n not in ctx.dataset.files]
    if missing:
        raise ValueError(f"{ctx.dataset.scenario} input lacks {', '.join(missing)}; this skill needs the "
                         "scenario's own files, not an earlier step's output")


def regex_extract(ctx: StepContext) -> StepSpec:
    """grep -oE over the scenario's framed text. Expected matches come from Python ``re``, which agrees
    with POSIX leftmost-longest only for patterns without alternation: scenarios offer only such."""
    rx = ctx.dataset.extra["regex"]
    text_lines = rx["text"].splitlines()
    found = {ere: [m.group(0) for ln in text_lines for m in re.finditer(ere, ln)] for _, ere in rx["patterns"]}
    ere = ctx.choose("pattern", [e for _, e in rx["patterns"] if found[e]])
    desc = dict((e, d) for d, e in rx["patterns"])[ere]
    scope = rx.get("scope", "anywhere in the file (comments included)")
    out = found[ere]
    return StepSpec(
        instructions=[
            f"Extract every {desc} {scope} from `{ctx.path}`: write each non-overlapping match of the extended "
            f"regular expression `{ere}` to `{ctx.out}`, one per line, in order of appearance (top to bottom, "
            "left to right).",
            f"Pull all matches of the POSIX extended regex `{ere}` (a {desc}) out of the {ctx.dataset.noun} "
            f"`{ctx.path}`, searching {scope}. Save them to `{ctx.out}`, one match per line, in the order they "
            "occur; repeated matches are listed each time.",
        ],
        solution=f"{rx['text_cmd'].replace('{path}', ctx.path)} | grep -oE -- '{ere}' > {ctx.out}",
        expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "regex matches"))


def dedupe_ordered(ctx: StepContext) -> StepSpec:
    f = pick_field(ctx, "category")
    out = list(dict.fromkeys(field_values(ctx, f)))
    return StepSpec(
        instructions=[
            f"List each distinct {f.desc} of `{ctx.path}` once, in order of first appearance (not sorted), and "
            f"write the list to `{ctx.out}`, one value per line.",
            f"Remove the duplicates from the sequence of {f.desc} values in the {ctx.dataset.noun} `{ctx.path}`, "
            f"keeping the first occurrence of each in its original position; save the result to `{ctx.out}`.",
        ],
        solution=f"{field_expr(ctx, f)} | awk '!seen[$0]++' > {ctx.out}",
        expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "values in first-seen order"))


def sort_multikey(ctx: StepContext) -> StepSpec:
    c, n = pick_field(ctx, "category"), pick_field(ctx, "number")
    rows = list(zip(field_values(ctx, c), field_values(ctx, n), strict=True))
    order = ctx.choose("order", ["category-first", "number-first"])
    if order == "category-first":
        rows.sort(key=lambda r: (c_order(r[0]), -int(r[1])))
        keys, how = "-k1,1 -k2,2nr", (f"by {c.name} in byte order, and within one {c.name} by {n.name} from "
                                      "largest to smallest")
    else:
        rows.sort(key=lambda r: (-int(r[1]), c_order(r[0])))
        keys, how = "-k2,2nr -k1,1", f"by {n.name} from largest to smallest, ties by {c.name} in byte order"
    out = [f"{a}\t{b}" for a, b in rows]
    sol = (f"paste -d '\\t' <({field_expr(ctx, c)}) <({field_expr(ctx, n)}) | LC_ALL=C sort -t \"$(printf '\\t')\" {keys} "
           f"> {ctx.out}")
    return StepSpec(
        instructions=[
            f"For every record of `{ctx.path}`, write its {c.desc} and its {n.desc} as `<{c.name}><TAB><{n.name}>` "
            f"to `{ctx.out}`, sorted {how}.",
            f"Produce one `{c.name}`<TAB>`{n.name}` line per record of the {ctx.dataset.noun} `{ctx.path}` "
            f"({c.desc}; {n.desc}) and order the lines {how}; save them in `{ctx.out}`.",
        ],
        solution=sol, expected=lines(out), output=ctx.out)


_SET_OPS = {"only-first": ("-23", "in A but not in B"), "only-second": ("-13", "in B but not in A"),
            "both": ("-12", "in both A and B")}


def comm_set_ops(ctx: StepContext) -> StepSpec:
    a, b = ctx.dataset.extra["sets"][:2]
    _needs_files(ctx, a["file"], b["file"])
    sa, sb = set(a["items"]), set(b["items"])
    results = {"only-first": sa - sb, "only-second": sb - sa, "both": sa & sb}
    op = ctx.choose("op", [k for k in _SET_OPS if results[k]])
    out = sorted(results[op], key=c_order)
    flag, what = _SET_OPS[op]
    da, db = (s["desc"].replace("{dir}", ctx.data_dir) for s in (a, b))
    ca, cb = (s["cmd"].replace("{dir}", ctx.data_dir) for s in (a, b))
    return StepSpec(
        instructions=[
            f"Let A be the set of {da}, and B the set of {db}. Write the names {what} to `{ctx.out}`, one per "
            "line, each once, sorted in byte order (LC_ALL=C).",
            f"Compare two sets of names: A = {da}; B = {db}. Save every name that is {what} in `{ctx.out}` "
            "(no duplicates, C-locale sort order, one per line).",
        ],
        solution=f"LC_ALL=C comm {flag} <({ca} | LC_ALL=C sort -u) <({cb} | LC_ALL=C sort -u) > {ctx.out}",
        expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "names"))


def join_files(ctx: StepContext) -> StepSpec:
    j = ctx.dataset.extra["join"]
    _needs_files(ctx, j["left"], j["right"])
    right = {r[j["rkey"] - 1]: r[j["rout"] - 1] for r in j["right_rows"]}
    pairs = [(r[j["lout"] - 1], right[r[j["lkey"] - 1]]) for r in j["left_rows"] if r[j["lkey"] - 1] in right]
    order = ctx.choose("order", ["left-first", "right-first"])
    first, second = (j["lname"], j["rname"]) if order == "left-first" else (j["rname"], j["lname"])
    out_cols = f"1.{j['lout']},2.{j['rout']}" if order == "left-first" else f"2.{j['rout']},1.{j['lout']}"
    out = sorted((f"{x}\t{y}" if order == "left-first" else f"{y}\t{x}" for x, y in pairs), key=c_order)
    sep, d = j["sep"], ctx.data_dir
    left, right_f = f"{d}/{j['left']}", f"{d}/{j['right']}"
    what, match = (j[k].replace("{dir}", d) for k in ("what", "match"))
    sol = (f"LC_ALL=C join -t '{sep}' -1 {j['lkey']} -2 {j['rkey']} -o {out_cols} "
           f"<(LC_ALL=C sort -t '{sep}' -k{j['lkey']},{j['lkey']} {left}) "
           f"<(LC_ALL=C sort -t '{sep}' -k{j['rkey']},{j['rkey']} {right_f}) | tr '{sep}' '\\t' | LC_ALL=C sort "
           f"> {ctx.out}")
    return StepSpec(
        instructions=[
            f"Join two files: list {what}, where {match}. Write `<{first}><TAB><{second}>` lines to `{ctx.out}`, "
            f"sorted in byte order of the whole line; {j['unmatched']}.",
            f"Combine `{left}` and `{right_f}` on {match}: for {what}, output `{first}`, a tab, and `{second}`. "
            f"Save the lines to `{ctx.out}` in C-locale sort order of the whole line; {j['unmatched']}.",
        ],
        solution=sol, expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "joined pairs"))


def base64_decode(ctx: StepContext) -> StepSpec:
    ds = ctx.dataset
    mode = ctx.choose("mode", ["one", "search"])
    if mode == "one":
        ids = [r["id"] for r in ds.records]
        pid = ctx.choose("id", [i for i in ds.extra.get("prefixed_ids", []) if i in ids] or ids)
        payload = next(r["payload"] for r in ds.records if r["id"] == pid)
        expected = (payload if payload.endswith("\n") else payload + "\n").encode()
        return StepSpec(
            instructions=[
                f"Decode the base64 payload whose id is exactly `{pid}` in `{ctx.path}` ({ds.noun}) and write the "
                f"decoded content, byte for byte, to `{ctx.out}`.",
                f"In the {ds.noun} `{ctx.path}`, find the line with id `{pid}` (exact match of the first column), "
                f"base64-decode its payload and save the result unchanged in `{ctx.out}`.",
            ],
            solution=f"awk -F '\\t' '$1 == \"{pid}\" {{print $3}}' {ctx.path} | base64 -d > {ctx.out}",
            expected=expected, output=ctx.out)
    n = len(ds.records)
    counts = {t: sum(t in r["payload"] for r in ds.records) for t in ds.extra["tokens"]}
    token = ctx.choose("token", [t for t, c in counts.items() if 2 <= c < n])
    out = [r["id"] for r in ds.records if token in r["payload"]]
    sol = (f"while IFS=$'\\t' read -r id type b64; do if printf '%s' \"$b64\" | base64 -d | grep -qF -- '{token}'; "
           f"then echo \"$id\"; fi; done < {ctx.path} > {ctx.out}")
    return StepSpec(
        instructions=[
            f"Decode every payload in `{ctx.path}` ({ds.noun}) and write the ids of those whose decoded content "
            f"contains the exact (case-sensitive) string `{token}` to `{ctx.out}`, one per line, in file order.",
            f"Which payloads of the {ds.noun} `{ctx.path}` contain `{token}` (case-sensitive) once base64-decoded? "
            f"Save their ids, one per line in the order of the file, to `{ctx.out}`.",
        ],
        solution=sol, expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "payload ids"))


_FASTA_AWK = ("awk '/^>/ {{if (id != \"\") {emit}; id = substr($1, 2); n = 0; g = 0; next}} "
              "{{n += length($0); g += gsub(/[GC]/, \"\")}} END {{if (id != \"\") {emit}}}' ")


def fasta_stats(ctx: StepContext) -> StepSpec:
    metric = ctx.choose("metric", ["length", "gc"])
    recs = ctx.dataset.records
    if metric == "length":
        out = [f"{r['id']}\t{r['length']}" for r in recs]
        emit, what = 'printf "%s\\t%d\\n", id, n', "length in bases (an integer)"
    else:
        out = [f"{r['id']}\t{100 * r['gc'] / r['length']:.2f}" for r in recs]
        emit = 'printf "%s\\t%.2f\\n", id, 100 * g / n'
        what = "GC content in percent, 100 × (number of G and C) / length, rounded to exactly 2 decimals"
    return StepSpec(
        instructions=[
            f"For each sequence in the FASTA file `{ctx.path}`, compute its {what}. Write `<id><TAB><value>` "
            f"lines to `{ctx.out}` in file order, where id is the header up to the first space, without `>`.",
            f"Report the {what} of every record of `{ctx.path}` ({ctx.dataset.noun}): one line per record, in "
            f"the file's order, formatted as the sequence id (header text before the first space, no `>`), a "
            f"tab, and the value. Save it to `{ctx.out}`.",
        ],
        solution=_FASTA_AWK.format(emit=emit) + f"{ctx.path} > {ctx.out}",
        expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "id/value lines"))


for skill in (
    Skill("regex-extract", "print every match of an extended regex (grep -oE), after framing the text right", 7.0,
          "grep -o with a regex is one of the most used text idioms; records that span lines (FASTA) make the "
          "framing step matter.", frozenset({"text"}), regex_extract, rare_in={"fasta": 0.5}),
    Skill("dedupe-ordered", "remove duplicates keeping first-occurrence order (awk '!seen[$0]++')", 4.0,
          "Order-preserving dedupe is a well-known awk idiom, much less reached for than sort -u.",
          frozenset({"lines", "category"}), dedupe_ordered),
    Skill("sort-multikey", "sort by two keys, one numeric descending (sort -k1,1 -k2,2nr)", 5.0,
          "Sorting is everyday work; two keys with different directions and a numeric key need sort's -k "
          "syntax, which many get subtly wrong.", frozenset({"rows", "number", "category"}), sort_multikey),
    Skill("comm-set-ops", "set difference / intersection of two name lists (sort -u | comm)", 3.0,
          "Comparing two lists (who is in A but not B) is common in audits; comm and its sorted-input rule "
          "are less known than grep -v -f.", frozenset({"setops"}), comm_set_ops),
    Skill("join-files", "relational join of two delimited files on a key (sort | join)", 2.5,
          "Joining files in the shell is a classic but rarer idiom; join needs both inputs sorted "
          "lexically on the key, and unmatched rows silently drop.", frozenset({"join"}), join_files),
    Skill("base64-decode", "decode base64 payloads (base64 -d), one or all of them", 3.5,
          "Decoding a base64 blob (secrets, tokens, mail parts) is a frequent small chore.",
          frozenset({"base64"}), base64_decode),
    Skill("fasta-stats", "per-sequence length or GC% of a multi-line FASTA file (awk over records)", 2.0,
          "The first thing anyone does with a FASTA file, but only in bioinformatics; records spanning lines "
          "make per-line tools wrong.", frozenset({"fasta"}), fasta_stats),
):
    register_skill(skill)
