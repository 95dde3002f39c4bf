"""Comparing lineage stores across runs: what two runs of the same evolution must agree on."""

from __future__ import annotations

import json
from collections.abc import Iterable

#: Fields that depend on the clock or the endpoint's accounting, at any depth of a record.
CLOCK_FIELDS = ("seconds", "usage", "timings")


def timeless_records(records: Iterable[dict]) -> list[str]:
    """A store's records without what depends on the clock (durations at any depth, usage), sorted."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in CLOCK_FIELDS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return sorted(json.dumps(strip(r), sort_keys=True) for r in records)
