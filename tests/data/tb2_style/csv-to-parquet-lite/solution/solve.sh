#!/bin/bash
# Reference solution for csv-to-parquet-lite.
set -euo pipefail
mkdir -p /app/output
python3 - <<'PY'
import csv
import json
from collections import defaultdict

from tabulate import tabulate

TYPES = {"sensor_id": "string", "timestamp": "string", "temperature_c": "float", "humidity_pct": "int"}
CAST = {"string": str, "int": int, "float": float}

with open("/app/data/readings.csv", newline="") as f:
    reader = csv.DictReader(f)
    names = reader.fieldnames
    rows = list(reader)

columns = {
    n: [CAST[TYPES[n]](r[n]) if r[n] != "" else None for r in rows] for n in names
}
doc = {
    "schema": [{"name": n, "type": TYPES[n]} for n in names],
    "num_rows": len(rows),
    "columns": columns,
}
with open("/app/output/readings.coljson", "w") as f:
    json.dump(doc, f)

temps = defaultdict(list)
for sid, t in zip(columns["sensor_id"], columns["temperature_c"]):
    if t is not None:
        temps[sid].append(t)
table = [[sid, round(sum(v) / len(v), 2)] for sid, v in sorted(temps.items())]
with open("/app/output/summary.md", "w") as f:
    f.write(tabulate(table, headers=["sensor_id", "mean_temperature_c"], tablefmt="github") + "\n")
PY
