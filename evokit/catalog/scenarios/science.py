"""Data-file scenarios from science and instrumentation: FASTA, sensor CSV, base64 payloads.

Their quirks are about what a record is and what a value means: a FASTA record spans
several 60-column lines; sensor timestamps carry different UTC offsets (one site changes
offset mid-file at a DST switch, some gateways switch to UTC notation); payloads only make
sense once decoded.
"""

from __future__ import annotations

import base64
import json
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

# -------------------------------------------------------------------------------- FASTA
_WRAP = 60
_ORGANISMS = ["Escherichia coli plasmid fragment", "Bacillus subtilis 16S region", "synthetic construct",
              "Saccharomyces cerevisiae chr IV segment", "environmental sample, soil", "phage lambda region"]
_MOTIFS = [  # (description, ERE); fixed length, no alternation: grep -oE and Python re agree
    ("EcoRI restriction site (`GAATTC`)", "GAATTC"),
    ("GGNCC site (`GG`, any one base, `CC`)", "GG[ACGT]CC"),
    ("TATA box variant (`TATA`, A or T, `A`, A or T)", "TATA[AT]A[AT]"),
]
# Joins each record's lines into one line per sequence: the step per-line tools skip.
UNWRAP = "awk '/^>/ {if (s != \"\") print s; s = \"\"; next} {s = s $0} END {if (s != \"\") print s}' {path}"


def _instance(rng: random.Random, ere: str) -> str:
    out, i = [], 0
    while i < len(ere):
        if ere[i] == "[":
            j = ere.index("]", i)
            out.append(rng.choice(ere[i + 1:j]))
            i = j + 1
        else:
            out.append(ere[i])
            i += 1
    return "".join(out)


def _fasta(records: list[dict]) -> bytes:
    out = []
    for r in records:
        out.append(f">{r['id']} {r['desc']}")
        out += [r["seq"][i:i + _WRAP] for i in range(0, len(r["seq"]), _WRAP)]
    return ("\n".join(out) + "\n").encode()


def _gc_tie(seq: str) -> bool:
    """True if the GC percentage sits exactly halfway between two 2-decimal values (rounding ambiguous)."""
    gc = sum(c in "GC" for c in seq)
    return (Fraction(10000 * gc, len(seq)) % 1) == Fraction(1, 2)


def make_fasta(rng: random.Random) -> Dataset:
    n = rng.randint(8, 13)
    prefix = rng.choice(["contig", "read", "scaffold", "seq"])
    seqs = []
    for _ in range(n):
        gc = rng.uniform(0.3, 0.7)
        w = [(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2]
        seqs.append(list("".join(rng.choices("ACGT", w, k=rng.randint(70, 400)))))
    # Plant each motif across a line break (and once inside a line), so that per-line grep misses some.
    for _, ere in _MOTIFS:
        for spans in (True, True, False):
            s = rng.choice([x for x in seqs if len(x) > _WRAP + 10])
            inst = _instance(rng, ere)
            if spans:
                pos = _WRAP * rng.randint(1, (len(s) - len(inst)) // _WRAP) - rng.randint(1, len(inst) - 1)
            else:
                pos = rng.randrange(0, len(s) - len(inst))
            s[pos:pos + len(inst)] = inst
    seqs = ["".join(s) for s in seqs]
    for i, s in enumerate(seqs):
        while _gc_tie(s):
            s += "A"
        seqs[i] = s
    ids = [f"{prefix}_{k:03d}" for k in sorted(rng.sample(range(1, 200), n))]
    records = [{"id": i, "desc": rng.choice(_ORGANISMS), "seq": s, "length": len(s),
                "gc": sum(c in "GC" for c in s)} for i, s in zip(ids, seqs, strict=True)]
    data = _fasta(records)
    # Keep only motifs where the per-line technique gives a different answer (guaranteed by the plants,
    # unless a later plant overwrote an earlier one).
    per_line = [ln for ln in data.decode().splitlines() if not ln.startswith(">")]
    patterns = [(d, e) for d, e in _MOTIFS
                if [m for s in seqs for m in re.findall(e, s)] != [m for ln in per_line for m in re.findall(e, ln)]]
    return Dataset(
        scenario="fasta", main="sequences.fa", noun="FASTA file of DNA sequences (sequence lines wrapped at 60 columns)",
        files={"sequences.fa": data}, records=records,
        fields=(
            Field("id", "sequence id (header up to the first space, without `>`)", "text",
                  "grep '^>' {path} | cut -d' ' -f1 | cut -c2-"),
            Field("length", "sequence length in bases", "number",
                  "awk '/^>/ {if (id) print n; id = 1; n = 0; next} {n += length($0)} END {print n}' {path}"),
        ),
        extra={"regex": {"text": "\n".join(seqs) + "\n", "text_cmd": UNWRAP, "patterns": patterns,
                         "scope": "in the DNA sequences (scan each record's whole sequence, not the headers, "
                                  "left to right)"}},
    )


register_scenario(Scenario(
    "fasta", "bio", "a FASTA file whose sequences are wrapped over several lines", prior=2.0,
    rationale="FASTA is the lingua franca of bioinformatics and shell one-liners over it are common there, "
              "but it is a niche format in terminal work overall; its multi-line records defeat per-line tools.",
    make=make_fasta, offers=frozenset({"fasta", "text", "rows", "number", "file"}),
))

# --------------------------------------------------------------------------- sensor CSV
_BERLIN_DST = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # CET → CEST
_SITES = {  # site → offset rule (UTC datetime → timedelta)
    "berlin": lambda t: timedelta(hours=1 if t < _BERLIN_DST else 2),
    "newyork": lambda t: timedelta(hours=-4),
    "pune": lambda t: timedelta(hours=5, minutes=30),
    "tokyo": lambda t: timedelta(hours=9),
    "reykjavik": lambda t: timedelta(0),
}
_KINDS = {"temp": (150, 260), "hum": (30, 90), "power": (200, 4000)}
_START = datetime(2026, 3, 28, 17, 0, tzinfo=UTC)
_HOURS = 38


def _iso(t: datetime, site: str, utc: bool) -> str:
    if utc or site == "reykjavik":
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    return t.astimezone(timezone(_SITES[site](t))).isoformat()


_SENSOR_COLS = {"timestamp": 1, "sensor": 2, "site": 3, "value": 4}


def _sensor_csv(records: list[dict]) -> bytes:
    return ("timestamp,sensor,site,value\n" + "".join(
        f"{r['timestamp']},{r['sensor']},{r['site']},{r['value']}\n" for r in records)).encode()


def make_sensor_csv(rng: random.Random) -> Dataset:
    sites = rng.sample(sorted(_SITES), rng.randint(3, 5))
    if "berlin" not in sites:
        sites[0] = "berlin"
    sensors = [(f"{kind}-{site[:3]}-{k}", site, kind) for site in sites
               for k, kind in enumerate(rng.sample(sorted(_KINDS), rng.randint(1, 2)), 1)]
    rows = []
    for name, site, kind in sensors:
        t = _START + timedelta(minutes=rng.randrange(120))
        # Some gateways were reconfigured mid-file to report in UTC ("Z"): one sensor, two notations.
        switch = _START + timedelta(hours=rng.randint(8, 30)) if rng.random() < 0.35 else None
        while t < _START + timedelta(hours=_HOURS):
            rows.append((t, name, site, rng.randint(*_KINDS[kind]), switch is not None and t >= switch))
            t += timedelta(minutes=rng.randint(70, 200))
    # Arrival order: by true time, with a little jitter (late uploads), so the file is not quite sorted.
    rows.sort(key=lambda r: r[0] + timedelta(minutes=rng.randint(0, 90)))
    records = [{"timestamp": _iso(t, site, utc), "sensor": name, "site": site, "value": v, "utc": t.isoformat()}
               for t, name, site, v, utc in rows]
    return Dataset(
        scenario="sensor-csv", main="readings.csv",
        noun="CSV of sensor readings with a header row (ISO 8601 timestamps with UTC offsets)",
        files={"readings.csv": _sensor_csv(records)}, records=records,
        fields=(
            Field("sensor", "sensor name (2nd column)", "category", "tail -n +2 {path} | cut -d, -f2"),
            Field("site", "site name (3rd column)", "category", "tail -n +2 {path} | cut -d, -f3"),
            Field("value", "reading value (4th column, integer)", "number", "tail -n +2 {path} | cut -d, -f4"),
            Field("timestamp", "timestamp (1st column)", "time", "tail -n +2 {path} | cut -d, -f1"),
        ),
        select=lambda f, v: f"awk -F, 'NR == 1 || ${_SENSOR_COLS[f.name]} == \"{v}\"' {{path}}",
        serialize=_sensor_csv,
    )


register_scenario(Scenario(
    "sensor-csv", "timeseries", "a CSV of timestamped sensor readings with mixed UTC offsets", prior=3.0,
    rationale="Timestamped CSV exports (IoT, monitoring, instruments) are common; mixed UTC offsets and a "
              "DST switch are realistic and make string comparison of timestamps wrong.",
    make=make_sensor_csv, offers=frozenset({"rows", "category", "number", "file", "lines", "time", "header"}),
))

# ------------------------------------------------------------------------ encoded blobs
_EVENTS = ["checkout", "login", "refund", "export", "sync"]
_USERS = ["alice", "bob", "carol", "dmitri", "erin"]
_LEVELS = ["INFO", "INFO", "WARN", "ERROR"]


def _payload(rng: random.Random, kind: str) -> str:
    if kind == "json":
        doc = {"event": rng.choice(_EVENTS), "user": rng.choice(_USERS), "ms": rng.randint(3, 4000),
               "status": rng.choice(["ok", "ok", "timeout", "denied"])}
        return json.dumps(doc, sort_keys=True) + ("\n" if rng.random() < 0.5 else "")
    if kind == "text":
        return "".join(f"2026-03-02 0{rng.randint(0, 9)}:{rng.randrange(60):02d}:{rng.randrange(60):02d} "
                       f"{rng.choice(_LEVELS)} {rng.choice(_EVENTS)} by {rng.choice(_USERS)}\n"
                       for _ in range(rng.randint(2, 4)))
    if kind == "csv":
        return "sku,qty\n" + "".join(f"SKU-{rng.randint(1000, 9999)},{rng.randint(0, 50)}\n"
                                     for _ in range(rng.randint(2, 4)))
    return (f"name: {rng.choice(_EVENTS)}-svc\nreplicas: {rng.randint(1, 6)}\n"
            f"image: registry.example.com/{rng.choice(_EVENTS)}:1.{rng.randint(0, 9)}.{rng.randint(0, 20)}\n")


def _blobs(records: list[dict]) -> bytes:
    return "".join(f"{r['id']}\t{r['type']}\t{r['b64']}\n" for r in records).encode()


def make_blobs(rng: random.Random) -> Dataset:
    prefix = rng.choice(["msg", "blob", "evt"])
    nums = rng.sample(range(1, 400), rng.randint(14, 24))
    short = rng.randint(1, 39)  # an id that is a prefix of another: naive grep picks both
    nums = [short, short * 10 + rng.randint(0, 9)] + [x for x in nums if x not in (short,)]
    nums = list(dict.fromkeys(nums))
    rng.shuffle(nums)
    records = []
    for n in nums:
        kind = rng.choice(["json", "json", "text", "csv", "yaml"])
        payload = _payload(rng, kind)
        records.append({"id": f"{prefix}-{n}", "type": kind, "payload": payload,
                        "b64": base64.b64encode(payload.encode()).decode()})
    ids = [r["id"] for r in records]
    prefixed = sorted(i for i in ids if any(j != i and j.startswith(i) for j in ids))
    return Dataset(
        scenario="encoded-blobs", main="payloads.tsv",
        noun="tab-separated file of base64-encoded payloads (id, content type, base64 payload; no header)",
        files={"payloads.tsv": _blobs(records)}, records=records,
        fields=(
            Field("id", "payload id (1st column)", "text", "cut -f1 {path}"),
            Field("type", "content type (2nd column)", "category", "cut -f2 {path}"),
        ),
        select=lambda f, v: f"awk -F '\\t' '${1 if f.name == 'id' else 2} == \"{v}\"' {{path}}",
        serialize=_blobs,
        extra={"prefixed_ids": prefixed,
               "tokens": ["ERROR", "timeout", "denied", "refund", "replicas", "SKU-", "alice", "carol"]},
    )


register_scenario(Scenario(
    "encoded-blobs", "text", "a file of base64-encoded payloads, one per line with ids", prior=2.5,
    rationale="Base64 blobs turn up in Kubernetes secrets, JWTs, e-mail and API dumps; decoding one is a "
              "frequent small chore, searching inside many of them less so.",
    make=make_blobs, offers=frozenset({"base64", "rows", "category", "file", "lines"}),
))
