#!/bin/bash
# Reference solution: group by sensor with the csv module.
set -euo pipefail
mkdir -p /app/result
python3 - <<'PY'
import csv
import glob
import json

vals = {}
for path in glob.glob("/app/data/*.csv"):
    for r in csv.DictReader(open(path)):
        vals.setdefault(r["sensor"], []).append(float(r["value"]))
stats = {s: {"count": len(v), "mean": round(sum(v) / len(v), 2), "max": max(v)} for s, v in vals.items()}
json.dump(stats, open("/app/result/stats.json", "w"))
PY
