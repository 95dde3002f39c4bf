#!/bin/bash
# Verifier for pipes-top-ips. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if the saved answer is right AND the script generalizes to a log it never saw.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt

check() {
    if [ ! -f /app/top_ips.txt ]; then echo "FAIL: /app/top_ips.txt missing"; return 1; fi
    if ! sed 's/\r$//' /app/top_ips.txt | diff - /tests/expected_top_ips.txt; then
        echo "FAIL: /app/top_ips.txt is wrong"; return 1
    fi
    if [ ! -f /app/top_ips.sh ]; then echo "FAIL: /app/top_ips.sh missing"; return 1; fi
    # A log the agent never saw: hard-coded answers fail here.
    local out
    out=$(cd /tmp && timeout 30 bash /app/top_ips.sh /tests/hidden_access.log 2>/dev/null)
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
