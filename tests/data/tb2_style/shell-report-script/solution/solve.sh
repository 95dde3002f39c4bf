#!/bin/bash
# Reference solution: one awk pass over every *.log file of the folder.
set -euo pipefail
cat > /home/analyst/report.sh <<'EOF'
#!/bin/bash
set -euo pipefail
cat "$1"/*.log | awk '
  { c = substr($4, 1, 1); n[c]++; b[c] += $5 }
  END { for (i = 2; i <= 5; i++) printf "%dxx %d %d\n", i, n[i] + 0, b[i] + 0 }'
EOF
chmod 0755 /home/analyst/report.sh
