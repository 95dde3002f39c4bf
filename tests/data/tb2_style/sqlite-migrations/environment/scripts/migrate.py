#!/usr/bin/env python3
"""Applies /app/migrations/NNNN_*.sql in order, recording each in schema_migrations."""
import argparse
import sqlite3
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--db", required=True)
ap.add_argument("--upto", type=int, default=None)
args = ap.parse_args()
con = sqlite3.connect(args.db)
con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)")
done = {v for (v,) in con.execute("SELECT version FROM schema_migrations")}
for path in sorted(Path("/app/migrations").glob("*.sql")):
    version = int(path.name.split("_")[0])
    if version in done or (args.upto is not None and version > args.upto):
        continue
    con.executescript(path.read_text())
    con.execute("INSERT INTO schema_migrations VALUES (?)", (version,))
    con.commit()
    print(f"applied {path.name}")
