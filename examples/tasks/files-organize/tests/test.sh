#!/bin/bash
# Verifier for files-organize. Writes 0 first so that any early stop still leaves a reward,
# then 1 only if every check passes. Uses only coreutils, find, sed and diff.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt

check() {
    if [ ! -d /app/incoming ]; then echo "FAIL: /app/incoming is gone"; return 1; fi
    if [ -n "$(find /app/incoming -mindepth 1 -print -quit)" ]; then
        echo "FAIL: /app/incoming is not empty"; return 1
    fi
    if [ ! -d /app/sorted ]; then echo "FAIL: /app/sorted missing"; return 1; fi
    # Exactly the expected files (and nothing else, no empty dirs count as files) under /app/sorted.
    if ! (cd /app/sorted && find . -type f | sed 's|^\./||' | LC_ALL=C sort) \
            | diff /tests/expected_manifest.txt - ; then
        echo "FAIL: files under /app/sorted differ from the expected layout"; return 1
    fi
    if [ -n "$(find /app/sorted -mindepth 1 ! -type f ! -type d -print -quit)" ]; then
        echo "FAIL: /app/sorted contains links or special files"; return 1
    fi
    # Contents unchanged.
    if ! (cd /app/sorted && md5sum -c --quiet /tests/expected_md5.txt); then
        echo "FAIL: some moved file changed content"; return 1
    fi
    if [ ! -f /app/manifest.txt ]; then echo "FAIL: /app/manifest.txt missing"; return 1; fi
    if ! cmp -s /app/manifest.txt /tests/expected_manifest.txt; then
        echo "FAIL: /app/manifest.txt differs from the expected manifest:"
        diff /tests/expected_manifest.txt /app/manifest.txt
        return 1
    fi
    return 0
}

if check; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
