#!/bin/bash
# Reference solution: answer /healthz before the route table.
set -euo pipefail
python3 - <<'PY'
from pathlib import Path

p = Path("/app/service/app.py")
src = p.read_text()
old = "        body = ROUTES.get(self.path)\n"
new = ('        body = ROUTES.get(self.path)\n'
       '        if self.path == "/healthz":\n'
       '            body = {"status": "ok", "routes": len(ROUTES)}\n')
assert old in src
p.write_text(src.replace(old, new, 1))
PY
