"""Storage scenarios: a SQLite shop database, a release tarball, a directory tree with metadata.

What the agent sees is made at image build time where bytes alone cannot carry it: the
database from SQL (the .sql is removed afterwards), file times and modes with touch/chmod.
"""

from __future__ import annotations

import gzip
import io
import random
import shlex
import tarfile
from datetime import UTC, date, datetime, timedelta

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

# ----------------------------------------------------------------------------- sqlite-db
_CUSTOMERS = ["Ana Costa", "Ben Ito", "Chen Wu", "Dara Okafor", "Eli Brandt", "Fatima Zahra", "Gus Lind",
              "Hana Sato", "Ivan Petrov", "Jo Meyer"]
_COUNTRIES = ["DE", "FR", "US", "JP", "BR"]
_STATUS = ["pending", "shipped", "delivered", "delivered", "delivered", "cancelled", "returned"]


def _sql_str(v) -> str:
    return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)


def make_sqlite_db(rng: random.Random) -> Dataset:
    names = rng.sample(_CUSTOMERS, rng.randint(6, 9))
    ids = rng.sample(range(1, 40), len(names))
    customers = [{"id": i, "name": n, "country": rng.choice(_COUNTRIES),
                  "joined": (date(2024, 1, 1) + timedelta(days=rng.randrange(700))).isoformat()}
                 for i, n in zip(ids, names, strict=True)]
    # customers[0] never orders and customers[1] only cancels: LEFT JOIN and ON-vs-WHERE matter.
    cancelling, active = customers[1], customers[2:]
    orders = []
    for oid in range(1, rng.randint(25, 40) + 1):
        c = cancelling if rng.random() < 0.1 or oid == 1 else rng.choice(active)
        status = "cancelled" if c is cancelling else rng.choice(_STATUS)
        placed = date(2026, 1, 2) + timedelta(days=rng.randrange(80))
        shipped = None if status in ("pending", "cancelled") else placed + timedelta(days=rng.randint(1, 6))
        orders.append({"id": oid, "customer_id": c["id"], "customer": c["name"], "country": c["country"],
                       "placed_on": placed.isoformat(), "shipped_on": shipped and shipped.isoformat(),
                       "status": status, "amount": rng.randint(5, 900)})
    sql = ["CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL, "
           "joined TEXT NOT NULL);",
           "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), "
           "placed_on TEXT NOT NULL, shipped_on TEXT, status TEXT NOT NULL, amount INTEGER NOT NULL);",
           "BEGIN;"]
    sql += [f"INSERT INTO customers VALUES ({c['id']}, {_sql_str(c['name'])}, '{c['country']}', '{c['joined']}');"
            for c in customers]
    # Rows go in out of id order, as real tables fill; every extractor says ORDER BY.
    for o in rng.sample(orders, len(orders)):
        sql.append(f"INSERT INTO orders VALUES ({o['id']}, {o['customer_id']}, '{o['placed_on']}', "
                   f"{_sql_str(o['shipped_on'])}, '{o['status']}', {o['amount']});")
    sql.append("COMMIT;")
    q = "sqlite3 -noheader -list {path} "
    join = " FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.id'"
    return Dataset(
        scenario="sqlite-db", main="shop.db",
        noun="SQLite database (tables customers and orders; one record per order)",
        files={"schema.sql": ("\n".join(sql) + "\n").encode()},
        records=orders,
        fields=(
            Field("status", "order status (orders.status)", "category",
                  q + "'SELECT status FROM orders ORDER BY id'"),
            Field("country", "customer country (customers.country of the order's customer)", "category",
                  q + "'SELECT c.country" + join),
            Field("customer", "customer name (customers.name of the order's customer)", "category",
                  q + "'SELECT c.name" + join),
            Field("amount", "order amount (orders.amount, integer)", "number",
                  q + "'SELECT amount FROM orders ORDER BY id'"),
        ),
        setup=("sqlite3 {dir}/shop.db < {dir}/schema.sql && rm {dir}/schema.sql",),
        extra={"customers": customers},
    )


register_scenario(Scenario(
    "sqlite-db", "database", "a SQLite shop database (customers, orders with NULL ship dates)", prior=4.0,
    rationale="SQLite files turn up in app data, caches and test fixtures, and sqlite3 one-liners are a "
              "common way to query them; less common than flat text, more than most binary formats.",
    make=make_sqlite_db,
    # No "rows": a record is a table row, not a line, so "filter to the same format" has no meaning.
    # No "file": the .db bytes come from the image's sqlite3 build, so a checksum cannot be computed
    # ahead of time from the records.
    offers=frozenset({"category", "number", "sql"}),
))

# --------------------------------------------------------------------------- tar-archive
_PROJECTS = ["invoicer", "logship", "tinyhttp", "datapipe"]
_WORDS = ["alpha", "beta", "gamma", "delta", "route", "cache", "parse", "value", "retry", "batch", "queue",
          "token", "index", "frame", "shard", "merge"]
_ARCHIVE_TIME = datetime(2026, 1, 20, 12, 0, tzinfo=UTC)


def _text(rng: random.Random, n_lines: int, prefix: str = "") -> str:
    return "".join(f"{prefix}{' '.join(rng.choices(_WORDS, k=rng.randint(3, 9)))}\n" for _ in range(n_lines))


def _project_files(rng: random.Random, pkg: str) -> dict[str, tuple[str, int]]:
    """Path inside the project → (content, mode). Two files are named config.py, in different dirs."""
    py = lambda n: '"""' + pkg + ' module."""\n' + _text(rng, n, "# ")  # noqa: E731
    files = {
        "README.md": (f"# {pkg}\n\n" + _text(rng, rng.randint(3, 20)), 0o644),
        "LICENSE": ("MIT License\n\n" + _text(rng, rng.randint(5, 12)), 0o644),
        "setup.cfg": (f"[metadata]\nname = {pkg}\n", 0o644),
        f"src/{pkg}/__init__.py": (py(1), 0o644),
        f"src/{pkg}/core.py": (py(rng.randint(10, 60)), 0o644),
        f"src/{pkg}/config.py": (py(rng.randint(4, 30)), 0o644),
        f"src/{pkg}/util/__init__.py": (py(1), 0o644),
        f"src/{pkg}/util/text.py": (py(rng.randint(4, 40)), 0o644),
        "tests/test_core.py": (py(rng.randint(4, 30)), 0o644),
        "tests/config.py": (py(rng.randint(2, 12)), 0o644),
        "docs/index.md": ("# Docs\n\n" + _text(rng, rng.randint(2, 25)), 0o644),
        "docs/usage.md": ("# Usage\n\n" + _text(rng, rng.randint(2, 25)), 0o644),
        "scripts/release.sh": ("#!/bin/sh\nset -e\n" + _text(rng, rng.randint(2, 10), "# "), 0o755),
        "config/default.yaml": ("".join(f"{w}: {rng.randint(1, 99)}\n" for w in rng.sample(_WORDS, 6)), 0o644),
    }
    for optional in ("LICENSE", "setup.cfg", "config/default.yaml"):
        if rng.random() < 0.3:
            del files[optional]
    return files


def make_tar_archive(rng: random.Random) -> Dataset:
    pkg = rng.choice(_PROJECTS)
    version = f"{rng.randint(0, 3)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}"
    files = _project_files(rng, pkg)
    # How the release was made decides member names: `tar czf x.tgz proj-1.2.3/` or `cd proj && tar czf .. .`
    prefix = rng.choice([f"{pkg}-{version}/", "./"])
    dirs = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
    entries = [("", "dir", "", 0o755)] + [(d, "dir", "", 0o755) for d in dirs]
    entries += [(p, "file", c, m) for p, (c, m) in files.items()]
    entries.append(("docs/latest.md", "symlink", "usage.md", 0o777))
    entries.sort(key=lambda e: e[0].encode())  # what `tar --sort=name` writes
    buf = io.BytesIO()
    records = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for i, (rel, kind, content, mode) in enumerate(entries):
            name = (prefix + rel) if rel else prefix.rstrip("/") or "."
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.uname, info.gname = mode, 1000, 1000, "dev", "dev"
            info.mtime = int((_ARCHIVE_TIME + timedelta(minutes=i)).timestamp())
            data = content.encode() if kind == "file" else b""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, content
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
            listed = name + "/" if kind == "dir" and not name.endswith("/") else name  # as `tar -t` prints it
            records.append({"name": listed, "rel": rel, "type": kind, "size": len(data), "content": content})
    archive = f"{pkg}-{version}.tar.gz"
    return Dataset(
        scenario="tar-archive", main=archive, noun="gzip-compressed tar archive of a project release",
        # mtime=0 and no file name in the gzip header: the same members give the same bytes with the same
        # zlib (a zlib-ng build may deflate differently; the checksum skill hashes the shipped bytes).
        files={archive: gzip.compress(buf.getvalue(), compresslevel=9, mtime=0)},
        records=records, extra={"prefix": prefix, "project": pkg},
    )


register_scenario(Scenario(
    "tar-archive", "archives", "a .tar.gz release of a small project (member naming varies, a symlink)",
    prior=4.0,
    rationale="Tarballs are how source releases, backups and build artefacts travel; listing or pulling one "
              "file out of one is a regular chore, though less frequent than working with plain files.",
    make=make_tar_archive, offers=frozenset({"archive", "file"}),
))

# ----------------------------------------------------------------------------- file-tree
#: (path, mode) of the tree. One name has a space (xargs without -0 breaks), old.conf.bak is
#: not a *.conf file, and several extensions recur at several depths (a top-level glob misses some).
_TREE = [
    ("logs/app.log", 0o644), ("logs/app.log.1", 0o644), ("logs/error.log", 0o640),
    ("logs/archive/app-2025-12.log", 0o644), ("logs/archive/app-2026-01.log", 0o644),
    ("conf/app.conf", 0o644), ("conf/db.conf", 0o600), ("conf/extra/cache.conf", 0o644),
    ("conf/extra/old.conf.bak", 0o644),
    ("data/users.csv", 0o644), ("data/orders.csv", 0o644), ("data/raw/export 2026.csv", 0o644),
    ("data/raw/notes.txt", 0o644),
    ("scripts/backup.sh", 0o755), ("scripts/deploy.sh", 0o755), ("scripts/lib/common.sh", 0o644),
    ("docs/README.md", 0o644), ("docs/guide.md", 0o644), ("docs/notes.txt", 0o644),
    ("tmp/cache.tmp", 0o644), ("tmp/session.tmp", 0o600), ("tmp/upload.part", 0o644),
]
_TREE_ROOT = "storage"
_TREE_START = datetime(2025, 11, 1, tzinfo=UTC)
_TREE_END = datetime(2026, 4, 1, tzinfo=UTC)


def _tree_sizes(rng: random.Random) -> list[int]:
    """Sizes with a file strictly inside every KiB band up to 3 KiB (find -size -Nk rounds up) and one
    above it, some empty files, one exactly 2048 bytes, and a total under 28 kB."""
    while True:
        sizes = [rng.choice([0, rng.randint(10, 1000), rng.randint(1025, 2047), rng.randint(2049, 3500)])
                 for _ in _TREE]
        fixed = rng.sample(range(len(sizes)), 5)
        for i, s in zip(fixed, (rng.randint(100, 1000), rng.randint(1025, 2047), 2048,
                                rng.randint(2049, 3071), rng.randint(3073, 3600)), strict=True):
            sizes[i] = s
        if sum(sizes) < 28_000 and 0 in sizes:
            return sizes


def _body(rng: random.Random, size: int) -> bytes:
    if size == 0:
        return b""
    text = _text(rng, size // 10 + 2)  # ≥ 18 bytes a line: always longer than needed
    return (text[: size - 1] + "\n").encode()


def make_file_tree(rng: random.Random) -> Dataset:
    sizes = _tree_sizes(rng)
    span = int((_TREE_END - _TREE_START).total_seconds())
    stamps = rng.sample(range(0, span, 60), len(_TREE))  # distinct whole minutes
    records = []
    for (path, mode), size, off in zip(_TREE, sizes, stamps, strict=True):
        records.append({"path": path, "size": size, "mode": mode, "body": _body(rng, size),
                        "mtime": (_TREE_START + timedelta(seconds=off)).strftime("%Y-%m-%d %H:%M:%S")})
    # A few files are world-writable (some also executable), one only group-writable:
    # "world-writable" is o+w, not any write bit beyond the owner's.
    for r in rng.sample(records, rng.randint(2, 4)):
        r["mode"] = 0o777 if r["mode"] & 0o100 else 0o666
    rng.choice([r for r in records if not r["mode"] & 0o002])["mode"] |= 0o020
    q = shlex.quote
    script = ["#!/bin/sh", "# Set file times and modes at image build time (COPY cannot carry them).", "set -eu",
              'cd "$1"']
    for r in records:
        script += [f"touch -d {q(r['mtime'] + ' UTC')} {q(r['path'])}", f"chmod {r['mode']:o} {q(r['path'])}"]
    return Dataset(
        scenario="file-tree", main=_TREE_ROOT, noun="directory tree",
        files={**{f"{_TREE_ROOT}/{r['path']}": r["body"] for r in records},
               "set-metadata.sh": ("\n".join(script) + "\n").encode()},
        records=[{k: v for k, v in r.items() if k != "body"} for r in records],
        setup=("sh {dir}/set-metadata.sh {dir}/" + _TREE_ROOT + " && rm {dir}/set-metadata.sh",),
        extra={"bodies": {r["path"]: r["body"] for r in records}},
    )


register_scenario(Scenario(
    "file-tree", "files", "a directory tree of logs, configs, data and scripts with varied sizes, times, modes",
    prior=7.0,
    rationale="Walking a directory tree (what is big, what changed, what is writable) is bread-and-butter "
              "sysadmin and developer work; find is among the most used commands.",
    make=make_file_tree, offers=frozenset({"tree"}),
))
