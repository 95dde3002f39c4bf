#!/bin/bash
# Reference solution: drop the copies beyond KEEP first, then rotate from the oldest copy down.
set -euo pipefail
cat > /app/scripts/rotate.sh <<'EOF'
#!/bin/bash
# Rotates /app/logs/app.log, keeping at most KEEP rotated copies (default 3).
set -euo pipefail
KEEP="${KEEP:-3}"
cd /app/logs
for f in app.log.*; do
  n="${f#app.log.}"
  case "$n" in ''|*[!0-9]*) continue ;; esac
  if [ "$n" -ge "$KEEP" ]; then rm -f "$f"; fi
done
for i in $(seq $((KEEP - 1)) -1 1); do
  if [ -f "app.log.$i" ]; then
    mv "app.log.$i" "app.log.$((i + 1))"
  fi
done
if [ -f app.log ]; then
  mv app.log app.log.1
fi
: > app.log
EOF
chmod 0755 /app/scripts/rotate.sh
