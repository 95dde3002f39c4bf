"""Checks for csv-to-parquet-lite, runnable with plain python3 (no pytest needed).

Each test_* function raises AssertionError on failure; main() runs them all, prints a line per
test and exits 1 if any failed. Expected values are recomputed from a pristine copy of the CSV
in /tests, and the CSV under /app must be left unchanged.
"""

import csv
import hashlib
import json
import math
import sys
import traceback
from pathlib import Path

DATA = Path("/app/data/readings.csv")
COLJSON = Path("/app/output/readings.coljson")
SUMMARY = Path("/app/output/summary.md")
TESTS = Path(__file__).resolve().parent
TYPES = {
    "sensor_id": "string",
    "timestamp": "string",
    "temperature_c": "float",
    "humidity_pct": "int",
}


def _rows():
    with open(TESTS / "readings.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_input_unchanged():
    digest = hashlib.sha256(DATA.read_bytes()).hexdigest()
    assert digest == hashlib.sha256((TESTS / "readings.csv").read_bytes()).hexdigest()


def test_coljson_schema_and_rows():
    doc = json.loads(COLJSON.read_text())
    assert set(doc) == {"schema", "num_rows", "columns"}, sorted(doc)
    assert doc["schema"] == [{"name": n, "type": t} for n, t in TYPES.items()]
    assert doc["num_rows"] == len(_rows())


def test_coljson_values_typed():
    doc = json.loads(COLJSON.read_text())
    rows = _rows()
    for name, kind in TYPES.items():
        got = doc["columns"][name]
        assert len(got) == len(rows), name
        for value, row in zip(got, rows, strict=True):
            raw = row[name]
            if raw == "":
                assert value is None, (name, value)
            elif kind == "int":
                assert type(value) is int and value == int(raw), (name, value)
            elif kind == "float":
                assert isinstance(value, float | int) and not isinstance(value, bool), (name, value)
                assert math.isclose(value, float(raw), abs_tol=1e-9), (name, value)
            else:
                assert value == raw, (name, value)


def test_summary_table():
    from tabulate import tabulate

    temps = {}
    for row in _rows():
        if row["temperature_c"]:
            temps.setdefault(row["sensor_id"], []).append(float(row["temperature_c"]))
    table = [[sid, round(sum(v) / len(v), 2)] for sid, v in sorted(temps.items())]
    expected = tabulate(table, headers=["sensor_id", "mean_temperature_c"], tablefmt="github")
    assert SUMMARY.read_text().rstrip("\n") == expected


def main() -> int:
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASSED {name}")
        except Exception:  # any error, not just assertions, is a failed check
            failed += 1
            print(f"FAILED {name}")
            traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
