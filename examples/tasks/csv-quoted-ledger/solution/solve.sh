#!/bin/bash
# Reference solution: a small RFC 4180 field splitter in (m)awk, sums kept in integer cents so
# that no float rounding creeps into the totals.
set -euo pipefail
awk '
function parse(line, f,    n, i, c, field, inq) {
    n = 0; field = ""; inq = 0
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (inq) {
            if (c == "\"") {
                if (substr(line, i + 1, 1) == "\"") { field = field "\""; i++ }
                else inq = 0
            } else field = field c
        } else if (c == "\"") inq = 1
        else if (c == ",") { f[++n] = field; field = "" }
        else field = field c
    }
    f[++n] = field
    return n
}
NR > 1 {
    sub(/\r$/, "")
    if ($0 == "") next
    parse($0, f)
    amount = f[4]
    gsub(/,/, "", amount)
    cents[f[2]] += sprintf("%.0f", amount * 100)
}
END { for (a in cents) printf "%s\t%.2f\n", a, cents[a] / 100 }
' /app/ledger.csv | LC_ALL=C sort > /app/account_totals.tsv
