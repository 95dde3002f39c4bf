#!/bin/bash
# Verifier for pipes-top-ips. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if the saved answer is right AND the script generalizes to a log it never saw.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
# The agent's script runs as nobody, with the answer keys out of its reach (/tests 0700) and
# its input copied out: run as root it could read /tests/expected_*.txt or replace our tools.
chmod 700 /tests
mkdir -p -m 755 /tmp/verifier-input && cp /tests/hidden_access.log /tmp/verifier-input/ \
    && chmod 644 /tmp/verifier-input/hidden_access.log

check() {
    if [ ! -f /app/top_ips.txt ]; then echo "FAIL: /app/top_ips.txt missing"; return 1; fi
    if ! sed 's/\r$//' /app/top_ips.txt | diff - /tests/expected_top_ips.txt; then
        echo "FAIL: /app/top_ips.txt is wrong"; return 1
    fi
    if [ ! -f /app/top_ips.sh ]; then echo "FAIL: /app/top_ips.sh missing"; return 1; fi
    # A log the agent never saw: hard-coded answers fail here.
    local out
    out=$(cd /tmp && timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups \
        bash /app/top_ips.sh /tmp/verifier-input/hidden_access.log 2>/dev/null)
    if ! printf '%s\n' "$out" | sed 's/\r$//' | diff - /tests/expected_hidden.txt; then
        echo "FAIL: /app/top_ips.sh gives the wrong answer on another log"; return 1
    fi
    return 0
}

if check; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
