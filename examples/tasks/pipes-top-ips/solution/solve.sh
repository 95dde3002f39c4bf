#!/bin/bash
# Reference solution: count first fields, sort by count, keep the top 5, strip uniq's padding.
set -euo pipefail
cat > /app/top_ips.sh <<'SCRIPT'
#!/bin/bash
set -euo pipefail
awk '{print $1}' "$1" | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 5 | awk '{print $1, $2}'
SCRIPT
chmod +x /app/top_ips.sh
/app/top_ips.sh /app/access.log > /app/top_ips.txt
