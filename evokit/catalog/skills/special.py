"""Skills with their own tools: git history queries, revert and bisect; a Python bug fix; SQL.

Each renderer reads the facts its scenario recorded (commit subjects and files, the seeded
bug, the shop's rows) and computes the expected output from them in Python; the oracle
uses the tool the skill is about (git log, git revert, git bisect run, sed, sqlite3).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from evokit.catalog.base import Skill, StepContext, StepSpec, lines
from evokit.catalog.registry import register_skill
from evokit.catalog.scenarios.records import text_list_dataset


def _c(s: str) -> bytes:  # LC_ALL=C (and SQLite BINARY) order
    return s.encode()


def _find_commit(repo: str, subject: str) -> str:
    """Shell: the hash of the commit with exactly this subject."""
    return f"$(git -C {repo} log --format='%H%x09%s' | awk -F '\\t' '$2 == \"{subject}\" {{print $1}}')"


# --------------------------------------------------------------------------------- git
def git_log_query(ctx: StepContext) -> StepSpec:
    recs, repo, out = ctx.dataset.records, ctx.path, ctx.out
    query = ctx.choose("query", ["author", "file", "commit-files"])
    if query == "author":
        counts = Counter(r["author"] for r in recs)
        who = ctx.choose("author", sorted(a for a, n in counts.items() if n >= 2) or sorted(counts))
        result = [r["subject"] for r in recs if r["author"] == who]
        sol = f"git -C {repo} log --reverse --author='^{who} <' --format=%s > {out}"
        ask = [f"In the git repository `{repo}`, list the subjects of every commit *authored* by {who} (any "
               f"e-mail address), oldest first, one per line, in `{out}`.",
               f"Write to `{out}` the subject line of each commit on `main` of `{repo}` whose author is {who}, "
               f"in chronological order (oldest first), one subject per line."]
    elif query == "file":
        counts = Counter(p for r in recs for p in r["files"])
        path = ctx.choose("path", sorted(p for p, n in counts.items() if n >= 2))
        result = [r["subject"] for r in recs if path in r["files"]]
        sol = f"git -C {repo} log --reverse --format=%s -- {path} > {out}"
        ask = [f"Which commits of the git repository `{repo}` changed the file `{path}`? Write their subjects to "
               f"`{out}`, oldest first, one per line.",
               f"List, oldest first, the subject line of every commit in `{repo}` that touched `{path}`; save the "
               f"list (one subject per line) to `{out}`."]
    else:
        subject = ctx.choose("subject", [r["subject"] for r in recs if len(r["files"]) >= 2])
        result = sorted(next(r["files"] for r in recs if r["subject"] == subject), key=_c)
        sol = (f"git -C {repo} show --pretty=format: --name-only {_find_commit(repo, subject)} | sed '/^$/d' "
               f"| LC_ALL=C sort > {out}")
        ask = [f"In the git repository `{repo}`, find the commit with subject `{subject}` and write the paths of "
               f"the files it changed (relative to the repository root) to `{out}`, one per line, in byte order.",
               f"Which files did the commit `{subject}` of `{repo}` modify or add? List their repository-relative "
               f"paths in `{out}`, sorted with LC_ALL=C, one per line."]
    return StepSpec(instructions=ask, solution=sol, expected=lines(result), output=out,
                    output_dataset=text_list_dataset(result, f"step{ctx.index}.txt", f"git {query} query result"))


def git_revert(ctx: StepContext) -> StepSpec:
    ds, repo, out = ctx.dataset, ctx.path, ctx.out
    bad, conf = ds.extra["bad"], ds.extra["settings"]
    sol = (f"git -C {repo} -c user.name='Evokit Oracle' -c user.email=oracle@example.invalid revert --no-edit "
           f"{_find_commit(repo, bad)} > /dev/null\n"
           f"git -C {repo} show HEAD:{conf} > {out}")
    return StepSpec(
        instructions=[
            f"In the git repository `{repo}`, the commit with subject `{bad}` broke `{conf}`. Undo that commit "
            f"with a new commit on top of `main` (keep every later commit; do not rewrite history), then write the "
            f"content of `{conf}` as committed at HEAD to `{out}`.",
            f"The change `{bad}` in `{repo}` was a mistake. Revert it on branch `main` as a new commit, leaving the "
            f"later history in place, and save the resulting committed `{conf}` (its content at HEAD) as `{out}`.",
        ],
        solution=sol, expected=ds.extra["reverted_settings"].encode(), output=out)


def git_bisect(ctx: StepContext) -> StepSpec:
    ds, repo, out = ctx.dataset, ctx.path, ctx.out
    check = f"{ctx.data_dir}/{ds.extra['check']}"
    sol = (f"git -C {repo} bisect start HEAD $(git -C {repo} rev-list --max-parents=0 HEAD) > /dev/null\n"
           f"git -C {repo} bisect run sh {check} > /dev/null\n"
           f"git -C {repo} log -1 --format=%s refs/bisect/bad > {out}\n"
           f"git -C {repo} bisect reset > /dev/null 2>&1")
    return StepSpec(
        instructions=[
            f"The check `{check}` (run it from the root of a checkout; exit status 0 means good) passes on the "
            f"first commit of the git repository `{repo}` but fails on the tip of `main`. Find the first commit "
            f"at which it fails and write that commit's subject line to `{out}`; leave the repository on `main`.",
            f"Somewhere in the history of `{repo}` a commit made `{check}` start failing (the script exits 0 on a "
            f"good checkout when run from the repository root; the first commit is good, `main` is bad). Write the "
            f"subject of the first bad commit to `{out}`, and leave `main` checked out.",
        ],
        solution=sol, expected=lines([ds.extra["bad"]]), output=out)


# ------------------------------------------------------------------------------ python
def _sed_escape(s: str, pattern: bool) -> str:
    special = "\\/.*[]^$&" if pattern else "\\/&"
    return "".join("\\" + ch if ch in special else ch for ch in s)


def python_bugfix(ctx: StepContext) -> StepSpec:
    ds, d, out = ctx.dataset, ctx.data_dir, ctx.out
    buggy, correct = ds.extra["fix"]
    module = ds.extra["module"]
    sol = (f"sed -i 's/{_sed_escape(buggy, True)}/{_sed_escape(correct, False)}/' {d}/{module}\n"
           f"python3 {d}/check.py > {out}")
    return StepSpec(
        instructions=[
            f"`python3 check.py` in `{d}` prints a wrong pricing summary because of a bug in the `shoplib` "
            f"package (its docstrings describe the intended behaviour). Fix the bug in `shoplib` (leave `check.py` "
            f"and `orders.json` unchanged), then save the output of `python3 {ctx.path}` to `{out}`.",
            f"The Python project in `{d}` has a bug in the package `shoplib`: `check.py` reports wrong numbers. "
            f"Repair the package so that it does what its docstrings say, without editing `check.py` or the data, "
            f"and write what `python3 {ctx.path}` prints afterwards to `{out}`.",
        ],
        solution=sol, expected=lines(ds.extra["output"]), output=out)


# --------------------------------------------------------------------------------- sql
def _sqlite(db: str, sql: str, out: str) -> str:
    return f'sqlite3 -noheader -list {db} "{sql}" > {out}'


_ROWS = "one row per line, columns separated by `|` (sqlite3's default list output), no header"


def sql_query(ctx: StepContext) -> StepSpec:
    recs, db, out = ctx.dataset.records, ctx.path, ctx.out
    query = ctx.choose("query", ["status-amount", "unshipped"])
    if query == "status-amount":
        status = ctx.choose("status", sorted({r["status"] for r in recs}))
        # The bound is an amount that occurs: `>=` and `>` give different answers.
        floor = ctx.choose("min_amount", sorted({r["amount"] for r in recs if r["status"] == status}))
        rows = sorted((r for r in recs if r["status"] == status and r["amount"] >= floor),
                      key=lambda r: (-r["amount"], r["id"]))
        result = [f"{r['id']}|{r['amount']}" for r in rows]
        sql = (f"SELECT id, amount FROM orders WHERE status = '{status}' AND amount >= {floor} "
               "ORDER BY amount DESC, id")
        ask = [f"Query the SQLite database `{db}`: the orders with status `{status}` and an amount of at least "
               f"{floor}, as `id|amount`, largest amount first (ties: smaller id first); {_ROWS}. Save to `{out}`.",
               f"From table `orders` in `{db}`, select id and amount of every order whose status is `{status}` and "
               f"whose amount is {floor} or more; order by amount descending, then id ascending; write the rows "
               f"to `{out}` ({_ROWS})."]
    else:
        rows = sorted((r for r in recs if r["shipped_on"] is None), key=lambda r: (r["placed_on"], r["id"]))
        result = [f"{r['id']}|{r['placed_on']}|{r['status']}" for r in rows]
        sql = "SELECT id, placed_on, status FROM orders WHERE shipped_on IS NULL ORDER BY placed_on, id"
        ask = [f"In the SQLite database `{db}`, find the orders that have no ship date recorded (column "
               f"`shipped_on`). Write `id|placed_on|status` for each to `{out}`, oldest `placed_on` first (ties: "
               f"smaller id first); {_ROWS}.",
               f"Which orders in `{db}` were never given a `shipped_on` date? Save their id, placed_on and status "
               f"to `{out}` ({_ROWS}), sorted by placed_on, then id."]
    return StepSpec(instructions=ask, solution=_sqlite(db, sql, out), expected=lines(result), output=out)


def sql_join_aggregate(ctx: StepContext) -> StepSpec:
    ds, db, out = ctx.dataset, ctx.path, ctx.out
    live = [r for r in ds.records if r["status"] != "cancelled"]
    query = ctx.choose("query", ["country", "customer"])
    count: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    key = "country" if query == "country" else "customer"
    for r in live:
        count[r[key]] += 1
        total[r[key]] += r["amount"]
    if query == "country":
        keys = sorted(count, key=lambda k: (-total[k], _c(k)))
        sql = ("SELECT c.country, COUNT(*), SUM(o.amount) FROM orders o JOIN customers c ON c.id = o.customer_id "
               "WHERE o.status != 'cancelled' GROUP BY c.country ORDER BY SUM(o.amount) DESC, c.country")
        ask = [f"Using the SQLite database `{db}` (tables `customers` and `orders`), compute for each customer "
               f"country the number of orders and their total amount, leaving out cancelled orders. Write "
               f"`country|orders|total` rows to `{out}`, highest total first (ties: country in byte order); "
               f"{_ROWS}.",
               f"Join orders to their customers in `{db}` and aggregate per customer country, ignoring orders with "
               f"status `cancelled`: `country|number of orders|sum of amount`, sorted by the sum descending, "
               f"then country. Save to `{out}` ({_ROWS})."]
    else:
        keys = sorted((c["name"] for c in ds.extra["customers"]), key=_c)
        sql = ("SELECT c.name, COUNT(o.id), COALESCE(SUM(o.amount), 0) FROM customers c LEFT JOIN orders o "
               "ON o.customer_id = c.id AND o.status != 'cancelled' GROUP BY c.id ORDER BY c.name")
        ask = [f"For every customer in the SQLite database `{db}` (including customers without any orders), "
               f"report the number of their orders that are not cancelled and the total amount of those orders "
               f"(0 when there are none): `name|orders|total`, sorted by name in byte order; {_ROWS}. Save to "
               f"`{out}`.",
               f"List each customer of `{db}` with the count and summed amount of their non-cancelled orders, "
               f"keeping customers that have none (count 0, total 0). Write `name|orders|total` rows ordered by "
               f"name (byte order) to `{out}` ({_ROWS})."]
    result = [f"{k}|{count[k]}|{total[k]}" for k in keys]
    return StepSpec(instructions=ask, solution=_sqlite(db, sql, out), expected=lines(result), output=out)


_GIT = frozenset({"git"})
for skill in (
    Skill("git-log-query", "query history: commits by an author, commits touching a file, files of a commit", 5.0,
          "Reading history with git log filters (--author, -- path, --name-only) is a daily developer task.",
          _GIT, git_log_query),
    Skill("git-revert", "undo a published commit with git revert, keeping later history", 3.0,
          "Reverting a bad commit happens weekly in most teams; doing it without clobbering later changes "
          "(rather than checking out an old file) is the skill.", _GIT, git_revert),
    Skill("git-bisect", "find the first bad commit with git bisect run and a check script", 1.5,
          "Bisecting is a well-known but rarely used technique: most developers reach for it a few times a "
          "year, and automating it with `bisect run` rarer still.", _GIT, git_bisect),
    Skill("python-bugfix", "find and fix a seeded bug in a small Python package, then rerun its script", 6.0,
          "Fixing a small bug so a script gives the right output is the core loop of coding agents and of "
          "everyday programming.", frozenset({"python"}), python_bugfix),
    Skill("sql-query", "a WHERE / ORDER BY query with the sqlite3 CLI (NULL-aware)", 4.0,
          "Ad-hoc SELECTs are the most common database interaction; IS NULL versus = NULL is the classic trap.",
          frozenset({"sql"}), sql_query),
    Skill("sql-join-aggregate", "JOIN two tables and GROUP BY (inner, or LEFT JOIN keeping empty groups)", 2.5,
          "Joins with aggregates are routine for analysts but a step up for general terminal users; LEFT JOIN "
          "with the filter in ON rather than WHERE is a frequent mistake.", frozenset({"sql"}), sql_join_aggregate),
):
    register_skill(skill)
