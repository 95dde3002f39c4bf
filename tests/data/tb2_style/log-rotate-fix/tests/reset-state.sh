#!/bin/bash
# Puts /app/logs back into a known state: the current log plus two rotated ones.
set -euo pipefail
rm -rf /app/logs
mkdir -p /app/logs
printf 'current line %s\n' 1 2 3 > /app/logs/app.log
printf 'older line %s\n' 1 2 > /app/logs/app.log.1
printf 'oldest line\n' > /app/logs/app.log.2
