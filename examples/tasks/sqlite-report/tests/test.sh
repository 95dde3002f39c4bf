#!/bin/bash
# Verifier for sqlite-report. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if the report matches the answer computed when the task was written. CRLF line
# ends and a missing final newline are tolerated; anything else must match byte for byte.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt

check() {
    if [ ! -f /app/category_report.csv ]; then
        echo "FAIL: /app/category_report.csv missing"; return 1
    fi
    if ! sed -e 's/\r$//' -e '$a\' /app/category_report.csv | diff - /tests/expected_report.csv; then
        echo "FAIL: /app/category_report.csv is wrong"; return 1
    fi
    # The database must be intact (a deleted or emptied table would show up here).
    if [ "$(sqlite3 /app/shop.db 'SELECT COUNT(*) FROM order_items;' 2>/dev/null)" != "$(cat /tests/order_items_count.txt)" ]; then
        echo "FAIL: /app/shop.db was modified"; return 1
    fi
    return 0
}

if check; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
