"""Checks for sqlite-migrations: schema version, backfilled data, the report file."""
import sqlite3
from pathlib import Path

DB = "/app/db/app.db"


def test_all_migrations_recorded_once():
    con = sqlite3.connect(DB)
    assert [v for (v,) in con.execute("SELECT version FROM schema_migrations ORDER BY version")] == [1, 2, 3]


def test_backfill():
    con = sqlite3.connect(DB)
    rows = con.execute("SELECT name, lifetime_cents FROM customers ORDER BY id").fetchall()
    assert rows == [("Ada", 1750), ("Linus", 999)]


def test_top_customer():
    assert Path("/app/db/top_customer.txt").read_text() == "Ada\n"
