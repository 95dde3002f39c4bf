#!/bin/bash
# Reference solution: move each file by its lowercased last extension, then write the manifest.
set -euo pipefail
cd /app
mkdir -p sorted
find incoming -maxdepth 1 -type f -print0 | while IFS= read -r -d '' path; do
    name=$(basename "$path")
    if [[ "$name" == *.* ]]; then
        ext=$(printf '%s' "${name##*.}" | tr '[:upper:]' '[:lower:]')
    else
        ext=no_ext
    fi
    mkdir -p "sorted/$ext"
    mv "$path" "sorted/$ext/$name"
done
(cd sorted && find . -type f | sed 's|^\./||' | LC_ALL=C sort) > /app/manifest.txt
