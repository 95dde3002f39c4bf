"""Log scenarios: a web server's access log, an SSH auth log."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

_PATHS = ["/", "/index.html", "/login", "/api/items", "/api/items/42", "/api/search", "/static/app.js",
          "/static/site.css", "/favicon.ico", "/admin", "/health", "/api/orders"]
_STATUSES = [200, 200, 200, 200, 301, 304, 404, 404, 500, 403]
_METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
_START = datetime(2026, 3, 2, 8, 0, 0)


def _ips(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.choice([10, 172, 192, 203])}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            for _ in range(n)]


def _access_line(r: dict) -> str:
    ts = r["time"].strftime("%d/%b/%Y:%H:%M:%S +0000")
    return (f'{r["ip"]} - - [{ts}] "{r["method"]} {r["path"]} HTTP/1.1" {r["status"]} {r["bytes"]} '
            f'"-" "Mozilla/5.0"')


def make_access_log(rng: random.Random) -> Dataset:
    pool = _ips(rng, rng.randint(8, 14))
    weights = [rng.random() ** 2 + 0.05 for _ in pool]  # skewed: a few heavy clients
    t = _START
    records = []
    for _ in range(rng.randint(60, 120)):
        t += timedelta(seconds=rng.randint(1, 400))
        records.append({"ip": rng.choices(pool, weights)[0], "time": t, "method": rng.choice(_METHODS),
                        "path": rng.choice(_PATHS), "status": rng.choice(_STATUSES),
                        "bytes": rng.randint(120, 50_000)})
    cols = {"ip": 1, "method": 6, "path": 7, "status": 9, "bytes": 10}

    def select(f: Field, value: str) -> str:
        expr = f'substr(${cols[f.name]}, 2) == "{value}"' if f.name == "method" else f'${cols[f.name]} == "{value}"'
        return f"awk '{expr}' {{path}}"  # {path} is filled in by the renderer (str.replace)

    return Dataset(
        scenario="access-log", main="access.log", noun="web server access log (nginx combined format)",
        files={"access.log": "".join(_access_line(r) + "\n" for r in records).encode()},
        records=[{**r, "time": r["time"].isoformat()} for r in records],
        fields=(
            Field("ip", "client IP address (first field)", "category", "awk '{print $1}' {path}"),
            Field("method", "HTTP method", "category", "awk '{print substr($6, 2)}' {path}"),
            Field("path", "request path", "category", "awk '{print $7}' {path}"),
            Field("status", "HTTP status code", "category", "awk '{print $9}' {path}"),
            Field("bytes", "response size in bytes", "number", "awk '{print $10}' {path}"),
        ),
        select=select,
        serialize=lambda rs: "".join(_access_line({**r, "time": datetime.fromisoformat(r["time"])}) + "\n"
                                     for r in rs).encode(),
    )


register_scenario(Scenario(
    "access-log", "logs", "an nginx access log in combined format", prior=10.0,
    rationale="Web access logs are the textbook terminal data source: every ops and data tutorial "
              "slices them with awk/sort/uniq; among the most common situations in shell work.",
    make=make_access_log, offers=frozenset({"rows", "category", "number", "file", "lines"}),
))

_USERS = ["root", "admin", "deploy", "alice", "bob", "carol", "git", "ubuntu", "test", "oracle"]


def _auth_line(r: dict) -> str:
    ts = r["time"].strftime("%b %d %H:%M:%S").replace(" 0", "  ", 1) if r["time"].day < 10 else \
        r["time"].strftime("%b %d %H:%M:%S")
    verb = "Accepted password" if r["outcome"] == "accepted" else "Failed password"
    invalid = "invalid user " if r["outcome"] == "invalid" else ""
    return (f"{ts} bastion sshd[{r['pid']}]: {verb} for {invalid}{r['user']} from {r['ip']} "
            f"port {r['port']} ssh2")


def make_auth_log(rng: random.Random) -> Dataset:
    attackers, staff = _ips(rng, rng.randint(3, 6)), _ips(rng, rng.randint(2, 4))
    t = _START
    records = []
    for _ in range(rng.randint(50, 100)):
        t += timedelta(seconds=rng.randint(1, 900))
        if rng.random() < 0.65:
            user, ip = rng.choice(_USERS), rng.choice(attackers)
            outcome = "invalid" if user in ("test", "oracle", "ubuntu") else "failed"
        else:
            user, ip, outcome = rng.choice(["alice", "bob", "deploy"]), rng.choice(staff), "accepted"
        records.append({"time": t, "user": user, "ip": ip, "outcome": outcome,
                        "pid": rng.randint(1000, 40000), "port": rng.randint(30000, 65000)})
    # Field positions move with "invalid user ", so the oracle uses sed rather than fixed columns.
    user_x = r"sed -E 's/.* for (invalid user )?([^ ]+) from .*/\2/' {path}"
    ip_x = r"sed -E 's/.* from ([0-9.]+) port .*/\1/' {path}"
    out_x = ("awk '{ if ($6 == \"Accepted\") print \"accepted\"; "
             "else if ($9 == \"invalid\") print \"invalid\"; else print \"failed\" }' {path}")

    def select(f: Field, value: str) -> str:
        return (f"paste -d '\\t' <({f.extract}) {{path}} | awk -F '\\t' '$1 == \"{value}\"' | "
                "cut -f 2-")

    return Dataset(
        scenario="auth-log", main="auth.log", noun="SSH authentication log (sshd syslog lines)",
        files={"auth.log": "".join(_auth_line(r) + "\n" for r in records).encode()},
        records=[{**r, "time": r["time"].isoformat()} for r in records],
        fields=(
            Field("user", "user name tried at login", "category", user_x),
            Field("ip", "source IP address", "category", ip_x),
            Field("outcome", "outcome (accepted, failed or invalid)", "category", out_x),
            Field("port", "source port", "number", "awk '{print $(NF-1)}' {path}"),
        ),
        select=select,
        serialize=lambda rs: "".join(_auth_line({**r, "time": datetime.fromisoformat(r["time"])}) + "\n"
                                     for r in rs).encode(),
    )


register_scenario(Scenario(
    "auth-log", "logs", "an sshd authentication log with failed and accepted logins", prior=5.0,
    rationale="Security triage of auth.log (who is brute-forcing us) is a frequent sysadmin chore, "
              "less common than web logs; its shifting columns make naive awk wrong.",
    make=make_auth_log, offers=frozenset({"rows", "category", "number", "file", "lines"}),
))
