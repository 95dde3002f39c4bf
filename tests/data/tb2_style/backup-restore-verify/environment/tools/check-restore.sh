#!/bin/bash
# Verifies a restore: every file of the manifest exists under $1 with the listed checksum.
set -euo pipefail
cd "${1:?usage: check-restore.sh DIR}"
sha256sum --quiet -c /app/backups/MANIFEST.sha256
