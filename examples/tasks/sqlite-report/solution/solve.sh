#!/bin/bash
# Reference solution: one aggregate query, CSV with a header straight from the sqlite3 CLI.
set -euo pipefail
sqlite3 -header -csv /app/shop.db < "$(dirname "$0")/query.sql" > /app/category_report.csv
