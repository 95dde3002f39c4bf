#!/bin/bash
# Reference solution: run the shipped migrator, then query.
set -euo pipefail
python3 /app/scripts/migrate.py --db /app/db/app.db
python3 - <<'PY'
import sqlite3

con = sqlite3.connect("/app/db/app.db")
(name,) = con.execute("SELECT name FROM customers ORDER BY lifetime_cents DESC LIMIT 1").fetchone()
open("/app/db/top_customer.txt", "w").write(name + "\n")
PY
