"""Project scenarios: a git repository with a config regression, a Python package with a bug.

Both are built from fixed identities, dates and contents, so every build of the image has
the same history and the same bug; expected answers come from the generator's own model of
that history (subjects, authors, files), never from commit hashes.
"""

from __future__ import annotations

import json
import random
import shlex
from datetime import datetime, timedelta

from evokit.catalog.base import Dataset, Scenario
from evokit.catalog.registry import register_scenario

# ----------------------------------------------------------------------------- git-repo
#: Authors of patches. Ben Ito appears under two addresses (a mail change mid-history), so
#: "commits by Ben Ito" differs from "commits by one address".
_AUTHORS = [("Ana Costa", "ana@example.org"), ("Ben Ito", "ben.ito@example.org"),
            ("Ben Ito", "bito@old-mail.example"), ("Chen Wu", "chen@example.org"),
            ("Dara Okafor", "dara@example.org")]
#: The maintainer commits every patch (and authors a few), so --committer is never the answer.
_MAINTAINER = ("Mira Salo", "mira@example.org")
_KEYS = ["workers", "timeout_s", "retries", "pool_size", "cache_ttl_s", "max_body_kb", "backlog",
         "keepalive_s", "queue_depth", "batch_size", "rate_limit", "port"]
_BAD_VALUES = ["0", "30s", "-1", "none", "1.5"]
_TOPICS = ["install", "upgrade", "backup", "metrics", "tls", "logging", "scaling", "troubleshooting"]
_HELPERS = ["parse_args", "load_config", "open_pool", "drain_queue", "retry_call", "format_status",
            "read_env", "close_pool"]
_REPO_START = datetime(2026, 2, 2, 9, 0)

CHECK_SCRIPT = """#!/bin/sh
# Validate app/settings.conf of the checkout in the current directory: every line must be
# `key = value` with a positive integer value. Exit status 0: good, 1: bad.
exec awk -F ' = ' 'NF != 2 || $2 !~ /^[0-9]+$/ || $2 + 0 == 0 { bad = 1 } END { exit bad }' app/settings.conf
"""


def _settings_text(values: dict[str, str]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in values.items())


def _commit_plan(rng: random.Random) -> list[tuple[str, str]]:
    """Kinds and keys of the commits after the initial one; exactly one ("bad", key)."""
    n_settings = rng.randint(4, 6)
    n_other = rng.randint(4, 8)
    bad_at = rng.randint(1, n_settings - 2)  # ≥ 1 settings change before and ≥ 1 after it
    bad_i = rng.randrange(len(_KEYS))
    # Later changes stay ≥ 3 lines away from the bad one, so `git revert` merges without conflict.
    far = [k for i, k in enumerate(_KEYS) if abs(i - bad_i) >= 3]
    near = [k for i, k in enumerate(_KEYS) if i != bad_i and k not in far]
    after = rng.sample(far, n_settings - 1 - bad_at)
    before = rng.sample([k for k in far + near if k not in after], bad_at)
    settings = [("tune", k) for k in before] + [("bad", _KEYS[bad_i])] + [("tune", k) for k in after]
    others = [rng.choice(["readme", "docs", "code"]) for _ in range(n_other)]
    # Interleave, keeping the order within each list (the bad commit stays between its neighbours).
    slots = sorted(rng.sample(range(n_settings + n_other), n_settings))
    plan, si, oi = [], 0, 0
    for pos in range(n_settings + n_other):
        if si < n_settings and pos == slots[si]:
            plan.append(settings[si])
            si += 1
        else:
            plan.append((others[oi], ""))
            oi += 1
    return plan


def make_git_repo(rng: random.Random) -> Dataset:
    settings = {k: str(rng.choice([1, 2, 4, 8, 16, 30, 60, 64, 128, 256, 8080])) for k in _KEYS}
    files = {
        "README.md": "# relay\n\nA small message relay service.\n",
        "app/settings.conf": _settings_text(settings),
        "app/main.py": '"""relay entry point."""\n\n\ndef main():\n    return 0\n',
    }
    topics, helpers = rng.sample(_TOPICS, len(_TOPICS)), rng.sample(_HELPERS, len(_HELPERS))
    t = _REPO_START
    commits = [{"subject": "Initial import", "author": _MAINTAINER[0], "email": _MAINTAINER[1],
                "date": t, "files": sorted(files), "snapshot": dict(files)}]
    bad_subject, before_bad = "", {}
    for kind, key in _commit_plan(rng):
        author, email = rng.choice(_AUTHORS + [_MAINTAINER])
        t += timedelta(hours=rng.randint(2, 40), minutes=rng.randint(0, 59))
        changed: dict[str, str] = {}
        if kind in ("tune", "bad"):
            if kind == "bad":
                before_bad = dict(settings)
                settings[key] = rng.choice(_BAD_VALUES)
            else:
                settings[key] = str(int(settings[key]) * rng.choice([2, 3, 4]) + rng.randint(1, 9))
            changed["app/settings.conf"] = _settings_text(settings)
            subject = f"Tune {key}"  # one style for good and bad changes: only the check tells them apart
            if kind == "bad":
                bad_subject = subject
        elif kind == "readme":
            topic = topics.pop()
            changed["README.md"] = files["README.md"] + f"\nSee the {topic} notes before deploying.\n"
            subject = f"Mention {topic} in README"
        elif kind == "docs":
            topic = topics.pop()
            changed[f"docs/{topic}.md"] = f"# {topic.title()}\n\nSteps for {topic} go here.\n"
            changed["README.md"] = files["README.md"] + f"\n- [{topic}](docs/{topic}.md)\n"
            subject = f"Add {topic} guide"
        else:
            name = helpers.pop()
            changed["app/main.py"] = files["app/main.py"] + f"\n\ndef {name}():\n    return None\n"
            subject = f"Add {name} helper"
        files.update(changed)
        commits.append({"subject": subject, "author": author, "email": email, "date": t,
                        "files": sorted(changed), "snapshot": changed})
    reverted = dict(settings)
    bad_key = bad_subject.removeprefix("Tune ")
    reverted[bad_key] = before_bad[bad_key]
    return Dataset(
        scenario="git-repo", main="repo", noun="git repository",
        files={"make-repo.sh": _build_script(commits).encode(), "check-settings.sh": CHECK_SCRIPT.encode()},
        records=[{k: (v.isoformat() if k == "date" else v) for k, v in c.items() if k != "snapshot"}
                 for c in commits],
        setup=("sh {dir}/make-repo.sh {dir}/repo && rm {dir}/make-repo.sh",),
        extra={"check": "check-settings.sh", "settings": "app/settings.conf", "bad": bad_subject,
               "reverted_settings": _settings_text(reverted)},
    )


def _build_script(commits: list[dict]) -> str:
    q = shlex.quote
    out = ["#!/bin/sh", "# Build the repository at image build time: fixed identities and dates.", "set -eu",
           "git config --system --add safe.directory '*'", 'mkdir -p "$1"', 'cd "$1"', "git init -q -b main",
           f"export GIT_COMMITTER_NAME={q(_MAINTAINER[0])} GIT_COMMITTER_EMAIL={q(_MAINTAINER[1])}"]
    for c in commits:
        for path, text in c["snapshot"].items():
            if "/" in path:
                out.append(f"mkdir -p {q(path.rsplit('/', 1)[0])}")
            out += [f"cat > {q(path)} <<'EOF_FILE'", text.rstrip("\n"), "EOF_FILE"]
        date = c["date"].strftime("%Y-%m-%d %H:%M:%S +0000")
        cdate = (c["date"] + timedelta(minutes=7)).strftime("%Y-%m-%d %H:%M:%S +0000")
        out += ["git add -A",
                f"GIT_AUTHOR_NAME={q(c['author'])} GIT_AUTHOR_EMAIL={q(c['email'])} GIT_AUTHOR_DATE={q(date)} "
                f"GIT_COMMITTER_DATE={q(cdate)} git commit -q -m {q(c['subject'])}"]
    return "\n".join(out) + "\n"


register_scenario(Scenario(
    "git-repo", "vcs", "a git repository (a dozen commits, several authors) with a config regression",
    prior=8.0,
    rationale="Git history is part of nearly every developer's terminal day; inspecting a log or undoing "
              "a commit is routine, so a repository is among the most common situations after plain files.",
    make=make_git_repo, offers=frozenset({"git"}),
))

# ------------------------------------------------------------------------ python-package
_SKUS = ["A-100", "A-215", "B-007", "B-310", "C-042", "C-118", "D-900", "E-555", "F-023", "G-404"]

PRICING = '''"""Order pricing helpers. All amounts are integer cents."""

DISCOUNT_THRESHOLD = {threshold}
DISCOUNT_PERCENT = {percent}


def line_total(line):
    """Price of one order line: quantity times unit price."""
    return line["qty"] * line["price"]


def subtotal(lines):
    """Sum of line_total over every line of the order."""
    total = 0
    for i in range(len(lines)):
        total += line_total(lines[i])
    return total


def discount(amount, threshold=DISCOUNT_THRESHOLD, percent=DISCOUNT_PERCENT):
    """Orders of at least `threshold` cents get `percent` % off, rounded down to a whole cent."""
    if amount >= threshold:
        return amount * percent // 100
    return 0


def top_skus(lines, n=3):
    """SKUs of the n lines (3 by default) with the largest line totals, largest first (ties: SKU ascending)."""
    ranked = sorted(lines, key=lambda line: (-line_total(line), line["sku"]))
    return [line["sku"] for line in ranked[:n]]
'''

CHECK_PY = '''"""Print the pricing summary of every order in orders.json (run: python3 check.py)."""

import json
from pathlib import Path

from shoplib import discount, subtotal, top_skus

orders = json.loads(Path(__file__).with_name("orders.json").read_text())
for order in orders:
    s = subtotal(order["lines"])
    d = discount(s)
    print(f"{order['id']} subtotal={s} discount={d} total={s - d} top={','.join(top_skus(order['lines']))}")
'''

#: bug name → (correct text, buggy text) in shoplib/pricing.py; the oracle swaps them back.
BUGS = {
    "off-by-one": ("range(len(lines))", "range(1, len(lines))"),
    "operator": ("if amount >= threshold:", "if amount > threshold:"),
    "default": ("def top_skus(lines, n=3):", "def top_skus(lines, n=2):"),
    "rounding": ("amount * percent // 100", "amount // 100 * percent"),
}


def pricing_summary(orders: list[dict], threshold: int, percent: int, bug: str | None = None) -> list[str]:
    """check.py's output lines, computed here; ``bug`` models the seeded bug (to make sure it shows)."""
    out = []
    for o in orders:
        lines = o["lines"][1:] if bug == "off-by-one" else o["lines"]
        s = sum(ln["qty"] * ln["price"] for ln in lines)
        hit = s > threshold if bug == "operator" else s >= threshold
        d = (s // 100 * percent if bug == "rounding" else s * percent // 100) if hit else 0
        n = 2 if bug == "default" else 3
        top = sorted(o["lines"], key=lambda ln: (-ln["qty"] * ln["price"], ln["sku"]))[:n]
        out.append(f"{o['id']} subtotal={s} discount={d} total={s - d} top={','.join(ln['sku'] for ln in top)}")
    return out


def make_python_package(rng: random.Random) -> Dataset:
    bug = rng.choice(sorted(BUGS))
    percent = rng.choice([5, 10, 15, 20])
    while True:  # until the bug changes the output (it nearly always does at once)
        orders = []
        for i in range(rng.randint(6, 10)):
            skus = rng.sample(_SKUS, rng.randint(1, 5))
            orders.append({"id": f"ORD-{1001 + i}", "lines": [
                {"sku": s, "qty": rng.randint(1, 5), "price": rng.randint(50, 5000)} for s in skus]})
        # The threshold equals one order's subtotal exactly: the `>=` boundary is exercised.
        threshold = sum(ln["qty"] * ln["price"] for ln in rng.choice(orders)["lines"])
        good = pricing_summary(orders, threshold, percent)
        if good != pricing_summary(orders, threshold, percent, bug):
            break
    correct, buggy = BUGS[bug]
    pricing = PRICING.format(threshold=threshold, percent=percent)
    assert pricing.count(correct) == 1, (bug, correct)
    return Dataset(
        scenario="python-package", main="check.py", noun="Python project (package shoplib, script check.py)",
        files={"check.py": CHECK_PY.encode(), "orders.json": (json.dumps(orders, indent=1) + "\n").encode(),
               "shoplib/__init__.py": b'from .pricing import discount, line_total, subtotal, top_skus  # noqa: F401\n',
               "shoplib/pricing.py": pricing.replace(correct, buggy).encode()},
        records=orders,
        extra={"bug": bug, "fix": (buggy, correct), "module": "shoplib/pricing.py", "output": good,
               "threshold": threshold, "percent": percent},
    )


register_scenario(Scenario(
    "python-package", "code", "a small Python package whose check script prints wrong results (seeded bug)",
    prior=7.0,
    rationale="Debugging a small Python project from the terminal (run it, read the code, patch it) is one of "
              "the most frequent agentic coding situations; the bug kinds (off-by-one, operator, default, "
              "rounding) are the everyday ones.",
    make=make_python_package, offers=frozenset({"python"}),
))
