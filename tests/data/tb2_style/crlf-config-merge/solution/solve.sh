#!/bin/bash
# Reference solution: configparser reads CRLF files; later files override earlier ones.
set -euo pipefail
cd /srv/config
python3 - <<'PY'
import configparser
import json

parser = configparser.ConfigParser()
parser.read(["/opt/app/defaults.ini", "conf.d/base.ini", "conf.d/site.ini", "conf.d/local.ini"])
merged = {s: dict(sorted(parser[s].items())) for s in sorted(parser.sections())}
blocks = ["\n".join([f"[{s}]"] + [f"{k} = {v}" for k, v in kv.items()]) for s, kv in merged.items()]
with open("merged.ini", "w", newline="\n") as f:
    f.write("\n\n".join(blocks) + "\n")
with open("merged.json", "w") as f:
    json.dump(merged, f, indent=2)
PY
