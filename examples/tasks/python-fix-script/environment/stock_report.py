#!/usr/bin/env python3
"""Restock report for a warehouse inventory CSV.

Usage: python3 stock_report.py [INVENTORY_CSV]    (default: /app/inventory.csv)

The CSV has a header row `sku,name,qty,reorder_level`. An item needs restocking when its qty is
below its reorder_level; its shortfall is reorder_level - qty. The report lists those items,
largest shortfall first (equal shortfalls in ascending SKU order), then the number of items and
the total units needed.
"""

import csv
import sys


def load_items(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def shortfalls(items):
    out = []
    for item in items[1:]:
        qty = int(item["qty"])
        reorder = int(item["reorder_level"])
        if qty < reorder:
            out.append((item["sku"], item["name"], str(reorder - qty)))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/app/inventory.csv"
    rows = shortfalls(load_items(path))
    rows.sort(key=lambda r: (r[2], r[0]), reverse=True)
    for sku, name, short in rows:
        print(f"{sku}  {name:<20} {short:>4}")
    print(f"items: {len(rows)}")
    print(f"units needed: {sum(int(r[2]) for r in rows)}")


if __name__ == "__main__":
    main()
