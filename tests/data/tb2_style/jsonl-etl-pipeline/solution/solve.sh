#!/bin/bash
# Reference solution: read the config, validate each line, aggregate by country name.
set -euo pipefail
mkdir -p /app/out
python3 - <<'PY'
import glob
import json
import os

cfg = json.load(open("/app/etl/config.json"))
names = json.load(open(cfg["lookup"]))
revenue, rejected = {}, []
for path in sorted(glob.glob(cfg["inputs"])):
    for n, line in enumerate(open(path), 1):
        try:
            ev = json.loads(line)
            ok = isinstance(ev.get("amount_cents"), int) and ev["amount_cents"] >= 0 and ev.get("country") in names
        except json.JSONDecodeError:
            ok = False
        if not ok:
            rejected.append(f"{os.path.basename(path)}:{n}")
            continue
        name = names[ev["country"]]
        revenue[name] = revenue.get(name, 0) + ev["amount_cents"]
json.dump(revenue, open("/app/out/revenue_by_country.json", "w"))
open("/app/out/rejected.txt", "w").write("".join(r + "\n" for r in sorted(rejected)))
PY
