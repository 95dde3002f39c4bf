"""Record scenarios: nested JSON Lines events (jq territory) and a plain text list."""

from __future__ import annotations

import json
import random

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

_NAMES = ["ana", "ben", "chen", "dara", "eli", "fatima", "gus", "hana", "ivan", "jo"]
_COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "NG"]
_EVENTS = ["login", "logout", "purchase", "search", "error", "upload"]


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records).encode()


def make_events(rng: random.Random) -> Dataset:
    records = []
    for i in range(rng.randint(40, 90)):
        records.append({"id": i + 1, "event": rng.choice(_EVENTS),
                        "user": {"name": rng.choice(_NAMES), "geo": {"country": rng.choice(_COUNTRIES)}},
                        "metrics": {"duration_ms": rng.randint(5, 5000)}})
    return Dataset(
        scenario="jsonl-events", main="events.jsonl", noun="JSON Lines event stream (nested objects, one per line)",
        files={"events.jsonl": _jsonl(records)}, records=records,
        fields=(
            Field("event", "event type (.event)", "category", "jq -r '.event' {path}"),
            Field("user", "user name (.user.name)", "category", "jq -r '.user.name' {path}", ("user", "name")),
            Field("country", "user country (.user.geo.country)", "category", "jq -r '.user.geo.country' {path}",
                  ("user", "geo", "country")),
            Field("duration", "duration in ms (.metrics.duration_ms)", "number", "jq -r '.metrics.duration_ms' {path}",
                  ("metrics", "duration_ms")),
        ),
        select=lambda f, v: f"jq -c --sort-keys 'select(.{'.'.join(f.key or (f.name,))} == \"{v}\")' {{path}}",
        serialize=_jsonl,
    )


register_scenario(Scenario(
    "jsonl-events", "json", "a JSON Lines stream of nested event objects", prior=6.0,
    rationale="Structured JSON logs and API dumps are now routine; nesting makes grep/cut brittle and jq the tool.",
    make=make_events, offers=frozenset({"rows", "category", "number", "file", "lines", "json"}),
))

_HOST_WORDS = ["api", "db", "cache", "web", "auth", "queue", "search", "mail", "cdn", "metrics"]


def make_text_list(rng: random.Random) -> Dataset:
    items = [f"{rng.choice(_HOST_WORDS)}-{rng.randint(1, 6)}.{rng.choice(['prod', 'stage'])}.internal"
             for _ in range(rng.randint(30, 60))]
    return text_list_dataset(items, "hosts.txt", "list of host names, one per line")


def text_list_dataset(items: list[str], main: str, noun: str) -> Dataset:
    """A plain list of lines; also what aggregating steps produce for a later step to consume."""
    return Dataset(
        scenario="text-list", main=main, noun=noun,
        files={main: "".join(f"{x}\n" for x in items).encode()},
        records=[{"line": x} for x in items],
        fields=(Field("line", "line", "category", "cat {path}"),),
        select=lambda f, v: f"grep -Fx -- '{v}' {{path}}",
        serialize=lambda rs: "".join(f"{r['line']}\n" for r in rs).encode(),
    )


register_scenario(Scenario(
    "text-list", "text", "a plain list of lines (host names, or an earlier step's output)", prior=9.0,
    rationale="Line lists (host inventories, grep output, intermediate results) are the glue of shell "
              "work and the most common input of all.",
    make=make_text_list, offers=frozenset({"rows", "category", "file", "lines"}),
))
