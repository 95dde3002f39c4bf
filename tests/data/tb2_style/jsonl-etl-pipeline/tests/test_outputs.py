"""Checks for jsonl-etl-pipeline: outputs under /app/out; inputs and the /opt lookup unchanged."""
import hashlib
import json
from pathlib import Path

OUT = Path("/app/out")


def test_revenue():
    assert json.loads((OUT / "revenue_by_country.json").read_text()) == {"Germany": 1250, "France": 1300}


def test_rejected():
    assert (OUT / "rejected.txt").read_text().split() == [
        "events-1.jsonl:3", "events-1.jsonl:4", "events-2.jsonl:1", "events-2.jsonl:3"]


def test_lookup_unchanged():
    digest = hashlib.sha256(Path("/opt/lookup/countries.json").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(Path("/tests/countries.json").read_bytes()).hexdigest()
