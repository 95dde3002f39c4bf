"""System-administration scenarios: a crontab, an INI config, passwd/group files, systemd units.

Each carries the quirk that makes the naive per-line technique wrong: cron's ranges, steps
and day-of-month/day-of-week rule; one key name in several INI sections; a primary gid with
no group and stale group members; dependency lists spread over several unit-file lines.
"""

from __future__ import annotations

import random
import re

from evokit.catalog.base import Dataset, Field, Scenario
from evokit.catalog.registry import register_scenario

# ----------------------------------------------------------------------------- crontab
_CRON_COMMANDS = [
    "/opt/app/bin/backup.sh --full >> /var/log/app/backup.log 2>&1",
    "/opt/app/bin/poll-queue.sh >> /var/log/app/queue.log 2>&1",
    "/usr/bin/certbot renew --quiet",
    "/opt/app/bin/report.sh daily",
    "/opt/app/bin/report.sh weekly",
    "/usr/local/bin/sync-mirror.sh >> /var/log/mirror/sync.log 2>&1",
    "/opt/app/bin/cleanup-tmp.sh",
    "/usr/bin/find /tmp/uploads -mtime +7 -delete",
    "/opt/app/bin/healthcheck.sh || /opt/app/bin/alert.sh",
    "/usr/local/bin/db-vacuum.sh >> /var/log/db/vacuum.log 2>&1",
    "/opt/app/bin/invoice-run.sh",
    "/usr/local/bin/ssl-expiry-check.sh",
    "/opt/app/bin/refresh-cache.sh > /dev/null 2>&1",
    "/usr/bin/rsync -a /srv/data/ backup01:/srv/data/",
    "/opt/app/bin/payroll.sh >> /var/log/app/payroll.log 2>&1",
    "/usr/local/bin/update-geoip.sh",
    "/opt/app/bin/export-metrics.sh",
    "/usr/local/bin/rotate-logs --compress",
]
_CRON_COMMENTS = ["# nightly maintenance", "# business hours only", "# reports", "# keep the queue drained",
                  "# DO NOT EDIT the schedule without telling ops", "# monthly jobs", "# mirrors"]
_SPECIALS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *"}


def _cron_schedule(rng: random.Random) -> str:
    """One schedule in the five-field form or an @ shortcut; ranges, lists and steps are common."""
    m, h = rng.randrange(60), rng.randrange(24)
    kind = rng.choice(["every", "window", "daily", "twice", "hstep", "rstep", "weekly", "weekdays", "monthly",
                       "both", "both", "months", "special"])
    if kind == "every":
        return f"*/{rng.choice([5, 10, 15, 20, 30])} * * * *"
    if kind == "window":
        a = rng.randint(6, 10)
        return f"*/{rng.choice([10, 15, 30])} {a}-{a + rng.randint(6, 10)} * * {rng.choice(['*', '1-5'])}"
    if kind == "daily":
        return f"{m} {h} * * *"
    if kind == "twice":
        return f"{m},{(m + 30) % 60} {h} * * *" if rng.random() < 0.5 else f"{m} {h % 12},{h % 12 + 12} * * *"
    if kind == "hstep":
        return f"{m} */{rng.choice([2, 3, 4, 6])} * * *"
    if kind == "rstep":
        a = rng.randint(0, 8)
        return f"{m} {a}-{a + rng.randint(8, 14)}/{rng.choice([2, 3])} * * *"
    if kind == "weekly":
        return f"{m} {h} * * {rng.randint(0, 7)}"  # 0 and 7 are both Sunday
    if kind == "weekdays":
        return f"{m} {h} * * 1-5"
    if kind == "monthly":
        return f"{m} {h} {rng.choice(['1', '15', '1,15', '28'])} * *"
    if kind == "both":  # both day fields restricted: cron runs the job when EITHER matches
        return rng.choice([f"{m} {h} 13 * 5", f"{m} {h} 1-7 * 1", f"{m} {h} 1 * 0", f"{m} {h} 15 * 3,6"])
    if kind == "months":
        a = rng.randint(1, 6)
        return f"{m} {h} * {a}-{a + rng.randint(2, 5)} *"
    return rng.choice(list(_SPECIALS))


def make_crontab(rng: random.Random) -> Dataset:
    commands = rng.sample(_CRON_COMMANDS, rng.randint(10, 16))
    out = ["SHELL=/bin/bash", "MAILTO=ops@example.com", "PATH=/usr/local/bin:/usr/bin:/bin", ""]
    records = []
    for cmd in commands:
        if rng.random() < 0.25:
            out += ["", rng.choice(_CRON_COMMENTS)]
        sched = _cron_schedule(rng)
        five = _SPECIALS.get(sched, sched).split()
        records.append({"schedule": sched, "minute": five[0], "hour": five[1], "dom": five[2], "month": five[3],
                        "dow": five[4], "command": cmd})
        sep = "\t" if not sched.startswith("@") and rng.random() < 0.2 else " "  # either separates fields
        out.append(f"{sched}{sep}{cmd}")
        if rng.random() < 0.1:
            out.append(f"#{sched} {cmd} --dry-run")  # a commented-out job is not a job
    text = "\n".join(out) + "\n"
    entry_x = "grep -Ev '^[[:space:]]*(#|$)' {path} | grep -Ev '^[A-Za-z_][A-Za-z0-9_]*='"
    return Dataset(
        scenario="crontab", main="crontab", noun="user crontab (one job per entry line; no user column)",
        files={"crontab": text.encode()}, records=records,
        fields=(Field("entry", "job entry", "text", entry_x),),
        extra={"regex": {"text": text, "text_cmd": "cat {path}", "patterns": [
            ("log file path under /var/log ending in `.log`", r"/var/log/[a-z0-9_/-]+\.log"),
            ("absolute path of a shell script ending in `.sh`", r"/[a-z0-9_/-]+\.sh"),
        ]}},
    )


register_scenario(Scenario(
    "crontab", "sysadmin", "a user crontab with lists, ranges, steps, @ shortcuts and comments", prior=4.0,
    rationale="Reading and debugging crontabs is a routine sysadmin chore, but working out by hand when a "
              "schedule with ranges, steps or both day fields fires is a recurring source of mistakes.",
    make=make_crontab, offers=frozenset({"cron", "rows", "file", "text"}),
))

# -------------------------------------------------------------------------- INI config
# (section, key, value generator); the same key names recur across sections on purpose.
_HOSTS = ["db.internal", "cache.internal", "10.0.3.17", "10.0.8.2", "localhost", "192.168.40.11", "0.0.0.0"]
_INI_SECTIONS: dict[str, list[tuple[str, object]]] = {
    "server": [("host", "host"), ("port", (8000, 9000)), ("workers", (2, 16)), ("timeout", (10, 120)),
               ("timeout_ms", (100, 900)), ("log_level", ["info", "debug", "warning"])],
    "database": [("host", "host"), ("port", [5432, 5433, 3306]), ("user", ["app", "svc_app", "reporting"]),
                 ("name", ["shop", "ledger", "inventory"]), ("dsn", "dsn"), ("timeout", (5, 60)),
                 ("pool_size", (5, 40))],
    "cache": [("host", "host"), ("port", [6379, 6380, 11211]), ("ttl", (60, 3600)), ("enabled", ["true", "false"])],
    "logging": [("level", ["info", "debug", "warning", "error"]), ("path", ["/var/log/app/app.log",
                "/var/log/shop/main.log"]), ("max_size", (10, 500)), ("rotate", (3, 14))],
    "auth": [("enabled", ["true", "false"]), ("provider", ["ldap", "oidc", "local"]), ("token_ttl", (300, 86400)),
             ("admin_email", ["ops@example.com", "admin@corp.example.org", "sec-team@example.net"])],
    "smtp": [("host", "host"), ("port", [25, 465, 587]), ("from", ["noreply@example.com", "alerts@shop.example"]),
             ("tls", ["true", "false"])],
    "metrics": [("enabled", ["true", "false"]), ("port", (9100, 9200)), ("path", ["/metrics", "/stats"]),
                ("interval", (5, 60))],
}


def _ini_value(rng: random.Random, gen) -> str:
    if gen == "host":
        return rng.choice(_HOSTS)
    if gen == "dsn":
        return f"postgres://app:s{rng.randint(100, 999)}cret@db.internal:5432/shop?sslmode=require"
    if isinstance(gen, tuple):
        return str(rng.randint(*gen))
    return str(rng.choice(gen))


_LEVELS = ["debug", "info", "warning", "error"]


def _new_values(old: str) -> list[str]:
    """Replacement values for an in-place edit: safe in a sed replacement (no / & \\), unlike ``old``."""
    if old.isdigit():
        return [str(int(old) * 2), str(int(old) + 7)]
    if old in ("true", "false"):
        return ["false" if old == "true" else "true"]
    if old in _LEVELS:
        return [v for v in _LEVELS if v != old]
    return []


def ini_text(items: list[tuple]) -> str:
    """INI text from line items: ("comment", text) | ("blank",) | ("section", name) | ("kv", key, sep, value)."""
    render = {"comment": lambda it: it[1], "blank": lambda it: "", "section": lambda it: f"[{it[1]}]",
              "kv": lambda it: f"{it[1]}{it[2]}{it[3]}"}
    return "".join(render[it[0]](it) + "\n" for it in items)


def ini_dataset(items: list[tuple], main: str) -> Dataset:
    """An INI file from line items (also what an in-place edit produces, for a later step)."""
    text = ini_text(items)
    records, section = [], None
    for it in items:
        if it[0] == "section":
            section = it[1]
        elif it[0] == "kv":
            records.append({"section": section, "key": it[1], "value": it[3]})
    edits = [{"file": main, "section": r["section"], "key": r["key"], "value": r["value"],
              "options": _new_values(r["value"])} for r in records]
    return Dataset(
        scenario="ini-config", main=main, noun="INI configuration file",
        files={main: text.encode()}, records=records,
        extra={"ini_items": items, "edits": edits,
               "regex": {"text": text, "text_cmd": "cat {path}", "patterns": [
                   ("IPv4 address (four dot-separated decimal numbers)", r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+"),
                   ("e-mail address", r"[a-z0-9._-]+@[a-z0-9.-]+\.[a-z]+"),
               ]}},
    )


def make_ini(rng: random.Random) -> Dataset:
    names = rng.sample(list(_INI_SECTIONS), rng.randint(5, 7))
    items: list[tuple] = [("comment", "; application configuration"), ("comment", "; managed by hand, see README"),
                          ("blank",)]
    for name in names:
        if rng.random() < 0.3:
            items.append(("comment", f"# {name} settings"))
        items.append(("section", name))
        for key, gen in _INI_SECTIONS[name]:
            if rng.random() < 0.2 and key != "host":
                continue
            value = _ini_value(rng, gen)
            if rng.random() < 0.15:  # an older value left commented out: not a setting
                items.append(("comment", f"; {key} = {_ini_value(rng, gen)}"))
            items.append(("kv", key, rng.choice([" = ", " = ", " = ", "=", "  =  "]), value))
        items.append(("blank",))
    items.pop()
    return ini_dataset(items, "app.ini")


register_scenario(Scenario(
    "ini-config", "config", "an INI file whose key names recur across sections", prior=5.0,
    rationale="INI-style configs (php.ini, my.cnf, setup.cfg, systemd, git config) are everywhere in ops "
              "work; the same key (host, port) in several sections makes a plain grep wrong.",
    make=make_ini, offers=frozenset({"ini", "config", "text", "file"}),
))

# ---------------------------------------------------------------------------- passwd-db
_SYSTEM_USERS = [("root", 0, 0, "root", "/root", "/bin/bash"),
                 ("daemon", 1, 1, "daemon", "/usr/sbin", "/usr/sbin/nologin"),
                 ("bin", 2, 2, "bin", "/bin", "/usr/sbin/nologin"),
                 ("sys", 3, 3, "sys", "/dev", "/usr/sbin/nologin"),
                 ("www-data", 33, 33, "www-data", "/var/www", "/usr/sbin/nologin"),
                 ("backup", 34, 34, "backup", "/var/backups", "/usr/sbin/nologin"),
                 ("nobody", 65534, 65534, "nobody", "/nonexistent", "/usr/sbin/nologin")]
_SERVICE_USERS = ["postgres", "redis", "prometheus", "nginx", "gitlab-runner", "jenkins", "grafana", "sshd"]
_PEOPLE = [("alice", "Alice Moreau"), ("bob", "Bob Okafor"), ("carol", "Carol Nguyen"), ("dmitri", "Dmitri Volkov"),
           ("erin", "Erin Walsh"), ("farid", "Farid Haddad"), ("grace", "Grace Lee"), ("hiro", "Hiro Tanaka"),
           ("ines", "Ines Duarte"), ("jonas", "Jonas Berg")]
_HUMAN_SHELLS = ["/bin/bash", "/bin/bash", "/bin/bash", "/bin/zsh", "/usr/bin/fish"]


def _passwd(records: list[dict]) -> bytes:
    return "".join(f"{r['user']}:x:{r['uid']}:{r['gid']}:{r['gecos']}:{r['home']}:{r['shell']}\n"
                   for r in records).encode()


def make_passwd(rng: random.Random) -> Dataset:
    users = [dict(zip(("user", "uid", "gid", "gecos", "home", "shell"), u, strict=True)) for u in _SYSTEM_USERS]
    groups: dict[str, dict] = {u["user"]: {"name": u["user"], "gid": u["gid"], "members": []} for u in users}
    groups["adm"] = {"name": "adm", "gid": 4, "members": ["syslog"]}
    groups["users"] = {"name": "users", "gid": 100, "members": []}
    uid = 100
    for name in rng.sample(_SERVICE_USERS, rng.randint(3, 5)):
        uid += rng.randint(1, 3)  # 101..115: below the extra groups' gids
        users.append({"user": name, "uid": uid, "gid": uid, "gecos": f"{name} service,,,",
                      "home": f"/var/lib/{name}", "shell": rng.choice(["/usr/sbin/nologin", "/bin/false"])})
        groups[name] = {"name": name, "gid": uid, "members": []}
    humans = rng.sample(_PEOPLE, rng.randint(5, 8))
    for i, (login, full) in enumerate(humans):
        uid = 1000 + i
        gid = 100 if rng.random() < 0.3 else uid  # some share the "users" group
        users.append({"user": login, "uid": uid, "gid": gid, "gecos": f"{full},Room {rng.randint(100, 420)},,",
                      "home": f"/home/{login}", "shell": rng.choice(_HUMAN_SHELLS)})
        if gid == uid:
            groups[login] = {"name": login, "gid": gid, "members": []}
    # A contractor whose primary group was deleted: the join must drop them.
    ghost = rng.choice(["contractor", "temp01", "intern"])
    users.append({"user": ghost, "uid": 1500 + rng.randint(0, 40), "gid": 1500 + rng.randint(50, 90),
                  "gecos": "Temporary account,,,", "home": f"/home/{ghost}", "shell": "/bin/bash"})
    logins = [h[0] for h in humans]
    extra_groups = {"sudo": 27, "docker": 998, "developers": 2001, "ssl-cert": 120}
    stale = rng.sample(["olduser", "mallory", "trent", "peggy"], 2)  # members without an account
    for gname, gid in extra_groups.items():
        members = rng.sample(logins, rng.randint(1, min(4, len(logins))))
        if gname == "developers" or rng.random() < 0.4:
            members.append(stale[gname == "developers"])
        groups[gname] = {"name": gname, "gid": gid, "members": members}
    group_list = sorted(groups.values(), key=lambda g: g["gid"])
    group_text = "".join(f"{g['name']}:x:{g['gid']}:{','.join(dict.fromkeys(g['members']))}\n" for g in group_list)
    members = sorted({m for g in group_list for m in g["members"]})
    col = {"user": 1, "uid": 3, "gid": 4, "home": 6, "shell": 7}
    return Dataset(
        scenario="passwd-db", main="passwd", noun="passwd-format account file (name:x:uid:gid:gecos:home:shell)",
        files={"passwd": _passwd(users), "group": group_text.encode()}, records=users,
        fields=(
            Field("user", "login name (1st field)", "category", "cut -d: -f1 {path}"),
            Field("shell", "login shell (7th field)", "category", "cut -d: -f7 {path}"),
            Field("uid", "numeric user id (3rd field)", "number", "cut -d: -f3 {path}"),
            Field("gid", "primary group id (4th field)", "category", "cut -d: -f4 {path}"),
            Field("home", "home directory (6th field)", "text", "cut -d: -f6 {path}"),
        ),
        select=lambda f, v: f"awk -F: '${col[f.name]} == \"{v}\"' {{path}}",
        serialize=_passwd,
        extra={
            "sets": [
                {"name": "accounts", "file": "passwd", "desc": "login names that have an account in `{dir}/passwd`",
                 "cmd": "cut -d: -f1 {dir}/passwd", "items": [u["user"] for u in users]},
                {"name": "members", "file": "group",
                 "desc": "user names listed as supplementary members of some group in `{dir}/group` (4th field, "
                         "comma-separated)",
                 "cmd": "cut -d: -f4 {dir}/group | tr ',' '\\n' | sed '/^$/d'", "items": members},
            ],
            "join": {"left": "passwd", "right": "group", "sep": ":", "lkey": 4, "lout": 1, "rkey": 3, "rout": 1,
                     "left_rows": [[u["user"], "x", str(u["uid"]), str(u["gid"])] for u in users],
                     "right_rows": [[g["name"], "x", str(g["gid"])] for g in group_list],
                     "lname": "user", "rname": "group",
                     "what": "each account (login name) of `{dir}/passwd` with the name of its primary group "
                             "from `{dir}/group`",
                     "match": "the gid of passwd (4th field) equals the gid of group (3rd field)",
                     "unmatched": "accounts whose gid has no group entry are left out"},
        },
    )


register_scenario(Scenario(
    "passwd-db", "sysadmin", "passwd and group files with system, service and human accounts", prior=4.0,
    rationale="Auditing accounts (who has a login shell, who is in sudo, dangling groups) is a classic "
              "sysadmin task; the colon-separated format is simple, the cross-file questions are not.",
    make=make_passwd,
    offers=frozenset({"rows", "category", "number", "file", "lines", "setops", "join"}),
))

# ------------------------------------------------------------------------ systemd units
_ROLES = ["db", "cache", "api", "worker", "web", "scheduler", "search", "migrate", "mailer"]
_EXTERNAL = ["network-online.target", "remote-fs.target", "time-sync.target", "postgresql.service",
             "redis-server.service", "nss-lookup.target"]


def _unit_text(u: dict) -> str:
    lines = ["[Unit]", f"Description={u['description']}"]
    for key in ("requires", "wants", "after"):
        vals = u[key]
        if not vals:
            continue
        # Long lists are sometimes split over several lines; systemd accumulates them.
        chunks = [vals[:1], vals[1:]] if len(vals) > 1 and u["split"] else [vals]
        lines += [f"{key.capitalize()}={' '.join(c)}" for c in chunks if c]
    if u["name"].endswith(".timer"):
        lines += ["", "[Timer]", f"OnCalendar={u['calendar']}", "Persistent=true", f"Unit={u['unit']}"]
        lines += ["", "[Install]", "WantedBy=timers.target"]
    else:
        lines += ["", "[Service]", f"Type={u['type']}", f"User={u['user']}", f"ExecStart={u['exec']}",
                  f"Restart={u['restart']}", f"TimeoutStartSec={u['timeout']}"]
        if u["type"] != "oneshot":
            lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


def make_units(rng: random.Random) -> Dataset:
    app = rng.choice(["shop", "ledger", "relay", "atlas", "orbit"])
    roles = rng.sample(_ROLES, rng.randint(5, 7))
    units: list[dict] = []
    for role in roles:
        name = f"{app}-{role}.service"
        earlier = [u["name"] for u in units]
        requires = sorted(rng.sample(earlier, min(len(earlier), rng.randint(0, 2))))
        rest = [n for n in earlier if n not in requires]
        wants = sorted(rng.sample(rest, min(len(rest), rng.randint(0, 2))))
        wants += rng.sample(_EXTERNAL, rng.randint(0, 1))
        after = sorted(set(requires + wants + rng.sample(_EXTERNAL[:3], rng.randint(1, 2))))
        units.append({"name": name, "description": f"{app.title()} {role}", "requires": requires, "wants": wants,
                      "after": after, "split": rng.random() < 0.4, "type": "oneshot" if role == "migrate" else
                      rng.choice(["simple", "notify", "exec"]), "user": rng.choice([app, f"{app}-{role}", "www-data"]),
                      "exec": f"/opt/{app}/bin/{role} --config /etc/{app}/{role}.conf",
                      "restart": rng.choice(["on-failure", "always", "no"]), "timeout": rng.choice([30, 90, 300])})
    svc_names = [u["name"] for u in units]
    job = f"{app}-backup.service"
    units.append({"name": job, "description": f"{app.title()} nightly backup", "requires": [svc_names[0]],
                  "wants": [], "after": [svc_names[0]], "split": False, "type": "oneshot", "user": app,
                  "exec": f"/opt/{app}/bin/backup --to /srv/backup", "restart": "no", "timeout": 900})
    units.append({"name": f"{app}-backup.timer", "description": f"Run {job} nightly", "requires": [], "wants": [],
                  "after": [], "split": False, "calendar": f"*-*-* 0{rng.randint(1, 4)}:{rng.randrange(60):02d}:00",
                  "unit": job})
    files = {f"units/{u['name']}": _unit_text(u).encode() for u in units}
    present = sorted(u["name"] for u in units)
    referenced = sorted({n for u in units for n in u["requires"] + u["wants"] + u["after"]})
    edits = []
    for u in units:
        sec = "Timer" if u["name"].endswith(".timer") else "Service"
        keys = ["OnCalendar"] if sec == "Timer" else ["Restart", "TimeoutStartSec"]
        for k in keys:
            old = re.search(rf"^{k}=(.*)$", files[f"units/{u['name']}"].decode(), re.M).group(1)
            options = {"OnCalendar": ["*-*-* 05:30:00", "Mon..Fri *-*-* 22:15:00"],
                       "Restart": ["on-failure", "always", "no", "on-abnormal"]}.get(k) or _new_values(old)
            edits.append({"file": f"units/{u['name']}", "section": sec, "key": k, "value": old,
                          "options": [v for v in options if v != old]})
    return Dataset(
        scenario="systemd-units", main="units", noun="directory of systemd unit files",
        files=files, records=units,
        extra={
            "edits": edits,
            "sets": [
                {"name": "present", "file": None, "desc": "units that have a unit file in `{dir}/units/`",
                 "cmd": "ls {dir}/units", "items": present},
                {"name": "referenced", "file": None,
                 "desc": "units named on any Requires=, Wants= or After= line of those files (lists are "
                         "space-separated)",
                 "cmd": "grep -hE '^(Requires|Wants|After)=' {dir}/units/* | cut -d= -f2- | tr ' ' '\\n' "
                        "| sed '/^$/d'", "items": referenced},
            ],
        },
    )


register_scenario(Scenario(
    "systemd-units", "sysadmin", "a directory of .service/.timer unit files of one application", prior=3.5,
    rationale="Writing and debugging systemd units is daily work on Linux servers; tracing what a unit pulls "
              "in (Requires=/Wants=/After=, accumulated over lines) is less common and easy to get wrong.",
    make=make_units, offers=frozenset({"units", "config", "setops"}),
))
