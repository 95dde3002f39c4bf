#!/bin/bash
# Reference solution: extract, check, count.
set -euo pipefail
mkdir -p /app/restore
tar -xzf /app/backups/nightly.tar.gz -C /app/restore
/app/tools/check-restore.sh /app/restore
find /app/restore -type f | wc -l > /app/restore.count
