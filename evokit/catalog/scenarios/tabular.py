"""Tabular scenarios: a quoted-CSV ledger (cut is wrong), a plain TSV inventory (cut is right)."""

from __future__ import annotations

import csv
import io
import random

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

_ACCOUNTS = ["ACME Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Ind", "Wayne Ent", "Vandelay"]
_MEMOS = ["Invoice {n}, net 30", "Refund, order {n}", "Consulting: Q{q}, phase {n}", "Hardware, rack {n}",
          'Travel "{n}" (client visit)', "Licenses, {n} seats", "Support, tier {q}"]
_CATEGORIES = ["services", "hardware", "travel", "software", "support"]

# A CSV reader that honours quotes: the technique quoted fields demand.
_PY_CSV = ("python3 -c 'import csv,sys; r=csv.DictReader(open(sys.argv[1], newline=\"\")); "
           "[print(row[sys.argv[2]]) for row in r]' {path} ")


def _ledger_csv(records: list[dict]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["date", "account", "memo", "category", "amount"], lineterminator="\n")
    w.writeheader()
    w.writerows(records)
    return buf.getvalue().encode()


def make_ledger(rng: random.Random) -> Dataset:
    records = []
    for _ in range(rng.randint(30, 70)):
        memo = rng.choice(_MEMOS).format(n=rng.randint(100, 999), q=rng.randint(1, 4))
        records.append({"date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                        "account": rng.choice(_ACCOUNTS), "memo": memo,
                        "category": rng.choice(_CATEGORIES), "amount": rng.randint(-500, 9000)})

    def select(f: Field, value: str) -> str:
        return ("python3 -c 'import csv,sys; r=csv.DictReader(open(sys.argv[1], newline=\"\")); "
                "w=csv.DictWriter(sys.stdout, r.fieldnames, lineterminator=\"\\n\"); w.writeheader(); "
                f"[w.writerow(row) for row in r if row[\"{f.name}\"] == sys.argv[2]]' {{path}} '{value}'")

    return Dataset(
        scenario="csv-ledger", main="ledger.csv", noun="CSV ledger with a header row (memo fields are quoted and contain commas)",
        files={"ledger.csv": _ledger_csv(records)}, records=records,
        fields=(
            Field("account", "account name", "category", _PY_CSV + "account"),
            Field("category", "expense category", "category", _PY_CSV + "category"),
            Field("amount", "amount (integer)", "number", _PY_CSV + "amount"),
        ),
        select=select, serialize=_ledger_csv,
    )


register_scenario(Scenario(
    "csv-ledger", "tabular", "a CSV ledger whose quoted memo fields contain commas", prior=6.0,
    rationale="CSV is everywhere, but quoted fields with embedded commas are a common trap rather than "
              "the norm; they force a real CSV parser instead of cut/awk -F,.",
    make=make_ledger, offers=frozenset({"rows", "category", "number", "file", "header"}),
))

_ITEMS = ["bolt", "nut", "washer", "gear", "spring", "bearing", "valve", "hinge", "pulley", "clamp"]
_SITES = ["north", "south", "east", "west"]


def _tsv(records: list[dict]) -> bytes:
    return "".join(f"{r['sku']}\t{r['item']}\t{r['site']}\t{r['qty']}\n" for r in records).encode()


def make_inventory(rng: random.Random) -> Dataset:
    records = [{"sku": f"SKU-{rng.randint(1000, 9999)}", "item": rng.choice(_ITEMS), "site": rng.choice(_SITES),
                "qty": rng.randint(0, 400)} for _ in range(rng.randint(30, 80))]
    col = {"sku": 1, "item": 2, "site": 3, "qty": 4}
    return Dataset(
        scenario="tsv-inventory", main="inventory.tsv", noun="tab-separated inventory (sku, item, site, quantity; no header)",
        files={"inventory.tsv": _tsv(records)}, records=records,
        fields=(
            Field("item", "item name (2nd column)", "category", "cut -f2 {path}"),
            Field("site", "warehouse site (3rd column)", "category", "cut -f3 {path}"),
            Field("qty", "quantity on hand (4th column)", "number", "cut -f4 {path}"),
        ),
        select=lambda f, v: f"awk -F '\\t' '${col[f.name]} == \"{v}\"' {{path}}",
        serialize=_tsv,
    )


register_scenario(Scenario(
    "tsv-inventory", "tabular", "a tab-separated inventory without a header", prior=7.0,
    rationale="Plain delimited text is the most common tabular form in shell work; cut and awk -F just work.",
    make=make_inventory, offers=frozenset({"rows", "category", "number", "file", "lines"}),
))
