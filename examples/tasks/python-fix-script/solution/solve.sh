#!/bin/bash
# Reference solution: fix the three bugs in place.
#  1. csv.DictReader already consumed the header, so items[1:] dropped the first item;
#  2. shortfalls were kept as strings, so they sorted as text ("9" > "13");
#  3. reverse=True also reversed the SKU tie-break, which must stay ascending.
set -euo pipefail
f=/app/stock_report.py
sed -i \
    -e 's/for item in items\[1:\]:/for item in items:/' \
    -e 's/str(reorder - qty)/reorder - qty/' \
    -e 's/rows.sort(key=lambda r: (r\[2\], r\[0\]), reverse=True)/rows.sort(key=lambda r: (-r[2], r[0]))/' \
    "$f"
grep -q 'for item in items:' "$f"
grep -q 'key=lambda r: (-r\[2\], r\[0\])' "$f"
