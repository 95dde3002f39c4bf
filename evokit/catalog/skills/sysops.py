"""System-administration skills: cron schedules, time arithmetic, in-place config edits, INI
queries and systemd dependency tracing.

Expected outputs come from the scenario's records through small Python models of the tools'
semantics (cron's day rule, sed's address ranges, configparser's sections), written apart from
the oracle commands, which read the files the agent sees.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from evokit.catalog.base import Skill, StepContext, StepSpec, lines
from evokit.catalog.registry import register_skill
from evokit.catalog.scenarios.sysadmin import ini_dataset
from evokit.catalog.skills.fields import c_order, derived_list, field_expr, field_values, pick_field


# ---------------------------------------------------------------------------------- cron
def _cron_values(spec: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        span, _, step = part.partition("/")
        a, b = (lo, hi) if span == "*" else (int(span), int(span)) if "-" not in span else map(int, span.split("-"))
        out.update(range(a, b + 1, int(step or 1)))
    return out


def cron_matcher(r: dict):
    """``t → bool``: whether job ``r`` fires at minute ``t`` (its fields expanded once, not per minute).

    crontab(5): if both day fields are restricted (neither starts with *), either may match.
    """
    minute, hour, month = _cron_values(r["minute"], 0, 59), _cron_values(r["hour"], 0, 23), \
        _cron_values(r["month"], 1, 12)
    dom, dow = _cron_values(r["dom"], 1, 31), {d % 7 for d in _cron_values(r["dow"], 0, 7)}
    either = not (r["dom"].startswith("*") or r["dow"].startswith("*"))

    def fires(t: datetime) -> bool:
        dom_ok, dow_ok = t.day in dom, t.isoweekday() % 7 in dow
        day = (dom_ok or dow_ok) if either else (dom_ok and dow_ok)
        return day and t.minute in minute and t.hour in hour and t.month in month

    return fires


def _is_tricky(r: dict) -> bool:
    both = not r["dom"].startswith("*") and not r["dow"].startswith("*")
    fields = [r[k] for k in ("minute", "hour", "dom", "month", "dow")]
    return both or any("," in f or ("-" in f and "/" in f) for f in fields)


_CRON_PY = r"""python3 - {path} {mode} {when} > {out} <<'EOF'
import re, sys
from datetime import datetime, timedelta
SPECIAL = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
           "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
def expand(spec, lo, hi):
    vals = set()
    for part in spec.split(","):
        r, _, step = part.partition("/")
        if r == "*":
            a, b = lo, hi
        elif "-" in r:
            a, b = map(int, r.split("-"))
        else:
            a = b = int(r)
        vals.update(range(a, b + 1, int(step or 1)))
    return vals
jobs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line or line.startswith("#") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", line):
        continue
    if line.startswith("@"):
        special, cmd = line.split(None, 1)
        fields = SPECIAL[special].split()
    else:
        *fields, cmd = line.split(None, 5)
    jobs.append((fields, cmd))
def fires(f, t):
    mi, h, dom, mon, dow = f
    d1 = t.day in expand(dom, 1, 31)
    d2 = t.isoweekday() % 7 in {d % 7 for d in expand(dow, 0, 7)}
    day = (d1 and d2) if dom[0] == "*" or dow[0] == "*" else (d1 or d2)
    return day and t.minute in expand(mi, 0, 59) and t.hour in expand(h, 0, 23) and t.month in expand(mon, 1, 12)
t = datetime.fromisoformat(sys.argv[3])
for f, cmd in jobs:
    if sys.argv[2] == "at":
        if fires(f, t):
            print(cmd)
    else:
        print(sum(fires(f, t + timedelta(minutes=i)) for i in range(1440)), cmd, sep="\t")
EOF"""

def _cron_oracle(path: str, mode: str, when: str, out: str) -> str:
    return _CRON_PY.replace("{path}", path).replace("{mode}", mode).replace("{when}", when).replace("{out}", out)


_CRON_DATES = ["2026-03-01", "2026-03-02", "2026-03-07", "2026-03-13", "2026-03-15", "2026-04-01", "2026-04-06"]
_CRON_RULES = "Read the schedules exactly as cron does (crontab(5))"


def cron_match(ctx: StepContext) -> StepSpec:
    jobs = ctx.dataset.records
    mode = ctx.choose("mode", ["at", "day"])
    day = datetime.fromisoformat(ctx.choose("date", _CRON_DATES))
    minutes = [day + timedelta(minutes=i) for i in range(1440)]
    fires = [cron_matcher(j) for j in jobs]
    if mode == "day":
        out = [f"{sum(f(t) for t in minutes)}\t{j['command']}" for j, f in zip(jobs, fires, strict=True)]
        when = day.strftime("%Y-%m-%d")
        return StepSpec(
            instructions=[
                f"For every job of the user crontab `{ctx.path}`, count how many times it runs on {when} "
                f"(00:00 to 23:59, the crontab's own clock). Write `<count><TAB><command>` lines to `{ctx.out}` "
                "in file order, where command is the entry's text after its schedule, exactly as written; "
                f"include jobs that do not run (count 0). {_CRON_RULES}.",
                f"How often does each cron job in `{ctx.path}` fire during the day {when}? One line per job, in "
                f"the order of the file: the number of runs, a tab, and the job's command (everything after the "
                f"schedule, verbatim). Save to `{ctx.out}`. {_CRON_RULES}.",
            ],
            solution=_cron_oracle(ctx.path, "day", when, ctx.out),
            expected=lines(out), output=ctx.out)
    counts = {t: sum(f(t) for f in fires) for t in minutes}
    busy = [t for t in minutes if 2 <= counts[t] < len(jobs)] or [t for t in minutes if counts[t]]
    # Prefer instants where a job fires through a range, list, step or the day-field OR rule.
    tricky_fires = [f for j, f in zip(jobs, fires, strict=True) if _is_tricky(j)]
    tricky = [t for t in busy if any(f(t) for f in tricky_fires)]
    busy = tricky or busy
    when = ctx.choose("time", [t.strftime("%Y-%m-%dT%H:%M") for t in busy])
    t = datetime.fromisoformat(when)
    out = [j["command"] for j, f in zip(jobs, fires, strict=True) if f(t)]
    shown = when.replace("T", " ")
    return StepSpec(
        instructions=[
            f"Which jobs of the user crontab `{ctx.path}` run at {shown} (the crontab's own clock)? Write the "
            f"command of each (the entry's text after its schedule, exactly as written) to `{ctx.out}`, one per "
            f"line, in file order. {_CRON_RULES}.",
            f"List the cron jobs in `{ctx.path}` that fire at exactly {shown}: their commands (everything after "
            f"the schedule, verbatim), in the order they appear, one per line, in `{ctx.out}`. {_CRON_RULES}.",
        ],
        solution=_cron_oracle(ctx.path, "at", when, ctx.out),
        expected=lines(out), output=ctx.out, output_dataset=derived_list(ctx, out, "cron commands"))


# ------------------------------------------------------------------------ date arithmetic
def date_arithmetic(ctx: StepContext) -> StepSpec:
    tf = ctx.dataset.fields_of("time")[0]
    utc = [datetime.fromisoformat(v).astimezone(UTC) for v in field_values(ctx, tf)]
    mode = ctx.choose("mode", ["per-day", "span"])
    to_utc = "while read -r t; do date -u -d \"$t\" +{fmt}; done"
    if mode == "per-day":
        days = Counter(t.strftime("%Y-%m-%d") for t in utc)
        out = [f"{d}\t{days[d]}" for d in sorted(days)]
        return StepSpec(
            instructions=[
                f"Count the records of `{ctx.path}` per calendar day in UTC, judged by the {tf.desc} (which carries "
                f"a UTC offset). Write `<YYYY-MM-DD><TAB><count>` lines to `{ctx.out}`, oldest day first.",
                f"Convert each {tf.desc} in the {ctx.dataset.noun} `{ctx.path}` to UTC and count how many records "
                f"fall on each UTC date; save one `YYYY-MM-DD`, tab, count line per date (ascending) in "
                f"`{ctx.out}`.",
            ],
            solution=f"{field_expr(ctx, tf)} | {to_utc.format(fmt='%F')} | LC_ALL=C sort | uniq -c "
                     f"| awk '{{printf \"%s\\t%s\\n\", $2, $1}}' > {ctx.out}",
            expected=lines(out), output=ctx.out)
    c = pick_field(ctx, "category")
    by: dict[str, list[datetime]] = {}
    for k, t in zip(field_values(ctx, c), utc, strict=True):
        by.setdefault(k, []).append(t)
    offsets: dict[str, set[str]] = {}
    for k, raw in zip(field_values(ctx, c), field_values(ctx, tf), strict=True):
        offsets.setdefault(k, set()).add(raw[19:])  # the offset notation after YYYY-MM-DDTHH:MM:SS
    spans = sorted((k for k, ts in by.items() if len(ts) > 1), key=c_order)
    # Prefer a value whose readings mix offsets: there, subtracting wall-clock times is wrong.
    v = ctx.choose("value", [k for k in spans if len(offsets[k]) > 1] or spans)
    minutes = int((max(by[v]) - min(by[v])).total_seconds()) // 60
    return StepSpec(
        instructions=[
            f"How many minutes lie between the earliest and the latest record of `{ctx.path}` whose {c.desc} is "
            f"`{v}`? Compare the actual instants ({tf.desc}, with its UTC offset) and write the whole number to "
            f"`{ctx.out}`.",
            f"For {c.name} `{v}` in the {ctx.dataset.noun} `{ctx.path}`, compute the time span from its first to "
            f"its last reading in real elapsed minutes (the {tf.desc} values carry different UTC offsets), and "
            f"save that integer in `{ctx.out}`.",
        ],
        solution=(f"paste -d '\\t' <({field_expr(ctx, c)}) <({field_expr(ctx, tf)}) | awk -F '\\t' '$1 == \"{v}\" {{print $2}}' "
                  f"| {to_utc.format(fmt='%s')} | sort -n "
                  f"| awk 'NR == 1 {{a = $1}} {{b = $1}} END {{print (b - a) / 60}}' > {ctx.out}"),
        expected=lines([minutes]), output=ctx.out)


# ----------------------------------------------------------------------- in-place edits
def sed_edit(text: str, section: str, key: str, new: str) -> str:
    """What ``sed '/^\\[section\\]/,/^\\[/ s/^\\(key[[:space:]]*=[[:space:]]*\\).*/\\1new/'`` does to ``text``."""
    out, inside = [], False
    start, end = re.compile(rf"^\[{re.escape(section)}\]"), re.compile(r"^\[")
    sub = re.compile(rf"^({re.escape(key)}[ \t\r\f\v]*=[ \t\r\f\v]*).*")
    for line in text.split("\n"):
        if not inside and start.match(line):
            inside, opened = True, True
        else:
            opened = False
        if inside:
            line = sub.sub(lambda m: m.group(1) + new, line, count=1)
            if not opened and end.match(line):
                inside = False
        out.append(line)
    return "\n".join(out)


def sed_inplace_edit(ctx: StepContext) -> StepSpec:
    ds = ctx.dataset
    edits = [e for e in ds.extra["edits"] if e["options"]]
    shared = [e for e in edits if sum(x["key"] == e["key"] for x in edits) > 1]  # same key elsewhere: the trap
    pick = ctx.choose("edit", [f"{e['file']}#{e['section']}#{e['key']}" for e in shared or edits])
    e = next(x for x in edits if f"{x['file']}#{x['section']}#{x['key']}" == pick)
    if e["file"] not in ds.files:
        raise ValueError(f"{ds.scenario} input lacks {e['file']}: an in-place edit needs the scenario's own files")
    new = ctx.choose("value", e["options"])
    if set(new) & set("/&\\'\n"):
        raise ValueError(f"replacement {new!r} is not safe inside a sed s/// command")
    src = f"{ctx.data_dir}/{e['file']}"
    expected = sed_edit(ds.files[e["file"]].decode(), e["section"], e["key"], new)
    out_ds = None
    if ds.scenario == "ini-config":
        items, section = [], None
        for it in ds.extra["ini_items"]:
            section = it[1] if it[0] == "section" else section
            hit = it[0] == "kv" and section == e["section"] and it[1] == e["key"]
            items.append(("kv", it[1], it[2], new) if hit else it)
        out_ds = ini_dataset(items, f"step{ctx.index}.txt")
        assert out_ds.files[out_ds.main].decode() == expected, "INI model and sed model disagree"
    what = "unit file" if ds.scenario == "systemd-units" else "INI file"
    sol = (f"cp {src} {ctx.out} && sed -i '/^\\[{e['section']}\\]/,/^\\[/ "
           f"s/^\\({e['key']}[[:space:]]*=[[:space:]]*\\).*/\\1{new}/' {ctx.out}")
    return StepSpec(
        instructions=[
            f"Copy the {what} `{src}` to `{ctx.out}` and edit the copy in place (e.g. with `sed -i`): in its "
            f"`[{e['section']}]` section, set `{e['key']}` to `{new}`. Change only that value; keep the key, the "
            "spacing around `=`, comments and every other line byte for byte.",
            f"Make `{ctx.out}` a copy of `{src}` in which the value of `{e['key']}` in section "
            f"`[{e['section']}]` (and nowhere else) is replaced by `{new}`, editing the copy in place; every other "
            "byte, including the key's spacing, stays as it was.",
        ],
        solution=sol, expected=expected.encode(), output=ctx.out, output_dataset=out_ds)


# ----------------------------------------------------------------------------- INI query
_CONFIGPARSER = "import configparser, sys; c = configparser.ConfigParser(interpolation=None); c.read(sys.argv[1]); "


def ini_query(ctx: StepContext) -> StepSpec:
    recs = ctx.dataset.records
    keys = Counter(r["key"] for r in recs)
    shared = sorted((k for k, n in keys.items() if n > 1), key=c_order)
    mode = ctx.choose("mode", ["one", "all"])
    if mode == "all":
        key = ctx.choose("key", shared)
        out = [f"{r['section']}\t{r['value']}" for r in recs if r["key"] == key]
        return StepSpec(
            instructions=[
                f"In the INI file `{ctx.path}`, find every section that sets `{key}` and write "
                f"`<section><TAB><value>` lines to `{ctx.out}` in file order (section name without brackets, "
                "value without surrounding spaces; commented-out lines do not count).",
                f"Which sections of `{ctx.path}` define the key `{key}`, and to what? Save one line per section, "
                f"in the order of the file, as the section name (no brackets), a tab and the trimmed value, to "
                f"`{ctx.out}`.",
            ],
            solution=(f"python3 -c '{_CONFIGPARSER}[print(s, c[s][sys.argv[2]], sep=\"\\t\") for s in c.sections() "
                      f"if c.has_option(s, sys.argv[2])]' {ctx.path} {key} > {ctx.out}"),
            expected=lines(out), output=ctx.out)
    pick = ctx.choose("entry", [f"{r['section']}.{r['key']}" for r in recs if r["key"] in shared]
                      or [f"{r['section']}.{r['key']}" for r in recs])
    section, key = pick.split(".", 1)
    value = next(r["value"] for r in recs if r["section"] == section and r["key"] == key)
    return StepSpec(
        instructions=[
            f"What is the value of `{key}` in the `[{section}]` section of the INI file `{ctx.path}`? Write it, "
            f"without surrounding spaces, to `{ctx.out}`.",
            f"Read the setting `{key}` of section `[{section}]` from `{ctx.path}` and save just its value "
            f"(trimmed) in `{ctx.out}`.",
        ],
        solution=f"python3 -c '{_CONFIGPARSER}print(c[sys.argv[2]][sys.argv[3]])' {ctx.path} {section} {key} "
                 f"> {ctx.out}",
        expected=lines([value]), output=ctx.out)


# ------------------------------------------------------------------------ unit deps
_PULLS_PY = r"""python3 - {dir} {unit} > {out} <<'EOF'
import os, re, sys
d, start = sys.argv[1], sys.argv[2]
def deps(u):
    p = os.path.join(d, u)
    if not os.path.exists(p):
        return []
    return [n for line in open(p) if (m := re.match(r"(Requires|Wants)=(.*)", line)) for n in m.group(2).split()]
seen, todo = set(), [start]
while todo:
    for n in deps(todo.pop()):
        if n not in seen:
            seen.add(n)
            todo.append(n)
seen.discard(start)
print("\n".join(sorted(seen)))
EOF"""


def unit_deps(ctx: StepContext) -> StepSpec:
    units = {u["name"]: u for u in ctx.dataset.records}
    d = ctx.path  # the unit directory

    def pulls(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            u = units.get(todo.pop())
            for n in (u["requires"] + u["wants"]) if u else []:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen - {name}

    answers = {
        "pulls": {n: pulls(n) for n in units},
        "after": {n: set(u["after"]) for n, u in units.items()},
        "needed-by": {n: {m for m, u in units.items() if n in u["requires"] + u["wants"]} for n in units},
    }
    mode = ctx.choose("mode", list(answers))
    candidates = sorted(n for n, a in answers[mode].items() if a)
    if mode == "pulls":  # prefer units whose closure goes beyond their own lines
        candidates = [n for n in candidates if answers["pulls"][n] != set(units[n]["requires"] + units[n]["wants"])
                      ] or candidates
    unit = ctx.choose("unit", candidates)
    out = sorted(answers[mode][unit], key=c_order)
    tail = f"Write the unit names to `{ctx.out}`, one per line, sorted in byte order (LC_ALL=C), each once."
    if mode == "pulls":
        ask = [f"Which units does `{unit}` pull in through `Requires=` and `Wants=`, directly or transitively "
               f"via the unit files in `{d}/`? A unit without a file there has no further dependencies; "
               f"`{unit}` itself is not listed. {tail}",
               f"Starting from `{unit}` in the systemd unit directory `{d}/`, follow every `Requires=` and "
               f"`Wants=` (lists may be split over several lines) to collect all units it needs, transitively "
               f"(units that have no file in the directory are leaves). {tail}"]
        sol = _PULLS_PY.replace("{dir}", d).replace("{unit}", unit).replace("{out}", ctx.out)
    elif mode == "after":
        ask = [f"List the units that `{d}/{unit}` orders itself after (all of its `After=` lines). {tail}",
               f"Collect every unit named on the `After=` lines of the unit file `{d}/{unit}`. {tail}"]
        sol = (f"grep -h '^After=' {d}/{unit} | cut -d= -f2- | tr ' ' '\\n' | sed '/^$/d' | LC_ALL=C sort -u "
               f"> {ctx.out}")
    else:
        ask = [f"Which unit files in `{d}/` name `{unit}` on a `Requires=` or `Wants=` line? {tail}",
               f"Find the units of `{d}/` that directly depend on `{unit}` through `Requires=` or `Wants=` "
               f"(not `After=`). {tail}"]
        sol = (f"grep -lE '^(Requires|Wants)=(.* )?{re.escape(unit)}( |$)' {d}/* | xargs -n 1 basename "
               f"| LC_ALL=C sort > {ctx.out}")
    return StepSpec(instructions=ask, solution=sol, expected=lines(out), output=ctx.out,
                    output_dataset=derived_list(ctx, out, "unit names"))


for skill in (
    Skill("cron-match", "work out when cron entries fire (lists, ranges, steps, the day-field rule)", 1.5,
          "People read crontabs often but rarely evaluate schedules exactly; the OR rule for two restricted "
          "day fields is a famous trap.", frozenset({"cron"}), cron_match),
    Skill("date-arithmetic", "time arithmetic across UTC offsets (date -d, or datetime)", 3.0,
          "Converting timestamps to UTC and computing spans is common in log and data work and a classic "
          "source of off-by-an-hour bugs.", frozenset({"time"}), date_arithmetic),
    Skill("sed-inplace-edit", "change one key's value inside one section in place (sed -i with an address range)",
          6.0, "Editing a config value in place with sed is one of the most common ops actions; scoping the "
          "substitution to one section is the less common, necessary refinement.",
          frozenset({"config"}), sed_inplace_edit),
    Skill("ini-query", "read a key from a section of an INI file (configparser or a section-aware awk)", 4.0,
          "Reading a config value is routine; section-awareness is what separates it from a grep.",
          frozenset({"ini"}), ini_query),
    Skill("unit-deps", "trace systemd dependencies (Requires=/Wants=/After=) through unit files", 2.0,
          "Debugging why a unit starts (or fails) is regular Linux admin work, though usually done with "
          "systemctl list-dependencies on a live system rather than from files.",
          frozenset({"units"}), unit_deps),
):
    register_skill(skill)
