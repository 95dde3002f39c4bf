#!/bin/bash
# Rotates /app/logs/app.log, keeping at most KEEP rotated copies (default 3).
set -euo pipefail
KEEP="${KEEP:-3}"
cd /app/logs
for i in $(seq 1 "$KEEP"); do
  if [ -f "app.log.$i" ]; then
    mv "app.log.$i" "app.log.$((i + 1))"
  fi
done
mv app.log app.log.1
touch app.log
