#!/bin/bash
# Verifier for python-fix-script. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if the fixed script reproduces the expected report on the shipped inventory AND
# on an inventory it never saw. Expected outputs live in /tests, out of the agent's reach.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
# The agent's script runs as nobody, with the answer keys out of its reach (/tests 0700) and
# its input copied out: run as root it could read /tests/expected_*.txt or replace our tools.
chmod 700 /tests
mkdir -p -m 755 /tmp/verifier-input && cp /tests/inventory_hidden.csv /tmp/verifier-input/ \
    && chmod 644 /tmp/verifier-input/inventory_hidden.csv
AS_AGENT="setpriv --reuid=65534 --regid=65534 --clear-groups"

check() {
    if [ ! -f /app/stock_report.py ]; then echo "FAIL: /app/stock_report.py missing"; return 1; fi
    if ! cmp -s /app/inventory.csv /tests/inventory.csv; then
        echo "FAIL: /app/inventory.csv was modified"; return 1
    fi
    local out
    out=$(cd /tmp && timeout 30 $AS_AGENT python3 /app/stock_report.py 2>&1)
    if ! printf '%s\n' "$out" | diff - /tests/expected_report.txt; then
        echo "FAIL: wrong report for /app/inventory.csv"; return 1
    fi
    out=$(cd /tmp && timeout 30 $AS_AGENT python3 /app/stock_report.py /tmp/verifier-input/inventory_hidden.csv 2>&1)
    if ! printf '%s\n' "$out" | diff - /tests/expected_hidden.txt; then
        echo "FAIL: wrong report for another inventory file"; return 1
    fi
    return 0
}

if check; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
