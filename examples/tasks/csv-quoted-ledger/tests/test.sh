#!/bin/bash
# Verifier for csv-quoted-ledger. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if the totals match the answer computed (with exact decimals) when the task was
# written. CRLF line ends and a missing final newline are tolerated.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt

check() {
    if [ ! -f /app/account_totals.tsv ]; then
        echo "FAIL: /app/account_totals.tsv missing"; return 1
    fi
    if ! sed -e 's/\r$//' -e '$a\' /app/account_totals.tsv | diff - /tests/expected_totals.tsv; then
        echo "FAIL: /app/account_totals.tsv is wrong"; return 1
    fi
    return 0
}

if check; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
